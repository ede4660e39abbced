"""explosion: the real modules' counts equal the closed forms at any width; the real params
count as the shapes say; the fitted exponent of a power law is its power."""

import jax
import jax.numpy as jnp
import pytest

from experiments import harness
from jaxformer import ladder
from jaxformer.analysis import explosion
from jaxformer.train import sweep

K, H = 3, 5


def _config(rung, width=8):
  model = {"d_model": width, "rank": K, "num_heads": H, "vocab_size": 16, "max_len": 8}
  return harness.train_config(rung, "induction:vocab_size=16,seq_len=8", model)


CLOSED = {
  "full_dynamic": lambda d: (d * d, 2 * K * d**3),
  "diagonal_dynamic": lambda d: (d, 2 * K * d**2),
  "matrix_sum": lambda d: (H, 2 * H * K * d + H * d * d),
}


@pytest.mark.parametrize("rung", list(CLOSED))
def test_counts_equal_the_closed_forms(rung):
  for width in (4, 12, 32, 512 if rung != "full_dynamic" else 256):
    got = explosion.counts(explosion.at_width(_config(rung), width))
    assert (got["functions"], got["params"]) == CLOSED[rung](width)


def test_at_width_changes_the_width_alone():
  config = _config("matrix_sum")
  wide = explosion.at_width(config, 24)
  assert wide.model.d_model == 24 and config.model.d_model == 8
  assert {k: v for k, v in wide.model.items() if k != "d_model"} == {
    k: v for k, v in config.model.items() if k != "d_model"
  }


def test_the_real_params_count_as_their_shapes_say():
  config = _config("diagonal_dynamic")
  model = ladder.build(config.rung, config.model)
  (params,) = sweep.init_params(model, [jax.random.key(0)], (1, 8))
  assert explosion.mixer_params(params) == explosion.counts(config)["params"] == 2 * K * 64


def test_the_slope_of_a_power_law_is_its_power():
  widths = (8, 16, 32)
  assert explosion.slope(widths, [3 * w**3 for w in widths]) == pytest.approx(3.0)
  assert explosion.slope(widths, [7, 7, 7]) == pytest.approx(0.0)
  assert jnp.isnan(explosion.slope(widths, [1, 0, 2])) and jnp.isnan(explosion.slope((8,), [1]))


def test_full_flops_per_token_grow_faster_than_the_sums():
  widths = (8, 16, 32)
  per_rung = {
    rung: [explosion.flops_per_token(explosion.at_width(_config(rung), w)) for w in widths]
    for rung in ("full_dynamic", "matrix_sum")
  }
  assert all(
    a < b for a, b in zip(per_rung["matrix_sum"][:-1], per_rung["matrix_sum"][1:], strict=True)
  )
  full, summed = (explosion.slope(widths, per_rung[r]) for r in ("full_dynamic", "matrix_sum"))
  assert full - summed > 0.5
