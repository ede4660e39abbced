"""Sampling: greedy is argmax, top-k never leaves the top k, temperature reshapes the law."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer.math import sampling

DRAWS = 4000


def _draws(logits_V, **kwargs):
  """DRAWS independent samples from one fixed logits row (batched, one call)."""
  logits_BV = jnp.broadcast_to(logits_V, (DRAWS, logits_V.shape[0]))
  return np.asarray(sampling.sample(logits_BV, jax.random.key(7), **kwargs))


def test_greedy_is_argmax():
  logits_BV = jax.random.normal(jax.random.key(0), (16, 50))
  got = sampling.sample(logits_BV, jax.random.key(1), greedy=True)
  np.testing.assert_array_equal(got, np.argmax(np.asarray(logits_BV), axis=-1))


@pytest.mark.parametrize("k", [1, 3, 8])
def test_top_k_never_samples_outside_the_top_k(k):
  logits_V = jax.random.normal(jax.random.key(2), (32,)) * 0.5  # flat-ish: outsiders are likely
  top = set(np.argsort(np.asarray(logits_V))[-k:].tolist())
  drawn = _draws(logits_V, top_k=k, temperature=2.0)
  assert set(drawn.tolist()) <= top
  assert len(set(drawn.tolist())) == k  # every one of the k is reachable
  # without top-k the same law does leave the top k
  assert not set(_draws(logits_V, temperature=2.0).tolist()) <= top


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_frequencies_follow_softmax_over_temperature(temperature):
  logits_V = jnp.array([1.0, 0.0, -0.5, 0.5, -1.0])
  counts = np.bincount(_draws(logits_V, temperature=temperature), minlength=5)
  want = np.asarray(jax.nn.softmax(logits_V / temperature))
  stderr = np.sqrt(want * (1 - want) / DRAWS)
  np.testing.assert_array_less(np.abs(counts / DRAWS - want), 5 * stderr)


def test_top_k_renormalizes_over_the_kept_logits():
  logits_V = jnp.array([2.0, 1.0, 0.0, -1.0])
  counts = np.bincount(_draws(logits_V, top_k=2), minlength=4)
  want = np.asarray(jax.nn.softmax(jnp.array([2.0, 1.0])))
  np.testing.assert_allclose(counts[:2] / DRAWS, want, atol=5 * np.sqrt(0.25 / DRAWS))
  assert counts[2:].sum() == 0
