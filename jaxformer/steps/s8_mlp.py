"""Step 8: the MLP is a key-value store too -> W1, W2.

Pressure: a position-wise memory of patterns. W2 sigma(W1 x): rows of W1 are keys,
columns of W2 the values written into the residual stream (Geva et al. 2021).
Equation: mlp_BLD = sigma(x_BLD W1_DF + b1_F) W2_FD + b2_D.
Without W2 (`w2=False`) hidden unit f writes coordinate f mod D only (F a multiple of D;
jaxformer.math.mlp.pooled_values); `w2_trained=False` keeps a W2 that is a fixed orthonormal
matrix, not a parameter (mlp.fixed_values: fixed directions, the control of what learning W2
buys).
With a single skip W1 can be absorbed into Wo (W1 Wo_j is one matrix); the split skip
with a norm in between (jaxformer.nn.block) breaks that, giving the Transformer block
(measured by jaxformer.analysis.absorption). Shapes x_BLD, pre_BLF and the output are
checked with chex from static shapes (jaxformer.math.shapes).
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import mlp as mlp_math
from jaxformer.math import shapes
from jaxformer.math.contract import contract
from jaxformer.nn import axes
from jaxformer.nn.layers import param


class MlpKV(nn.Module):
  d_ff: int
  activation: str = "gelu"
  w2: bool = True
  w2_trained: bool = True
  use_bias: bool = True

  @nn.compact
  def __call__(self, x_BLD):
    sizes = shapes.check("MlpKV", {"F": self.d_ff}, x_BLD=x_BLD)
    width = x_BLD.shape[-1]
    if not self.w2 and self.d_ff % width:
      raise ValueError(
        f"d_ff={self.d_ff}: without W2 each key writes one coordinate, so d_ff must be a "
        f"multiple of d_model={width}"
      )
    w1 = param(self, "w1", (width, self.d_ff), (axes.EMBED, axes.MLP)).astype(x_BLD.dtype)
    b1 = self._bias("b1", self.d_ff, axes.MLP, x_BLD.dtype)
    pre_BLF = contract("BLD,DF->BLF", x_BLD, w1) + b1
    pre_BLF = nn.with_logical_constraint(pre_BLF, (axes.BATCH, axes.LENGTH, axes.MLP))
    shapes.check("MlpKV", sizes, pre_BLF=pre_BLF)
    self.sow("intermediates", "mlp_pre", pre_BLF)
    post_BLF = mlp_math.ACTIVATIONS[self.activation](pre_BLF)
    self.sow("intermediates", "mlp_post", post_BLF)
    if not self.w2:
      if self.d_ff == width:
        return post_BLF
      return post_BLF.reshape(*post_BLF.shape[:-1], self.d_ff // width, width).sum(-2)
    if self.w2_trained:
      w2 = param(self, "w2", (self.d_ff, width), (axes.MLP, axes.EMBED)).astype(x_BLD.dtype)
    else:
      w2 = jnp.asarray(mlp_math.fixed_values(self.d_ff, width), x_BLD.dtype)
    out_BLD = contract("BLF,FD->BLD", post_BLF, w2) + self._bias(
      "b2", width, axes.EMBED, x_BLD.dtype
    )
    shapes.check_same_shape("MlpKV", x_BLD=x_BLD, out_BLD=out_BLD)
    return out_BLD

  def _bias(self, name, size, axis, dtype):
    return param(self, name, (size,), (axis,)).astype(dtype) if self.use_bias else 0.0
