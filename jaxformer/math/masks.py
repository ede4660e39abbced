"""Which keys a query may read: the masks every attention implementation agrees on.

Positions are absolute: query l sits at `q_offset + l` (q_offset > 0 when L new queries
attend to M cached keys), key m sits at m. With d = q_pos - k_pos, a query reads a key when

  causal          d >= 0                 (no reading the future)
  window w        d < w, and d > -w when not causal (the last w keys, or a band of width 2w-1)
  kv_mask_BM      the cache slot m is valid
  block_sparse    the block pair is in `block_pattern` (below)

A query that may read no key returns zeros in every implementation.
"""

import jax.numpy as jnp

# block_sparse: every `GLOBAL_STRIDE`-th key block is a "global" (summary) block.
GLOBAL_STRIDE = 4


def position_mask(q_pos_L, k_pos_M, *, causal, window):
  """Boolean [L, M] (or broadcast shape) mask from absolute positions."""
  d_LM = q_pos_L[..., :, None] - k_pos_M[..., None, :]
  ok_LM = jnp.ones(d_LM.shape, bool)
  if causal:
    ok_LM &= d_LM >= 0
  if window is not None:
    ok_LM &= d_LM < window
    if not causal:
      ok_LM &= d_LM > -window
  return ok_LM


def block_pattern(q_block, k_block, *, causal, stride=GLOBAL_STRIDE):
  """The block_sparse pattern on block indices (broadcasting).

  A query in block b reads key blocks b (local) and b - 1 (previous; also b + 1 when not
  causal) and every global block g with (g + 1) % stride == 0: the last block of each
  group of `stride` blocks acts as a summary that every query reads (the "fixed" pattern
  of Child et al. 2019, Sparse Transformers). Causality is applied per element on top.
  The cost is O(L * (3 * block + L / stride)): linear in the local part, quadratic / stride
  in the global part.
  """
  local = (k_block == q_block) | (k_block == q_block - 1)
  if not causal:
    local |= k_block == q_block + 1
  return local | ((k_block + 1) % stride == 0)


def attention_mask(L, M, *, causal=True, window=None, q_offset=0, kv_mask_BM=None):
  """The full boolean mask [B or 1, L, M] that `dense` uses (the reference)."""
  q_pos_L = q_offset + jnp.arange(L)
  ok_LM = position_mask(q_pos_L, jnp.arange(M), causal=causal, window=window)
  if kv_mask_BM is None:
    return ok_LM[None]
  return ok_LM[None] & kv_mask_BM[:, None, :]


def block_sparse_mask(
  L, M, *, block_size, causal=True, q_offset=0, kv_mask_BM=None, stride=GLOBAL_STRIDE
):
  """`attention_mask` restricted to `block_pattern` on blocks of `block_size` positions."""
  q_pos_L = q_offset + jnp.arange(L)
  k_pos_M = jnp.arange(M)
  pattern_LM = block_pattern(
    q_pos_L[:, None] // block_size, k_pos_M[None, :] // block_size, causal=causal, stride=stride
  )
  mask_BLM = attention_mask(L, M, causal=causal, q_offset=q_offset, kv_mask_BM=kv_mask_BM)
  return mask_BLM & pattern_LM[None]
