"""Step 7: the value cache is too large -> low-rank values, concat + Wo.

Pressure: summed heads s_L = sum_j sum_i a_ij V_j x_i need a D-dim value per head and
token in the cache. Write V_j as Wo_j Wv_j with Wv_j of shape K x D (K = r < D) and
Wo_j of shape D x K: s_L = sum_j Wo_j sum_i a_ij Wv_j x_i = concat_j(o_j) Wo.
Cache only the r-dim values Wv_j x_i; Wo projects back up after the sum.
With r = D and every Wo_j = I this is exactly the summed form of step 4.
"""

import flax.linen as nn

from jaxformer.math import heads
from jaxformer.math.contract import contract
from jaxformer.nn import axes
from jaxformer.nn.layers import param


class ConcatWo(nn.Module):
  width: int
  num_heads: int
  rank: int
  use_bias: bool = False

  def setup(self):
    self.wv_DHK = param(
      self, "wv", (self.width, self.num_heads, self.rank), (axes.EMBED, axes.HEADS, axes.KV)
    )
    self.wo_HKD = param(
      self, "wo", (self.num_heads, self.rank, self.width), (axes.HEADS, axes.KV, axes.EMBED)
    )
    if self.use_bias:
      self.bv_HK = param(
        self, "bv", (self.num_heads, self.rank), (axes.HEADS, axes.KV), nn.initializers.zeros
      )
      self.bo_D = param(self, "bo", (self.width,), (axes.EMBED,))

  def values(self, x_BMD):
    v_BMHK = contract("BMD,DHK->BMHK", x_BMD, self.wv_DHK.astype(x_BMD.dtype))
    v_BMHK = v_BMHK + self.bv_HK.astype(x_BMD.dtype) if self.use_bias else v_BMHK
    return nn.with_logical_constraint(v_BMHK, axes.HEADS_BLHK)

  def combine(self, o_BLHK):
    o_BLHK = nn.with_logical_constraint(o_BLHK, axes.HEADS_BLHK)
    out_BLD = heads.combine_concat(o_BLHK, self.wo_HKD.astype(o_BLHK.dtype))
    return out_BLD + self.bo_D.astype(o_BLHK.dtype) if self.use_bias else out_BLD
