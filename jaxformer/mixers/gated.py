"""A gated linear recurrence as a plug-in mixer (the Mamba / GLA family).

Per head j a fixed state S_j [K, K], decayed per key dimension by a gate of the token:

  u = conv_C(x)   (a causal depthwise convolution over the last C tokens, as Mamba and H3)
  S_jL = diag(a_j(u_L)) S_j(L-1) + k_j(u_L) v_j(u_L)^T,   s_L = sum_j Wo_j S_jL^T q_j(u_L)
  a_j(u) = sigmoid(u Wa_j + ba_j)^(1 / temperature),  k scaled by 1 / sqrt(K)

(Yang et al. 2024, Gated Linear Attention; Gu & Dao 2023, Mamba.) The arithmetic is
jaxformer.math.gated and jaxformer.math.chunked, three training forms of one function:

  chunked    (the default) GLA's chunked form, chunks of `chunk` tokens, prefix states only at
             chunk boundaries: [B, L / chunk, H, K, K] floats. What fits an accelerator: at
             the scorecard's accel size (B 256, L 256, D 256, 3 replicas a chip) the scan's
             train step needs 141.6 GB of temporaries on a v5e chip (BENCHMARKS.md).
  scan       the associative scan over every position: depth ~log L, every S_l materialized
             ([B, L, H, K, K] floats).
  recurrent  the step-by-step recurrence: depth ~L, one state.

Decoding carries S alone, H x K x K numbers (and the last C - 1 inputs of the convolution)
whatever the length.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import chunked, gated
from jaxformer.mixers.linear import head_dim, output, projections
from jaxformer.nn import axes
from jaxformer.nn.layers import param

FORMS = ("chunked", *gated.FORMS)


class GatedRecurrence(nn.Module):
  width: int
  num_heads: int = 4
  head_dim: int | None = None  # K; None: width // num_heads
  temperature: float = 16.0  # a = sigmoid(.)^(1/temperature): starts near 1 (long memory)
  form: str = "chunked"  # chunked | scan (associative, parallel) | recurrent; same function
  conv: int = 4  # C: taps of the short causal convolution before the recurrence; 0: none
  chunk: int = 16  # tokens per chunk of the chunked form

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.form not in FORMS:
      raise ValueError(f"form={self.form!r}: expected one of {', '.join(FORMS)}")
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
    k_BLHK = k_BLHK * dim**-0.5
    if decode:
      a_BLHK = gated.decay(gate_BLHK + ba_HK, self.temperature)
      state = self.variable(
        "cache", "state", jnp.zeros, (batch, self.num_heads, dim, dim), jnp.float32
      )
      o_BLHK, state.value = gated.gated_linear_attention(
        q_BLHK, k_BLHK, v_BLHK, a_BLHK, state.value, form="recurrent"
      )
    elif self.form == "chunked":
      log_a_BLHK = gated.log_decay(gate_BLHK + ba_HK, self.temperature)
      o_BLHK, _ = chunked.chunked(q_BLHK, k_BLHK, v_BLHK, log_a_BLHK, chunk=self.chunk)
    else:
      a_BLHK = gated.decay(gate_BLHK + ba_HK, self.temperature)
      o_BLHK, _ = gated.gated_linear_attention(q_BLHK, k_BLHK, v_BLHK, a_BLHK, form=self.form)
    return output(self, o_BLHK.astype(x_BLD.dtype), self.width)
