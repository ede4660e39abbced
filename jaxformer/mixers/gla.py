"""Gated Linear Attention as a plug-in mixer (Yang et al. 2023): a decay per key dimension,
computed from the token, trained in chunks.

Per head j, with a low-rank gate (rank R) kept near 1 by a temperature tau (eq. 9-10):

  alpha_jn = sigmoid(x_n W1 W2_j + b_j)^(1 / tau)                      in (0, 1)^K
  S_jn = diag(alpha_jn) S_j(n-1) + k_jn v_jn^T,   o_jn = S_jn^T q_jn
  s_n  = Wo (swish(x_n Wr) * RMSNorm_j(o_jn))

k is scaled by 1 / sqrt(K). Training runs the chunked form of jaxformer.math.chunked, where
the intra-chunk scores carry the relative decay e^(b_c - b_d) per key dimension (the
paper's secondary-level chunking: exponents masked to d <= c, never positive); decoding the
recurrent form from the cached S. (jaxformer.mixers.gated is the same recurrence with a
full-rank gate and a short convolution, trained by this chunked form or an associative scan.)

State: H x K x K float32 per sequence, whatever the length.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import chunked, feature_maps, gated
from jaxformer.math.contract import contract
from jaxformer.mixers.linear import head_dim, output, projections
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def state_size(width, num_heads=4, head_dim=None):
  """Numbers in the decode state of one sequence: H K^2."""
  dim = head_dim or width // num_heads
  return num_heads * dim * dim


class GLA(nn.Module):
  width: int
  num_heads: int = 4
  head_dim: int | None = None  # K; None: width // num_heads
  gate_rank: int = 16  # R of the low-rank gate W1 W2
  temperature: float = 16.0  # tau: alpha = sigmoid(.)^(1 / tau) starts near 1
  chunk: int = 16  # C of the chunked training form

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if not self.temperature > 0:
      raise ValueError(f"temperature={self.temperature!r}: must be > 0")
    if self.gate_rank <= 0:
      raise ValueError(f"gate_rank={self.gate_rank!r}: must be a positive integer")
    dim = head_dim(self.width, self.num_heads, self.head_dim)
    H = self.num_heads
    batch, _, width = x_BLD.shape
    q_BLHK, k_BLHK, v_BLHK, r_BLHK = projections(self, x_BLD, H, dim, ("wq", "wk", "wv", "wr"))
    w1_DR = param(self, "gate_down", (width, self.gate_rank), (axes.EMBED, None))
    w2_RHK = param(self, "gate_up", (self.gate_rank, H, dim), (None, axes.HEADS, axes.KV))
    b_HK = param(self, "gate_bias", (H, dim), (axes.HEADS, axes.KV), nn.initializers.zeros)
    gate_BLHK = contract("BLR,RHK->BLHK", contract("BLD,DR->BLR", x_BLD, w1_DR), w2_RHK) + b_HK
    log_a_BLHK = gated.log_decay(gate_BLHK, self.temperature)
    k_BLHK = k_BLHK * dim**-0.5
    if decode:
      state = self.variable("cache", "state", jnp.zeros, (batch, H, dim, dim), jnp.float32)
      o_BLHK, state.value = chunked.recurrent(q_BLHK, k_BLHK, v_BLHK, log_a_BLHK, state.value)
    else:
      o_BLHK, _ = chunked.chunked(q_BLHK, k_BLHK, v_BLHK, log_a_BLHK, chunk=self.chunk)
    scale_HK = param(self, "norm", (H, dim), (axes.HEADS, axes.KV), nn.initializers.ones)
    o_BLHK = feature_maps.head_norm(o_BLHK, scale_HK)
    return output(self, (nn.swish(r_BLHK) * o_BLHK).astype(x_BLD.dtype), self.width)
