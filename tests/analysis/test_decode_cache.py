"""jaxformer.analysis.decode_cache: the key and value bytes of a real decoding cache equal the
closed forms, for the bilinear key (D per head) and the factored one (r per head); and the
article's 10 GB -> 2 GB arithmetic from decode.cache_dims."""

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
