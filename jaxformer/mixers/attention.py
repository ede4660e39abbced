"""Softmax attention as a plug-in mixer: the transformer's own, and a sliding window.

The transformer rung's mixer (jaxformer.ladder) composed from the same pieces: low-rank
queries and keys (step 5), rank-r values with concat + Wo (step 7), softmax over the
sources with tau = sqrt(r) (step 6), causal:

  s_L = sum_j Wo_j sum_{i<=L} softmax_i(q_j(x_L) . k_j(x_i) / sqrt(r)) Wv_j x_i

`window=w` reads only the last w sources (step 9: linear cost, blind beyond w); with
`impl='sliding_window'` the kernel never builds the L x L scores. Decoding keeps every
past key and value (a ring of w slots with a window): the state that grows with L.
"""

import flax.linen as nn

from jaxformer.nn.mixer import GENERIC, Mixer
from jaxformer.steps.s5_interaction import LowRank
from jaxformer.steps.s7_concat_wo import ConcatWo


class SoftmaxAttention(nn.Module):
  width: int
  num_heads: int = 1
  window: int | None = None  # None: every past source; w: the last w
  impl: str = GENERIC  # generic (the transformer rung's) or a kernel of jaxformer.math.attention
  use_bias: bool = True  # biases on q, k, v and Wo, as the transformer rung

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    if self.num_heads <= 0 or self.width % self.num_heads:
      raise ValueError(f"num_heads={self.num_heads}: must be > 0 and divide width={self.width}")
    if self.window is not None and self.window <= 0:
      raise ValueError(f"window={self.window!r}: must be a positive integer or None")
    rank = self.width // self.num_heads
    return Mixer(
      # named as the transformer rung names them: the same parameter tree
      scorer=LowRank(self.width, self.num_heads, rank, use_bias=self.use_bias, name="scorer"),
      valuer=ConcatWo(self.width, self.num_heads, rank, use_bias=self.use_bias, name="valuer"),
      normalizer="softmax",
      window=self.window,
      impl=self.impl,
      name="attention",
    )(x_BLD, decode=decode)
