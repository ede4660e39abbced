"""Choosing the next token from logits_BV: greedy, temperature, top-k (pure functions)."""

import jax
import jax.numpy as jnp
from jax import lax


def top_k_mask(logits_BV, k):
  """Keeps the k largest logits per row, the rest -inf (ties with the k-th are kept)."""
  kth_B1 = lax.top_k(logits_BV, k)[0][:, -1:]
  return jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)


def sample(logits_BV, rng, *, temperature=1.0, top_k=None, greedy=False):
  """Next token ids_B: argmax if greedy, else a draw from softmax(logits / temperature),
  restricted to the top k logits when top_k is set."""
  if greedy:
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  logits_BV = logits_BV.astype(jnp.float32) / temperature
  if top_k is not None:
    logits_BV = top_k_mask(logits_BV, top_k)
  return jax.random.categorical(rng, logits_BV, axis=-1).astype(jnp.int32)
