"""Decoding with a cache: prefill + one token at a time == the full forward pass, for
every rung; generate compiles once; the cache is as large as the formula says."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer import decode, ladder

LENGTH = 9


def small_config(rung, **overrides):
  """A rung's default config, shrunk so that every rung compiles in about a second."""
  c = ladder.default_config(rung)
  c.vocab_size, c.max_len, c.num_layers = 32, 16, 2
  if rung not in ("full_dynamic", "diagonal_dynamic"):
    c.d_model, c.d_ff = 16, 32
  for field, value in overrides.items():
    c[field] = value
  return c


def setup(rung, **overrides):
  c = small_config(rung, **overrides)
  model = ladder.build(rung, c)
  tokens_BL = jax.random.randint(jax.random.key(1), (2, LENGTH), 0, c.vocab_size)
  params = model.init(jax.random.key(0), tokens_BL)["params"]
  return c, model, params, tokens_BL


@jax.jit(static_argnums=(0, 3))
def full_and_cached(model, params, tokens_BL, prefill):
  """(full-forward logits, logits through the cache, final cache), in one compile."""
  full_BLV = model.apply({"params": params}, tokens_BL)
  return full_BLV, *decode.cached_logits(model, params, tokens_BL, prefill)


@pytest.mark.parametrize("rung", ladder.RUNGS)
def test_cached_decoding_equals_full_forward(rung):
  _, model, params, tokens_BL = setup(rung)
  want, got, _ = full_and_cached(model, params, tokens_BL, 3)
  chex.assert_trees_all_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
  "rung, overrides",
  [
    ("transformer", {}),  # lowrank keys, rank-r values (concat + Wo)
    ("matrix_sum", {"interaction": "bilinear"}),  # A_j x_i: D per head
    ("softmax", {}),  # summed heads: D-dim values per head
    ("concat_wo", {"window": 4}),  # ring buffer of 4 slots
    ("concat_wo", {"dtype": "bfloat16", "rank": 4}),
    ("source_only", {}),  # one key number per head
    ("rnn_attention", {}),  # carries + one attention layer
  ],
)
def test_cache_bytes_match_formula(rung, overrides):
  c = small_config(rung, **overrides)
  model = ladder.build(rung, c)
  cache = decode.init_cache(model, 3, 12)
  assert decode.cache_bytes(cache) == decode.cache_bytes_formula(c, 12, batch=3, rung=rung)


def test_cache_dims_follow_the_pieces():
  c = small_config("transformer", rank=4)
  assert decode.cache_dims(c) == (c.num_heads * 4, c.num_heads * 4)
  c = small_config("matrix_sum", interaction="bilinear")
  assert decode.cache_dims(c) == (c.num_heads * c.d_model, c.num_heads * c.d_model)


def test_formula_reproduces_the_articles_bilinear_arithmetic():
  """5,000 tokens x 50 layers x 20 functions x 1,000 dims x 2 bytes = 10 GB of keys; r = 200: 2 GB."""
  c = ladder.default_config("matrix_sum")
  c.d_model, c.num_heads, c.num_layers, c.dtype = 1000, 20, 50, "bfloat16"
  c.interaction = "bilinear"
  key_dims, _ = decode.cache_dims(c)
  assert 5000 * c.num_layers * key_dims * 2 == 10 * 10**9
  c.interaction, c.rank = "lowrank", 200
  assert 5000 * c.num_layers * decode.cache_dims(c)[0] * 2 == 2 * 10**9


def test_greedy_generate_equals_argmax_of_full_forward():
  c, model, params, tokens_BL = setup("transformer")
  prompt, steps = tokens_BL[:, :4], 6
  got = decode.generate(model, params, prompt, steps=steps, rng=jax.random.key(3), greedy=True)
  # recompute the whole prefix each step; later (padding) tokens cannot change causal logits
  forward = jax.jit(model.apply)
  seq = jnp.zeros((2, 4 + steps), jnp.int32).at[:, :4].set(prompt)
  for t in range(4, 4 + steps):
    seq = seq.at[:, t].set(jnp.argmax(forward({"params": params}, seq)[:, t - 1], axis=-1))
  np.testing.assert_array_equal(got, seq[:, 4:])


def test_generate_compiles_once_and_respects_top_k(monkeypatch):
  c, model, params, tokens_BL = setup("softmax")
  traced = chex.assert_max_traces(decode._generate, n=1)
  monkeypatch.setattr(decode, "_generate_jit", decode._jit(traced))
  outs = [
    decode.generate(
      model, params, tokens_BL[:, :3] + i, steps=5, rng=jax.random.key(i), temperature=t, top_k=2
    )
    for i, t in enumerate([1.0, 0.7, 2.0])
  ]
  chex.assert_shape(outs, (2, 5))
  assert not all(np.array_equal(outs[0], o) for o in outs[1:])  # the inputs did change
  monkeypatch.undo()  # other static arguments below: new traces are expected
  # top_k=1 is greedy whatever the temperature
  prompt = tokens_BL[:, :3]
  top1 = decode.generate(model, params, prompt, steps=5, rng=jax.random.key(9), top_k=1)
  greedy = decode.generate(model, params, prompt, steps=5, rng=jax.random.key(9), greedy=True)
  np.testing.assert_array_equal(top1, greedy)


@pytest.mark.parametrize(
  "kwargs, field",
  [
    ({"steps": 20}, "steps"),  # 3 + 20 > max_len 16
    ({"steps": 0}, "steps"),
    ({"steps": 2, "temperature": 0.0}, "temperature"),
    ({"steps": 2, "top_k": 0}, "top_k"),
    ({"steps": 2, "top_k": 33}, "top_k"),
  ],
)
def test_generate_rejects_bad_arguments(kwargs, field):
  c, model, params, tokens_BL = setup("concat_wo")
  with pytest.raises(ValueError, match=field):
    decode.generate(model, params, tokens_BL[:, :3], rng=jax.random.key(0), **kwargs)
