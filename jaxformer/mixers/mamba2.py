"""Mamba-2 as a plug-in mixer (Dao & Gu 2024, SSD): a scalar decay per head, a state of N.

With E = expand x D inner channels split into H heads of P, a short causal convolution
(C taps) then SiLU on (x, B, C), and per head h a step dt_h and a decay rate A_h < 0:

  dt_hn = softplus(x_n W_dt + b_dt)_h,    a_hn = e^(dt_hn A_h)                 (scalar)
  h_hn  = a_hn h_h(n-1) + (dt_hn B_n) x_hn^T,   y_hn = h_hn^T C_n + D_h x_hn   (SSD, eq. 1)
  s_n   = Wo RMSNorm(y_n * silu(z_n))

B_n, C_n [N] are shared by the heads (one group). This is gated linear attention with
q = C, k = dt B, v = x and one decay per head, so training runs the chunked form of
jaxformer.math.chunked (the SSD block decomposition: the masked C x C form inside a chunk,
the states between chunks) and decoding the recurrent form from the cached h.

State: H x N x P float32 (the SSM) + (C - 1) x (E + 2N) inputs of the convolution, per
sequence, whatever the length.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.math import chunked, feature_maps, gated
from jaxformer.math.contract import contract
from jaxformer.mixers.linear import head_dim
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def state_size(width, num_heads=4, state=16, expand=2, conv=4):
  """Numbers in the decode state of one sequence: H N P + (C - 1)(E + 2N), E = H P."""
  inner = expand * width
  return num_heads * state * (inner // num_heads) + max(conv - 1, 0) * (inner + 2 * state)


def log_uniform(low, high):
  """An initializer: e^u with u uniform in [log low, log high]."""

  def init(key, shape, dtype=jnp.float32):
    u = jax.random.uniform(key, shape, dtype, np.log(low), np.log(high))
    return jnp.exp(u)

  return init


def dt_bias_init(key, shape, dtype=jnp.float32):
  """softplus^-1 of dt drawn log-uniform in [0.001, 0.1] (Mamba's initialization)."""
  dt = log_uniform(1e-3, 1e-1)(key, shape, dtype)
  return dt + jnp.log(-jnp.expm1(-dt))


def log_rate_init(key, shape, dtype=jnp.float32):
  """log of A's magnitude, |A| uniform in [1, 16]."""
  return jnp.log(jax.random.uniform(key, shape, dtype, 1.0, 16.0))


class Mamba2(nn.Module):
  width: int
  num_heads: int = 4
  head_dim: int | None = None  # P; None: expand x width // num_heads
  state: int = 16  # N: the SSM's state per head and channel
  expand: int = 2  # E = expand x D inner channels
  conv: int = 4  # taps of the short causal convolution; 0: none
  chunk: int = 16  # C of the chunked training form

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.state <= 0 or self.expand <= 0 or self.conv < 0:
      raise ValueError(
        f"state={self.state!r}, expand={self.expand!r}: must be > 0; conv={self.conv!r}: >= 0"
      )
    H, N = self.num_heads, self.state
    P = head_dim(self.expand * self.width, H, self.head_dim)
    E = H * P
    batch, length, width = x_BLD.shape

    def proj(name, shape, names):
      return param(self, name, (width, *shape), (axes.EMBED, *names))

    z_BLHK = contract("BLD,DHK->BLHK", x_BLD, proj("wz", (H, P), (axes.HEADS, axes.KV)))
    u_BLHK = contract("BLD,DHK->BLHK", x_BLD, proj("wx", (H, P), (axes.HEADS, axes.KV)))
    b_BLK = contract("BLD,DK->BLK", x_BLD, proj("wb", (N,), (None,)))
    c_BLK = contract("BLD,DK->BLK", x_BLD, proj("wc", (N,), (None,)))
    dt_BLH = contract("BLD,DH->BLH", x_BLD, proj("wdt", (H,), (axes.HEADS,)))
    xbc_BLF = jnp.concatenate([u_BLHK.reshape(batch, length, E), b_BLK, c_BLK], axis=-1)
    if self.conv:
      w_CF = param(self, "conv", (self.conv, E + 2 * N), (None, None))
      if decode:
        history = self.variable(
          "cache", "conv", jnp.zeros, (batch, self.conv - 1, E + 2 * N), x_BLD.dtype
        )
        xbc_BLF, history.value = gated.short_conv(xbc_BLF, w_CF.astype(x_BLD.dtype), history.value)
      else:
        xbc_BLF, _ = gated.short_conv(xbc_BLF, w_CF.astype(x_BLD.dtype))
    xbc_BLF = nn.silu(xbc_BLF)
    u_BLHK = xbc_BLF[..., :E].reshape(batch, length, H, P)
    b_BLK, c_BLK = xbc_BLF[..., E : E + N], xbc_BLF[..., E + N :]
    dt_bias_H = param(self, "dt_bias", (H,), (axes.HEADS,), dt_bias_init)
    log_rate_H = param(self, "log_rate", (H,), (axes.HEADS,), log_rate_init)
    dt_BLH = jax.nn.softplus(dt_BLH.astype(jnp.float32) + dt_bias_H)
    log_a_BLH1 = (-jnp.exp(log_rate_H) * dt_BLH)[..., None]
    q_BLHN = jnp.broadcast_to(c_BLK[:, :, None], (batch, length, H, N))
    k_BLHN = b_BLK[:, :, None].astype(jnp.float32) * dt_BLH[..., None]
    if decode:
      ssm = self.variable("cache", "state", jnp.zeros, (batch, H, N, P), jnp.float32)
      y_BLHK, ssm.value = chunked.recurrent(q_BLHN, k_BLHN, u_BLHK, log_a_BLH1, ssm.value)
    else:
      y_BLHK, _ = chunked.chunked(q_BLHN, k_BLHN, u_BLHK, log_a_BLH1, chunk=self.chunk)
    skip_H = param(self, "skip", (H,), (axes.HEADS,), nn.initializers.ones)
    y_BLHK = y_BLHK + skip_H[:, None] * u_BLHK
    y_BLHK = y_BLHK * nn.silu(z_BLHK.astype(jnp.float32))
    # RMSNorm over all E channels (not per head): one scale per channel
    y_BL1E = y_BLHK.reshape(batch, length, 1, E)
    scale_1E = param(self, "norm", (1, E), (None, axes.MLP), nn.initializers.ones)
    y_BLHK = feature_maps.head_norm(y_BL1E, scale_1E).reshape(batch, length, H, P)
    wo_HKD = param(self, "wo", (H, P, width), (axes.HEADS, axes.KV, axes.EMBED))
    return contract("BLHK,HKD->BLD", y_BLHK.astype(x_BLD.dtype), wo_HKD)
