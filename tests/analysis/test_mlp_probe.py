"""MLP probe: a key-value pair planted in a transformer's MLP is found again."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis import mlp_probe
from jaxformer.analysis.cache import run_with_cache

V, D, F = 32, 64, 24
UNIT, KEY_TOKEN, VALUE_TOKEN = 5, 11, 23


def _planted():
  """Layer 0's unit UNIT fires on KEY_TOKEN (whatever came before) and writes VALUE_TOKEN.

  Token embeddings are orthogonal and zero-mean, positions and the mixer are switched
  off, so the MLP reads LN(embed[t]) = sqrt(D) e_t / |e_t| and only KEY_TOKEN matches.
  """
  config = ladder.default_config("transformer")
  config.vocab_size, config.d_model, config.d_ff, config.num_layers = V, D, F, 1
  config.max_len, config.tie_embeddings = 16, True
  model = ladder.build("transformer", config)
  params = nn.meta.unbox(model.init(jax.random.key(0), np.zeros((1, 16), np.int32)))
  p = jax.tree_util.tree_map(np.array, params["params"])
  rng = np.random.default_rng(0)
  raw = rng.standard_normal((V, D))
  q, _ = np.linalg.qr((raw - raw.mean(1, keepdims=True)).T)  # zero-mean orthonormal columns
  p["embed"] = (3.0 * q.T).astype(np.float32)
  p["pos_embed"][:] = 0.0
  mixer = p["layers_0"]["mixer"]["valuer"]
  mixer["wo"][:], mixer["bo"][:] = 0.0, 0.0
  ffn = p["layers_0"]["ffn"]
  ffn["w1"][:] = 0.1 * rng.standard_normal((D, F)) / np.sqrt(D)
  ffn["b1"][:] = 0.0
  key = q[:, KEY_TOKEN] * np.sqrt(D)  # LN(embed[KEY_TOKEN])
  ffn["w1"][:, UNIT] = 8.0 * key / (key @ key)
  ffn["b1"][UNIT] = -4.0  # pre-activation +4 on KEY_TOKEN, -4 on every other token
  ffn["w2"][:] = 0.1 * rng.standard_normal((F, D))
  ffn["w2"][UNIT] = 2.0 * p["embed"][VALUE_TOKEN]
  tokens = rng.integers(0, V, (40, 16))
  return model, {"params": p}, tokens


def test_probe_recovers_the_planted_key_and_value():
  model, params, tokens = _planted()
  report = mlp_probe.probe(model, params, tokens, layer=0, k=5, batch_size=16)
  assert report["activations"].shape == (F, 5) and report["value_tokens"].shape == (F, 5)
  hits = tokens[report["sequence"][UNIT], report["position"][UNIT]]
  np.testing.assert_array_equal(hits, KEY_TOKEN)
  np.testing.assert_allclose(report["activations"][UNIT], 4.0, atol=1e-3)  # gelu(4) = 3.9999
  assert report["value_tokens"][UNIT, 0] == VALUE_TOKEN
  assert report["value_scores"][UNIT, 0] > 10 * abs(report["value_scores"][UNIT, 1])
  # the other units found something else: the plant is what the probe reports, not a default
  others = tokens[report["sequence"][UNIT + 1], report["position"][UNIT + 1]]
  assert not np.all(others == KEY_TOKEN) and report["value_tokens"][UNIT + 1, 0] != VALUE_TOKEN
  text = mlp_probe.describe(report, tokens, UNIT, decode=lambda t: f"t{t}")
  assert f"[t{KEY_TOKEN}]" in text and f"t{VALUE_TOKEN} (" in text


def test_top_contexts_equal_a_full_sort_across_batches():
  model, params, tokens = _planted()
  for use in ("post", "pre"):
    got = mlp_probe.top_contexts(model, params, tokens, 0, k=3, batch_size=7, use=use)
    _, cache = run_with_cache(model, params, tokens)
    act_XF = np.asarray(cache[f"layers_0/ffn/mlp_{use}"]).reshape(-1, F)
    np.testing.assert_allclose(got["activations"], -np.sort(-act_XF, axis=0)[:3].T, rtol=1e-5)
    found = act_XF[got["sequence"] * 16 + got["position"], np.arange(F)[:, None]]
    np.testing.assert_allclose(found, got["activations"], rtol=1e-5)


def test_value_tokens_without_w2_and_bad_input():
  config = ladder.default_config("mlp_kv")
  config.mlp_w2, config.d_ff, config.num_layers, config.tie_embeddings = False, 64, 1, False
  model = ladder.build("mlp_kv", config)
  params = model.init(jax.random.key(0), np.zeros((1, 4), np.int32))
  values = mlp_probe.value_tokens(params, 0, k=2)
  unembed = np.asarray(nn.meta.unbox(params)["params"]["unembed"])
  np.testing.assert_array_equal(values["tokens"][:, 0], unembed.argmax(1))  # v_f = e_f
  with pytest.raises(KeyError, match="layers_3"):
    mlp_probe.value_tokens(params, 3)
  with pytest.raises(ValueError, match="use="):
    mlp_probe.top_contexts(model, params, np.zeros((1, 4)), 0, use="mid")
