"""A gated linear recurrence as a plug-in mixer (the Mamba / GLA family).

Per head j a fixed state S_j [K, K], decayed per key dimension by a gate of the token:

  u = conv_C(x)   (a causal depthwise convolution over the last C tokens, as Mamba and H3)
  S_jL = diag(a_j(u_L)) S_j(L-1) + k_j(u_L) v_j(u_L)^T,   s_L = sum_j Wo_j S_jL^T q_j(u_L)
  a_j(u) = sigmoid(u Wa_j + ba_j)^(1 / temperature),  k scaled by 1 / sqrt(K)

(Yang et al. 2024, Gated Linear Attention; Gu & Dao 2023, Mamba.) The arithmetic is
jaxformer.math.gated: training runs the associative scan (`form='scan'`, depth ~log L) or
the step-by-step recurrence (`form='recurrent'`, depth ~L); decoding carries S alone,
H x K x K numbers (and the last C - 1 inputs of the convolution) whatever the length.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import gated
from jaxformer.mixers.linear import head_dim, output, projections
from jaxformer.nn import axes
from jaxformer.nn.layers import param


class GatedRecurrence(nn.Module):
  width: int
  num_heads: int = 4
  head_dim: int | None = None  # K; None: width // num_heads
  temperature: float = 16.0  # a = sigmoid(.)^(1/temperature): starts near 1 (long memory)
  form: str = "scan"  # scan (associative, parallel) | recurrent (lax.scan); same function
  conv: int = 4  # C: taps of the short causal convolution before the recurrence; 0: none

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.form not in gated.FORMS:
      raise ValueError(f"form={self.form!r}: expected one of {', '.join(gated.FORMS)}")
    if not self.temperature > 0:
      raise ValueError(f"temperature={self.temperature!r}: must be > 0")
    if self.conv < 0:
      raise ValueError(f"conv={self.conv!r}: must be >= 0")
    dim = head_dim(self.width, self.num_heads, self.head_dim)
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
    names = ("wq", "wk", "wv", "wa")
    q_BLHK, k_BLHK, v_BLHK, gate_BLHK = projections(self, x_BLD, self.num_heads, dim, names)
    ba_HK = param(self, "ba", (self.num_heads, dim), (axes.HEADS, axes.KV), nn.initializers.zeros)
    a_BLHK = gated.decay(gate_BLHK + ba_HK, self.temperature)
    k_BLHK = k_BLHK * dim**-0.5
    if decode:
      state = self.variable(
        "cache", "state", jnp.zeros, (batch, self.num_heads, dim, dim), jnp.float32
      )
      o_BLHK, state.value = gated.gated_linear_attention(
        q_BLHK, k_BLHK, v_BLHK, a_BLHK, state.value, form="recurrent"
      )
    else:
      o_BLHK, _ = gated.gated_linear_attention(q_BLHK, k_BLHK, v_BLHK, a_BLHK, form=self.form)
    return output(self, o_BLHK.astype(x_BLD.dtype), self.width)
