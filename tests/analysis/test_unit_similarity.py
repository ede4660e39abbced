"""Neighbouring-unit similarity: the definition, and the symmetry it detects (step 3)."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis import similarity
from jaxformer.analysis.cache import run_with_cache


def _loop_similarity(s_BLD, offset, start):
  values = []
  for b in range(s_BLD.shape[0]):
    for l in range(start, s_BLD.shape[1] - offset):
      a, c = s_BLD[b, l], s_BLD[b, l + offset]
      values.append(a @ c / (np.linalg.norm(a) * np.linalg.norm(c)))
  return np.mean(values)


def test_definition_matches_a_loop_and_separates_prefix_means_from_noise():
  rng = np.random.default_rng(0)
  x_BLD = rng.standard_normal((3, 20, 256))
  prefix_mean = np.cumsum(x_BLD, axis=1) / np.arange(1, 21)[None, :, None]  # source-only-like
  for s, offset, start in ((x_BLD, 1, 0), (prefix_mean, 1, 0), (prefix_mean, 3, 5)):
    np.testing.assert_allclose(
      similarity.neighbour_similarity(s, offset, start), _loop_similarity(s, offset, start), 1e-5
    )
  assert abs(float(similarity.neighbour_similarity(x_BLD))) < 0.05
  assert float(similarity.neighbour_similarity(prefix_mean, start=4)) > 0.9
  by_offset = np.asarray(similarity.similarity_by_offset(prefix_mean, 4))
  assert np.all(np.diff(by_offset) < 0)  # neighbours are the most alike
  o_BLHK = np.stack([prefix_mean[..., :128], x_BLD[..., 128:]], axis=2)
  heads = np.asarray(similarity.head_neighbour_similarity(o_BLHK))
  np.testing.assert_allclose(heads, [_loop_similarity(o_BLHK[:, :, h], 1, 0) for h in (0, 1)], 1e-5)
  assert float(similarity.neighbour_similarity(np.zeros((1, 4, 8)))) == 0.0
  with pytest.raises(ValueError, match="offset=20"):
    similarity.neighbour_similarity(x_BLD, offset=20)


def _cache(rung):
  config = ladder.default_config(rung)
  config.num_layers = 1
  model = ladder.build(rung, config)
  tokens = jax.random.randint(jax.random.key(3), (4, 24), 0, config.vocab_size)
  params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
  return run_with_cache(model, params, tokens)[1]


def test_source_only_units_are_alike_and_stateless_ones_are_not():
  source_only, stateless = _cache("source_only"), _cache("stateless")
  sim_source = float(similarity.mixer_similarity(source_only, 0))
  sim_stateless = float(similarity.mixer_similarity(stateless, "layers_0"))
  assert sim_source > 0.8 and abs(sim_stateless) < 0.2, (sim_source, sim_stateless)
  heads = similarity.mixer_similarity(source_only, 0, per_head=True)
  assert heads.shape == (2,) and np.all(np.asarray(heads) > 0.8)
  with pytest.raises(KeyError, match="layers_5/mixer/out"):
    similarity.mixer_similarity(stateless, 5)
