"""DeltaNet and Gated DeltaNet as plug-in mixers: the delta rule, trained in chunks.

DeltaNet (Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length") and, with `gated=True`, Gated DeltaNet (Yang et al. 2025). A short causal
convolution (C taps) on each projection, then per head j

  q, k = L2Norm(SiLU(conv(x Wq_j))), L2Norm(SiLU(conv(x Wk_j))),  v = SiLU(conv(x Wv_j))
  beta = sigmoid(x Wb_j)
  alpha = e^(-|A_j| softplus(x Wa_j + b_j))       (gated only; DeltaNet: alpha = 1;
                                                   |A_j| in [1, 16], dt in [0.001, 0.1])
  S_jn = alpha_n (I - beta_n k_n k_n^T) S_j(n-1) + beta_n k_n v_n^T,   o_jn = S_jn^T q_n / sqrt(K)
  s_n  = Wo RMSNorm_j(o_jn)                        (DeltaNet)
  s_n  = Wo (swish(x_n Wg_j) * RMSNorm_j(o_jn))    (Gated DeltaNet's output gate)

Unit-norm keys and beta in (0, 1) keep every (I - beta k k^T) a contraction. Training runs
the chunked (WY) form of jaxformer.math.delta; decoding the recurrent form from the cached S.

State: H x K x K float32 + (C - 1) x 3 H K inputs of the convolution, per sequence,
whatever the length.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxformer.math import delta, feature_maps, gated
from jaxformer.math.contract import contract
from jaxformer.mixers.linear import head_dim, output, projections
from jaxformer.mixers.mamba2 import dt_bias_init, log_rate_init
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def state_size(width, num_heads=4, head_dim=None, conv=4):
  """Numbers in the decode state of one sequence: H K^2 + (C - 1) 3 H K."""
  dim = head_dim or width // num_heads
  return num_heads * dim * dim + max(conv - 1, 0) * 3 * num_heads * dim


def _l2_normalize(x_BLHK, eps=1e-6):
  x = x_BLHK.astype(jnp.float32)
  return x * jax.lax.rsqrt((x * x).sum(-1, keepdims=True) + eps)


class DeltaNet(nn.Module):
  width: int
  num_heads: int = 4
  head_dim: int | None = None  # K; None: width // num_heads
  gated: bool = False  # True: Gated DeltaNet (a decay alpha per head, an output gate)
  conv: int = 4  # taps of the short causal convolution on x; 0: none
  chunk: int = 16  # C of the chunked training form

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.conv < 0:
      raise ValueError(f"conv={self.conv!r}: must be >= 0")
    dim = head_dim(self.width, self.num_heads, self.head_dim)
    H = self.num_heads
    batch, length, width = x_BLD.shape
    q_BLHK, k_BLHK, v_BLHK = projections(self, x_BLD, H, dim, ("wq", "wk", "wv"))
    if self.conv:  # over the projected q, k, v (as the papers' short convolutions)
      qkv_BLF = jnp.concatenate([q_BLHK, k_BLHK, v_BLHK], axis=2).reshape(batch, length, -1)
      w_C3HK = param(
        self,
        "conv",
        (self.conv, 3, H, dim),
        (None, None, axes.HEADS, axes.KV),
        nn.initializers.normal(stddev=self.conv**-0.5),  # depthwise: fan-in C
      )
      w_CF = w_C3HK.reshape(self.conv, -1).astype(qkv_BLF.dtype)
      if decode:
        history = self.variable(
          "cache", "conv", jnp.zeros, (batch, self.conv - 1, 3 * H * dim), qkv_BLF.dtype
        )
        qkv_BLF, history.value = gated.short_conv(qkv_BLF, w_CF, history.value)
      else:
        qkv_BLF, _ = gated.short_conv(qkv_BLF, w_CF)
      q_BLHK, k_BLHK, v_BLHK = jnp.split(qkv_BLF.reshape(batch, length, 3 * H, dim), 3, axis=2)
    q_BLHK, k_BLHK, v_BLHK = nn.silu(q_BLHK), nn.silu(k_BLHK), nn.silu(v_BLHK)
    q_BLHK = _l2_normalize(q_BLHK) * dim**-0.5
    k_BLHK = _l2_normalize(k_BLHK)
    wb_DH = param(self, "wb", (width, H), (axes.EMBED, axes.HEADS))
    beta_BLH = jax.nn.sigmoid(contract("BLD,DH->BLH", x_BLD, wb_DH).astype(jnp.float32))
    log_a_BLH = None
    if self.gated:
      wa_DH = param(self, "wa", (width, H), (axes.EMBED, axes.HEADS))
      ba_H = param(self, "ba", (H,), (axes.HEADS,), dt_bias_init)  # dt in [0.001, 0.1]
      log_rate_H = param(self, "log_rate", (H,), (axes.HEADS,), log_rate_init)
      dt_BLH = jax.nn.softplus(contract("BLD,DH->BLH", x_BLD, wa_DH).astype(jnp.float32) + ba_H)
      log_a_BLH = -jnp.exp(log_rate_H) * dt_BLH
    if decode:
      state = self.variable("cache", "state", jnp.zeros, (batch, H, dim, dim), jnp.float32)
      o_BLHK, state.value = delta.recurrent(
        q_BLHK, k_BLHK, v_BLHK, beta_BLH, log_a_BLH, state.value
      )
    else:
      o_BLHK, _ = delta.chunked(q_BLHK, k_BLHK, v_BLHK, beta_BLH, log_a_BLH, chunk=self.chunk)
    scale_HK = param(self, "norm", (H, dim), (axes.HEADS, axes.KV), nn.initializers.ones)
    o_BLHK = feature_maps.head_norm(o_BLHK, scale_HK)
    if self.gated:
      (g_BLHK,) = projections(self, x_BLD, H, dim, ("wg",))
      o_BLHK = nn.swish(g_BLHK.astype(jnp.float32)) * o_BLHK
    return output(self, o_BLHK.astype(x_BLD.dtype), self.width)
