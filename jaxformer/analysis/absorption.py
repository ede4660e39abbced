"""Can W1 be absorbed into Wo? The residual of the best linear fold (step 8).

A block's MLP starts with pre_BLF = u_BLD W1 + b1, where u is what the MLP reads:
  single skip         u = s = o Wo + bo         o_BLHK: the heads' outputs, before Wo
  split, no norm      u = x + o Wo + bo         x_BLD: the block's input (its skip)
  split, pre norm     u = LN(x + o Wo + bo)
  split, post norm    u = LN(x + o Wo + bo)     (the first sum's norm)
In the first two pre is linear in (x, o), so W1 folds into the mixing weights:
  pre = x A_DF + o C_HKF + c_F,   A = W1 (split) or 0 (single),  C_j = Wo_j W1,  c = bo W1 + b1
and the MLP's first matrix adds nothing a wider Wo could not hold. With a layer norm each
token is divided by its own standard deviation, which no linear (A, C, c) reproduces.

  fold, residual = absorption.fit(x_BLD, o_BLHK, pre_BLF)     # on real activations
  absorption.residuals(model, params, tokens_BL)             # {'layers_0': residual, ...}
  absorption.closed_form(params['params']['layers_0'], 'split')   # the fold the algebra gives

`fit` is the measurement: the least-squares (A, C, c) over all B*L positions, in float64,
and the relative residual of that best fold,
  residual = ||pre - (x A + o C + c)||_F / ||pre - mean_BL(pre)||_F
(0: W1 folds exactly; 1: the fold explains nothing beyond the mean). It needs more
positions than unknowns per unit (D + H*K + 1), or any target fits exactly; use several
times more, since a fit with few spare positions also absorbs part of a nonlinearity.
"""

from typing import NamedTuple

import numpy as np

from jaxformer.analysis.cache import layer_names, run_with_cache
from jaxformer.math import shapes
from jaxformer.nn.block import SKIPS


class Fold(NamedTuple):
  """pre_BLF = x_BLD x_DF + o_BLHK o_HKF + c_F (float64 numpy arrays)."""

  x_DF: np.ndarray
  o_HKF: np.ndarray
  c_F: np.ndarray


def apply(fold, x_BLD, o_BLHK):
  """The fold's pre-activation pre_BLF = x A + o C + c, in float64."""
  x_BLD, o_BLHK = np.asarray(x_BLD, np.float64), np.asarray(o_BLHK, np.float64)
  return x_BLD @ fold.x_DF + np.einsum("BLHK,HKF->BLF", o_BLHK, fold.o_HKF) + fold.c_F


def residual(fold, x_BLD, o_BLHK, pre_BLF):
  """||pre - apply(fold)||_F / ||pre - mean over B, L of pre||_F."""
  pre_BLF = np.asarray(pre_BLF, np.float64)
  centred_BLF = pre_BLF - pre_BLF.mean(axis=(0, 1))
  return float(np.linalg.norm(pre_BLF - apply(fold, x_BLD, o_BLHK)) / np.linalg.norm(centred_BLF))


def fit(x_BLD, o_BLHK, pre_BLF):
  """The best linear fold by least squares over the B*L positions: (Fold, residual).

  x_BLD: the block's input; o_BLHK: its heads' outputs (before Wo); pre_BLF: its MLP's
  pre-activation (what W1 + b1 produced). ValueError when B*L <= D + H*K + 1.
  """
  sizes = shapes.check("absorption.fit", x_BLD=x_BLD, o_BLHK=o_BLHK, pre_BLF=pre_BLF)
  n, width, heads_k = sizes["B"] * sizes["L"], sizes["D"], sizes["H"] * sizes["K"]
  unknowns = width + heads_k + 1
  if n <= unknowns:
    raise ValueError(
      f"absorption.fit: B*L={n} positions for {unknowns} unknowns per unit (D + H*K + 1): "
      "any target would fit exactly; pass more positions"
    )
  z_NP = np.concatenate(
    [
      np.asarray(x_BLD, np.float64).reshape(n, width),
      np.asarray(o_BLHK, np.float64).reshape(n, heads_k),
      np.ones((n, 1)),
    ],
    axis=1,
  )
  pre_NF = np.asarray(pre_BLF, np.float64).reshape(n, -1)
  coef_PF, *_ = np.linalg.lstsq(z_NP, pre_NF, rcond=None)
  fold = Fold(
    coef_PF[:width],
    coef_PF[width:-1].reshape(sizes["H"], sizes["K"], -1),
    coef_PF[-1],
  )
  return fold, residual(fold, x_BLD, o_BLHK, pre_BLF)


def closed_form(layer_params, skip):
  """The fold the algebra gives for one block's params (a concat + Wo mixer, an MLP).

  layer_params: params['params']['layers_i'], with mixer/valuer/wo (and bo when biased)
  and ffn/w1 (and b1). skip: 'single' (A = 0) or 'split' (A = W1). Exact when the MLP
  reads a linear function of x and o (no norm between); otherwise what a fold would be.
  """
  if skip not in SKIPS:
    raise ValueError(f"absorption.closed_form: skip={skip!r}; expected one of {SKIPS}")
  valuer, ffn = layer_params["mixer"]["valuer"], layer_params["ffn"]
  if "wo" not in valuer:
    raise ValueError("absorption.closed_form: the mixer has no Wo (head_combine='concat' has)")
  wo_HKD, w1_DF = (np.asarray(w, np.float64) for w in (valuer["wo"], ffn["w1"]))
  bo_D = np.asarray(valuer.get("bo", np.zeros(w1_DF.shape[0])), np.float64)
  b1_F = np.asarray(ffn.get("b1", np.zeros(w1_DF.shape[1])), np.float64)
  x_DF = w1_DF if skip == "split" else np.zeros_like(w1_DF)
  return Fold(x_DF, np.einsum("HKD,DF->HKF", wo_HKD, w1_DF), bo_D @ w1_DF + b1_F)


def residuals(model, params, tokens_BL):
  """{'layers_i': fit residual} for every block of a rung whose MLP is W2 sigma(W1 .)."""
  names = ["*/resid_pre", "*/mixer/head_outputs", "*/ffn/mlp_pre"]
  _, cache = run_with_cache(model, params, tokens_BL, names=names)
  out = {}
  for layer in layer_names(cache):
    if f"{layer}/ffn/mlp_pre" in cache:
      _, out[layer] = fit(
        cache[f"{layer}/resid_pre"],
        cache[f"{layer}/mixer/head_outputs"],
        cache[f"{layer}/ffn/mlp_pre"],
      )
  return out
