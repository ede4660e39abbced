"""Generation with a cache: prefill the prompt once, then one token per step.

  cache = init_cache(model, batch, max_len)        # zeros, shaped by the model itself
  out = generate(model, params, prompts, steps=S, rng=key, top_k=40, top_p=0.9,
                 stop_token=eos)                   # out.tokens, out.log_probs, out.lengths

Every layer keeps what later tokens need in Flax's 'cache' collection
(jaxformer.nn.mixer: keys and values per past token; jaxformer.steps.s1_fixed_memory:
the recurrent carry), so a step costs one token's work plus a read of the cache instead
of recomputing the whole prefix. `generate` runs the steps in one `lax.scan` inside one
`jit`: it compiles once per (model, prompt shape, steps, top_k, top_p set or not, greedy).
Prompts of different lengths are left-padded: each row keeps its own positions and no
layer reads its padding (`pad_B`), so a row is sampled as it would be alone.

The cache size is the quantity of steps 5 and 7: `cache_bytes_formula` is the closed form
(tokens x layers x (key dims + value dims) x bytes), `cache_bytes` measures real arrays.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.math import sampling

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


def init_cache(model, batch, max_len):
  """A zero cache for `batch` sequences of up to `max_len` tokens (no parameters built)."""
  tokens_BL = jax.ShapeDtypeStruct((batch, max_len), jnp.int32)
  shapes = jax.eval_shape(
    lambda t: model.init(jax.random.key(0), t, decode=True)["cache"], tokens_BL
  )
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def decode_step(model, params, cache, tokens_BL, pad_B=None):
  """Feeds tokens_BL (a prompt, or one token) after what the cache holds.

  pad_B: int32 [B], how many padding tokens start each row (left padding, see `left_pad`);
  give the same pad_B to every call of one generation. Returns (logits_BLV, the extended cache).
  """
  logits_BLV, variables = model.apply(
    {"params": params, "cache": cache}, tokens_BL, decode=True, pad_B=pad_B, mutable=["cache"]
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


class Generation(NamedTuple):
  """What `generate` returns, per row b of the batch."""

  tokens: jax.Array  # int32 [B, S]: sampled tokens; after the row's stop token, stop_token
  log_probs: jax.Array  # float32 [B, S]: log p(token) under the model (0 after the stop)
  lengths: jax.Array  # int32 [B]: tokens up to and including the stop token (S if none)


def left_pad(prompts, pad_id=0):
  """Prompts of different lengths -> (prompt_BL, pad_B): each row right-aligned after pad_B[b]
  copies of pad_id, L the longest prompt. An array [B, L] is returned as is, pad_B None."""
  if hasattr(prompts, "ndim") and prompts.ndim == 2:
    return jnp.asarray(prompts), None
  rows = [np.asarray(p) for p in prompts]
  for i, row in enumerate(rows):
    if row.ndim != 1 or not np.issubdtype(row.dtype, np.integer) or row.size == 0:
      raise ValueError(
        f"prompts[{i}]: expected a non-empty 1-D sequence of token ids, got {row.dtype}{row.shape}"
      )
  if not rows:
    raise ValueError("prompts: expected at least one prompt")
  length = max(len(r) for r in rows)
  prompt_BL = np.full((len(rows), length), pad_id, np.int32)
  for i, row in enumerate(rows):
    prompt_BL[i, length - len(row) :] = row
  return jnp.asarray(prompt_BL), jnp.asarray([length - len(r) for r in rows], jnp.int32)


def generate(
  model,
  params,
  prompts,
  *,
  steps,
  rng,
  temperature=1.0,
  top_k=None,
  top_p=None,
  greedy=False,
  stop_token=None,
):
  """Samples `steps` tokens after each prompt; returns a Generation (tokens, log_probs, lengths).

  prompts: int [B, L] (every row L tokens) or a list of 1-D token sequences of any lengths,
  left-padded here (`left_pad`): each row is sampled exactly as it would be alone. A row
  that samples `stop_token` stops there (its later tokens are stop_token; all rows run
  `steps` steps). Sampling: greedy, or softmax(logits / temperature) within the top_k
  logits and the top_p nucleus (jaxformer.math.sampling).
  """
  prompt_BL, pad_B = left_pad(prompts)
  _check_generate(model, prompt_BL, steps, temperature, top_k, top_p, stop_token)
  return _generate_jit(
    model,
    params,
    prompt_BL,
    pad_B,
    rng,
    jnp.float32(temperature),
    jnp.float32(1.0 if top_p is None else top_p),
    jnp.int32(-1 if stop_token is None else stop_token),
    steps=steps,
    top_k=top_k,
    nucleus=top_p is not None,
    greedy=greedy,
  )


def generate_long(model, params, prompt_BL, *, num_tokens, rng, stop_token=None, **sampler):
  """`num_tokens` tokens after each row of prompt_BL, past the model's max_len if need be:
  one `generate` over the model's context, then chunks that continue from the last
  max_len // 2 tokens (the model has no positions past max_len). Returns one int32 array per
  row, cut after its first stop_token. `sampler`: temperature, top_k, top_p, greedy."""
  prompt_BL = np.asarray(prompt_BL)
  max_len = model.max_len
  if prompt_BL.shape[1] >= max_len:
    raise ValueError(
      f"prompt_BL: {prompt_BL.shape[1]} tokens; the model reads at most max_len - 1 = {max_len - 1}"
    )
  if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens <= 0:
    raise ValueError(f"num_tokens={num_tokens!r}: must be a positive integer")
  new_BN = np.zeros((prompt_BL.shape[0], 0), np.int32)
  while new_BN.shape[1] < num_tokens:
    context_BL = prompt_BL
    if new_BN.shape[1]:
      context_BL = np.concatenate([prompt_BL, new_BN], axis=1)[:, -(max_len // 2) :]
    steps = min(num_tokens - new_BN.shape[1], max_len - context_BL.shape[1])
    rng, key = jax.random.split(rng)
    out = generate(
      model, params, context_BL, steps=steps, rng=key, stop_token=stop_token, **sampler
    )
    new_BN = np.concatenate([new_BN, np.asarray(out.tokens)], axis=1)
    if stop_token is not None and (new_BN == stop_token).any(axis=1).all():
      break
  rows = []
  for row_N in new_BN[:, :num_tokens]:
    if stop_token is not None and (row_N == stop_token).any():
      row_N = row_N[: int(np.argmax(row_N == stop_token)) + 1]
    rows.append(row_N)
  return rows


def _generate(
  model, params, prompt_BL, pad_B, rng, temperature, top_p, stop, *, steps, top_k, nucleus, greedy
):
  batch, length = prompt_BL.shape
  keys = jax.random.split(rng, steps)

  def choose(logits_BV, key, done_B):
    """The next token and its log-probability; a row that has stopped repeats the stop."""
    token_B = sampling.sample(
      logits_BV,
      key,
      temperature=temperature,
      top_k=top_k,
      top_p=top_p if nucleus else None,
      greedy=greedy,
    )
    log_p_B = sampling.token_log_probs(logits_BV, token_B)
    token_B = jnp.where(done_B, stop, token_B)
    log_p_B = jnp.where(done_B, 0.0, log_p_B)
    return token_B, log_p_B, done_B | (token_B == stop)

  cache = init_cache(model, batch, length + steps)
  logits_BLV, cache = decode_step(model, params, cache, prompt_BL, pad_B)
  first = choose(logits_BLV[:, -1], keys[0], jnp.zeros(batch, bool))

  def step(carry, key):
    cache, token_B, log_p_B, done_B = carry
    logits_B1V, cache = decode_step(model, params, cache, token_B[:, None], pad_B)
    return (cache, *choose(logits_B1V[:, 0], key, done_B)), (token_B, log_p_B)

  (_, last_B, last_log_p_B, _), (tokens_SB, log_p_SB) = jax.lax.scan(
    step, (cache, *first), keys[1:]
  )
  tokens_BS = jnp.concatenate([tokens_SB.T, last_B[:, None]], axis=1)
  log_p_BS = jnp.concatenate([log_p_SB.T, last_log_p_B[:, None]], axis=1)
  stopped_BS = tokens_BS == stop
  lengths_B = jnp.where(stopped_BS.any(axis=1), jnp.argmax(stopped_BS, axis=1) + 1, steps)
  return Generation(tokens_BS, log_p_BS, lengths_B.astype(jnp.int32))


def _jit(fn):
  return jax.jit(fn, static_argnums=0, static_argnames=("steps", "top_k", "nucleus", "greedy"))


_generate_jit = _jit(_generate)


def _check_generate(model, prompt_BL, steps, temperature, top_k, top_p, stop_token):
  if prompt_BL.ndim != 2 or not jnp.issubdtype(prompt_BL.dtype, jnp.integer):
    raise ValueError(
      f"prompt_BL: expected integer tokens [B, L], got {prompt_BL.dtype}{prompt_BL.shape}"
    )
  if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0:
    raise ValueError(f"steps={steps!r}: must be a positive integer")
  if prompt_BL.shape[1] + steps > model.max_len:
    raise ValueError(
      f"steps={steps}: prompt length {prompt_BL.shape[1]} + steps exceeds max_len={model.max_len}"
    )
  if not (math.isfinite(temperature) and temperature > 0):
    raise ValueError(f"temperature={temperature!r}: must be a finite number > 0")
  if top_k is not None and not (isinstance(top_k, int) and 1 <= top_k <= model.vocab_size):
    raise ValueError(f"top_k={top_k!r}: must be None or an integer in [1, {model.vocab_size}]")
  if top_p is not None and not (isinstance(top_p, int | float) and 0 < top_p <= 1):
    raise ValueError(f"top_p={top_p!r}: must be None or a number in (0, 1]")
  if stop_token is not None and not (
    isinstance(stop_token, int | np.integer) and 0 <= stop_token < model.vocab_size
  ):
    raise ValueError(
      f"stop_token={stop_token!r}: must be None or a token id in [0, {model.vocab_size})"
    )


def cache_bytes(cache):
  """Bytes of the real cache arrays (the 0-d position counters are bookkeeping, left out)."""
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache) if x.ndim > 0)


def cache_dims(config):
  """(key dims, value dims) one layer caches per token: what scorer.keys / valuer.values keep."""
  from jaxformer.ladder import head_rank, value_rank

  c, width = config, config.d_model
  heads = {"full": width * width, "diagonal": width, "heads": c.num_heads}[c.weights]
  per_head = {"source": 1, "additive": 1, "tanh": head_rank(c), "bilinear": width}
  per_head["lowrank"] = head_rank(c)
  key_dims = heads * per_head[c.interaction]
  if c.weights != "heads":
    value_dims = heads  # one coordinate of x_i per head (K = 1)
  else:
    value_dims = heads * (width if c.head_combine == "sum" else value_rank(c))
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
