"""Linear attention as a plug-in mixer: softmax replaced by a feature map (section 9).

  s_L = sum_j Wo_j phi(q_j(x_L))^T S_jL / phi(q_j(x_L))^T z_jL,
  S_jL = sum_{i<=L} phi(k_j(x_i)) v_j(x_i)^T,  z_jL = sum_{i<=L} phi(k_j(x_i)),  phi = elu + 1

(Katharopoulos et al. 2020.) Training uses the chunked parallel form of
jaxformer.math.linear_attention; decoding keeps only (S, z) per head, K x (K + 1) numbers
whatever the length: the fixed memory of section 1, carried by the gated recurrence of
jaxformer.math.gated with no decay (a = 1) and z as one more column of v.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import gated, heads
from jaxformer.math import linear_attention as linear_math
from jaxformer.math.contract import contract
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def head_dim(width, num_heads, dim):
  """K: `dim`, or width // num_heads when None (which must divide)."""
  if dim is not None:
    if dim <= 0:
      raise ValueError(f"head_dim={dim!r}: must be a positive integer or None")
    return dim
  if num_heads <= 0 or width % num_heads:
    raise ValueError(f"num_heads={num_heads}: must be > 0 and divide width={width}")
  return width // num_heads


def projections(module, x_BLD, num_heads, dim, names):
  """Per-head projections x -> [B, L, H, K], one kernel [D, H, K] each, named `names`."""
  width = x_BLD.shape[-1]
  return [
    contract(
      "BLD,DHK->BLHK",
      x_BLD,
      param(module, name, (width, num_heads, dim), (axes.EMBED, axes.HEADS, axes.KV)),
    )
    for name in names
  ]


def output(module, o_BLHK, width):
  """concat_j(o_j) Wo: [B, L, H, K] -> [B, L, D]."""
  _, _, num_heads, dim = o_BLHK.shape
  wo_HKD = param(module, "wo", (num_heads, dim, width), (axes.HEADS, axes.KV, axes.EMBED))
  return heads.combine_concat(o_BLHK, wo_HKD.astype(o_BLHK.dtype))


class LinearAttention(nn.Module):
  width: int
  num_heads: int = 1
  head_dim: int | None = None  # K, the feature dimension; None: width // num_heads
  chunk: int = 64  # block length of the chunked parallel form

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    dim = head_dim(self.width, self.num_heads, self.head_dim)
    q_BLHK, k_BLHK, v_BLHK = projections(self, x_BLD, self.num_heads, dim, ("wq", "wk", "wv"))
    if decode:
      o_BLHK = self._through_state(q_BLHK, k_BLHK, v_BLHK)
    else:
      o_BLHK = linear_math.linear_attention(q_BLHK, k_BLHK, v_BLHK, chunk=self.chunk)
    return output(self, o_BLHK.astype(x_BLD.dtype), self.width)

  def _through_state(self, q_BLHK, k_BLHK, v_BLHK):
    """The recurrent form from the cached (S, z), which it then replaces."""
    batch, _, num_heads, dim = q_BLHK.shape
    state = self.variable(
      "cache", "state", jnp.zeros, (batch, num_heads, dim, dim + 1), jnp.float32
    )
    fq_BLHK = linear_math.feature_map(q_BLHK.astype(jnp.float32))
    fk_BLHK = linear_math.feature_map(k_BLHK.astype(jnp.float32))
    ones_BLH1 = jnp.ones((*v_BLHK.shape[:3], 1), jnp.float32)
    v1_BLHJ = jnp.concatenate([v_BLHK.astype(jnp.float32), ones_BLH1], axis=-1)  # J = K + 1
    out_BLHJ, state.value = gated.gated_linear_attention(
      fq_BLHK, fk_BLHK, v1_BLHJ, jnp.ones_like(fk_BLHK), state.value, form="recurrent"
    )
    num_BLHK, den_BLH = out_BLHJ[..., :dim], out_BLHJ[..., dim]
    return num_BLHK / jnp.where(den_BLH > 0, den_BLH, 1.0)[..., None]
