"""Attention that reads a fixed subset of keys: a sliding window and a block-sparse pattern.

Pressure: dense attention costs O(L M). If each query only reads keys near it, the cost is
linear in L. Both functions here cut the queries into chunks of `block_size`, give every
chunk one contiguous slice of keys (a `lax.dynamic_slice` per chunk, so `q_offset` may be
traced), and mask each element exactly as `masks.py` says, so each equals `dense_attention`
under its mask:

  sliding_window  chunk [s, s + b) reads keys [s - w + 1, s + b) (and w - 1 more to the right
                  when not causal): O(L (b + w) K) time and memory instead of O(L M K).
  block_sparse    chunk reads its block, the previous one (and the next when not causal) as a
                  slice, plus the shared global blocks (`masks.block_pattern`):
                  O(L (3 b + M / stride) K).

What is lost (docs/reconstruction.md section 9): a key outside the window is unreadable,
however important; pin-point recall beyond w fails. Reference: Child et al. 2019 (Sparse
Transformers); Beltagy et al. 2020 (Longformer) for the sliding window.
"""

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxformer.math.dense import masked_softmax
from jaxformer.math.masks import GLOBAL_STRIDE, block_pattern, position_mask

_F32 = jnp.float32


def _query_chunks(q_BLHK, b, tau):
    """[B, L, H, K] -> float32 [N, B, b, H, K] scaled by 1 / tau, zero-padded."""
    B, L, H, K = q_BLHK.shape
    n = -(-L // b)
    q_BLHK = jnp.pad(q_BLHK.astype(_F32) / tau, ((0, 0), (0, n * b - L), (0, 0), (0, 0)))
    return q_BLHK.reshape(B, n, b, H, K).transpose(1, 0, 2, 3, 4)


def _key_slices(k_BMHK, v_BMHK, valid_BM, start_N, width):
    """Per chunk the keys at absolute positions [start, start + width).

    Returns k, v [N, B, width, H, K], valid [N, B, width] and positions [N, width]. Keys
    outside [0, M) are padding (invalid); a slice that would run past the padded end is
    clamped, and since `position` records where it really starts, masks stay exact.
    """
    M = k_BMHK.shape[1]
    front = width  # covers start >= -width
    pad = ((0, 0), (front, width), (0, 0), (0, 0))
    k_BPHK, v_BPHK = jnp.pad(k_BMHK, pad), jnp.pad(v_BMHK, pad)
    valid_BP = jnp.pad(valid_BM, ((0, 0), (front, width)))
    s_N = jnp.clip(start_N + front, 0, M + front)  # padded length M + 2 width

    def one(s):
        return (
            lax.dynamic_slice_in_dim(k_BPHK, s, width, axis=1),
            lax.dynamic_slice_in_dim(v_BPHK, s, width, axis=1),
            lax.dynamic_slice_in_dim(valid_BP, s, width, axis=1),
        )

    k_NBWHK, v_NBWHK, valid_NBW = jax.vmap(one)(s_N)
    pos_NW = (s_N - front)[:, None] + jnp.arange(width)
    return k_NBWHK, v_NBWHK, valid_NBW, pos_NW


def _valid_keys(k_BMHK, kv_mask_BM):
    B, M = k_BMHK.shape[:2]
    return jnp.ones((B, M), bool) if kv_mask_BM is None else kv_mask_BM.astype(bool)


def _finish(w_NBHLW, v_NBWHK, q_BLHK, L, extra_BLHK=None):
    out_NBLHK = jnp.einsum("NBHLW,NBWHK->NBLHK", w_NBHLW, v_NBWHK.astype(_F32))
    N, B, b, H, K = out_NBLHK.shape
    out_BLHK = out_NBLHK.transpose(1, 0, 2, 3, 4).reshape(B, N * b, H, K)
    if extra_BLHK is not None:
        out_BLHK = out_BLHK + extra_BLHK
    return out_BLHK[:, :L].astype(q_BLHK.dtype)


def sliding_window_attention(
    q_BLHK,
    k_BMHK,
    v_BMHK,
    *,
    window,
    causal=True,
    temperature=None,
    block_size=128,
    q_offset=0,
    kv_mask_BM=None,
):
    """Exact attention over the last `window` keys (i - window < j <= i), linear in L.

    Query chunks are min(block_size, window) long: a chunk of b reads b + window - 1 keys,
    so a chunk longer than the window would mostly compute masked scores.
    """
    B, L, H, K = q_BLHK.shape
    b = min(block_size, window, L)
    tau = math.sqrt(K) if temperature is None else temperature
    q_NBLHK = _query_chunks(q_BLHK, b, tau)
    N = q_NBLHK.shape[0]
    first_N = q_offset + b * jnp.arange(N)  # absolute position of each chunk's first query
    width = b + window - 1 + (0 if causal else window - 1)
    k_NBWHK, v_NBWHK, valid_NBW, k_pos_NW = _key_slices(
        k_BMHK, v_BMHK, _valid_keys(k_BMHK, kv_mask_BM), first_N - window + 1, width
    )
    q_pos_NL = first_N[:, None] + jnp.arange(b)
    ok_NLW = position_mask(q_pos_NL, k_pos_NW, causal=causal, window=window)
    ok_NBLW = ok_NLW[:, None] & valid_NBW[:, :, None, :]
    s_NBHLW = jnp.einsum("NBLHK,NBWHK->NBHLW", q_NBLHK, k_NBWHK.astype(_F32))
    w_NBHLW = masked_softmax(s_NBHLW, ok_NBLW[:, :, None])
    return _finish(w_NBHLW, v_NBWHK, q_BLHK, L)


def block_sparse_attention(
    q_BLHK,
    k_BMHK,
    v_BMHK,
    *,
    causal=True,
    temperature=None,
    block_size=128,
    q_offset=0,
    kv_mask_BM=None,
    stride=GLOBAL_STRIDE,
):
    """Exact attention restricted to `masks.block_pattern` on blocks of `block_size`."""
    B, L, H, K = q_BLHK.shape
    M = k_BMHK.shape[1]
    bs = block_size
    b = min(bs, L)  # query chunk; may straddle two pattern blocks unless aligned
    aligned = isinstance(q_offset, int) and q_offset % bs == 0 and b == bs
    tau = math.sqrt(K) if temperature is None else temperature
    q_NBLHK = _query_chunks(q_BLHK, b, tau)
    N = q_NBLHK.shape[0]
    first_N = q_offset + b * jnp.arange(N)
    q_pos_NL = first_N[:, None] + jnp.arange(b)
    valid_BM = _valid_keys(k_BMHK, kv_mask_BM)

    # local part: blocks [b0 - 1, b1 (+ 1 if not causal)] as one contiguous slice
    b0_N = first_N // bs
    n_local = (2 if aligned else 3) + (0 if causal else 1)
    k_NBWHK, v_NBWHK, valid_NBW, k_pos_NW = _key_slices(
        k_BMHK, v_BMHK, valid_BM, (b0_N - 1) * bs, n_local * bs
    )
    pattern_NLW = block_pattern(
        q_pos_NL[:, :, None] // bs, k_pos_NW[:, None, :] // bs, causal=causal, stride=stride
    )
    ok_NLW = pattern_NLW & position_mask(q_pos_NL, k_pos_NW, causal=causal, window=None)
    ok_NBLW = ok_NLW[:, None] & valid_NBW[:, :, None, :]
    s_NBHLW = jnp.einsum("NBLHK,NBWHK->NBHLW", q_NBLHK, k_NBWHK.astype(_F32))

    # global part: blocks g with (g + 1) % stride == 0, shared by all chunks; a global block
    # inside a chunk's local slice is read there, so it is masked here
    g_G = jnp.arange(stride - 1, -(-M // bs), stride)
    if g_G.size == 0:
        w_NBHLW = masked_softmax(s_NBHLW, ok_NBLW[:, :, None])
        return _finish(w_NBHLW, v_NBWHK, q_BLHK, L)
    g_pos_J = (g_G[:, None] * bs + jnp.arange(bs)).reshape(-1)  # J = G * bs global keys
    in_range_J = g_pos_J < M
    g_idx_J = jnp.where(in_range_J, g_pos_J, 0)
    k_BJHK, v_BJHK = k_BMHK[:, g_idx_J].astype(_F32), v_BMHK[:, g_idx_J].astype(_F32)
    g_valid_BJ = valid_BM[:, g_idx_J] & in_range_J
    local_NJ = (g_pos_J // bs >= (b0_N - 1)[:, None]) & (
        g_pos_J // bs < (b0_N - 1 + n_local)[:, None]
    )
    ok_NLJ = ~local_NJ[:, None, :] & position_mask(q_pos_NL, g_pos_J, causal=causal, window=None)
    ok_NBLJ = ok_NLJ[:, None] & g_valid_BJ[None, :, None, :]
    s_NBHLJ = jnp.einsum("NBLHK,BJHK->NBHLJ", q_NBLHK, k_BJHK)

    # one softmax over both parts
    W = s_NBHLW.shape[-1]
    s_NBHLX = jnp.concatenate([s_NBHLW, s_NBHLJ], -1)
    ok_NBLX = jnp.concatenate([ok_NBLW, ok_NBLJ], -1)
    w_NBHLX = masked_softmax(s_NBHLX, ok_NBLX[:, :, None])
    out_NBLHK = jnp.einsum("NBHLJ,BJHK->NBLHK", w_NBHLX[..., W:], v_BJHK)
    out_BLHK = out_NBLHK.transpose(1, 0, 2, 3, 4).reshape(B, N * b, H, K)
    return _finish(w_NBHLX[..., :W], v_NBWHK, q_BLHK, L, extra_BLHK=out_BLHK)
