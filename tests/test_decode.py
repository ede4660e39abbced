"""Decoding with a cache: prefill + one token at a time == the full forward pass, for
every rung; generate compiles once; the cache is as large as the formula says."""

import chex
import flax.linen as nn
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


@pytest.mark.parametrize("value_rank", [2, 12])
def test_values_of_their_own_rank_decode_as_the_full_pass(value_rank):
  """concat + Wo with model.value_rank: Wv_j and Wo_j are r_v wide, the scorer stays rank 4."""
  c, model, params, tokens_BL = setup("transformer", rank=4, value_rank=value_rank)
  mixer = nn.meta.unbox(params)["layers_0"]["mixer"]
  assert mixer["valuer"]["wv"].shape == (c.d_model, c.num_heads, value_rank)
  assert mixer["valuer"]["wo"].shape == (c.num_heads, value_rank, c.d_model)
  assert mixer["scorer"]["wq"].shape == (c.d_model, c.num_heads, 4)
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
    ("concat_wo", {"rank": 2, "value_rank": 6}),  # values wider than the keys
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
  c = small_config("transformer", rank=4, value_rank=12)
  assert decode.cache_dims(c) == (c.num_heads * 4, c.num_heads * 12)
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
  got = got.tokens
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
  outs = [o.tokens for o in outs]
  chex.assert_shape(outs, (2, 5))
  assert not all(np.array_equal(outs[0], o) for o in outs[1:])  # the inputs did change
  monkeypatch.undo()  # other static arguments below: new traces are expected
  # top_k=1 is greedy whatever the temperature
  prompt = tokens_BL[:, :3]
  top1 = decode.generate(model, params, prompt, steps=5, rng=jax.random.key(9), top_k=1)
  greedy = decode.generate(model, params, prompt, steps=5, rng=jax.random.key(9), greedy=True)
  np.testing.assert_array_equal(top1.tokens, greedy.tokens)


@pytest.mark.parametrize(
  "kwargs, field",
  [
    ({"steps": 20}, "steps"),  # 3 + 20 > max_len 16
    ({"steps": 0}, "steps"),
    ({"steps": 2, "temperature": 0.0}, "temperature"),
    ({"steps": 2, "top_k": 0}, "top_k"),
    ({"steps": 2, "top_k": 33}, "top_k"),
    ({"steps": 2, "top_p": 0.0}, "top_p"),
    ({"steps": 2, "top_p": 1.5}, "top_p"),
    ({"steps": 2, "stop_token": 32}, "stop_token"),
    ({"steps": 2, "stop_token": -1}, "stop_token"),
    ({"steps": 2, "prompts": [[1, 2], []]}, r"prompts\[1\]"),
    ({"steps": 2, "prompts": [[1.5, 2.0]]}, r"prompts\[0\]"),
  ],
)
def test_generate_rejects_bad_arguments(kwargs, field):
  c, model, params, tokens_BL = setup("concat_wo")
  prompts = kwargs.pop("prompts", tokens_BL[:, :3])
  with pytest.raises(ValueError, match=field):
    decode.generate(model, params, prompts, rng=jax.random.key(0), **kwargs)


# A batch of prompts of different lengths, left-padded, against each prompt alone: every rung
# family (attention with the generic form and with a kernel, a sliding-window ring, the
# recurrent carry, attention over recurrent states), both position tables, and the scanned
# layer stack (every layer reads the same padding through the scan).
RAGGED = [
  ("transformer", {}),
  ("transformer", {"scan_layers": True}),
  ("transformer", {"attention": "blockwise", "positions": "sinusoidal"}),
  ("concat_wo", {"window": 3}),
  ("rnn", {}),
  ("rnn_attention", {}),
]


@pytest.mark.parametrize("rung, overrides", RAGGED)
def test_prompts_of_different_lengths_sample_as_each_alone(rung, overrides):
  c, model, params, tokens_BL = setup(rung, **overrides)
  prompts = [tokens_BL[0, :2], tokens_BL[1, :6], tokens_BL[1, 3:8]]
  steps = 5
  out = decode.generate(model, params, prompts, steps=steps, rng=jax.random.key(0), greedy=True)
  # Each prompt alone, without the cache: row i starts at position 0 and is extended by the
  # argmax of a full forward pass (later, right-side tokens cannot change causal logits).
  forward = jax.jit(model.apply)
  seq = np.zeros((len(prompts), c.max_len), np.int32)
  for i, prompt in enumerate(prompts):
    seq[i, : len(prompt)] = prompt
  for t in range(steps):
    log_p_BLV = jax.nn.log_softmax(forward({"params": params}, jnp.asarray(seq)), axis=-1)
    for i, prompt in enumerate(prompts):
      at = len(prompt) + t
      seq[i, at] = int(jnp.argmax(log_p_BLV[i, at - 1]))
      assert int(out.tokens[i, t]) == seq[i, at], (i, t)
      np.testing.assert_allclose(out.log_probs[i, t], log_p_BLV[i, at - 1, seq[i, at]], atol=1e-4)


def test_log_probs_score_the_tokens_under_the_full_forward():
  c, model, params, tokens_BL = setup("transformer")
  out = decode.generate(model, params, tokens_BL[:, :4], steps=5, rng=jax.random.key(4))
  seq = jnp.concatenate([tokens_BL[:, :4], out.tokens], axis=1)
  log_p_BLV = jax.nn.log_softmax(model.apply({"params": params}, seq), axis=-1)
  want = jnp.take_along_axis(log_p_BLV[:, 3:-1], out.tokens[..., None], axis=-1)[..., 0]
  np.testing.assert_allclose(out.log_probs, want, atol=1e-5)
  assert (out.lengths == 5).all()


def test_a_row_stops_at_its_stop_token():
  c, model, params, tokens_BL = setup("softmax")
  prompt = tokens_BL[:, :3]
  free = decode.generate(model, params, prompt, steps=8, rng=jax.random.key(5), greedy=True)
  stop = int(free.tokens[0, 2])  # row 0 reaches it at its third token
  out = decode.generate(
    model, params, prompt, steps=8, rng=jax.random.key(5), greedy=True, stop_token=stop
  )
  for b in range(2):
    row = np.asarray(free.tokens[b])
    first = int(np.argmax(row == stop)) if (row == stop).any() else None
    length = 8 if first is None else first + 1
    assert int(out.lengths[b]) == length
    np.testing.assert_array_equal(out.tokens[b, :length], row[:length])
    assert (np.asarray(out.tokens[b, length:]) == stop).all()
    assert (np.asarray(out.log_probs[b, length:]) == 0).all()
  assert int(out.lengths[0]) <= 3


def test_generate_long_continues_past_max_len_from_the_last_half():
  c, model, params, tokens_BL = setup("transformer")  # max_len 16
  prompt = np.asarray(tokens_BL[:, :3])
  rows = decode.generate_long(
    model, params, prompt, num_tokens=30, rng=jax.random.key(0), greedy=True
  )
  assert [len(r) for r in rows] == [30, 30]
  # 13 tokens fill the context; then chunks of 8 after the last 8 (max_len // 2), then 1
  seq = prompt
  for steps in (13, 8, 8, 1):
    context = seq if seq.shape[1] == 3 else seq[:, -8:]
    out = decode.generate(model, params, context, steps=steps, rng=jax.random.key(0), greedy=True)
    seq = np.concatenate([seq, np.asarray(out.tokens)], axis=1)
  np.testing.assert_array_equal(np.stack(rows), seq[:, 3:])
  stop = int(seq[0, 3 + 20])  # row 0's 21st token (or an earlier copy of it)
  cut = decode.generate_long(
    model, params, prompt, num_tokens=30, rng=jax.random.key(0), greedy=True, stop_token=stop
  )
  for row, full in zip(cut, seq[:, 3:], strict=True):
    n = int(np.argmax(full == stop)) + 1 if (full == stop).any() else 30
    np.testing.assert_array_equal(row, full[:n])
  assert len(cut[0]) <= 21
