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


@pytest.mark.parametrize(
  "p, kept",
  [
    (0.5, [0]),  # 0.64 alone reaches 0.5
    (0.7, [0, 1]),  # 0.64 < 0.7: the next token is needed
    (0.9, [0, 1, 2]),
    (1.0, [0, 1, 2, 3]),
  ],
)
def test_top_p_keeps_the_smallest_nucleus_reaching_p(p, kept):
  probs_V = jnp.array([0.64, 0.2, 0.1, 0.06])
  logits_V = jnp.log(probs_V)[jnp.array([2, 0, 3, 1])]  # shuffled: the filter must sort
  order = np.array([1, 3, 0, 2])  # where probs_V[i] sits in logits_V
  drawn = set(_draws(logits_V, top_p=p).tolist())
  assert drawn == set(order[kept].tolist())
  masked = np.asarray(sampling.top_p_mask(logits_V[None], p))[0]
  assert set(np.flatnonzero(np.isfinite(masked)).tolist()) == set(order[kept].tolist())


def test_top_p_renormalizes_and_composes_with_top_k():
  logits_V = jnp.log(jnp.array([0.5, 0.3, 0.15, 0.05]))
  counts = np.bincount(_draws(logits_V, top_p=0.8), minlength=4)
  want = np.array([0.5, 0.3]) / 0.8
  np.testing.assert_allclose(counts[:2] / DRAWS, want, atol=5 * np.sqrt(0.25 / DRAWS))
  assert counts[2:].sum() == 0
  # top_k=3 first (renormalized 0.526, 0.316, 0.158), then p = 0.6 keeps two
  assert set(_draws(logits_V, top_k=3, top_p=0.6).tolist()) == {0, 1}


def test_token_log_probs_are_the_models_log_softmax():
  logits_BV = jax.random.normal(jax.random.key(3), (4, 10))
  tokens_B = jnp.array([0, 9, 3, 3])
  got = sampling.token_log_probs(logits_BV, tokens_B)
  want = np.log(np.asarray(jax.nn.softmax(logits_BV)))[np.arange(4), np.asarray(tokens_B)]
  np.testing.assert_allclose(got, want, rtol=1e-5)
