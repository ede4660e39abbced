"""Step 5: the coefficient must be a pure interaction -> dot product, keys and queries.

Pressure: split a(x_i, x_L) = g(x_i) + v(x_i, x_L) + h(x_L); the one-argument terms
bring the symmetry of step 3 back, so only the interaction v may stay.
Scorers (the "query . key -> weights" slot; each has queries, keys, scores):
- `Additive`: g(x_i) + h(x_L), the sum the argument rules out.
- `Tanh`: w . tanh(U x_i + W x_L) (Bahdanau): contours like a sum's, weak interaction.
- `Bilinear`: x_L^T A_j x_i. The cacheable part is A_j x_i: D numbers per head.
- `LowRank`: A_j = Wq_j^T Wk_j with Wq_j, Wk_j of shape K x D (K = r):
  scores_BHLM = (Wq x_L) . (Wk x_i), the query and the key; the cache shrinks D -> K.
Cache arithmetic of the article: 5000 tokens x 50 layers x 20 functions x 1000 dims
x 2 bytes = 10 GB for bilinear; at r = 200, 2 GB.
"""

import flax.linen as nn

from jaxformer.math import interaction
from jaxformer.math.contract import contract
from jaxformer.nn import axes
from jaxformer.nn.layers import param

_QK_NAMES = (axes.EMBED, axes.HEADS, axes.KV)


class Additive(nn.Module):
  width: int
  num_heads: int
  rank = 1

  def setup(self):
    self.wq_DH = param(self, "wq", (self.width, self.num_heads), (axes.EMBED, axes.HEADS))
    self.wk_DH = param(self, "wk", (self.width, self.num_heads), (axes.EMBED, axes.HEADS))

  def queries(self, x_BLD):
    return x_BLD @ self.wq_DH

  def keys(self, x_BMD):
    return x_BMD @ self.wk_DH

  def scores(self, q_BLH, k_BMH, length):
    return interaction.additive_scores(q_BLH, k_BMH)


class Tanh(nn.Module):
  width: int
  num_heads: int
  rank: int

  def setup(self):
    shape = (self.width, self.num_heads, self.rank)
    self.wq_DHK = param(self, "wq", shape, _QK_NAMES)
    self.wk_DHK = param(self, "wk", shape, _QK_NAMES)
    self.w_HK = param(self, "w", (self.num_heads, self.rank), (axes.HEADS, axes.KV))

  def queries(self, x_BLD):
    return _project(x_BLD, self.wq_DHK)

  def keys(self, x_BMD):
    return _project(x_BMD, self.wk_DHK)

  def scores(self, q_BLHK, k_BMHK, length):
    return interaction.tanh_scores(q_BLHK, k_BMHK, self.w_HK)


class Bilinear(nn.Module):
  width: int
  num_heads: int

  @property
  def rank(self):
    return self.width

  def setup(self):
    shape = (self.num_heads, self.width, self.width)
    self.a_HDE = param(self, "a", shape, (axes.HEADS, axes.EMBED, axes.EMBED_OUT))

  def queries(self, x_BLD):
    return x_BLD[:, :, None, :]  # every head reads the receiver x_L itself

  def keys(self, x_BMD):
    return interaction.bilinear_keys(x_BMD, self.a_HDE.astype(x_BMD.dtype))

  def scores(self, q_BL1D, k_BMHD, length):
    return interaction.dot_scores(q_BL1D.repeat(k_BMHD.shape[2], axis=2), k_BMHD)


class LowRank(nn.Module):
  width: int
  num_heads: int
  rank: int
  use_bias: bool = False

  def setup(self):
    shape = (self.width, self.num_heads, self.rank)
    self.wq_DHK = param(self, "wq", shape, _QK_NAMES)
    self.wk_DHK = param(self, "wk", shape, _QK_NAMES)
    if self.use_bias:
      bias_shape, names = (self.num_heads, self.rank), (axes.HEADS, axes.KV)
      # Biases start at zero: a random bk_HK adds bq . k_i, a source-only score (step 3's
      # symmetry) that dominated at init and stalled recall training in jaxformer's runs.
      self.bq_HK = param(self, "bq", bias_shape, names, nn.initializers.zeros)
      self.bk_HK = param(self, "bk", bias_shape, names, nn.initializers.zeros)

  def queries(self, x_BLD):
    return _project(x_BLD, self.wq_DHK, self.bq_HK if self.use_bias else None)

  def keys(self, x_BMD):
    return _project(x_BMD, self.wk_DHK, self.bk_HK if self.use_bias else None)

  def scores(self, q_BLHK, k_BMHK, length):
    return interaction.dot_scores(q_BLHK, k_BMHK)


def _project(x_BLD, w_DHK, b_HK=None):
  y_BLHK = contract("BLD,DHK->BLHK", x_BLD, w_DHK.astype(x_BLD.dtype))
  y_BLHK = y_BLHK if b_HK is None else y_BLHK + b_HK.astype(x_BLD.dtype)
  return nn.with_logical_constraint(y_BLHK, axes.HEADS_BLHK)
