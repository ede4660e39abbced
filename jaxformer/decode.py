"""Generation with a cache: prefill the prompt once, then one token per step.

  cache = init_cache(model, batch, max_len)        # zeros, shaped by the model itself
  tokens_BS = generate(model, params, prompt_BL, steps=S, rng=key, top_k=40)

Every layer keeps what later tokens need in Flax's 'cache' collection
(jaxformer.nn.mixer: keys and values per past token; jaxformer.steps.s1_fixed_memory:
the recurrent carry), so a step costs one token's work plus a read of the cache instead
of recomputing the whole prefix. `generate` runs the steps in one `lax.scan` inside one
`jit`: it compiles once per (model, prompt shape, steps, top_k, greedy).

The cache size is the quantity of steps 5 and 7: `cache_bytes_formula` is the closed form
(tokens x layers x (key dims + value dims) x bytes), `cache_bytes` measures real arrays.
"""

import math

import jax
import jax.numpy as jnp

from jaxformer.math import sampling

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


def init_cache(model, batch, max_len):
  """A zero cache for `batch` sequences of up to `max_len` tokens (no parameters built)."""
  tokens_BL = jax.ShapeDtypeStruct((batch, max_len), jnp.int32)
  shapes = jax.eval_shape(
    lambda t: model.init(jax.random.key(0), t, decode=True)["cache"], tokens_BL
  )
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def decode_step(model, params, cache, tokens_BL):
  """Feeds tokens_BL (a prompt, or one token) after what the cache holds.

  Returns (logits_BLV, the extended cache).
  """
  logits_BLV, variables = model.apply(
    {"params": params, "cache": cache}, tokens_BL, decode=True, mutable=["cache"]
  )
  return logits_BLV, variables["cache"]


def cached_logits(model, params, tokens_BL, prefill):
  """Logits of every position computed through the cache: one call on the first `prefill`
  tokens, then one call per token (a scan). Equals model.apply on tokens_BL up to rounding:
  the check that a cache stores everything the layers read. Returns (logits_BLV, cache)."""
  cache = init_cache(model, tokens_BL.shape[0], tokens_BL.shape[1])
  first_BLV, cache = decode_step(model, params, cache, tokens_BL[:, :prefill])

  def step(cache, token_B):
    logits_B1V, cache = decode_step(model, params, cache, token_B[:, None])
    return cache, logits_B1V[:, 0]

  cache, rest_LBV = jax.lax.scan(step, cache, tokens_BL[:, prefill:].T)
  return jnp.concatenate([first_BLV, rest_LBV.swapaxes(0, 1)], axis=1), cache


def generate(model, params, prompt_BL, *, steps, rng, temperature=1.0, top_k=None, greedy=False):
  """Samples `steps` tokens after prompt_BL; returns the new tokens int32 [B, steps]."""
  prompt_BL = jnp.asarray(prompt_BL)
  _check_generate(model, prompt_BL, steps, temperature, top_k)
  return _generate_jit(
    model, params, prompt_BL, rng, jnp.float32(temperature), steps=steps, top_k=top_k, greedy=greedy
  )


def _generate(model, params, prompt_BL, rng, temperature, *, steps, top_k, greedy):
  batch, length = prompt_BL.shape
  pick = lambda logits_BLV, key: sampling.sample(  # noqa: E731
    logits_BLV[:, -1], key, temperature=temperature, top_k=top_k, greedy=greedy
  )
  keys = jax.random.split(rng, steps)
  logits_BLV, cache = decode_step(
    model, params, init_cache(model, batch, length + steps), prompt_BL
  )
  first_B = pick(logits_BLV, keys[0])

  def step(carry, key):
    cache, token_B = carry
    logits_B1V, cache = decode_step(model, params, cache, token_B[:, None])
    return (cache, pick(logits_B1V, key)), token_B

  (_, last_B), tokens_SB = jax.lax.scan(step, (cache, first_B), keys[1:])
  return jnp.concatenate([tokens_SB.T, last_B[:, None]], axis=1)


def _jit(fn):
  return jax.jit(fn, static_argnums=0, static_argnames=("steps", "top_k", "greedy"))


_generate_jit = _jit(_generate)


def _check_generate(model, prompt_BL, steps, temperature, top_k):
  if prompt_BL.ndim != 2 or not jnp.issubdtype(prompt_BL.dtype, jnp.integer):
    raise ValueError(
      f"prompt_BL: expected integer tokens [B, L], got {prompt_BL.dtype}{prompt_BL.shape}"
    )
  if not isinstance(steps, int) or steps <= 0:
    raise ValueError(f"steps={steps!r}: must be a positive integer")
  if prompt_BL.shape[1] + steps > model.max_len:
    raise ValueError(
      f"steps={steps}: prompt length {prompt_BL.shape[1]} + steps exceeds max_len={model.max_len}"
    )
  if not (math.isfinite(temperature) and temperature > 0):
    raise ValueError(f"temperature={temperature!r}: must be a finite number > 0")
  if top_k is not None and not (isinstance(top_k, int) and 1 <= top_k <= model.vocab_size):
    raise ValueError(f"top_k={top_k!r}: must be None or an integer in [1, {model.vocab_size}]")


def cache_bytes(cache):
  """Bytes of the real cache arrays (the 0-d position counters are bookkeeping, left out)."""
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache) if x.ndim > 0)


def cache_dims(config):
  """(key dims, value dims) one layer caches per token: what scorer.keys / valuer.values keep."""
  from jaxformer.ladder import head_rank

  c, width = config, config.d_model
  heads = {"full": width * width, "diagonal": width, "heads": c.num_heads}[c.weights]
  per_head = {"source": 1, "additive": 1, "tanh": head_rank(c), "bilinear": width}
  per_head["lowrank"] = head_rank(c)
  key_dims = heads * per_head[c.interaction]
  if c.weights != "heads":
    value_dims = heads  # one coordinate of x_i per head (K = 1)
  else:
    value_dims = heads * (width if c.head_combine == "sum" else head_rank(c))
  return key_dims, value_dims


def cache_bytes_formula(config, length, *, batch=1, rung=None):
  """Closed form: tokens x layers x (key dims + value dims) x bytes, times the batch.

  A sliding window keeps min(window, length) tokens. rung='rnn' / 'rnn_attention' adds
  the recurrent carries (D, or 2 D for an LSTM, per layer) and has one attention layer.
  """
  nbytes = _DTYPE_BYTES[config.dtype]
  tokens = length if config.window is None else min(config.window, length)
  layers = {"rnn": 0, "rnn_attention": 1}.get(rung, config.num_layers)
  total = tokens * layers * sum(cache_dims(config)) * nbytes
  if rung in ("rnn", "rnn_attention"):
    total += config.num_layers * config.d_model * (2 if config.cell == "lstm" else 1) * nbytes
  return batch * total
