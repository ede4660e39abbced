"""Numbers for the MLP-as-memory probe that a control can be held against (step 8).

The probe of `mlp_probe` lists, per unit f of an MLP layer, its top-activating contexts (the
key side) and the tokens its value vector promotes (the value side, Geva et al. 2021). A
pattern among a unit's top contexts is evidence of a learned key only if it is stronger than
the same statistic for an untrained model and for random directions; these functions compute
the statistics from arrays, so a unit, a random direction and an untrained unit are scored the
same way:

  seq_FK, pos_FK = top_positions(act_NLF, k)        # the k largest of each column f
  suffix_rate(tokens_NL, seq_FK, pos_FK, n)          # top contexts ending in one n-gram
  next_token_agreement(targets_NL, seq_FK, pos_FK, promoted_F)   # value side
  fold_residuals(cache)                              # W1 into the mixer, two ways
  ablation_drops(model, params, inputs_NL, layer, seq_FK, pos_FK, promoted_F, ablate_F)
                                                     # causal: zero a unit, read a logit

act_NLF is any activation over N sequences of L positions with F columns: a layer's
pre-activations (units), or those times a random matrix (random directions).
"""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.analysis import absorption, interventions
from jaxformer.analysis.cache import layer_names


def top_positions(act_NLF, k):
  """(seq_FK, pos_FK): per column f, the (sequence, position) of its k largest values, best
  first (ties: the earlier flat position)."""
  act_NLF = np.asarray(act_NLF)
  if act_NLF.ndim != 3 or not 1 <= k <= act_NLF.shape[0] * act_NLF.shape[1]:
    raise ValueError(f"act_NLF of shape {act_NLF.shape}, k={k}: expected [N, L, F], 1 <= k <= N L")
  length = act_NLF.shape[1]
  flat_XF = act_NLF.reshape(-1, act_NLF.shape[2])
  order_KF = np.argsort(-flat_XF, axis=0, kind="stable")[:k]
  return order_KF.T // length, order_KF.T % length


def suffix_rate(tokens_NL, seq_FK, pos_FK, n):
  """Per column: the fraction of its k contexts whose last n tokens (ending at the position)
  are the most common such n-gram among them. A context that starts less than n - 1 tokens in
  counts as its own, unshared n-gram."""
  tokens_NL = np.asarray(tokens_NL)
  if n < 1:
    raise ValueError(f"n={n}: an n-gram needs n >= 1")
  rates = []
  for seqs, poss in zip(np.asarray(seq_FK), np.asarray(pos_FK), strict=True):
    grams = [
      tuple(tokens_NL[s, p - n + 1 : p + 1]) if p >= n - 1 else ("start", s, p)
      for s, p in zip(seqs, poss, strict=True)
    ]
    rates.append(collections.Counter(grams).most_common(1)[0][1] / len(grams))
  return np.asarray(rates)


def next_token_agreement(targets_NL, seq_FK, pos_FK, promoted_F):
  """Per column f: the fraction of its top contexts whose next token (targets_NL at the
  position) is promoted_F[f], the token its value vector raises most."""
  next_FK = np.asarray(targets_NL)[np.asarray(seq_FK), np.asarray(pos_FK)]
  return np.mean(next_FK == np.asarray(promoted_F)[:, None], axis=1)


UNITS_PER_PROGRAM = 32  # ablation_drops: units read by one vmapped call (bounds the logits held)


def ablation_drops(model, params, inputs_NL, layer, seq_FK, pos_FK, promoted_F, ablate_F):
  """Per unit f: how much zeroing unit ablate_F[f] of layer `layer`'s MLP lowers the logit of
  token promoted_F[f] at f's top contexts (the mean over them of logit before - after, each
  context its own sequence up to the position; nothing else changes). ablate_F = range(F)
  reads each unit's own ablation (the causal test of its value vector); another unit per f
  is the control. One compiled program per model and context count, vmapped over up to
  UNITS_PER_PROGRAM units at a time (the units traced, the last chunk padded)."""
  seq_FK, pos_FK = np.asarray(seq_FK), np.asarray(pos_FK)
  units_F = np.asarray(list(ablate_F), np.int32)
  tokens_F = np.asarray(promoted_F, np.int32)
  count = len(units_F)
  chunk = min(count, UNITS_PER_PROGRAM)
  padded = -(-count // chunk) * chunk

  def pad(a):
    return np.concatenate([a, np.repeat(a[:1], padded - count, axis=0)])

  seq_FK, pos_FK, units_F, tokens_F = (pad(a) for a in (seq_FK, pos_FK, units_F, tokens_F))
  tokens_FKL = np.asarray(inputs_NL)[seq_FK]
  name = f"layers_{layer}/ffn/mlp_post"
  drops = [
    np.asarray(_drops(model, name, params, *(a[i : i + chunk] for a in
                      (units_F, tokens_FKL, pos_FK, tokens_F))))
    for i in range(0, padded, chunk)
  ]  # fmt: skip
  return np.concatenate(drops)[:count].astype(np.float64)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _drops(model, name, params, unit_F, tokens_FKL, pos_FK, token_F):
  """Per f: the mean over its K contexts of token_F[f]'s logit at pos_FK[f], before - after
  zeroing unit_F[f]."""
  variables = {"params": params}

  def drop(unit, tokens_KL, pos_K, token):
    before = model.apply(variables, tokens_KL)
    after = interventions.run_with_interventions(
      model, variables, tokens_KL, {name: lambda h_BLF: h_BLF.at[..., unit].set(0)}
    )
    rows = jnp.arange(tokens_KL.shape[0])
    return jnp.mean(before[rows, pos_K, token] - after[rows, pos_K, token])

  return jax.vmap(drop)(unit_F, tokens_FKL, pos_FK, token_F)


def random_directions(rng, rows, cols):
  """A [rows, cols] Gaussian matrix with unit-norm columns: cols random directions."""
  m = rng.normal(size=(rows, cols))
  return m / np.linalg.norm(m, axis=0, keepdims=True)


def fold_residuals(cache):
  """Per block with an MLP: the residual of the best linear fold of W1 (absorption.fit),
  {'layers_i': {'mixer': r_o, 'mixer_and_skip': r_xo}}.

  mixer           pre ~ o C + c: W1 folded into the mixing output alone (absorbed into Wo)
  mixer_and_skip  pre ~ x A + o C + c: also allowed a matrix on the block's input x (the
                  split skip's x W1)

  `cache` is run_with_cache's, holding '*/resid_pre', '*/mixer/head_outputs' and
  '*/ffn/mlp_pre'. The mixer-only fold is the same least squares with x set to zero (its
  coefficients come out zero).
  """
  out = {}
  for layer in layer_names(cache):
    if f"{layer}/ffn/mlp_pre" not in cache:
      continue
    x, o, pre = (
      np.asarray(cache[f"{layer}/{name}"], np.float64)
      for name in ("resid_pre", "mixer/head_outputs", "ffn/mlp_pre")
    )
    _, mixer = absorption.fit(np.zeros_like(x), o, pre)
    _, both = absorption.fit(x, o, pre)
    out[layer] = {"mixer": mixer, "mixer_and_skip": both}
  return out
