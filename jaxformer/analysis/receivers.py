"""Does a mixing weight depend on its receiver? The measures of steps 3 and 5 on a trained mixer.

Step 3 (reconstruction.md): W_iL = f(x_i) sends the same weights into every receiver;
W_iL = f(x_i, x_L) need not. Step 5: split a(x_i, x_L) = g(x_i) + v(x_i, x_L) + h(x_L);
under a softmax over the sources h(x_L) cancels, so only the interaction v lets a receiver
choose its source.

  receiver_dependence(a_BHLM, mask_LM)   for receivers l < l', both weight rows restricted
      to the sources S that both see (|S| >= 2) and renormalised over S, then
        TV(l, l') = 1/2 sum_{i in S} |p_i - q_i|
      averaged over the pairs and the batch: one number per head in [0, 1]. Source-only
      weights under a softmax give exactly 0 (softmax_i g(x_i) over S does not depend on how
      many later sources a receiver also sees); 1 is two receivers reading disjoint sources.
  interaction_share(z_NLM)   the share of the variance of score grids z[l, m] = a(x_m, x_l)
      that the best additive fit g(x_m) + h(x_l) leaves unexplained (two-way ANOVA on a full
      grid: the fit is row mean + column mean - grand mean), pooled over the N grids: 0 for
      any sum, 1 for x1 * x3 on a grid symmetric about 0.
  scores(model, variables, tokens_BL)   each layer's raw scores a(x_i, x_L) for every pair of
      a sequence's tokens (before the mask and the normalizer), from the layer's own scorer
      applied to the queries and keys it sowed: the real token pairs of the share.
  layer_dependence(model, variables, tokens_BL)   receiver_dependence of every layer's weights.
"""

import numpy as np

from jaxformer.analysis.cache import cached
from jaxformer.nn.mixer import Mixer

# Weights below this are rounding, not a negative weight (softmax output is >= 0 exactly).
_NEGATIVE = -1e-6


def receiver_dependence(a_BHLM, mask_LM):
  """Mean total-variation distance between receivers' weights over their shared sources,
  per head: float64 [H]. A row with no weight on the shared sources counts as the zero
  vector (distance 1/2 from any distribution). Raises ValueError for negative weights (a
  divergence needs distributions: use a softmax normalizer) or when no two receivers share
  two sources (e.g. the stateless rung's self mask)."""
  a_BHLM = np.asarray(a_BHLM, np.float64)
  mask_LM = np.asarray(mask_LM, bool)
  if a_BHLM.ndim != 4 or a_BHLM.shape[2:] != mask_LM.shape:
    raise ValueError(
      f"weights {a_BHLM.shape} and mask {mask_LM.shape}: expected [B, H, L, M], [L, M]"
    )
  if a_BHLM.min(initial=0.0) < _NEGATIVE:
    raise ValueError(
      f"weights: a negative weight ({a_BHLM.min():.3g}); receiver_dependence compares "
      "distributions over the sources (normalizer='softmax')"
    )
  batch, heads, length, _ = a_BHLM.shape
  total, pairs = np.zeros(heads), 0
  for l in range(length - 1):
    later = np.arange(l + 1, length)
    shared_KM = mask_LM[l][None, :] & mask_LM[later]  # K: the receivers after l
    keep = shared_KM.sum(-1) >= 2
    if not keep.any():
      continue
    later, shared_KM = later[keep], shared_KM[keep]
    p_BHKM = _renormalise(a_BHLM[:, :, l, None, :] * shared_KM)
    q_BHKM = _renormalise(a_BHLM[:, :, later, :] * shared_KM)
    total += 0.5 * np.abs(p_BHKM - q_BHKM).sum(-1).sum(axis=(0, 2))
    pairs += batch * len(later)
  if not pairs:
    raise ValueError("mask: no two receivers share two sources; nothing to compare")
  return total / pairs


def _renormalise(w_XM):
  mass = w_XM.sum(-1, keepdims=True)
  return np.divide(w_XM, mass, out=np.zeros_like(w_XM), where=mass > 0)


def interaction_share(z_NLM):
  """Pooled share of the variance of N grids z[l, m] beyond the best g(m) + h(l): a float in
  [0, 1] (0.0 for constant grids, which are additive)."""
  z = np.asarray(z_NLM, np.float64)
  if z.ndim != 3 or min(z.shape[1:]) < 2:
    raise ValueError(f"grids {z.shape}: expected [N, L, M] with L, M >= 2")
  grand = z.mean(axis=(1, 2), keepdims=True)
  additive = z.mean(axis=2, keepdims=True) + z.mean(axis=1, keepdims=True) - grand
  total = float(np.sum((z - grand) ** 2))
  return float(np.sum((z - additive) ** 2) / total) if total > 0 else 0.0


def mixers(model):
  """(layer name, Mixer) of every block of a ladder model that has one."""
  for i, layer in enumerate(getattr(model, "layers", ())):
    mixer = getattr(layer, "mixer", None)
    if isinstance(mixer, Mixer):
      yield f"layers_{i}", mixer


SCORE_INPUTS = ("*/mixer/queries", "*/mixer/keys")


def scores(model, variables, tokens_BL, cache=None):
  """{'layers_i': scores_BHLM}: a(x_i, x_L) for every receiver L and source i of each
  sequence (the whole L x M grid, future sources included: the same function, unmasked).
  variables: {'params': ...} of a ladder model; cache: a `cached` cache of these tokens
  holding SCORE_INPUTS, if there is one."""
  tokens_BL = np.asarray(tokens_BL, np.int32)
  cache = cached(model, variables, tokens_BL, SCORE_INPUTS) if cache is None else cache
  out = {}
  for name, mixer in mixers(model):
    scorer_params = {"params": variables["params"][name]["mixer"]["scorer"]}
    q, k = cache.get(f"{name}/mixer/queries"), cache[f"{name}/mixer/keys"]
    value = mixer.scorer.apply(scorer_params, q, k, tokens_BL.shape[1], method="scores")
    out[name] = np.asarray(value)
  return out


def cache_dependence(model, cache, length):
  """{'layers_i': receiver_dependence per head [H]} from a cache holding '*/mixer/weights'."""
  return {
    name: receiver_dependence(cache[f"{name}/mixer/weights"], mixer.mask_LM(length))
    for name, mixer in mixers(model)
  }


def layer_dependence(model, variables, tokens_BL):
  """{'layers_i': receiver_dependence per head [H]} of each layer's weights."""
  tokens_BL = np.asarray(tokens_BL, np.int32)
  cache = cached(model, variables, tokens_BL, ("*/mixer/weights",))
  return cache_dependence(model, cache, tokens_BL.shape[1])
