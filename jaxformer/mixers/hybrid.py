"""A hybrid mixer: a short sliding window plus linear attention (Based, Arora et al. 2024).

  s_L = window_attention_w(x)_L + linear_attention(x)_L

The window recalls exactly what lies within w tokens; the linear branch keeps a fixed
summary of everything before. Both states are fixed in L: w keys and values, and (S, z).
"""

import flax.linen as nn

from jaxformer.mixers.attention import SoftmaxAttention
from jaxformer.mixers.linear import LinearAttention


class Hybrid(nn.Module):
  width: int
  window: int = 16  # the softmax branch reads the last `window` tokens
  num_heads: int = 1  # of each branch
  head_dim: int | None = None  # K of the linear branch; None: width // num_heads

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    local = SoftmaxAttention(
      self.width, self.num_heads, window=self.window, impl="sliding_window", name="window"
    )
    summary = LinearAttention(self.width, self.num_heads, self.head_dim, name="linear")
    return local(x_BLD, decode=decode) + summary(x_BLD, decode=decode)
