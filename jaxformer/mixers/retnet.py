"""RetNet's retention as a plug-in mixer (Sun et al. 2023): a fixed decay per head.

Per head j, with the rotation e^(i n theta) of jaxformer.math.feature_maps.rotate on q and k
and a decay gamma_j = 1 - 2^(-5 - j) fixed, not learned (head j forgets over ~2^(5 + j)
tokens):

  S_jn = gamma_j S_j(n-1) + k_jn v_jn^T,    o_jn = S_jn^T q_jn      (retention, eq. 4-5)
  s_n  = Wo (swish(x_n Wg) * GroupNorm_j(o_jn))                       (eq. 8)

k is scaled by 1 / sqrt(K). Training runs the chunkwise form of jaxformer.math.chunked
(the paper's chunkwise recurrent representation, eq. 7); decoding the recurrent form from
the cached S.

State: H x K x K float32 per sequence (and a position counter), whatever the length.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import chunked, feature_maps
from jaxformer.mixers.linear import head_dim, output, projections
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def state_size(width, num_heads=4, head_dim=None):
  """Numbers in the decode state of one sequence: H K^2."""
  dim = head_dim or width // num_heads
  return num_heads * dim * dim


class Retention(nn.Module):
  width: int
  num_heads: int = 4
  head_dim: int | None = None  # K (even: the rotation turns pairs); None: width // num_heads
  chunk: int = 16  # C of the chunkwise training form

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    dim = head_dim(self.width, self.num_heads, self.head_dim)
    batch, length, _ = x_BLD.shape
    names = ("wq", "wk", "wv", "wg")
    q_BLHK, k_BLHK, v_BLHK, g_BLHK = projections(self, x_BLD, self.num_heads, dim, names)
    pos_L = jnp.arange(length)
    if decode:
      index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
      pos_L = pos_L + index.value
      index.value = index.value + length
    q_BLHK = feature_maps.rotate(q_BLHK, pos_L)
    k_BLHK = feature_maps.rotate(k_BLHK, pos_L) * dim**-0.5
    log_a_BLH1 = jnp.broadcast_to(
      chunked.retention_log_decays(self.num_heads)[:, None], (batch, length, self.num_heads, 1)
    )
    if decode:
      state = self.variable(
        "cache", "state", jnp.zeros, (batch, self.num_heads, dim, dim), jnp.float32
      )
      o_BLHK, state.value = chunked.recurrent(q_BLHK, k_BLHK, v_BLHK, log_a_BLH1, state.value)
    else:
      o_BLHK, _ = chunked.chunked(q_BLHK, k_BLHK, v_BLHK, log_a_BLH1, chunk=self.chunk)
    scale_HK = param(
      self, "norm", (self.num_heads, dim), (axes.HEADS, axes.KV), nn.initializers.ones
    )
    o_BLHK = feature_maps.head_norm(o_BLHK, scale_HK, center=True)
    return output(self, (nn.swish(g_BLHK) * o_BLHK).astype(x_BLD.dtype), self.width)
