"""Linear attention: the softmax kernel replaced by a feature map, so attention is a recurrence.

Pressure: softmax attention needs all M keys kept (the KV cache grows with L) and O(L M)
work. Replace exp(q.k) by phi(q).phi(k) with phi(x) = elu(x) + 1 > 0; then

  out_l = phi(q_l)^T S_l / (phi(q_l)^T z_l),  S_l = sum_{m<=l} phi(k_m) v_m^T,  z_l = sum phi(k_m)

and (S, z) is a fixed-size state [K, K] + [K] per head: fixed memory again, like an RNN.
Two forms of the same function:

  parallel (chunked)  within a chunk of C the masked [C, C] form, across chunks the prefix
                      states: O(L (C + K) K) time, O(L K + L / C K^2) memory.
  recurrent           `lax.scan` over positions carrying (S, z): O(L K^2) time, O(K^2) state.

This is NOT softmax attention (no temperature: phi has none; the outputs differ from
`dense`). `linear_attention_masked` is its O(L M) reference under any mask. Reference:
Katharopoulos et al. 2020 (Transformers are RNNs).
"""

import jax
import jax.numpy as jnp
from jax import lax

from jaxformer.math.masks import attention_mask

_F32 = jnp.float32


def feature_map(x):
  """phi(x) = elu(x) + 1, positive so that the normalizer phi(q).z is > 0."""
  return jax.nn.elu(x) + 1.0


def _normalize(num, den):
  return num / jnp.where(den > 0, den, 1.0)[..., None]


def linear_attention_masked(q_BLHK, k_BMHK, v_BMHK, mask_BLM=None):
  """The reference: a_LM = phi(q_l).phi(k_m) masked, out = a v / sum_M a. O(L M)."""
  fq, fk = feature_map(q_BLHK.astype(_F32)), feature_map(k_BMHK.astype(_F32))
  a_BHLM = jnp.einsum("BLHK,BMHK->BHLM", fq, fk)
  if mask_BLM is not None:
    a_BHLM = jnp.where(mask_BLM[:, None], a_BHLM, 0.0)
  num_BHLK = jnp.einsum("BHLM,BMHK->BHLK", a_BHLM, v_BMHK.astype(_F32))
  out_BHLK = _normalize(num_BHLK, a_BHLM.sum(-1))
  return out_BHLK.transpose(0, 2, 1, 3).astype(q_BLHK.dtype)


def _causal_chunked(fq_BLHK, fk_BLHK, v_BLHK, C):
  """Causal parallel form on aligned queries and keys (L == M), float32."""
  B, L, H, K = fq_BLHK.shape
  N = -(-L // C)
  pad = ((0, 0), (0, N * C - L), (0, 0), (0, 0))

  def chunks(x):
    return jnp.pad(x, pad).reshape(B, N, C, H, x.shape[-1])

  fq_BNCHK, fk_BNCHK, v_BNCHK = chunks(fq_BLHK), chunks(fk_BLHK), chunks(v_BLHK)
  # state before each chunk: exclusive prefix sum of the per-chunk sums
  S_BNHKK = jnp.cumsum(jnp.einsum("BNCHK,BNCHJ->BNHKJ", fk_BNCHK, v_BNCHK), axis=1)
  z_BNHK = jnp.cumsum(fk_BNCHK.sum(2), axis=1)
  S_BNHKK = jnp.pad(S_BNHKK, ((0, 0), (1, 0), (0, 0), (0, 0), (0, 0)))[:, :-1]
  z_BNHK = jnp.pad(z_BNHK, ((0, 0), (1, 0), (0, 0), (0, 0)))[:, :-1]
  # inside a chunk: the masked [C, C] form
  a_BNHCD = jnp.einsum("BNCHK,BNDHK->BNHCD", fq_BNCHK, fk_BNCHK)
  a_BNHCD = jnp.where(jnp.tri(C, dtype=bool), a_BNHCD, 0.0)
  num_BNCHK = jnp.einsum("BNCHK,BNHKJ->BNCHJ", fq_BNCHK, S_BNHKK)
  num_BNCHK += jnp.einsum("BNHCD,BNDHJ->BNCHJ", a_BNHCD, v_BNCHK)
  den_BNCH = jnp.einsum("BNCHK,BNHK->BNCH", fq_BNCHK, z_BNHK) + a_BNHCD.sum(-1).transpose(
    0, 1, 3, 2
  )
  return _normalize(num_BNCHK, den_BNCH).reshape(B, N * C, H, -1)[:, :L]


def _causal_recurrent(fq_BLHK, fk_BLHK, v_BLHK):
  """Causal recurrent form: one fixed-size state (S, z) carried along the positions."""
  B, L, H, K = fq_BLHK.shape

  def step(state, x):
    S_BHKJ, z_BHK = state
    fq_BHK, fk_BHK, v_BHJ = x
    S_BHKJ = S_BHKJ + jnp.einsum("BHK,BHJ->BHKJ", fk_BHK, v_BHJ)
    z_BHK = z_BHK + fk_BHK
    num_BHJ = jnp.einsum("BHK,BHKJ->BHJ", fq_BHK, S_BHKJ)
    return (S_BHKJ, z_BHK), _normalize(num_BHJ, jnp.einsum("BHK,BHK->BH", fq_BHK, z_BHK))

  init = (jnp.zeros((B, H, K, v_BLHK.shape[-1]), _F32), jnp.zeros((B, H, K), _F32))
  xs = tuple(x.transpose(1, 0, 2, 3) for x in (fq_BLHK, fk_BLHK, v_BLHK))
  _, out_LBHJ = lax.scan(step, init, xs)
  return out_LBHJ.transpose(1, 0, 2, 3)


def linear_attention(
  q_BLHK,
  k_BMHK,
  v_BMHK,
  *,
  causal=True,
  chunk=128,
  recurrent=False,
  q_offset=0,
  kv_mask_BM=None,
):
  """Causal (or not) elu+1 linear attention, parallel chunked form or recurrent form.

  Invalid keys (`kv_mask_BM` False) contribute nothing to the state. With `q_offset` or
  L != M the queries are placed on the key timeline (query l at position q_offset + l
  reads keys m <= q_offset + l), so the cost is linear in M.
  """
  B, L, H, K = q_BLHK.shape
  M = k_BMHK.shape[1]
  fq_BLHK = feature_map(q_BLHK.astype(_F32))
  fk_BMHK = feature_map(k_BMHK.astype(_F32))
  if kv_mask_BM is not None:
    fk_BMHK = jnp.where(kv_mask_BM[:, :, None, None], fk_BMHK, 0.0)
  v_BMHK = v_BMHK.astype(_F32)

  if not causal:  # every query reads the same total state
    S_BHKJ = jnp.einsum("BMHK,BMHJ->BHKJ", fk_BMHK, v_BMHK)
    num_BLHJ = jnp.einsum("BLHK,BHKJ->BLHJ", fq_BLHK, S_BHKJ)
    den_BLH = jnp.einsum("BLHK,BMHK->BLH", fq_BLHK, fk_BMHK)
    return _normalize(num_BLHJ, den_BLH).astype(q_BLHK.dtype)

  aligned = isinstance(q_offset, int) and q_offset == 0 and L == M
  if aligned:
    fq_BMHK = fq_BLHK
  else:  # the query at each key position (if any), gathered onto the key timeline
    l_M = jnp.arange(M) - q_offset
    fq_BMHK = jnp.where((l_M >= 0)[None, :, None, None], fq_BLHK[:, jnp.clip(l_M, 0, L - 1)], 0)

  if recurrent:
    out_BMHJ = _causal_recurrent(fq_BMHK, fk_BMHK, v_BMHK)
  else:
    out_BMHJ = _causal_chunked(fq_BMHK, fk_BMHK, v_BMHK, min(chunk, M))
  if aligned:
    return out_BMHJ.astype(q_BLHK.dtype)

  # back from the key timeline; a query past the last key reads the final state
  pos_L = q_offset + jnp.arange(L)
  out_BLHJ = out_BMHJ[:, jnp.clip(pos_L, 0, M - 1)]
  S_BHKJ = jnp.einsum("BMHK,BMHJ->BHKJ", fk_BMHK, v_BMHK)
  num_BLHJ = jnp.einsum("BLHK,BHKJ->BLHJ", fq_BLHK, S_BHKJ)
  past_BLHJ = _normalize(num_BLHJ, jnp.einsum("BLHK,BMHK->BLH", fq_BLHK, fk_BMHK))
  out_BLHJ = jnp.where((pos_L >= M)[None, :, None, None], past_BLHJ, out_BLHJ)
  return out_BLHJ.astype(q_BLHK.dtype)


def linear_attention_reference(q_BLHK, k_BMHK, v_BMHK, *, causal=True, q_offset=0, kv_mask_BM=None):
  """`linear_attention_masked` with the mask `attend` would use."""
  L, M = q_BLHK.shape[1], k_BMHK.shape[1]
  mask_BLM = attention_mask(L, M, causal=causal, q_offset=q_offset, kv_mask_BM=kv_mask_BM)
  return linear_attention_masked(q_BLHK, k_BMHK, v_BMHK, mask_BLM)
