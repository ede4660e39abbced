"""The mixer's cache with the attention kernels of step 9 and with a sliding window (a ring
buffer of `window` slots): decoding equals the full forward pass, also past the window."""

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxformer import decode, ladder


def build(**overrides):
  c = ladder.default_config("transformer")
  c.vocab_size, c.max_len, c.num_layers, c.d_model, c.d_ff = 32, 16, 2, 16, 32
  for field, value in overrides.items():
    c[field] = value
  model = ladder.build("transformer", c)
  tokens_BL = jax.random.randint(jax.random.key(1), (2, 11), 0, c.vocab_size)
  return c, model, model.init(jax.random.key(0), tokens_BL)["params"], tokens_BL


@jax.jit(static_argnums=(0, 3))
def full_and_cached(model, params, tokens_BL, prefill):
  full_BLV = model.apply({"params": params}, tokens_BL)
  return full_BLV, *decode.cached_logits(model, params, tokens_BL, prefill)


@pytest.mark.parametrize(
  "impl, window",
  [
    ("dense", None),
    ("blockwise", None),
    ("block_sparse", None),
    ("linear", None),
    ("sliding_window", 3),
  ],
)
def test_decoding_with_attention_kernels(impl, window):
  _, model, params, tokens_BL = build(attention=impl, window=window)
  want, got, _ = full_and_cached(model, params, tokens_BL, 3)
  chex.assert_trees_all_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("prefill", [1, 5])  # 5 > window: the prompt alone overruns the ring
def test_sliding_window_ring_buffer_past_the_window(prefill):
  window = 3
  c, model, params, tokens_BL = build(window=window, positions="sinusoidal")
  want, got, cache = full_and_cached(model, params, tokens_BL, prefill)
  chex.assert_trees_all_close(got, want, atol=2e-5, rtol=2e-5)
  chex.assert_shape(
    cache["layers_0"]["mixer"]["keys"], (2, window, c.num_heads, c.d_model // c.num_heads)
  )
  # the window really limits what is read: without it the same weights give other logits
  _, wide, _, _ = build(positions="sinusoidal")
  full = jax.jit(wide.apply)({"params": params}, tokens_BL)
  assert float(jnp.max(jnp.abs(full[:, window:] - want[:, window:]))) > 1e-3
