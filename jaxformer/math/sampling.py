"""Choosing the next token from logits_BV: greedy, temperature, top-k, top-p (pure functions).

The filters apply in the usual order: logits / temperature, then the top k, then the
smallest set of most likely tokens whose probability reaches p (nucleus sampling, Holtzman et
al. 2020). Ties with the last kept logit are kept by both filters.
"""

import jax
import jax.numpy as jnp
from jax import lax


def top_k_mask(logits_BV, k):
  """Keeps the k largest logits per row, the rest -inf (ties with the k-th are kept)."""
  kth_B1 = lax.top_k(logits_BV, k)[0][:, -1:]
  return jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)


def top_p_mask(logits_BV, p):
  """Keeps per row the most likely tokens until their probability reaches p (at least one),
  the rest -inf. p in (0, 1]; p = 1 keeps every token of nonzero probability."""
  sorted_BV = -jnp.sort(-logits_BV, axis=-1)  # descending
  probs_BV = jax.nn.softmax(sorted_BV, axis=-1)
  before_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV  # mass of the tokens ranked above
  kept_B1 = jnp.sum(before_BV < p, axis=-1, keepdims=True)  # >= 1: the first has 0 before it
  last_B1 = jnp.take_along_axis(sorted_BV, kept_B1 - 1, axis=-1)
  return jnp.where(logits_BV < last_B1, -jnp.inf, logits_BV)


def sample(logits_BV, rng, *, temperature=1.0, top_k=None, top_p=None, greedy=False):
  """Next token ids_B: argmax if greedy, else a draw from softmax(logits / temperature),
  restricted to the top k logits when top_k is set and to the top-p nucleus when top_p is."""
  if greedy:
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  logits_BV = logits_BV.astype(jnp.float32) / temperature
  if top_k is not None:
    logits_BV = top_k_mask(logits_BV, top_k)
  if top_p is not None:
    logits_BV = top_p_mask(logits_BV, top_p)
  return jax.random.categorical(rng, logits_BV, axis=-1).astype(jnp.int32)


def token_log_probs(logits_BV, tokens_B):
  """log p(token) under the model's own distribution softmax(logits): before temperature
  and filtering, so it scores the text, not the sampler."""
  log_probs_BV = jax.nn.log_softmax(logits_BV.astype(jnp.float32), axis=-1)
  return jnp.take_along_axis(log_probs_BV, tokens_B[:, None], axis=-1)[:, 0]
