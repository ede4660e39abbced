"""Step 4: a matrix-valued weight function explodes -> values and heads.

Pressure: W_iL = f(x_i, x_L) is D x D-valued. Each valuer below says how H scalar
coefficients a_j (from a scorer) become that matrix, as per-head values v_BMHK that
`mix` weights and a combine that maps o_BLHK back to D:
- `FullEntries`: one scalar function per entry, W_iL[d, e] = a_(d,e): H = D^2
  functions (D in the hundreds: over 100K sets of parameters).
- `Diagonal`: W_iL = diag(a_1..a_D): D functions, and sparsity only as exact zeros.
- `MatrixSum`: W_iL = sum_{j=1..H} a_j(x_i, x_L) V_j with static learned V_j (the
  values) and H dynamic scalars a_j (the heads). Heads combine by summing.
Parameter counts (scorer of rank K per function, no biases):
  full 2 K D^3, diagonal 2 K D^2, matrix sum 2 H K D + H D^2.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import heads
from jaxformer.nn import axes
from jaxformer.nn.layers import param


class FullEntries(nn.Module):
  """Head (d, e) reads coordinate e of x_i and writes coordinate d: v = x_i[e], K = 1."""

  width: int

  @property
  def num_heads(self):
    return self.width * self.width

  def values(self, x_BMD):
    batch, memory, width = x_BMD.shape
    v_BMDE = jnp.broadcast_to(x_BMD[:, :, None, :], (batch, memory, width, width))
    return v_BMDE.reshape(batch, memory, width * width, 1)

  def combine(self, o_BLHK):
    return heads.combine_entries(o_BLHK, self.width)


class Diagonal(nn.Module):
  """Head d scales coordinate d of x_i: W_iL = diag(a), v = x_i[d], K = 1."""

  width: int

  @property
  def num_heads(self):
    return self.width

  def values(self, x_BMD):
    return x_BMD[..., None]

  def combine(self, o_BLHK):
    return o_BLHK[..., 0]


class MatrixSum(nn.Module):
  """v_j = V_j x_i with V_j a full D x D matrix per head; heads are summed."""

  width: int
  num_heads: int

  def setup(self):
    self.v_HDE = param(
      self, "v", (self.num_heads, self.width, self.width), (axes.HEADS, axes.EMBED, axes.EMBED_OUT)
    )

  def values(self, x_BMD):
    v_BMHE = jnp.einsum("BMD,HDE->BMHE", x_BMD, self.v_HDE.astype(x_BMD.dtype))
    return nn.with_logical_constraint(v_BMHE, axes.HEADS_BLHK)

  def combine(self, o_BLHK):
    return heads.combine_sum(o_BLHK)
