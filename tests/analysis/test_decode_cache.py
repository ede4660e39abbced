"""jaxformer.analysis.decode_cache: the key and value bytes of a real decoding cache equal the
closed forms, for the bilinear key (D per head) and the factored one (r per head); the
article's 10 GB -> 2 GB arithmetic from decode.cache_dims; and caching x_i once per layer in
place of the keys and values reads the same scores and outputs."""

import numpy as np
import pytest

from experiments import harness
from jaxformer import decode, ladder
from jaxformer.analysis import decode_cache

D, H, LAYERS, L, B = 16, 2, 2, 8, 3


def _model_config(rung, **fields):
  c = ladder.default_config(rung)
  c.vocab_size, c.max_len, c.d_model, c.num_layers, c.num_heads = 16, L, D, LAYERS, H
  c.norm, c.final_norm = "pre", True
  for k, v in fields.items():
    c[k] = v
  return ladder.validate(rung, c)


@pytest.mark.parametrize(
  "scorer, per_head",
  [({"interaction": "bilinear"}, D), ({"interaction": "lowrank", "rank": 4}, 4),
   ({"interaction": "lowrank", "rank": 1}, 1)],
)  # fmt: skip
def test_measured_cache_matches_the_formula(scorer, per_head):
  config = _model_config("softmax", **scorer)
  model = ladder.build("softmax", config)
  prompts = np.random.default_rng(0).integers(0, config.vocab_size, (B, L))
  params = harness.init_params(model, prompts)
  measured = decode_cache.measure(model, params, prompts)
  keys = decode_cache.key_bytes_formula(config, L, batch=B)
  total = decode.cache_bytes_formula(config, L, batch=B)
  assert measured == {"total": total, "keys": keys, "values": total - keys}
  assert keys == B * L * LAYERS * H * per_head * 4  # float32
  assert total - keys == B * L * LAYERS * H * D * 4  # summed heads: V_j x_i, D each


def test_the_article_arithmetic():
  """5,000 tokens x 50 layers x 20 heads x 1,000 dims x 2 bytes = 10 GB; r = 200: 2 GB."""
  c = ladder.default_config("concat_wo")
  c.d_model, c.num_heads, c.num_layers, c.dtype, c.rank = 1000, 20, 50, "bfloat16", 200
  out = {}
  for interaction in ("bilinear", "lowrank"):
    c.interaction = interaction
    config = ladder.validate("concat_wo", c)
    out[interaction] = decode_cache.key_bytes_formula(config, 5000)
  assert out["bilinear"] == 5000 * 50 * 20 * 1000 * 2 == 10 * 10**9
  assert out["lowrank"] == 5000 * 50 * 20 * 200 * 2 == 2 * 10**9


def test_caching_x_once_per_layer_gives_the_cached_keys_scores_and_values():
  """The layout that caches x_i once per layer instead of Wk x_i and Wv x_i computes the same
  scores and head outputs (the keys and values are recomputed at each decoded token)."""
  rng = np.random.default_rng(0)
  d, r, m = 8, 3, 5
  wq, wk, wv = (rng.normal(size=(d, r)) for _ in range(3))
  x_MD, x_D = rng.normal(size=(m, d)), rng.normal(size=d)
  scores_M = (x_MD @ wk) @ (x_D @ wq)  # cached keys Wk x_i
  np.testing.assert_allclose(x_MD @ (wk @ (wq.T @ x_D)), scores_M, rtol=1e-12)
  a_M = np.exp(scores_M) / np.exp(scores_M).sum()
  np.testing.assert_allclose((a_M @ x_MD) @ wv, a_M @ (x_MD @ wv), rtol=1e-12)
