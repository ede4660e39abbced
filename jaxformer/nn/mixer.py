"""The dynamic-weight layer, as named slots (steps 2-7, 9).

  s_BLD = combine( sum_M normalize(scores(queries(x_L), keys(x_i)) | mask) values(x_i) )

Slots, each filled by a piece from one step file:
  scorer  (steps 3, 5): queries, keys, scores -> scores_BHLM for H functions
  mask    (steps 3, 9): causal, self (stateless) or a sliding window
  normalizer (step 6):  none | sum | softmax with temperature tau (default sqrt(K))
  valuer  (steps 4, 7): values(x) -> v_BMHK, combine(o_BLHK) -> s_BLD
A rung is a choice of pieces (jaxformer.ladder); this module only wires them.

`impl` selects how the softmax(q . k) case is computed: 'generic' materializes
scores_BHLM with any scorer and normalizer; the others call the attention kernels of
jaxformer.math.attention (dense, blockwise, sliding window, ...), which need a
query/key scorer and a softmax.
"""

import math

import flax.linen as nn

from jaxformer.math import mixing

GENERIC = "generic"


class Mixer(nn.Module):
  scorer: nn.Module
  valuer: nn.Module
  normalizer: str = "softmax"
  temperature: float | None = None
  mask: str = "causal"
  window: int | None = None
  impl: str = GENERIC

  @property
  def tau(self):
    return self.temperature if self.temperature is not None else math.sqrt(self.scorer.rank)

  def __call__(self, x_BLD):
    length = x_BLD.shape[1]
    q = self.scorer.queries(x_BLD)
    k = self.scorer.keys(x_BLD)
    v_BMHK = self.valuer.values(x_BLD)
    for name, value in (("queries", q), ("keys", k), ("values", v_BMHK)):
      if value is not None:
        self.sow("intermediates", name, value)
    if self.impl == GENERIC:
      scores_BHLM = self.scorer.scores(q, k, length)
      a_BHLM = mixing.normalize(scores_BHLM, self.mask_LM(length), self.normalizer, self.tau)
      self.sow("intermediates", "weights", a_BHLM)
      o_BLHK = mixing.mix(a_BHLM, v_BMHK)
    else:
      from jaxformer.math import attention  # the kernels of step 9

      o_BLHK = attention.attend(
        q, k, v_BMHK, impl=self.impl, causal=True, temperature=self.tau, window=self.window
      )
    self.sow("intermediates", "head_outputs", o_BLHK)
    return self.valuer.combine(o_BLHK)

  def mask_LM(self, length):
    if self.mask == "self":
      return mixing.self_mask(length)
    return mixing.causal_mask(length, window=self.window)
