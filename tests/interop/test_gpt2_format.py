"""GPT-2 import/export without torch: a numpy GPT-2 as reference, round trips, bad input."""

import copy
import json
import sys

import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.interop import gpt2
from tests.interop.gpt2_reference import logits as reference_logits
from tests.interop.gpt2_reference import random_state

SHAPES = [  # (layers, width, heads, vocab, positions, mlp)
  (1, 32, 2, 50, 16, None),
  (2, 64, 4, 97, 32, 80),
  (3, 96, 3, 300, 64, None),
]


def _logits(config, params, tokens):
  return np.asarray(jax.jit(ladder.build("transformer", config).apply)(params, tokens))


@pytest.mark.parametrize("layers,width,heads,vocab,positions,mlp", SHAPES)
def test_loaded_weights_match_a_numpy_gpt2(layers, width, heads, vocab, positions, mlp):
  rng = np.random.default_rng(layers)
  state = random_state(rng, vocab, positions, width, layers, mlp)
  config, params = gpt2.load(state, num_heads=heads)
  assert (config.num_layers, config.d_model, config.num_heads) == (layers, width, heads)
  assert (config.vocab_size, config.max_len, config.d_ff) == (vocab, positions, mlp or 4 * width)
  assert config.tie_embeddings and config.activation == "gelu" and config.temperature is None
  tokens = rng.integers(0, vocab, (2, positions))
  want = reference_logits(state, heads, tokens)
  np.testing.assert_allclose(_logits(config, params, tokens), want, atol=1e-4, rtol=0)


def test_untied_unscaled_and_prefix_free_state():
  rng = np.random.default_rng(7)
  state = random_state(rng, 40, 12, 32, 2, untied=True, prefix=False)
  state["h.0.attn.bias"] = np.tril(np.ones((1, 1, 12, 12)))  # causal-mask buffer: ignored
  hf = {"n_head": 4, "tie_word_embeddings": False, "scale_attn_weights": False}
  config, params = gpt2.load(state, gpt2_config=hf)
  assert not config.tie_embeddings and config.temperature == 1.0
  np.testing.assert_array_equal(params["params"]["unembed"], state["lm_head.weight"].T)
  tokens = rng.integers(0, 40, (2, 12))
  want = reference_logits(_no_buffers(state), 4, tokens, scale=False)
  np.testing.assert_allclose(_logits(config, params, tokens), want, atol=1e-4, rtol=0)
  exported = gpt2.to_state_dict(config, params)
  assert set(exported) == set(_no_buffers(state))
  for name, value in exported.items():
    np.testing.assert_array_equal(value, _no_buffers(state)[name], err_msg=name)


def _no_buffers(state):
  return {k: v for k, v in state.items() if not k.endswith(".attn.bias")}


def test_save_load_round_trip_file_and_directory(tmp_path):
  rng = np.random.default_rng(3)
  state = random_state(rng, 50, 16, 48, 2)
  config, params = gpt2.load(state, num_heads=3)
  file = gpt2.save(config, params, tmp_path / "w.safetensors")
  directory = gpt2.save(config, params, tmp_path / "hf")
  assert json.loads((tmp_path / "hf" / "config.json").read_text())["n_head"] == 3
  for source in (file, directory, tmp_path / "hf" / "model.safetensors"):
    config2, params2 = gpt2.load(source)  # head count from the metadata / config.json
    assert config2 == config
    jax.tree_util.tree_map(np.testing.assert_array_equal, params2, params)
  exported = gpt2.to_state_dict(config, params)
  assert "lm_head.weight" not in exported  # tied: stored once, as transformers does
  for name, value in exported.items():
    np.testing.assert_array_equal(value, state["transformer." + name], err_msg=name)


def _bad(state, match, **kwargs):
  with pytest.raises(gpt2.GPT2FormatError, match=match):
    gpt2.load(state, **kwargs)


def test_bad_input_names_the_tensor_or_field(tmp_path):
  state = random_state(np.random.default_rng(0), 50, 16, 32, 2)
  _bad(
    {k: v for k, v in state.items() if "h.1.mlp.c_fc.bias" not in k},
    "h.1.mlp.c_fc.bias",
    num_heads=2,
  )
  _bad(state | {"transformer.h.1.ln_2.bias": np.zeros(31)}, r"h.1.ln_2.bias.*\(31,\)", num_heads=2)
  _bad(
    state | {"transformer.h.0.attn.rotary": np.zeros(3)},
    "unknown tensor 'h.0.attn.rotary'",
    num_heads=2,
  )
  _bad({k: v for k, v in state.items() if "wpe" not in k}, "wpe.weight", num_heads=2)
  _bad(state, "num_heads")
  _bad(state, "num_heads=3 must divide n_embd=32", num_heads=3)
  _bad(state, "n_head=4", num_heads=2, gpt2_config={"n_head": 4})
  _bad(state, "layer_norm_epsilon", num_heads=2, gpt2_config={"layer_norm_epsilon": 1e-6})
  _bad(
    state, "activation_function='gelu'", num_heads=2, gpt2_config={"activation_function": "gelu"}
  )
  _bad(state, "n_embd=64", num_heads=2, gpt2_config={"n_embd": 64})
  _bad(
    state,
    "scale_attn_by_inverse_layer_idx",
    gpt2_config={"n_head": 2, "scale_attn_by_inverse_layer_idx": True},
  )
  untied = state | {"lm_head.weight": state["lm_head.weight"] + 1}
  _bad(untied, "tie_word_embeddings=True", num_heads=2)
  with pytest.raises(FileNotFoundError, match="nothing.safetensors"):
    gpt2.load(tmp_path / "nothing.safetensors", num_heads=2)
  (tmp_path / "w.npz").write_bytes(b"")
  _bad(tmp_path / "w.npz", "unknown weights format", num_heads=2)


def test_save_refuses_configs_gpt2_cannot_express(tmp_path):
  config, params = gpt2.load(random_state(np.random.default_rng(0), 50, 16, 32, 1), num_heads=2)
  for field, value in (("norm", "post"), ("use_bias", False), ("window", 4), ("temperature", 2.0)):
    bad = copy.deepcopy(config)
    bad[field] = value
    with pytest.raises(gpt2.GPT2FormatError, match=f"model.{field}"):
      gpt2.save(bad, params, tmp_path / "x.safetensors")
  wrong = jax.tree_util.tree_map(lambda x: x, params)
  wrong["params"]["layers_0"]["ffn"]["w1"] = np.zeros((32, 7), np.float32)
  with pytest.raises(gpt2.GPT2FormatError, match=r"\['layers_0'\]\['ffn'\]\['w1'\].*\(32, 7\)"):
    gpt2.save(config, wrong, tmp_path / "x.safetensors")


def test_bin_without_torch_says_how_to_proceed(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were absent
  (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
  with pytest.raises(ImportError, match=r"weights_only=True.*\.safetensors"):
    gpt2.load(tmp_path / "pytorch_model.bin", num_heads=2)
