"""DeltaNet and Gated DeltaNet as plug-in mixers: the delta rule, trained in chunks.

DeltaNet (Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length") and, with `gated=True`, Gated DeltaNet (Yang et al. 2025). A short causal
convolution (C taps) on x, then per head j

  q, k = L2Norm(SiLU(x Wq_j)), L2Norm(SiLU(x Wk_j)),  v = x Wv_j,  beta = sigmoid(x Wb_j)
  alpha = e^(-e^(A_j) softplus(x Wa_j + b_j))     (gated only; DeltaNet: alpha = 1)
  S_jn = alpha_n (I - beta_n k_n k_n^T) S_j(n-1) + beta_n k_n v_n^T,   o_jn = S_jn^T q_n / sqrt(K)
  s_n  = Wo RMSNorm_j(o_jn)                        (DeltaNet)
  s_n  = Wo (swish(x_n Wg_j) * RMSNorm_j(o_jn))    (Gated DeltaNet's output gate)

Unit-norm keys and beta in (0, 1) keep every (I - beta k k^T) a contraction. Training runs
the chunked (WY) form of jaxformer.math.delta; decoding the recurrent form from the cached S.

State: H x K x K float32 + (C - 1) x D inputs of the convolution, per sequence, whatever
the length.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxformer.math import delta, feature_maps, gated
from jaxformer.math.contract import contract
from jaxformer.mixers.linear import head_dim, output, projections
from jaxformer.mixers.mamba2 import dt_bias_init
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def state_size(width, num_heads=4, head_dim=None, conv=4):
  """Numbers in the decode state of one sequence: H K^2 + (C - 1) D."""
  dim = head_dim or width // num_heads
  return num_heads * dim * dim + max(conv - 1, 0) * width


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
    batch, _, width = x_BLD.shape
    if self.conv:
      w_CD = param(self, "conv", (self.conv, width), (None, axes.EMBED))
      if decode:
        history = self.variable(
          "cache", "conv", jnp.zeros, (batch, self.conv - 1, width), x_BLD.dtype
        )
        x_BLD, history.value = gated.short_conv(x_BLD, w_CD.astype(x_BLD.dtype), history.value)
      else:
        x_BLD, _ = gated.short_conv(x_BLD, w_CD.astype(x_BLD.dtype))
    q_BLHK, k_BLHK, v_BLHK = projections(self, x_BLD, H, dim, ("wq", "wk", "wv"))
    q_BLHK = _l2_normalize(nn.silu(q_BLHK)) * dim**-0.5
    k_BLHK = _l2_normalize(nn.silu(k_BLHK))
    wb_DH = param(self, "wb", (width, H), (axes.EMBED, axes.HEADS))
    beta_BLH = jax.nn.sigmoid(contract("BLD,DH->BLH", x_BLD, wb_DH).astype(jnp.float32))
    log_a_BLH = None
    if self.gated:
      wa_DH = param(self, "wa", (width, H), (axes.EMBED, axes.HEADS))
      ba_H = param(self, "ba", (H,), (axes.HEADS,), dt_bias_init)  # dt in [0.001, 0.1]
      log_rate_H = param(self, "log_rate", (H,), (axes.HEADS,), nn.initializers.zeros)
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
