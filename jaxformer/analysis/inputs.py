"""What a probe of trained models reads: held-out inputs and the networks at initialisation.

eval_inputs(spec, count)              int32 [B, L]: the first `count` inputs of the eval
                                      half of task `spec`'s held-out split (never used for
                                      selection or early stopping)
initial_params(model, seeds, shape)   per seed, the params a sweep replica of that seed
                                      starts from, bit for bit: the untrained reading of a
                                      trained-minus-untrained measure reads the same nets
"""

import jax
import numpy as np

from jaxformer import data
from jaxformer.train import sweep


def eval_inputs(spec, count):
  test = data.get_dataset(spec, "test")
  start = len(test) // 2
  indices = [int(i) for i in range(start, min(start + count, len(test)))]
  getitems = getattr(test.source, "__getitems__", None)
  records = getitems(indices) if getitems else [test.source[i] for i in indices]
  return np.stack([np.asarray(r["inputs"]) for r in records]).astype(np.int32)


def initial_params(model, seeds, shape):
  # the params_rng of jaxformer.train.step.init_state, through the sweep's init program
  keys = [jax.random.split(jax.random.key(int(seed)))[0] for seed in seeds]
  return sweep.init_params(model, keys, tuple(shape))
