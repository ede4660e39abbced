"""run_with_cache: every rung's intermediates, recombined into the logits they came from.

The recombination is recomputed in numpy from the params, independent of jaxformer's code.
"""

import functools

import chex
import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis.cache import layer_names, run_with_cache

BATCH, LENGTH = 2, 8


def _setup(rung, **fields):
  config = ladder.default_config(rung)
  for key, value in fields.items():
    config[key] = value
  model = ladder.build(rung, config)
  tokens = jax.random.randint(jax.random.key(1), (BATCH, LENGTH), 0, config.vocab_size)
  params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
  # Random norms and biases (init has ones / zeros) so every recombination term counts.
  leaves, tree = jax.tree_util.tree_flatten(params)
  rng = np.random.default_rng(2)
  leaves = [x + 0.1 * rng.standard_normal(x.shape, np.float32) for x in leaves]
  return config, model, jax.tree_util.tree_unflatten(tree, leaves), tokens


@pytest.mark.parametrize("rung", ladder.RUNGS)
def test_every_rung_caches_under_jit_and_matches_apply(rung):
  config, model, params, tokens = _setup(rung, num_layers=1)
  logits, cache = jax.jit(functools.partial(run_with_cache, model))(params, tokens)
  chex.assert_trees_all_close(logits, jax.jit(model.apply)(params, tokens), atol=1e-5)
  chex.assert_shape(cache["embedded"], (BATCH, LENGTH, config.d_model))
  names = layer_names(cache)
  if rung in ladder.RECURRENT_RUNGS:
    chex.assert_shape(cache["layers_0/states"], (BATCH, LENGTH, config.d_model))
    assert "layers_0/mixer/weights" not in cache
  if rung == "rnn":
    assert names == ["layers_0"]
    return
  last = names[-1]
  a = np.asarray(cache[f"{last}/mixer/weights"])
  assert a.shape[0] == BATCH and a.shape[2:] == (LENGTH, LENGTH)
  assert np.all(np.triu(a, 1) == 0)  # causal (or self-only): nothing from the future
  if config.normalizer == "softmax":
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
  for name in ("head_outputs", "out"):
    assert f"{last}/mixer/{name}" in cache
  if config.mlp == "kv":
    chex.assert_shape(cache["layers_0/ffn/mlp_pre"], (BATCH, LENGTH, config.d_ff))
    chex.assert_shape(cache["layers_0/ffn/mlp_post"], (BATCH, LENGTH, config.d_ff))


def _norm(x, norm):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-5) * norm["scale"] + norm["bias"]


def _gelu(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _softmax(s):
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("tied", [True, False])
def test_transformer_cache_recombines_into_logits(tied):
  config, model, params, tokens = _setup("transformer", tie_embeddings=tied, num_heads=4)
  logits, cache = run_with_cache(model, params, tokens)  # eager
  p = jax.tree_util.tree_map(np.asarray, params["params"])
  logits, cache = np.asarray(logits), {k: np.asarray(v) for k, v in cache.items()}
  close = functools.partial(np.testing.assert_allclose, atol=2e-5, rtol=2e-5)

  close(cache["embedded"], p["embed"][np.asarray(tokens)] + p["pos_embed"][:LENGTH])
  resid = cache["embedded"]
  future = np.triu(np.ones((LENGTH, LENGTH), bool), 1)
  for i in range(config.num_layers):
    lp, c = p[f"layers_{i}"], lambda name, i=i: cache[f"layers_{i}/{name}"]
    valuer, ffn = lp["mixer"]["valuer"], lp["ffn"]
    close(c("resid_pre"), resid)
    close(c("norm1/out"), _norm(resid, lp["norm1"]))
    # weights = softmax(q . k / sqrt(K) + causal mask), from the cached queries and keys
    q, k, v = c("mixer/queries"), c("mixer/keys"), c("mixer/values")
    chex.assert_shape(q, (BATCH, LENGTH, 4, config.d_model // 4))
    scores = np.einsum("BLHK,BMHK->BHLM", q, k) / np.sqrt(q.shape[-1])
    close(c("mixer/weights"), _softmax(np.where(future, -np.inf, scores)))
    close(c("mixer/head_outputs"), np.einsum("BHLM,BMHK->BLHK", c("mixer/weights"), v))
    # per-head outputs combined through Wo (+ bo) are the mixer output
    mixer_out = np.einsum("BLHK,HKD->BLD", c("mixer/head_outputs"), valuer["wo"]) + valuer["bo"]
    close(c("mixer/out"), mixer_out)
    close(c("resid_mid"), resid + mixer_out)
    close(c("norm2/out"), _norm(c("resid_mid"), lp["norm2"]))
    close(c("ffn/mlp_pre"), c("norm2/out") @ ffn["w1"] + ffn["b1"])
    close(c("ffn/mlp_post"), _gelu(c("ffn/mlp_pre")))
    close(c("ffn/out"), c("ffn/mlp_post") @ ffn["w2"] + ffn["b2"])
    # the residual stream is the sum of every component's write
    resid = resid + c("mixer/out") + c("ffn/out")
    close(c("resid_post"), resid)
  final = _norm(resid, p["final_norm"])
  close(cache["final_norm/out"], final)
  close(logits, final @ (p["embed"].T if tied else p["unembed"]))


@pytest.mark.parametrize("window", [None, 3])
def test_kernel_weights_are_recomputed_like_the_generic_ones(window):
  """attention='dense' sows no weights; the cache derives them from q, k, tau and the mask."""
  _, model, params, tokens = _setup("transformer", window=window)
  _, generic = jax.jit(functools.partial(run_with_cache, model))(params, tokens)
  _, dense_model, _, _ = _setup("transformer", window=window, attention="dense")
  dense_logits, dense = jax.jit(functools.partial(run_with_cache, dense_model))(params, tokens)
  chex.assert_trees_all_close(dense_logits, jax.jit(model.apply)(params, tokens), atol=1e-5)
  for name in layer_names(generic):
    chex.assert_trees_all_close(
      dense[f"{name}/mixer/weights"], generic[f"{name}/mixer/weights"], atol=1e-6
    )
  if window is not None:  # the window masks: no weight on sources m <= l - window
    a = np.asarray(dense["layers_0/mixer/weights"])
    assert np.all(np.tril(a, -window) == 0) and np.tril(a, 1 - window).max() > 0


def test_names_filter_keeps_only_matching_entries():
  _, model, params, tokens = _setup("transformer")
  _, cache = run_with_cache(model, params, tokens, names=["*/weights", "embedded"])
  assert sorted(cache) == ["embedded", "layers_0/mixer/weights", "layers_1/mixer/weights"]
