"""Residual wiring of a block: what each `skip` adds back (jaxformer.nn.block)."""

import chex
import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis.cache import run_with_cache


def _cache(skip, norm="pre", params=None):
  config = ladder.default_config("transformer")
  config.num_layers, config.skip, config.norm = 2, skip, norm
  model = ladder.build("transformer", config)
  tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, config.vocab_size)
  if params is None:
    params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
  return params, run_with_cache(model, params, tokens)[1]


@pytest.mark.parametrize("norm", ["pre", "none"])
def test_no_skip_outputs_the_branches_alone_and_split_adds_x_back(norm):
  params, split = _cache("split", norm)
  chex.assert_trees_all_equal_shapes(params, _cache("none", norm)[0])  # no parameter added
  _, none = _cache("none", norm, params)
  for i in (0, 1):
    layer = f"layers_{i}"
    chex.assert_trees_all_close(none[f"{layer}/resid_post"], none[f"{layer}/ffn/out"], atol=0)
    got = split[f"{layer}/resid_post"]
    want = split[f"{layer}/resid_pre"] + split[f"{layer}/mixer/out"] + split[f"{layer}/ffn/out"]
    chex.assert_trees_all_close(got, want, atol=1e-5)
    assert f"{layer}/resid_mid" in split and f"{layer}/resid_mid" not in none
  if norm == "none":  # the MLP reads the mixer's output itself, not x + s
    np.testing.assert_allclose(_mlp_input(params, none), none["layers_0/mixer/out"], atol=1e-4)
    np.testing.assert_allclose(_mlp_input(params, split), split["layers_0/resid_mid"], atol=1e-4)


def _mlp_input(params, cache):
  """W1's input, recovered from its pre-activation (W1 is D x F with F > D)."""
  ffn = params["params"]["layers_0"]["ffn"]
  pre_BLF = np.asarray(cache["layers_0/ffn/mlp_pre"]) - np.asarray(ffn.get("b1", 0.0))
  return pre_BLF @ np.linalg.pinv(np.asarray(ffn["w1"]))


def test_an_unknown_skip_is_named():
  config = ladder.default_config("transformer")
  config.skip = "dense"
  with pytest.raises(ladder.ConfigError, match="model.skip='dense'"):
    ladder.build("transformer", config)
