"""H3 as a plug-in mixer (Fu et al. 2023, Hungry Hungry Hippos): a long convolution.

Per head j of K channels, q, k, v = x Wq_j, x Wk_j, x Wv_j, then

  k'  = shift_SSM(k)                  a short causal convolution of C taps (the shift SSM)
  kv  = k' v^T                        K x K channels per head and position
  y   = diag_SSM(kv)                  each channel through a diagonal SSM of N states:
                                      a long convolution whose kernel is
                                      kernel_t = sum_n c_n a_n^t b_n (+ a skip d kv)
  o_j = y^T q_j,    s = Wo concat_j(o_j)

(the paper's eq. in section 3.1: Q * SSM_diag(SSM_shift(K) * V)). The diagonal SSM follows
S4D-Real: a_n = e^(-dt |A_n|) with |A_n| = n + 1, dt log-uniform in [0.001, 0.1].
Training applies the kernel by FFT (jaxformer.math.long_conv.conv: O(L log L)); decoding
runs the same SSM as a recurrence, N numbers per channel.

State: H K^2 N float32 (the SSMs) + (C - 1) x D inputs of the shift, per sequence,
whatever the length.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxformer.math import gated, long_conv
from jaxformer.mixers.linear import output, projections
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def state_size(width, head_dim=2, state=8, shift=4):
  """Numbers in the decode state of one sequence: H K^2 N + (C - 1) D, H = D / K."""
  return (width // head_dim) * head_dim * head_dim * state + max(shift - 1, 0) * width


def _s4d_real(key, shape, dtype=jnp.float32):
  """log |A_n| = log(n + 1) for every channel (S4D-Real)."""
  del key
  return jnp.broadcast_to(jnp.log1p(jnp.arange(shape[-1], dtype=dtype)), shape)


def _log_dt(key, shape, dtype=jnp.float32):
  """log dt uniform in [log 0.001, log 0.1] (S4D's initialization)."""
  return jax.random.uniform(key, shape, dtype, jnp.log(1e-3), jnp.log(1e-1))


class H3(nn.Module):
  width: int
  head_dim: int = 2  # K: each head carries K x K SSM channels
  state: int = 8  # N: states of each channel's diagonal SSM
  shift: int = 4  # C: taps of the shift SSM on k; 0: none

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.state <= 0 or self.shift < 0:
      raise ValueError(f"state={self.state!r}: must be > 0; shift={self.shift!r}: >= 0")
    if self.head_dim <= 0 or self.width % self.head_dim:
      raise ValueError(f"head_dim={self.head_dim!r}: must be > 0 and divide width={self.width}")
    K, N = self.head_dim, self.state
    H = self.width // K
    batch, length, width = x_BLD.shape
    q_BLHK, k_BLHK, v_BLHK = projections(self, x_BLD, H, K, ("wq", "wk", "wv"))
    if self.shift:
      w_CD = param(self, "shift", (self.shift, width), (None, axes.EMBED))
      k_BLD = k_BLHK.reshape(batch, length, width)
      if decode:
        history = self.variable(
          "cache", "shift", jnp.zeros, (batch, self.shift - 1, width), k_BLD.dtype
        )
        k_BLD, history.value = gated.short_conv(k_BLD, w_CD.astype(k_BLD.dtype), history.value)
      else:
        k_BLD, _ = gated.short_conv(k_BLD, w_CD.astype(k_BLD.dtype))
      k_BLHK = k_BLD.reshape(batch, length, H, K)
    channels = (axes.HEADS, axes.KV, None)
    names = (*channels, None)
    log_rate_HKJN = param(self, "log_rate", (H, K, K, N), names, _s4d_real)
    log_dt_HKJ = param(self, "log_dt", (H, K, K), channels, _log_dt)
    b_HKJN = param(self, "b", (H, K, K, N), names, nn.initializers.ones)
    c_HKJN = param(self, "c", (H, K, K, N), names, nn.initializers.normal(N**-0.5))
    skip_HKJ = param(self, "skip", (H, K, K), channels, nn.initializers.ones)
    E = H * K * K  # SSM channels

    def flat(x):
      return x.reshape(E, *x.shape[3:])

    log_a_EN = flat(-jnp.exp(log_rate_HKJN) * jnp.exp(log_dt_HKJ)[..., None])
    kv_BLE = (
      jnp.einsum("BLHK,BLHJ->BLHKJ", k_BLHK, v_BLHK).reshape(batch, length, E).astype(jnp.float32)
    )
    if decode:
      ssm = self.variable("cache", "state", jnp.zeros, (batch, E, N), jnp.float32)
      y_BLE, ssm.value = long_conv.recurrent(
        kv_BLE, log_a_EN, flat(b_HKJN), flat(c_HKJN), ssm.value
      )
    else:
      y_BLE = long_conv.conv(kv_BLE, log_a_EN, flat(b_HKJN), flat(c_HKJN))
    y_BLE = y_BLE + flat(skip_HKJ) * kv_BLE
    o_BLHK = jnp.einsum(
      "BLHK,BLHKJ->BLHJ", q_BLHK.astype(jnp.float32), y_BLE.reshape(batch, length, H, K, K)
    )
    return output(self, o_BLHK.astype(x_BLD.dtype), self.width)
