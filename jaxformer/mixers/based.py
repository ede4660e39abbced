"""Based as a plug-in mixer (Arora et al. 2024): Taylor linear attention plus a short window.

Two branches summed, each with its own projections:

  linear  per head j, q and k projected to a small feature dimension F (scaled by
          F^(-1/4) each) and mapped by the second-order Taylor expansion of exp
          (jaxformer.math.feature_maps.taylor: phi(q) . phi(k) = 1 + q.k + (q.k)^2 / 2):
            o_jn = phi(q_n)^T S_jn / phi(q_n)^T z_jn,
            S_jn = sum_(m <= n) phi(k_m) v_m^T,  z_jn = sum_(m <= n) phi(k_m)
          the global, approximate read (state (1 + F + F^2) x (K + 1) per head)
  window  softmax attention over the last `window` tokens (the sliding-window kernel): the
          exact, local read

Training runs the chunked form of jaxformer.math.chunked (no decay, z as one more column of
v); decoding the recurrent form from the cached (S, z) and the window's ring of keys and
values.

State: H x (1 + F + F^2) x (K + 1) float32 + the window's 2 x window x D keys and values,
per sequence, whatever the length.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import chunked, feature_maps
from jaxformer.mixers.attention import SoftmaxAttention
from jaxformer.mixers.linear import head_dim, output, projections


def state_size(width, num_heads=2, feature_dim=8, window=8):
  """Numbers in the decode state of one sequence: H (1 + F + F^2)(K + 1) + 2 w D."""
  dim = width // num_heads
  return num_heads * feature_maps.taylor_dim(feature_dim) * (dim + 1) + 2 * window * width


class TaylorLinearAttention(nn.Module):
  """Based's linear branch alone."""

  width: int
  num_heads: int = 2
  feature_dim: int = 8  # F: q and k are projected to F before the Taylor map
  chunk: int = 16

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.feature_dim <= 0:
      raise ValueError(f"feature_dim={self.feature_dim!r}: must be a positive integer")
    dim = head_dim(self.width, self.num_heads, None)
    H, F = self.num_heads, self.feature_dim
    batch, length, _ = x_BLD.shape
    q_BLHF, k_BLHF = projections(self, x_BLD, H, F, ("wq", "wk"))
    (v_BLHK,) = projections(self, x_BLD, H, dim, ("wv",))
    fq_BLHT = feature_maps.taylor(q_BLHF.astype(jnp.float32) * F**-0.25)
    fk_BLHT = feature_maps.taylor(k_BLHF.astype(jnp.float32) * F**-0.25)
    ones_BLH1 = jnp.ones((batch, length, H, 1), jnp.float32)
    v1_BLHJ = jnp.concatenate([v_BLHK.astype(jnp.float32), ones_BLH1], axis=-1)  # J = K + 1
    no_decay_BLH1 = jnp.zeros((batch, length, H, 1), jnp.float32)
    if decode:
      T = feature_maps.taylor_dim(F)
      state = self.variable("cache", "state", jnp.zeros, (batch, H, T, dim + 1), jnp.float32)
      out_BLHJ, state.value = chunked.recurrent(
        fq_BLHT, fk_BLHT, v1_BLHJ, no_decay_BLH1, state.value
      )
    else:
      out_BLHJ, _ = chunked.chunked(fq_BLHT, fk_BLHT, v1_BLHJ, no_decay_BLH1, chunk=self.chunk)
    o_BLHK = out_BLHJ[..., :dim] / out_BLHJ[..., dim:]  # the denominator is >= 1/2 per key
    return output(self, o_BLHK.astype(x_BLD.dtype), self.width)


class Based(nn.Module):
  width: int
  num_heads: int = 2  # of each branch
  feature_dim: int = 8  # F of the linear branch
  window: int = 8  # the softmax branch reads the last `window` tokens
  chunk: int = 16

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    local = SoftmaxAttention(
      self.width, self.num_heads, window=self.window, impl="sliding_window", name="window"
    )
    summary = TaylorLinearAttention(
      self.width, self.num_heads, self.feature_dim, self.chunk, name="linear"
    )
    return local(x_BLD, decode=decode) + summary(x_BLD, decode=decode)
