"""How much of a trained scorer is interaction: the measure of step 5 on real token pairs.

Split a(x_i, x_L) = g(x_i) + v(x_i, x_L) + h(x_L). `share(model, params, tokens_BL)` takes
each layer's raw scores over every pair of a sequence's tokens (receivers.scores: the layer's
own scorer on the queries and keys it computed) and returns the share of their variance that
the best additive fit g(x_i) + h(x_L) leaves unexplained (receivers.interaction_share, pooled
over sequences and heads), averaged over layers: 0 for a sum, near 1 for a pure product.
`surface_share(f, grid_points, span)` is the same share of a scalar function of two inputs on
a grid (the contours of the spec: tanh(x1 + x3), x1 + x3, x1 * x3).
"""

import numpy as np

from jaxformer.analysis import receivers
from jaxformer.analysis.cache import cached

PROBED = (*receivers.SCORE_INPUTS,)


def share(model, params, tokens_BL):
  """The interaction share of one model's scores, mean over layers (a float in [0, 1])."""
  variables = {"params": params}
  cache = cached(model, variables, tokens_BL, PROBED)
  per_layer = [
    receivers.interaction_share(s_BHLM.reshape(-1, *s_BHLM.shape[2:]))
    for s_BHLM in receivers.scores(model, variables, tokens_BL, cache).values()
  ]
  return float(np.mean(per_layer))


def surface(f, grid_points, span):
  """(x1, x3, f(x1, x3)) on a grid_points^2 grid over [-span, span]^2."""
  x = np.linspace(-span, span, grid_points)
  x1, x3 = np.meshgrid(x, x, indexing="ij")
  return x1, x3, f(x1, x3)


def surface_share(f, grid_points=121, span=3.0):
  return receivers.interaction_share(surface(f, grid_points, span)[2][None])
