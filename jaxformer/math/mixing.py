"""Dynamic-weight mixing (steps 2-7): s_L = sum_{i<=L} W(x_i, x_L) x_i, in two notations.

*Sum notation* (`dynamic_sum`): an explicit d x d matrix W_iL for every pair, summed
position by position. This is the spec's equation and the reference for tests.

*Matrix notation* (`mix`): coefficients a_BHLM (H scalar functions, normalized over
the sources M) times per-head values v_BMHK: o_BLHK = sum_M a_BHLM v_BMHK. A head
combine (jaxformer.math.heads) then maps o_BLHK to the D-wide output. Every weight
form of step 4 is an instance: the matrix sum W_iL = sum_j a_j V_j directly, the
diagonal as D heads of K = 1, the full per-entry form as D*D heads of K = 1.
"""

import jax
import jax.numpy as jnp

NORMALIZERS = ("none", "sum", "softmax")
MASKS = ("causal", "self", "bidirectional")


def causal_mask(length, memory=None, *, offset=0, window=None):
  """mask_LM: True where receiver l (at absolute position offset + l) may read source m.

  window: keep only the last `window` sources (m > l - window), a sliding window.
  """
  memory = length if memory is None else memory
  l_L1 = jnp.arange(length)[:, None] + offset
  m_1M = jnp.arange(memory)[None, :]
  mask_LM = m_1M <= l_L1
  if window is not None:
    mask_LM &= m_1M > l_L1 - window
  return mask_LM


def self_mask(length):
  """mask_LM for the stateless rung: W_iL = 0 for i != L."""
  return jnp.eye(length, dtype=bool)


def bidirectional_mask(length):
  """mask_LM of an encoder: every receiver reads every source, earlier or later."""
  return jnp.ones((length, length), dtype=bool)


def normalize(scores_BHLM, mask_LM, kind, temperature=1.0):
  """Normalizes scores over the sources M (not over heads), masked entries are 0.

  none:    a = s / tau                   (raw: sums grow with L)
  sum:     a = s / sum_M |s|             (L1-normalized; tau cancels)
  softmax: a = softmax_M(s / tau + mask) (positive, sums to 1, sharp for small tau)
  """
  s = scores_BHLM.astype(jnp.float32) / temperature
  if kind == "none":
    return jnp.where(mask_LM, s, 0.0)
  if kind == "sum":
    s = jnp.where(mask_LM, s, 0.0)
    return s / (jnp.sum(jnp.abs(s), axis=-1, keepdims=True) + 1e-6)
  if kind == "softmax":
    s = jnp.where(mask_LM, s, -jnp.inf)
    return jnp.nan_to_num(jax.nn.softmax(s, axis=-1))  # a row with no source gives 0
  raise ValueError(f"normalizer={kind!r}: expected one of {NORMALIZERS}")


def mix(a_BHLM, v_BMHK):
  """o_BLHK = sum_M a_BHLM v_BMHK: the matrix form of the weighted sum."""
  return jnp.einsum("BHLM,BMHK->BLHK", a_BHLM.astype(v_BMHK.dtype), v_BMHK)


def attention_loop(q_BLHK, k_BMHK, v_BMHK, normalizer, temperature):
  """Reference sum form, one receiver at a time: s_L = sum_{i<=L} a_iL v_i.

  Normalizes each row over i <= L only (a Python loop over L, no mask matrix).
  """
  rows = []
  for l in range(q_BLHK.shape[1]):
    s_BHM = jnp.einsum("BHK,BMHK->BHM", q_BLHK[:, l], k_BMHK[:, : l + 1])
    a_BHM = normalize(s_BHM[:, :, None], jnp.ones((1, l + 1), bool), normalizer, temperature)
    rows.append(jnp.einsum("BHM,BMHK->BHK", a_BHM[:, :, 0], v_BMHK[:, : l + 1]))
  return jnp.stack(rows, axis=1)


def attention_matrix(q_BLHK, k_BMHK, v_BMHK, normalizer, temperature):
  """Matrix form: normalize(Q K^T / tau + M) V, all receivers at once."""
  scores_BHLM = jnp.einsum("BLHK,BMHK->BHLM", q_BLHK, k_BMHK)
  mask_LM = causal_mask(q_BLHK.shape[1], k_BMHK.shape[1])
  return mix(normalize(scores_BHLM, mask_LM, normalizer, temperature), v_BMHK)


def dynamic_sum(w_BLMDE, x_BMD, mask_LM):
  """The spec's equation, literally: s_L = sum_{i: mask} W_iL x_i with W_iL of shape D x E."""
  w_BLMDE = jnp.where(mask_LM[None, :, :, None, None], w_BLMDE, 0.0)
  return jnp.einsum("BLMDE,BME->BLD", w_BLMDE, x_BMD)
