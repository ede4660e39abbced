"""The delta rule: a fixed state that overwrites what a key holds instead of adding to it.

DeltaNet (Schlag et al. 2021; Yang et al. 2024) and Gated DeltaNet (Yang et al. 2025) keep,
per head, S [K, J] and, with a write strength beta_l in (0, 1) and a decay a_l in (0, 1]
(a = 1: DeltaNet),

  S_l = a_l (I - beta_l k_l k_l^T) S_(l-1) + beta_l k_l v_l^T,     out_l = S_l^T q_l

i.e. S_l = a_l S_(l-1) + beta_l k_l (v_l - a_l S_(l-1)^T k_l)^T: the value read at k_l is
moved toward v_l, one step of online regression, so a repeated key replaces its old value
where linear attention would sum both. With unit-norm keys and beta in (0, 1) every factor
(I - beta k k^T) has eigenvalues in [0, 1]: the state cannot blow up.

Two forms of the same function:

  chunked    (Yang et al. 2024, the WY / UT form) inside a chunk of C, with the inclusive
             cumulative log decay g_c from the chunk's start and the entering state S_0,
             the written values u_c (S_C = e^(g_C) S_0 + sum_d e^(g_C - g_d) k_d u_d^T) solve
               u_c = beta_c (v_c - e^(g_c) S_0^T k_c - sum_(d < c) e^(g_c - g_d) (k_c . k_d) u_d)
             a unit lower-triangular system (I + A) U = diag(beta) V - diag(beta e^g) K S_0,
             solved once per chunk for W = (I + A)^-1 diag(beta e^g) K and U_0
             = (I + A)^-1 diag(beta) V, all chunks at once (the inverse by products
             alone: unit_lower_inverse). Across chunks the state map is affine,
             S_0 -> (e^(g_C) I - Kend^T W) S_0 + Kend^T U_0 (Kend_d = e^(g_C - g_d) k_d),
             so the entering states come from an associative scan of
             K x K maps (depth ~log(L / C), O(L / C K^3) work), then every chunk at once:
               u = U_0 - W S_0,
               out_c = e^(g_c) S_0^T q_c + sum_(d <= c) e^(g_c - g_d) (q_c . k_d) u_d
  recurrent  `lax.scan` over positions carrying S; what decoding runs.
"""

import jax.numpy as jnp
from jax import lax

from jaxformer.math import shapes
from jaxformer.math.chunked import to_chunks

_F32 = jnp.float32


def _check(q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH, state_BHKJ):
  sizes = shapes.check("delta", q_BLHK=q_BLHK, k_BLHK=k_BLHK, v_BLHJ=v_BLHJ, beta_BLH=beta_BLH)
  shapes.check("delta", sizes, log_a_BLH=log_a_BLH, state_BHKJ=state_BHKJ)
  return sizes


def recurrent(q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH=None, state_BHKJ=None):
  """(out_BLHJ, final state [B, H, K, J]) by `lax.scan` over the positions; float32.
  log_a None: no decay (DeltaNet)."""
  sizes = _check(q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH, state_BHKJ)
  B, H, K, J = (sizes[c] for c in "BHKJ")
  if log_a_BLH is None:
    log_a_BLH = jnp.zeros_like(beta_BLH, _F32)
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, J), _F32)

  def step(s_BHKJ, x):
    q_BHK, k_BHK, v_BHJ, beta_BH, log_a_BH = x
    s_BHKJ = jnp.exp(log_a_BH)[..., None, None] * s_BHKJ
    new_BHJ = v_BHJ - jnp.einsum("BHKJ,BHK->BHJ", s_BHKJ, k_BHK)
    s_BHKJ = s_BHKJ + jnp.einsum("BHK,BHJ->BHKJ", k_BHK, beta_BH[..., None] * new_BHJ)
    return s_BHKJ, jnp.einsum("BHK,BHKJ->BHJ", q_BHK, s_BHKJ)

  xs = (q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH)
  xs = tuple(jnp.swapaxes(x.astype(_F32), 0, 1) for x in xs)
  final_BHKJ, out_LBHJ = lax.scan(step, state_BHKJ.astype(_F32), xs)
  return jnp.swapaxes(out_LBHJ, 0, 1), final_BHKJ


def unit_lower_inverse(a_XCC):
  """(I + A)^-1 of strictly lower-triangular A [..., C, C], by matrix products alone:
  A^C = 0, so (I + A)^-1 = sum_(k < C) (-A)^k = (I - A)(I + A^2)(I + A^4)... (log2 C
  factors). No LAPACK call: jaxlib 0.10's batched CPU triangular solve can deadlock its
  thread pool when two solves run at once (seen on 2 cores at batch >= 128)."""
  C = a_XCC.shape[-1]
  eye = jnp.eye(C, dtype=a_XCC.dtype)
  power = -a_XCC  # (-A)^(2^i)
  inverse = eye + power
  reach = 2  # the product so far sums (-A)^k for k < reach
  while reach < C:
    power = jnp.matmul(power, power)
    inverse = jnp.matmul(inverse, eye + power)
    reach *= 2
  return inverse


def _compose(first, second):
  """The affine map `first` then `second`, each (M_...KK, R_...KJ): S -> M S + R."""
  m1, r1 = first
  m2, r2 = second
  return jnp.einsum("...KL,...LM->...KM", m2, m1), jnp.einsum("...KL,...LJ->...KJ", m2, r1) + r2


def chunked(q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH=None, state_BHKJ=None, *, chunk=16):
  """(out_BLHJ, final state [B, H, K, J]) by the chunked (WY) form; float32. Padding
  positions carry k = v = beta = 0 and log a = 0, so they change no state."""
  sizes = _check(q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH, state_BHKJ)
  if chunk <= 0:
    raise ValueError(f"chunk={chunk!r}: must be a positive integer")
  B, L, H, K, J = (sizes[c] for c in "BLHKJ")
  C = min(chunk, L)
  if log_a_BLH is None:
    log_a_BLH = jnp.zeros_like(beta_BLH, _F32)
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, J), _F32)
  xs = (q_BLHK, k_BLHK, v_BLHJ, beta_BLH, log_a_BLH)
  q, k, v, beta, log_a = (to_chunks(x.astype(_F32), C) for x in xs)
  g_BNHC = jnp.cumsum(log_a, axis=2).transpose(0, 1, 3, 2)  # inclusive, from the chunk start
  beta_BNHC = beta.transpose(0, 1, 3, 2)
  below_CD = jnp.tri(C, dtype=bool)
  # e^(g_c - g_d) for d <= c (0 above the diagonal): masked before the exp, never overflows
  decay_BNHCD = jnp.exp(jnp.where(below_CD, g_BNHC[..., :, None] - g_BNHC[..., None, :], -jnp.inf))
  kk_BNHCD = jnp.einsum("BNCHK,BNDHK->BNHCD", k, k)
  strict_CD = jnp.tri(C, k=-1, dtype=bool)
  a_BNHCD = jnp.where(strict_CD, beta_BNHC[..., None] * decay_BNHCD * kk_BNHCD, 0.0)
  rhs_BNHCK = (beta_BNHC * jnp.exp(g_BNHC))[..., None] * k.transpose(0, 1, 3, 2, 4)
  rhs_BNHCJ = beta_BNHC[..., None] * v.transpose(0, 1, 3, 2, 4)

  inverse_BNHCD = unit_lower_inverse(a_BNHCD)
  w_BNHCK = jnp.einsum("BNHCD,BNHDK->BNHCK", inverse_BNHCD, rhs_BNHCK)
  u0_BNHCJ = jnp.einsum("BNHCD,BNHDJ->BNHCJ", inverse_BNHCD, rhs_BNHCJ)
  qk_BNHCD = jnp.where(below_CD, decay_BNHCD * jnp.einsum("BNCHK,BNDHK->BNHCD", q, k), 0.0)
  qg_BNHCK = jnp.exp(g_BNHC)[..., None] * q.transpose(0, 1, 3, 2, 4)
  # e^(g_C - g_d) k_d: what each written value adds to the state at the chunk's end
  kend_BNHCK = jnp.exp(g_BNHC[..., -1:] - g_BNHC)[..., None] * k.transpose(0, 1, 3, 2, 4)
  end_BNH = jnp.exp(g_BNHC[..., -1])
  # Across chunks the state map is affine, S -> M S + R with
  #   M = e^(g_C) I - Kend^T W,   R = Kend^T U_0
  # and affine maps compose associatively: every entering state by an associative scan.
  eye_KK = jnp.eye(K, dtype=_F32)
  m_BNHKK = end_BNH[..., None, None] * eye_KK - jnp.einsum(
    "BNHCK,BNHCL->BNHKL", kend_BNHCK, w_BNHCK
  )
  r_BNHKJ = jnp.einsum("BNHCK,BNHCJ->BNHKJ", kend_BNHCK, u0_BNHCJ)
  s0_BHKJ = state_BHKJ.astype(_F32)
  r_BNHKJ = r_BNHKJ.at[:, 0].add(jnp.einsum("BHKL,BHLJ->BHKJ", m_BNHKK[:, 0], s0_BHKJ))
  _, after_BNHKJ = lax.associative_scan(_compose, (m_BNHKK, r_BNHKJ), axis=1)
  before_BNHKJ = jnp.concatenate([s0_BHKJ[:, None], after_BNHKJ[:, :-1]], axis=1)
  u_BNHCJ = u0_BNHCJ - jnp.einsum("BNHCK,BNHKJ->BNHCJ", w_BNHCK, before_BNHKJ)
  out_BNHCJ = jnp.einsum("BNHCK,BNHKJ->BNHCJ", qg_BNHCK, before_BNHKJ)
  out_BNHCJ += jnp.einsum("BNHCD,BNHDJ->BNHCJ", qk_BNHCD, u_BNHCJ)
  out_BLHJ = out_BNHCJ.transpose(0, 1, 3, 2, 4).reshape(B, -1, H, J)[:, :L]
  final_BHKJ = after_BNHKJ[:, -1]
  return out_BLHJ, final_BHKJ
