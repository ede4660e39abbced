"""Chunked gated linear attention: the training form of RetNet, GLA and Mamba-2 (SSD).

One recurrence, per head, a state S [K, J] decayed then written by every token:

  S_l = diag(a_l) S_(l-1) + k_l v_l^T,    out_l = S_l^T q_l,    log a_l <= 0

The decay is given as its log, `log_a_BLHG` with G = K (a decay per key dimension: GLA,
Yang et al. 2023) or G = 1 (one decay per head: RetNet's fixed gamma_h, Sun et al. 2023;
Mamba-2's data-dependent exp(dt A_h), Dao & Gu 2024). Two forms of the same function:

  chunked    the sequence cut into chunks of C. Inside a chunk, with the inclusive
             cumulative log decay b_c = sum_(c' <= c) log a_c' (from the chunk's start),
               out_c = (q_c * e^(b_c))^T S_0 + sum_(d <= c) [sum_k q_ck k_dk e^(b_ck - b_dk)] v_d
               S_C   = e^(b_C) * S_0 + sum_d (k_d * e^(b_C - b_d)) v_d^T
             every exponent b_c - b_d (d <= c) is <= 0, so nothing overflows; the states
             entering the chunks come from an associative scan over the chunks
             (jaxformer.math.gated.states): depth ~log(L / C) + C, work O(L C (K + J) + L K J).
  recurrent  `lax.scan` over positions carrying S: depth ~L, O(K J) state; what decoding
             runs, one token at a time, from the cached S.

A decay of 1 (log a = 0) is plain linear attention; the mixers' property tests compare both
forms with a step-by-step Python loop (tests/mixers/test_successor_math.py).
"""

import jax.numpy as jnp
from jax import lax

from jaxformer.math import gated, shapes

_F32 = jnp.float32


def _check(q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG, state_BHKJ):
  sizes = shapes.check("chunked", q_BLHK=q_BLHK, k_BLHK=k_BLHK, v_BLHJ=v_BLHJ)
  shapes.check("chunked", sizes, state_BHKJ=state_BHKJ)
  G = log_a_BLHG.shape[-1]
  if G not in (1, sizes["K"]):
    raise ValueError(f"log_a_BLHG: last dimension {G}: expected 1 (per head) or K={sizes['K']}")
  shapes.check("chunked", {k: sizes[k] for k in "BLH"} | {"G": G}, log_a_BLHG=log_a_BLHG)
  return sizes


def recurrent(q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG, state_BHKJ=None):
  """(out_BLHJ, final state [B, H, K, J]) by `lax.scan` over the positions; float32."""
  sizes = _check(q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG, state_BHKJ)
  B, H, K, J = sizes["B"], sizes["H"], sizes["K"], sizes["J"]
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, J), _F32)

  def step(s_BHKJ, x):
    q_BHK, k_BHK, v_BHJ, log_a_BHG = x
    s_BHKJ = jnp.exp(log_a_BHG)[..., None] * s_BHKJ + jnp.einsum("BHK,BHJ->BHKJ", k_BHK, v_BHJ)
    return s_BHKJ, jnp.einsum("BHK,BHKJ->BHJ", q_BHK, s_BHKJ)

  xs = tuple(jnp.swapaxes(x.astype(_F32), 0, 1) for x in (q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG))
  final_BHKJ, out_LBHJ = lax.scan(step, state_BHKJ.astype(_F32), xs)
  return jnp.swapaxes(out_LBHJ, 0, 1), final_BHKJ


def to_chunks(x_BL, C, fill=0.0):
  """[B, L, ...] -> [B, N, C, ...] (N = ceil(L / C)), the tail padded with `fill`."""
  B, L = x_BL.shape[:2]
  N = -(-L // C)
  pad = [(0, 0), (0, N * C - L)] + [(0, 0)] * (x_BL.ndim - 2)
  return jnp.pad(x_BL, pad, constant_values=fill).reshape(B, N, C, *x_BL.shape[2:])


def chunked(q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG, state_BHKJ=None, *, chunk=16):
  """(out_BLHJ, final state [B, H, K, J]) by the chunked form; float32. Padding positions
  carry k = v = 0 and log a = 0, so they change no state."""
  sizes = _check(q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG, state_BHKJ)
  if chunk <= 0:
    raise ValueError(f"chunk={chunk!r}: must be a positive integer")
  B, L, H, K, J = (sizes[c] for c in "BLHKJ")
  C = min(chunk, L)
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, J), _F32)
  q, k, v, log_a = (to_chunks(x.astype(_F32), C) for x in (q_BLHK, k_BLHK, v_BLHJ, log_a_BLHG))
  b_BNCHG = jnp.cumsum(log_a, axis=2)  # inclusive, from each chunk's start
  total_BNHG = b_BNCHG[:, :, -1]
  # what each chunk adds to the state, decayed to the chunk's end, then the prefix states
  kd_BNCHK = k * jnp.exp(total_BNHG[:, :, None] - b_BNCHG)
  add_BNHKJ = jnp.einsum("BNCHK,BNCHJ->BNHKJ", kd_BNCHK, v)
  a_BNHK = jnp.broadcast_to(jnp.exp(total_BNHG), (B, add_BNHKJ.shape[1], H, K))
  after_BNHKJ = gated.states(a_BNHK, add_BNHKJ, state_BHKJ.astype(_F32))
  before_BNHKJ = jnp.concatenate([state_BHKJ.astype(_F32)[:, None], after_BNHKJ[:, :-1]], axis=1)
  # from the state entering the chunk
  out_BNCHJ = jnp.einsum("BNCHK,BNHKJ->BNCHJ", q * jnp.exp(b_BNCHG), before_BNHKJ)
  # inside the chunk: scores with the relative decay, masked to d <= c before the exp
  causal_CD = jnp.tri(C, dtype=bool)
  if log_a.shape[-1] == 1:
    b_BNHC = b_BNCHG[..., 0].transpose(0, 1, 3, 2)
    rel_BNHCD = b_BNHC[..., :, None] - b_BNHC[..., None, :]
    decay_BNHCD = jnp.exp(jnp.where(causal_CD, rel_BNHCD, -jnp.inf))
    scores_BNHCD = jnp.einsum("BNCHK,BNDHK->BNHCD", q, k) * decay_BNHCD
  else:
    rel_BNCDHK = b_BNCHG[:, :, :, None] - b_BNCHG[:, :, None, :]
    decay_BNCDHK = jnp.exp(jnp.where(causal_CD[:, :, None, None], rel_BNCDHK, -jnp.inf))
    scores_BNHCD = jnp.einsum("BNCHK,BNDHK,BNCDHK->BNHCD", q, k, decay_BNCDHK)
  out_BNCHJ += jnp.einsum("BNHCD,BNDHJ->BNCHJ", scores_BNHCD, v)
  return out_BNCHJ.reshape(B, -1, H, J)[:, :L], after_BNHKJ[:, -1]


def retention_log_decays(num_heads):
  """RetNet's fixed per-head decays, log gamma_h with gamma_h = 1 - 2^(-5 - h) (Sun et al.
  2023, section 2.2): head h forgets over ~2^(5 + h) tokens, from 32 on."""
  return jnp.log1p(-(2.0 ** (-5.0 - jnp.arange(num_heads, dtype=_F32))))
