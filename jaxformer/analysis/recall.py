"""MQAR recall per pair count P, for every replica of a sweep at once.

Zoology trains one model on a mixture of pair counts (`num_kv_pairs=4+8+16`) and reads its
recall at each count separately. This module reads it:

  accuracy(model, stacked_params, spec)   each replica's accuracy on the test split of
      `spec` (an MQAR spec with one pair count P): argmax of the logits = target, pooled
      over the scored positions (mask = 1) of all its examples, correct / scored, as
      jaxformer.train.sweep reports eval accuracy. float64 numpy [N].
  by_pairs(model, stacked_params, spec_for_pairs, pairs)   {P: accuracy [N]} for each P.

`model` is a Linen module as jaxformer.ladder.build makes it; `stacked_params` the params
of N replicas, every leaf with a leading axis N (jaxformer.train.sweep.SweepResult.params).
One jitted program, vmapped over the replicas, reads the split in batches of B examples
(the last padded with mask 0, so every batch has one shape).
"""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxformer import data
from jaxformer.train import step

BATCH = 256  # B: examples per batch; the logits held are [N, B, L, V]


@functools.partial(jax.jit, static_argnames="model")
def _counts(params_N, batch_BL, *, model):
  """(correct, scored) over one batch: float32 [N] each."""

  def one(params):
    sums = step.eval_step(params, batch_BL, model=model)
    return sums["correct_sum"], sums["weight_sum"]

  return jax.vmap(one)(params_N)


def accuracy(model, stacked_params, spec, *, batch_size=BATCH, data_dir=None):
  """Each replica's accuracy on the test split of `spec`: float64 numpy [N], in [0, 1].

  The split is prepared (and cached) by jaxformer.data.get_dataset in `data_dir`. Raises
  DataError for a bad spec or a token id the model's vocabulary does not hold."""
  test = data.in_memory(data.get_dataset(spec, "test", data_dir=data_dir), max_bytes=math.inf)
  arrays_BL = {k: np.asarray(v, np.int32) for k, v in test.source.arrays.items()}
  data.check_tokens(arrays_BL["inputs"], model.vocab_size, field=f"{test.spec}: inputs")
  params_N = jax.tree.map(jnp.asarray, nn.meta.unbox(stacked_params))
  n = len(arrays_BL["inputs"])
  B = min(batch_size, n)
  correct = scored = 0.0
  for start in range(0, n, B):
    batch_BL = {k: np.zeros((B, v.shape[1]), np.int32) for k, v in arrays_BL.items()}
    for k, v in arrays_BL.items():  # the rows past the split's end stay 0: mask 0
      rows = v[start : start + B]
      batch_BL[k][: len(rows)] = rows
    c_N, w_N = _counts(params_N, batch_BL, model=model)
    correct = correct + np.asarray(c_N, np.float64)
    scored = scored + np.asarray(w_N, np.float64)
  return correct / np.maximum(scored, 1.0)


def by_pairs(model, stacked_params, spec_for_pairs, pairs=(2, 4, 8, 16), **kwargs):
  """{P: accuracy [N]}: `accuracy` on the MQAR spec of each pair count P in `pairs`.

  spec_for_pairs: a function P -> spec; a string holding `{P}` (filled by str.format); or
  an MQAR spec whose num_kv_pairs is replaced by P (e.g. the mixed spec a model trained
  on: its test split is drawn from the seed stream [seed, 1], disjoint from training's).
  kwargs go to `accuracy`. Raises DataError when a spec is not MQAR with exactly P pairs,
  or P does not fit its seq_len or vocab_size."""
  out = {}
  for P in pairs:
    spec = _spec_for(spec_for_pairs, P)
    name, params = data.parse_spec(spec)
    if name != "mqar" or params["num_kv_pairs"] != P:
      raise data.DataError(f"spec_for_pairs({P})={spec!r}: expected mqar with num_kv_pairs={P}")
    out[P] = accuracy(model, stacked_params, spec, **kwargs)
  return out


def _spec_for(spec_for_pairs, P):
  if callable(spec_for_pairs):
    return spec_for_pairs(P)
  if "{P}" in spec_for_pairs:
    return spec_for_pairs.format(P=P)
  name, params = data.parse_spec(spec_for_pairs)
  return data.format_spec(name, {**params, "num_kv_pairs": P})
