"""A linear probe of absolute position: how well each activation says where its token sits.

  r2 = position_r2(model, params, tokens_NL)     # {'embedded': 0.01, 'layers_1/resid_post': 0.97}

A model given no position embedding can still come to know positions: under a causal mask the
number of sources a receiver averages over grows with its position, and a trained stack can
turn that into a coordinate (Haviv et al. 2022, "Transformer Language Models without
Positional Encodings Still Learn Positional Information"). The probe measures it: a ridge
regression from an activation x_D (one row per token) to the token's position l, fitted on
half of the sequences and scored on the other half as R^2 = 1 - SSE / SST (1: position read
off exactly; 0: no better than the mean position; below 0: worse).
"""

import numpy as np

from jaxformer.analysis.cache import cached

NAMES = ("embedded", "layers_*/resid_post")


def held_out_r2(features_ND, targets_N, groups_N, ridge=1e-3):
  """R^2 on the rows of odd group of a ridge fit (with a bias) on the rows of even group.

  groups_N: each row's sequence index, so no sequence is in both halves."""
  x = np.asarray(features_ND, np.float64)
  y = np.asarray(targets_N, np.float64)
  fit = np.asarray(groups_N) % 2 == 0
  if fit.all() or not fit.any():
    raise ValueError("held_out_r2: needs rows of at least two sequences (groups)")
  mean, scale = x[fit].mean(0), x[fit].std(0) + 1e-8
  x = np.concatenate([(x - mean) / scale, np.ones((len(x), 1))], axis=1)
  gram = x[fit].T @ x[fit] + ridge * np.eye(x.shape[1])
  weights = np.linalg.solve(gram, x[fit].T @ y[fit])
  test = ~fit
  residual = y[test] - x[test] @ weights
  total = y[test] - y[test].mean()
  return float(1.0 - (residual @ residual) / max(total @ total, 1e-12))


def position_r2(model, params, tokens_NL, names=NAMES, ridge=1e-3):
  """{activation name: held-out R^2 of position} for every activation of run_with_cache
  matching `names` (default: the embedding and each block's output), over every position of
  tokens_NL (at least two sequences)."""
  cache = cached(model, {"params": params}, tokens_NL, tuple(names))
  n, length = np.asarray(tokens_NL).shape
  positions = np.tile(np.arange(length), n)
  groups = np.repeat(np.arange(n), length)
  out = {}
  for name in sorted(cache):
    x_NLD = np.asarray(cache[name])
    out[name] = held_out_r2(x_NLD.reshape(n * length, -1), positions, groups, ridge)
  return out
