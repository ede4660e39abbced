"""Step 3: connections that do not exist until run time need dynamic weights.

Pressure: sequences have any length, so the weight from x_i into unit L cannot be a
fixed parameter; a function with trainable parameters produces it, W_iL = f(...).
Equation: s_BLD = sum_{i<=L} W_iL x_i (the `Mixer`, jaxformer.nn.mixer).

This step's piece is the argument of f:
- `SourceOnly`: W_iL = f(x_i). Symmetric: x_i sends the same weight into every later
  unit, so neighbouring units compute nearly the same thing.
- the `self` mask of the stateless rung: W_iL = 0 for i != L. Breaks the symmetry but
  leaves a position-wise net with no communication (jaxformer.math.mixing.self_mask).
- f(x_i, x_L): the interactions of step 5 (jaxformer.steps.s5_interaction). x_L is the
  receiving unit's own input, the stand-in for its output: the future query.
"""

import flax.linen as nn

from jaxformer.math import interaction
from jaxformer.nn import axes
from jaxformer.nn.layers import param


class SourceOnly(nn.Module):
  """Scores g_j(x_i) = w_j . x_i that ignore the receiver: scores_BHLM constant in L."""

  width: int
  num_heads: int
  rank = 1  # no query . key product: the default temperature is 1

  def setup(self):
    self.w_DH = param(self, "w", (self.width, self.num_heads), (axes.EMBED, axes.HEADS))

  def keys(self, x_BMD):
    return x_BMD @ self.w_DH

  def queries(self, x_BLD):
    return None

  def scores(self, q, k_BMH, length):
    return interaction.source_scores(k_BMH, length)
