"""Head combination (step 7): how H per-head outputs o_BLHK become one D-wide output.

  sum:    s = sum_j o_j              (needs K = D: each V_j is a full D x D matrix)
  concat: s = [o_1 ... o_H] Wo = sum_j Wo_j o_j   (V_j is r x D, Wo_j is D x r)

With every Wo_j = I (and r = D) concat + Wo is exactly the summed form; keeping the
two matrices apart is what lets the cache hold r-dim values instead of D-dim ones.
"""

import jax.numpy as jnp

from jaxformer.math.contract import contract

HEAD_COMBINES = ("sum", "concat")


def combine_sum(o_BLHK):
  return jnp.sum(o_BLHK, axis=2)


def combine_concat(o_BLHK, wo_HKD):
  return contract("BLHK,HKD->BLD", o_BLHK, wo_HKD)


def combine_entries(o_BLHK, width):
  """Full per-entry weights: head (d, e) carries a_{de} x_i[e]; row d sums over e."""
  batch, length = o_BLHK.shape[:2]
  return jnp.sum(o_BLHK.reshape(batch, length, width, -1), axis=-1)
