"""What a weight function costs as the width D grows, read from the real modules.

  at_width(config, width)     a copy of a training config (jaxformer.train.config) whose model
                              has width D = `width`, every other field kept
  counts(config)              {"functions", "params"} of layer 0's mixer: the scalar
                              coefficient functions a_j (the scorer's heads) and the mixing
                              parameters, from jax.eval_shape (nothing is allocated, so a
                              full_dynamic layer of a billion parameters costs nothing)
  mixer_params(params)        the mixing parameters of layer 0 in real (trained) params
  flops_per_token(config)     XLA's FLOPs of one train step (forward, backward, AdamW) at
                              batch 1 x max_len, per token; lowered, never compiled
  slope(widths, values)       b of values ~ a D^b: least squares in log-log

The closed forms, for a rank-K scorer per function (jaxformer/steps/s4_values_heads.py): full
dynamic weights D^2 functions and 2 K D^3 parameters per layer, the diagonal D and 2 K D^2,
a sum of H learned matrices H and 2 H K D + H D^2.
"""

import copy
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxformer import ladder
from jaxformer.analysis import depth


def at_width(config, width):
  c = copy.deepcopy(config)
  c.model.d_model = int(width)
  return c


def _mixer(tree):
  return tree.get("params", tree)["layers_0"]["mixer"]


def counts(config):
  model = ladder.build(config.rung, config.model)
  tokens = jax.ShapeDtypeStruct((1, 2), jnp.int32)
  shapes = jax.eval_shape(lambda t: nn.meta.unbox(model.init(jax.random.key(0), t)), tokens)
  mixer = _mixer(shapes)
  params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(mixer))
  return {"functions": int(mixer["scorer"]["wq"].shape[1]), "params": params}


def mixer_params(params):
  return sum(int(np.size(x)) for x in jax.tree.leaves(_mixer(params)))


def flops_per_token(config):
  length = int(config.model.max_len)
  fn, state, batch = depth.abstract_train_step(config, (1, length))
  return float(jax.jit(fn).lower(state, batch).cost_analysis()["flops"]) / length


def slope(widths, values):
  """The fitted exponent b (NaN unless there are two widths and every value is finite, > 0)."""
  values = [float(v) for v in values]
  if len(widths) < 2 or not all(math.isfinite(v) and v > 0 for v in values):
    return math.nan
  return float(np.polyfit(np.log(widths), np.log(values), 1)[0])
