"""Receiver dependence and interaction share: definitions, and what each scorer gives."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis import receivers, similarity
from jaxformer.analysis.cache import run_with_cache
from jaxformer.math import mixing


def _loop_dependence(a_BHLM, mask_LM):
  """The definition, one pair at a time."""
  batch, heads, length, _ = a_BHLM.shape
  out = np.zeros(heads)
  pairs = 0
  for l in range(length):
    for k in range(l + 1, length):
      shared = mask_LM[l] & mask_LM[k]
      if shared.sum() < 2:
        continue
      pairs += batch
      for b in range(batch):
        for h in range(heads):
          p, q = a_BHLM[b, h, l, shared], a_BHLM[b, h, k, shared]
          out[h] += 0.5 * np.abs(p / p.sum() - q / q.sum()).sum()
  return out / pairs


def _softmax_weights(scores_BHLM, mask_LM):
  return np.asarray(mixing.normalize(scores_BHLM, mask_LM, "softmax"))


def test_dependence_matches_the_loop_and_is_zero_for_source_only_scores():
  rng = np.random.default_rng(0)
  mask_LM = np.asarray(mixing.causal_mask(7))
  pair_scores = rng.normal(size=(3, 2, 7, 7))
  a = _softmax_weights(pair_scores, mask_LM)
  np.testing.assert_allclose(
    receivers.receiver_dependence(a, mask_LM), _loop_dependence(a, mask_LM), rtol=1e-6
  )
  assert np.all(receivers.receiver_dependence(a, mask_LM) > 0.1)
  source_scores = np.broadcast_to(rng.normal(size=(3, 2, 1, 7)), (3, 2, 7, 7))
  same = receivers.receiver_dependence(_softmax_weights(source_scores, mask_LM), mask_LM)
  np.testing.assert_allclose(same, 0.0, atol=1e-7)
  window_LM = np.asarray(mixing.causal_mask(7, window=3))
  a = _softmax_weights(pair_scores, window_LM)
  np.testing.assert_allclose(
    receivers.receiver_dependence(a, window_LM), _loop_dependence(a, window_LM), rtol=1e-6
  )


def test_disjoint_reads_give_one_and_bad_inputs_are_named():
  mask_LM = np.asarray(mixing.causal_mask(3))
  a = np.zeros((1, 1, 3, 3))
  a[0, 0, 1, 0] = 1.0  # receiver 1 reads source 0 ...
  a[0, 0, 2, 1] = 1.0  # ... receiver 2 reads source 1: disjoint on the shared {0, 1}
  np.testing.assert_allclose(receivers.receiver_dependence(a, mask_LM), [1.0])
  with pytest.raises(ValueError, match="negative weight"):
    receivers.receiver_dependence(-a, mask_LM)
  with pytest.raises(ValueError, match="no two receivers share two sources"):
    receivers.receiver_dependence(a, np.eye(3, dtype=bool))
  with pytest.raises(ValueError, match=r"expected \[B, H, L, M\]"):
    receivers.receiver_dependence(a[0], mask_LM)


def test_interaction_share_of_sums_products_and_pooled_grids():
  x = np.linspace(-3, 3, 41)
  x1, x3 = np.meshgrid(x, x, indexing="ij")
  assert receivers.interaction_share((x1 + x3)[None]) == pytest.approx(0.0, abs=1e-12)
  assert receivers.interaction_share((x1 * x3)[None]) == pytest.approx(1.0, abs=1e-12)
  assert 0.05 < receivers.interaction_share(np.tanh(x1 + x3)[None]) < 0.3
  rng = np.random.default_rng(1)
  g, h = rng.normal(size=(5, 9, 1)), rng.normal(size=(5, 1, 11))
  assert receivers.interaction_share(g + h) == pytest.approx(0.0, abs=1e-12)
  # pooled: one additive grid and one product grid of equal variance give 1/2
  pooled = np.stack([x1 + x3, (x1 * x3) * np.std(x1 + x3) / np.std(x1 * x3)])
  assert receivers.interaction_share(pooled) == pytest.approx(0.5, abs=1e-9)
  assert receivers.interaction_share(np.ones((2, 3, 3))) == 0.0
  with pytest.raises(ValueError, match=r"expected \[N, L, M\]"):
    receivers.interaction_share(x1)


def _model(interaction, rung="matrix_sum"):
  config = ladder.default_config(rung)
  config.num_layers, config.normalizer, config.vocab_size = 2, "softmax", 32
  if rung == "matrix_sum":
    config.interaction = interaction
  model = ladder.build(rung, config)
  tokens = jax.random.randint(jax.random.key(2), (4, 12), 0, config.vocab_size)
  params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
  return model, params, np.asarray(tokens)


@pytest.mark.parametrize("interaction", ["source", "additive", "tanh", "bilinear", "lowrank"])
def test_scores_recompute_the_weights_and_measure_each_scorer(interaction):
  rung = "source_only" if interaction == "source" else "matrix_sum"
  model, params, tokens = _model(interaction, rung)
  _, cache = run_with_cache(model, params, tokens, names=["*/mixer/weights"])
  all_scores = receivers.scores(model, params, tokens)
  dependence = receivers.layer_dependence(model, params, tokens)
  assert list(all_scores) == list(dependence) == ["layers_0", "layers_1"]
  for name, layer in zip(all_scores, model.layers, strict=True):
    scores_BHLM = all_scores[name]
    assert scores_BHLM.shape == (4, 2, 12, 12)  # every pair, both heads
    a = mixing.normalize(scores_BHLM, layer.mixer.mask_LM(12), "softmax", layer.mixer.tau)
    np.testing.assert_allclose(a, cache[f"{name}/mixer/weights"], atol=1e-5)
    share = receivers.interaction_share(scores_BHLM.reshape(-1, 12, 12))
    if interaction in ("source", "additive"):  # one-argument terms: no interaction, and
      assert share == pytest.approx(0.0, abs=1e-9)  # under the softmax h(x_L) cancels
      np.testing.assert_allclose(dependence[name], 0.0, atol=1e-6)
    else:
      assert np.all(dependence[name] > 1e-3), dependence[name]
      assert (0.005 < share < 0.3) if interaction == "tanh" else share > 0.5, share


def test_offset_contrast_separates_running_averages_from_noise():
  rng = np.random.default_rng(0)
  x_BLD = rng.standard_normal((8, 24, 64))
  running = np.cumsum(x_BLD, axis=1) / np.arange(1, 25)[None, :, None]  # source-only-like
  centred = similarity.centre(running)
  np.testing.assert_allclose(np.asarray(centred).mean(axis=1), 0.0, atol=1e-5)
  per_position = np.asarray(similarity.position_similarity(running, 2))
  loop = [np.mean([_cos(running[b, l], running[b, l + 2]) for b in range(8)]) for l in range(22)]
  np.testing.assert_allclose(per_position, loop, rtol=1e-5)
  contrast = np.asarray(similarity.offset_contrast(running, far=4))
  assert contrast.shape == (20,) and np.all(contrast > 0.02)
  assert abs(float(np.mean(similarity.offset_contrast(x_BLD, far=4)))) < 0.05
  with pytest.raises(ValueError, match="far=1"):
    similarity.offset_contrast(x_BLD, far=1)
  with pytest.raises(ValueError, match="offset=24"):
    similarity.position_similarity(x_BLD, 24)


def _cos(a, b):
  return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
