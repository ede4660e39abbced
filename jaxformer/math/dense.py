"""The reference attention: every score materialized, softmax in float32.

  s_BHLM = q_BLHK . k_BMHK / tau,   w_BHLM = softmax_M(s + mask),   out_BLHK = w_BHLM v_BMHK

O(L M) time and memory. A query whose mask row is empty returns zeros (not the mean of v),
the convention every implementation in `jaxformer.math.attention` follows.
"""

import math

import jax.numpy as jnp


def masked_softmax(s, mask=None, axis=-1):
  """softmax of float32 scores over `axis` where `mask` (broadcastable) is True; an empty
  row gives zeros."""
  if mask is not None:
    s = jnp.where(mask, s, -jnp.inf)
  m = s.max(axis, keepdims=True)
  p = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
  l = p.sum(axis, keepdims=True)
  return p / jnp.where(l > 0, l, 1.0)


def dense_attention(q_BLHK, k_BMHK, v_BMHK, mask_BLM=None, *, temperature=None):
  """`mask_BLM` is boolean, broadcastable to [B, L, M] (True = may read)."""
  dtype = q_BLHK.dtype
  q_BLHK, k_BMHK, v_BMHK = (x.astype(jnp.float32) for x in (q_BLHK, k_BMHK, v_BMHK))
  tau = math.sqrt(q_BLHK.shape[-1]) if temperature is None else temperature
  s_BHLM = jnp.einsum("BLHK,BMHK->BHLM", q_BLHK, k_BMHK) / tau
  w_BHLM = masked_softmax(s_BHLM, None if mask_BLM is None else mask_BLM[:, None])
  return jnp.einsum("BHLM,BMHK->BLHK", w_BHLM, v_BMHK).astype(dtype)
