"""Exact attention that never materializes the L x M score matrix.

Pressure: dense attention stores the [L, M] scores (and the probabilities, for the backward
pass), so memory grows as L^2 and, on memory-bound hardware, so does time. The softmax can be
computed one key block at a time (the "online softmax"): keep per query a running max m, a
running normalizer l and an unnormalized output acc, and rescale them when the max grows:

  s_LM   = q_LK k_MK^T / tau                       (one [bq, bk] block at a time)
  m'     = max(m, max_M s)       p_LM = exp(s - m')
  l'     = l exp(m - m') + sum_M p     acc' = acc exp(m - m') + p_LM v_MK
  out    = acc / l,                lse = m + log l

The backward pass recomputes each block from the saved (out, lse) instead of storing the
probabilities: p = exp(s - lse), dv += p^T do, dp = do v^T, ds = p (dp - D) with
D = rowsum(do * out), dq += ds k, dk += ds^T q. Memory is O(L K + block^2), not O(L M).
Blocks that the causal mask or the window empties are never visited (the loops run over
the visible block range only).

Few blocks (at most UNROLL_MAX_PAIRS visible block pairs, e.g. L = 256 in blocks of 128) with
a static q_offset: the loops are unrolled in Python over the visible pairs instead of
`lax.map` / `fori_loop` over traced bounds, so XLA sees straight-line code it can fuse and
schedule (no while loops), and the masks are applied only on blocks that the diagonal or
the window cuts (a block wholly below the diagonal is read unmasked).

Changed from dense: same function, different schedule. References: Rabe & Staats 2021
(Self-attention does not need O(n^2) memory); Dao et al. 2022 (FlashAttention) and Dao 2023
(FlashAttention-2) for the loop order and the backward pass.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxformer.math.masks import position_mask

_F32 = jnp.float32
UNROLL_MAX_PAIRS = 16  # visible block pairs up to which the loops are unrolled in Python


def _to_blocks(x_BLHK, n, b):
  """[B, L, H, K] -> [n, B, H, b, K], zero-padded to n * b positions."""
  B, L, H, K = x_BLHK.shape
  x_BLHK = jnp.pad(x_BLHK, ((0, 0), (0, n * b - L), (0, 0), (0, 0)))
  return x_BLHK.reshape(B, n, b, H, K).transpose(1, 0, 3, 2, 4)


def _from_blocks(x_NBHbK, L):
  n, B, H, b, K = x_NBHbK.shape
  return x_NBHbK.transpose(1, 0, 3, 2, 4).reshape(B, n * b, H, K)[:, :L]


def _clip(x, lo, hi):
  """jnp.clip, in Python ints when x is one (static block ranges stay static under jit)."""
  return min(max(x, lo), hi) if isinstance(x, int) else jnp.clip(x, lo, hi)


def _max(a, b):
  return max(a, b) if isinstance(a, int) and isinstance(b, int) else jnp.maximum(a, b)


def _key_range(i, q_offset, cfg):
  """Key blocks [lo, hi) that query block i can see."""
  causal, window, bq, bk, nq, nk = cfg[:6]
  first = q_offset + i * bq  # absolute position of the block's first query
  last = first + bq - 1
  lo, hi = 0, nk
  if causal:
    hi = _clip(last // bk + 1, 0, nk)
  if window is not None:
    lo = _clip((first - window + 1) // bk, 0, nk)
    if not causal:
      hi = _clip((last + window - 1) // bk + 1, 0, nk)
  return lo, _max(lo, hi)


def _query_range(j, q_offset, cfg):
  """Query blocks [lo, hi) that can see key block j (the inverse of `_key_range`)."""
  causal, window, bq, bk, nq, nk = cfg[:6]
  lo, hi = 0, nq
  if causal:
    lo = _clip((j * bk - q_offset) // bq, 0, nq)
  if window is not None:
    x = (j + 1) * bk + window - 1 - q_offset
    hi = _clip(-(-x // bq), 0, nq)
    if not causal:
      lo = _clip((j * bk - q_offset - window + 1) // bq, 0, nq)
  return lo, _max(lo, hi)


def _scores(q_BHLK, k_BHMK, i, j, kv_NBM, q_offset, cfg):
  """Masked scores of block pair (i, j): [B, H, bq, bk] float32, -inf where masked."""
  causal, window, bq, bk = cfg[:4]
  s_BHLM = jnp.einsum("BHLK,BHMK->BHLM", q_BHLK, k_BHMK, preferred_element_type=_F32)
  if (causal or window is not None) and not _whole_block(i, j, q_offset, cfg):
    q_pos_L = q_offset + i * bq + jnp.arange(bq)
    k_pos_M = j * bk + jnp.arange(bk)
    ok_LM = position_mask(q_pos_L, k_pos_M, causal=causal, window=window)
    s_BHLM = jnp.where(ok_LM, s_BHLM, -jnp.inf)
  if kv_NBM is not None:
    s_BHLM = jnp.where(kv_NBM[j][:, None, None, :], s_BHLM, -jnp.inf)
  return s_BHLM


def _whole_block(i, j, q_offset, cfg):
  """True when (i, j) and the offset are Python ints and every query of block i sees every
  key of block j: its mask is all True and can be skipped."""
  causal, window, bq, bk = cfg[:4]
  if not all(isinstance(n, int) for n in (i, j, q_offset)):
    return False
  first_q, last_q = q_offset + i * bq, q_offset + i * bq + bq - 1
  first_k, last_k = j * bk, j * bk + bk - 1
  ok = not causal or last_k <= first_q
  if window is not None:
    ok &= last_q - first_k < window and (causal or last_k - first_q < window)
  return ok


def _unrolled(cfg, q_offset):
  """The visible block pairs [(i, j), ...] when the loops are unrolled (see the docstring),
  else None."""
  if not isinstance(q_offset, int):
    return None
  nq, nk = cfg[4:6]
  pairs = []
  for i in range(nq):
    lo, hi = _key_range(i, q_offset, cfg)
    pairs += [(i, j) for j in range(lo, hi)]
  return pairs if len(pairs) <= UNROLL_MAX_PAIRS else None


def _online_step(q_BHLK, k_BHMK, v_BHMK, i, j, kv_NBM, q_offset, cfg, carry):
  """One key block of the online softmax for query block i: (m, l, acc) -> (m, l, acc)."""
  m_BHL, l_BHL, acc_BHLK = carry
  s_BHLM = _scores(q_BHLK, k_BHMK, i, j, kv_NBM, q_offset, cfg)
  m_new_BHL = jnp.maximum(m_BHL, s_BHLM.max(-1))
  # a row that has seen only masked keys keeps m = -inf; shift by 0 to avoid inf - inf
  shift_BHL = jnp.where(jnp.isfinite(m_new_BHL), m_new_BHL, 0.0)
  p_BHLM = jnp.exp(s_BHLM - shift_BHL[..., None])
  rescale_BHL = jnp.exp(m_BHL - shift_BHL)
  l_BHL = l_BHL * rescale_BHL + p_BHLM.sum(-1)
  pv_BHLK = jnp.einsum(
    "BHLM,BHMK->BHLK", p_BHLM.astype(v_BHMK.dtype), v_BHMK, preferred_element_type=_F32
  )
  return m_new_BHL, l_BHL, acc_BHLK * rescale_BHL[..., None] + pv_BHLK


def _finish(m_BHL, l_BHL, acc_BHLK, dtype):
  """(out, lse) of one query block from its online-softmax state."""
  seen_BHL = l_BHL > 0
  out_BHLK = acc_BHLK / jnp.where(seen_BHL, l_BHL, 1.0)[..., None]
  # +inf for a query that sees no key makes exp(s - lse) = 0 in the backward pass
  lse_BHL = jnp.where(seen_BHL, m_BHL + jnp.log(jnp.where(seen_BHL, l_BHL, 1.0)), jnp.inf)
  return out_BHLK.astype(dtype), lse_BHL


def _forward(q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, cfg):
  """Online softmax: outer map over query blocks, inner loop over visible key blocks."""
  nq, B, H, bq, K = q_NBHLK.shape
  init = (
    jnp.full((B, H, bq), -jnp.inf, _F32),
    jnp.zeros((B, H, bq), _F32),
    jnp.zeros((B, H, bq, K), _F32),
  )
  static_offset = cfg[6]
  pairs = _unrolled(cfg, static_offset)
  if pairs is not None:
    outs, lses = [], []
    for i in range(nq):
      carry = init
      for j in (j for i2, j in pairs if i2 == i):
        carry = _online_step(
          q_NBHLK[i], k_NBHMK[j], v_NBHMK[j], i, j, kv_NBM, static_offset, cfg, carry
        )
      out_BHLK, lse_BHL = _finish(*carry, q_NBHLK.dtype)
      outs.append(out_BHLK)
      lses.append(lse_BHL)
    return jnp.stack(outs), jnp.stack(lses)

  def query_block(i):
    q_BHLK = q_NBHLK[i]

    def key_block(j, carry):
      return _online_step(q_BHLK, k_NBHMK[j], v_NBHMK[j], i, j, kv_NBM, q_offset, cfg, carry)

    lo, hi = _key_range(i, q_offset, cfg)
    return _finish(*lax.fori_loop(lo, hi, key_block, init), q_NBHLK.dtype)

  return lax.map(query_block, jnp.arange(nq))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _flash(q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, cfg):
  return _forward(q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, cfg)[0]


def _flash_fwd(q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, cfg):
  out_NBHLK, lse_NBHL = _forward(q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, cfg)
  return out_NBHLK, (q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, out_NBHLK, lse_NBHL)


def _pair_grads(q_BHLK, k_BHMK, v_BHMK, do_BHLK, lse_BHL, D_BHL, i, j, kv_NBM, q_offset, cfg):
  """(dq, dk, dv) contributions of block pair (i, j), recomputing p from the saved lse."""
  s_BHLM = _scores(q_BHLK, k_BHMK, i, j, kv_NBM, q_offset, cfg)
  p_BHLM = jnp.exp(s_BHLM - lse_BHL[..., None])
  dv_BHMK = jnp.einsum(
    "BHLM,BHLK->BHMK", p_BHLM.astype(do_BHLK.dtype), do_BHLK, preferred_element_type=_F32
  )
  dp_BHLM = jnp.einsum("BHLK,BHMK->BHLM", do_BHLK, v_BHMK, preferred_element_type=_F32)
  ds_BHLM = p_BHLM * (dp_BHLM - D_BHL[..., None])
  dq_BHLK = jnp.einsum(
    "BHLM,BHMK->BHLK", ds_BHLM.astype(k_BHMK.dtype), k_BHMK, preferred_element_type=_F32
  )
  dk_BHMK = jnp.einsum(
    "BHLM,BHLK->BHMK", ds_BHLM.astype(q_BHLK.dtype), q_BHLK, preferred_element_type=_F32
  )
  return dq_BHLK, dk_BHMK, dv_BHMK


def _flash_bwd(cfg, residuals, do_NBHLK):
  """Outer scan over key blocks (dk, dv finished per block), inner loop over the query
  blocks that see it, accumulating dq in place."""
  q_NBHLK, k_NBHMK, v_NBHMK, kv_NBM, q_offset, out_NBHLK, lse_NBHL = residuals
  D_NBHL = jnp.sum(do_NBHLK.astype(_F32) * out_NBHLK.astype(_F32), -1)
  static_offset = cfg[6]
  pairs = _unrolled(cfg, static_offset)
  if pairs is not None:
    dq, dk, dv = {}, {}, {}
    for i, j in pairs:
      grads = _pair_grads(
        q_NBHLK[i],
        k_NBHMK[j],
        v_NBHMK[j],
        do_NBHLK[i],
        lse_NBHL[i],
        D_NBHL[i],
        i,
        j,
        kv_NBM,
        static_offset,
        cfg,
      )
      for acc, n, g in zip((dq, dk, dv), (i, j, j), grads, strict=True):
        acc[n] = acc[n] + g if n in acc else g

    def stack(acc, like_NBHLK):
      zeros = jnp.zeros(like_NBHLK.shape[1:], _F32)
      return jnp.stack([acc.get(n, zeros) for n in range(like_NBHLK.shape[0])])

    dq_NBHLK, dk_NBHMK, dv_NBHMK = stack(dq, q_NBHLK), stack(dk, k_NBHMK), stack(dv, v_NBHMK)
  else:

    def key_block(dq_NBHLK, j):
      k_BHMK, v_BHMK = k_NBHMK[j], v_NBHMK[j]

      def query_block(i, carry):
        dk_BHMK, dv_BHMK, dq_NBHLK = carry
        dq_BHLK, dk_j, dv_j = _pair_grads(
          q_NBHLK[i],
          k_BHMK,
          v_BHMK,
          do_NBHLK[i],
          lse_NBHL[i],
          D_NBHL[i],
          i,
          j,
          kv_NBM,
          q_offset,
          cfg,
        )
        return dk_BHMK + dk_j, dv_BHMK + dv_j, dq_NBHLK.at[i].add(dq_BHLK)

      zeros_BHMK = jnp.zeros(k_BHMK.shape, _F32)
      lo, hi = _query_range(j, q_offset, cfg)
      dk_BHMK, dv_BHMK, dq_NBHLK = lax.fori_loop(
        lo, hi, query_block, (zeros_BHMK, zeros_BHMK, dq_NBHLK)
      )
      return dq_NBHLK, (dk_BHMK, dv_BHMK)

    nk = k_NBHMK.shape[0]
    dq_NBHLK, (dk_NBHMK, dv_NBHMK) = lax.scan(
      key_block, jnp.zeros(q_NBHLK.shape, _F32), jnp.arange(nk)
    )
  return (
    dq_NBHLK.astype(q_NBHLK.dtype),
    dk_NBHMK.astype(k_NBHMK.dtype),
    dv_NBHMK.astype(v_NBHMK.dtype),
    None,
    None,
  )


_flash.defvjp(_flash_fwd, _flash_bwd)


def blockwise_attention(
  q_BLHK,
  k_BMHK,
  v_BMHK,
  *,
  causal=True,
  temperature=None,
  window=None,
  block_size=128,
  q_offset=0,
  kv_mask_BM=None,
):
  """Exact softmax attention in O(L K + block^2) memory; equals `dense_attention`.

  Any L and M: queries and keys are zero-padded to whole blocks and padded keys masked.
  `q_offset` may be a traced integer (decoding); `kv_mask_BM` marks valid keys.
  """
  B, L, H, K = q_BLHK.shape
  M = k_BMHK.shape[1]
  bq, bk = min(block_size, L), min(block_size, M)
  nq, nk = -(-L // bq), -(-M // bk)
  # a Python-int offset is also static (cfg[6]): the loops may unroll (`_unrolled`)
  static_offset = q_offset if isinstance(q_offset, int) else None
  cfg = (causal, window, bq, bk, nq, nk, static_offset)
  tau = math.sqrt(K) if temperature is None else temperature

  kv_NBM = None
  if kv_mask_BM is not None or nk * bk != M:
    valid_BM = jnp.ones((B, M), bool) if kv_mask_BM is None else kv_mask_BM.astype(bool)
    valid_BM = jnp.pad(valid_BM, ((0, 0), (0, nk * bk - M)))
    kv_NBM = valid_BM.reshape(B, nk, bk).transpose(1, 0, 2)

  # scaling q once is O(L K); scaling the scores would be O(L M)
  q_BLHK = (q_BLHK.astype(_F32) / tau).astype(q_BLHK.dtype)
  out_NBHLK = _flash(
    _to_blocks(q_BLHK, nq, bq),
    _to_blocks(k_BMHK, nk, bk),
    _to_blocks(v_BMHK, nk, bk),
    kv_NBM,
    jnp.asarray(q_offset, jnp.int32),
    cfg,
  )
  return _from_blocks(out_NBHLK, L)
