"""jaxformer.analysis.value_cache: the measured value width per token and layer is H r_v under
concat + Wo, H D for summed heads, and equals the value arrays of a real prefilled cache."""

import jax
import jax.numpy as jnp
import pytest

from jaxformer import decode, ladder
from jaxformer.analysis import value_cache


def _model(rung, **fields):
  c = ladder.default_config(rung)
  c.vocab_size, c.max_len, c.d_model, c.num_layers = 16, 16, 16, 2
  for k, v in fields.items():
    c[k] = v
  return ladder.build(rung, c)


@pytest.mark.parametrize(
  "rung, fields, want",
  [
    ("concat_wo", {"num_heads": 1, "value_rank": 1}, 1),
    ("concat_wo", {"num_heads": 1, "value_rank": 4}, 4),
    ("concat_wo", {"num_heads": 1}, 16),  # value rank: the scorer's, D / H
    ("concat_wo", {"num_heads": 4}, 16),  # 4 heads of rank 4
    ("softmax", {"num_heads": 2}, 32),  # summed heads: D per head
  ],
)
def test_value_floats_are_heads_times_value_width(rung, fields, want):
  assert value_cache.value_floats(_model(rung, **fields)) == want


def test_value_floats_equal_a_real_prefilled_cache():
  model = _model("concat_wo", num_heads=2, value_rank=3)
  tokens_BL = jnp.ones((2, 8), jnp.int32)
  params = model.init(jax.random.key(0), tokens_BL)["params"]
  _, cache = decode.decode_step(model, params, decode.init_cache(model, 2, 8), tokens_BL)
  values = [
    x
    for p, x in jax.tree_util.tree_leaves_with_path(cache)
    if getattr(p[-1], "key", "") == "values"
  ]
  assert sum(x.size for x in values) / (2 * 8 * len(values)) == value_cache.value_floats(model)
