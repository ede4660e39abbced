"""The position probe: held-out R^2 of a ridge map from activations to absolute position."""

import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis import position_probe


def test_r2_is_one_for_a_linear_code_of_position_and_near_zero_for_noise():
  rng = np.random.default_rng(0)
  n, length = 20, 8
  positions = np.tile(np.arange(length), n)
  groups = np.repeat(np.arange(n), length)
  code = np.stack([positions * 0.5 + 1.0, rng.normal(size=n * length)], axis=1)
  assert position_probe.held_out_r2(code, positions, groups) == pytest.approx(1.0, abs=1e-4)
  noise = rng.normal(size=(n * length, 4))
  assert position_probe.held_out_r2(noise, positions, groups) < 0.1


def test_one_sequence_cannot_be_split_into_fit_and_score_halves():
  with pytest.raises(ValueError, match="at least two sequences"):
    position_probe.held_out_r2(np.zeros((8, 2)), np.arange(8), np.zeros(8, int))


@pytest.mark.parametrize("positions, readable", [("learned", True), ("none", False)])
def test_a_position_table_is_read_off_the_embedding_and_none_is_not(positions, readable):
  c = ladder.default_config("transformer")
  c.vocab_size, c.max_len, c.num_layers, c.d_model, c.d_ff = 16, 8, 1, 32, 32
  c.positions = positions
  model = ladder.build("transformer", c)
  tokens_NL = np.asarray(jax.random.randint(jax.random.key(1), (16, 8), 0, 16), np.int32)
  params = model.init(jax.random.key(0), tokens_NL)["params"]
  r2 = position_probe.position_r2(model, params, tokens_NL)
  assert set(r2) == {"embedded", "layers_0/resid_post"}
  assert (r2["embedded"] > 0.9) == readable and (r2["embedded"] < 0.2) == (not readable)
