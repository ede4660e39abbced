"""Parity with transformers' GPT2LMHeadModel (randomly initialized, no download).

torch and transformers are test requirements (requirements-test.txt, installed by `make
test`): without them every test here FAILS, naming what is missing, rather than skipping,
so a suite that lacks them cannot pass without the parity check. test_gpt2_format.py
checks the mapping against a numpy GPT-2 as well.
"""

import pickle

import jax
import numpy as np
import pytest

try:
  import torch
  import transformers
except ImportError as error:  # reported by every test below, not skipped
  torch = transformers = None
  _MISSING = f"{error}; install requirements-test.txt (make .venv/.installed-test)"
else:
  _MISSING = None

from jaxformer import ladder  # noqa: E402
from jaxformer.interop import gpt2  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_and_transformers():
  if _MISSING is not None:
    pytest.fail(f"GPT-2 parity needs torch and transformers: {_MISSING}", pytrace=False)


SHAPES = [  # GPT2Config fields; every parameter is re-drawn so biases and norms count
  dict(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=16),
  dict(n_layer=2, n_embd=64, n_head=4, vocab_size=97, n_positions=32, n_inner=80),
  dict(n_layer=3, n_embd=96, n_head=3, vocab_size=300, n_positions=64),
  dict(n_layer=2, n_embd=48, n_head=4, vocab_size=64, n_positions=24, tie_word_embeddings=False),
  dict(n_layer=1, n_embd=32, n_head=4, vocab_size=60, n_positions=20, scale_attn_weights=False),
  dict(n_layer=2, n_embd=40, n_head=2, vocab_size=70, n_positions=16, activation_function="relu"),
]


def _torch_model(fields, seed=0):
  torch.manual_seed(seed)
  special = dict(bos_token_id=0, eos_token_id=0)
  model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**special, **fields)).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.normal_(0.0, 0.15)
      if ".ln_" in name and name.endswith("weight"):
        p.add_(1.0)
  return model


def _torch_logits(model, tokens):
  with torch.no_grad():
    return model(torch.as_tensor(tokens)).logits.numpy()


def _jax_logits(config, params, tokens):
  return np.asarray(jax.jit(ladder.build("transformer", config).apply)(params, tokens))


@pytest.mark.parametrize("fields", SHAPES, ids=lambda f: "-".join(f"{v}" for v in f.values()))
def test_logits_match_pytorch(fields):
  model = _torch_model(fields)
  tokens = np.random.default_rng(1).integers(0, fields["vocab_size"], (2, fields["n_positions"]))
  config, params = gpt2.load(model.state_dict(), gpt2_config=model.config)
  assert config.tie_embeddings == fields.get("tie_word_embeddings", True)
  want = _torch_logits(model, tokens)
  got = _jax_logits(config, params, tokens)
  assert np.abs(want).max() > 1.0  # logits large enough for 1e-4 to mean something
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_files_in_and_out(tmp_path):
  fields = SHAPES[1]
  model = _torch_model(fields, seed=2)
  tokens = np.random.default_rng(3).integers(0, fields["vocab_size"], (2, 32))
  want = _torch_logits(model, tokens)
  # transformers' own directory (config.json + model.safetensors)
  model.save_pretrained(tmp_path / "hf")
  config, params = gpt2.load(tmp_path / "hf")
  np.testing.assert_allclose(_jax_logits(config, params, tokens), want, atol=1e-4, rtol=0)
  # a bare torch .bin: torch.load(weights_only=True); heads from the argument
  torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
  config, params = gpt2.load(tmp_path / "pytorch_model.bin", num_heads=fields["n_head"])
  np.testing.assert_allclose(_jax_logits(config, params, tokens), want, atol=1e-4, rtol=0)
  # our export, read back by transformers
  gpt2.save(config, params, tmp_path / "ours")
  reloaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours").eval()
  np.testing.assert_allclose(_torch_logits(reloaded, tokens), want, atol=1e-5, rtol=0)


class _NotATensor:
  pass


def test_bin_files_are_read_with_the_safe_loader(tmp_path):
  """weights_only=True: a .bin holding an arbitrary pickled object is refused, not run."""
  torch.save({"wte.weight": _NotATensor()}, tmp_path / "evil.bin")
  with pytest.raises(pickle.UnpicklingError):
    gpt2.load(tmp_path / "evil.bin", num_heads=2)


def test_cache_matches_transformers_hidden_states_and_attentions():
  """run_with_cache on imported weights names the same tensors transformers returns."""
  from jaxformer.analysis.cache import run_with_cache

  fields = SHAPES[2]
  model = _torch_model(fields, seed=4)
  model.config._attn_implementation = "eager"  # sdpa returns no attention weights
  tokens = np.random.default_rng(5).integers(0, fields["vocab_size"], (2, 20))
  with torch.no_grad():
    out = model(torch.as_tensor(tokens), output_hidden_states=True, output_attentions=True)
  config, params = gpt2.load(model.state_dict(), gpt2_config=model.config)
  _, cache = jax.jit(lambda p, t: run_with_cache(ladder.build("transformer", config), p, t))(
    params, tokens
  )
  close = lambda a, b: np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=1e-4, rtol=0)  # noqa: E731
  for i in range(fields["n_layer"]):
    close(cache[f"layers_{i}/resid_pre"], out.hidden_states[i])
    close(cache[f"layers_{i}/mixer/weights"], out.attentions[i])
  close(cache["final_norm/out"], out.hidden_states[-1])  # transformers' last entry is after ln_f
