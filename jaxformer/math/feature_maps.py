"""Feature maps and position rotations of the successor mixers (pure functions).

taylor(x)        Based's feature map (Arora et al. 2024): the second-order Taylor
                 expansion of exp, phi(x) = [1, x, vec(x x^T) / sqrt(2)], so that
                 phi(q) . phi(k) = 1 + q . k + (q . k)^2 / 2  (>= 1/2 > 0): K -> 1 + K + K^2
rotate(x, pos)   RetNet's relative-position rotation e^(i n theta) (Sun et al. 2023, the
                 xPos form without its length scale): pairs (x_2i, x_2i+1) of each head
                 turned by pos * theta_i, theta_i = base^(-2i / K); so q_n . k_m depends
                 on n - m alone
"""

import jax
import jax.numpy as jnp


def taylor_dim(dim):
  """The feature count of `taylor` on K = dim inputs: 1 + K + K^2."""
  return 1 + dim + dim * dim


def taylor(x_BLHK):
  """[..., K] -> [..., 1 + K + K^2]: [1, x, vec(x x^T) / sqrt(2)]."""
  outer = (x_BLHK[..., :, None] * x_BLHK[..., None, :]).reshape(*x_BLHK.shape[:-1], -1)
  ones = jnp.ones((*x_BLHK.shape[:-1], 1), x_BLHK.dtype)
  return jnp.concatenate([ones, x_BLHK, outer * 0.5**0.5], axis=-1)


def rotate(x_BLHK, pos_L, base=10000.0):
  """Each pair (x_2i, x_2i+1) turned by the angle pos * base^(-2i / K); K must be even."""
  K = x_BLHK.shape[-1]
  if K % 2:
    raise ValueError(f"rotate: head dimension K={K} must be even")
  theta_I = base ** (-jnp.arange(0, K, 2, dtype=jnp.float32) / K)
  angle_LI = pos_L.astype(jnp.float32)[:, None] * theta_I
  cos_L1I, sin_L1I = jnp.cos(angle_LI)[:, None], jnp.sin(angle_LI)[:, None]
  x = x_BLHK.astype(jnp.float32)
  even, odd = x[..., 0::2], x[..., 1::2]
  turned = jnp.stack([even * cos_L1I - odd * sin_L1I, even * sin_L1I + odd * cos_L1I], axis=-1)
  return turned.reshape(x.shape).astype(x_BLHK.dtype)


def head_norm(o_BLHK, scale_HK, eps=1e-5, center=False):
  """o / rms(o) (o - mean(o) / std(o) with center) over K of each head, times scale_HK."""
  o = o_BLHK.astype(jnp.float32)
  if center:
    o = o - o.mean(-1, keepdims=True)
  o = o * jax.lax.rsqrt((o * o).mean(-1, keepdims=True) + eps)
  return (o * scale_HK.astype(jnp.float32)).astype(o_BLHK.dtype)
