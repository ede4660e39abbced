"""The arithmetic of the successor mixers, each form against a step-by-step NumPy loop of the
paper's recurrence: chunked gated linear attention (RetNet / GLA / Mamba-2), the delta rule
(DeltaNet / Gated DeltaNet), the diagonal SSM's long convolution (H3), Based's Taylor map.
Seeded random inputs, a starting state, L not a multiple of the chunk; jit and not."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer.math import chunked, delta, feature_maps, long_conv

B, L, H, K, J, CHUNK = 2, 11, 2, 4, 3, 4
ATOL = 2e-5


def _maybe_jit(fn, use_jit, **static):
  wrapped = lambda *a: fn(*a, **static)  # noqa: E731
  return jax.jit(wrapped) if use_jit else wrapped


def _gated_loop(q, k, v, log_a, s):
  s, outs = s.copy(), []
  for t in range(q.shape[1]):
    s = np.exp(log_a[:, t])[..., None] * s + np.einsum("bhk,bhj->bhkj", k[:, t], v[:, t])
    outs.append(np.einsum("bhk,bhkj->bhj", q[:, t], s))
  return np.stack(outs, 1), s


def _delta_loop(q, k, v, beta, log_a, s):
  s, outs = s.copy(), []
  eye = np.eye(k.shape[-1])
  for t in range(q.shape[1]):
    for b in range(q.shape[0]):
      for h in range(q.shape[2]):
        kk = k[b, t, h]
        erase = eye - beta[b, t, h] * np.outer(kk, kk)
        s[b, h] = np.exp(log_a[b, t, h]) * erase @ s[b, h] + beta[b, t, h] * np.outer(
          kk, v[b, t, h]
        )
    outs.append(np.einsum("bhk,bhkj->bhj", q[:, t], s))
  return np.stack(outs, 1), s


@pytest.mark.parametrize("use_jit", [False, True])
@pytest.mark.parametrize("per_key", [False, True])  # GLA's decay per key dim / one per head
def test_chunked_gated_equals_recurrent_equals_the_loop(per_key, use_jit):
  r = np.random.default_rng(1 + per_key)
  q, k = r.normal(size=(2, B, L, H, K)).astype(np.float32)
  v = r.normal(size=(B, L, H, J)).astype(np.float32)
  log_a = -r.uniform(0.0, 2.0, size=(B, L, H, K if per_key else 1)).astype(np.float32)
  s0 = r.normal(size=(B, H, K, J)).astype(np.float32)
  want = _gated_loop(q, k, v, log_a, s0)
  got_c = _maybe_jit(chunked.chunked, use_jit, chunk=CHUNK)(q, k, v, log_a, s0)
  got_r = _maybe_jit(chunked.recurrent, use_jit)(q, k, v, log_a, s0)
  chex.assert_trees_all_close(got_c, want, atol=ATOL)
  chex.assert_trees_all_close(got_r, want, atol=ATOL)


def test_chunked_gated_survives_a_decay_that_would_overflow_unmasked():
  """log a = -30 per step: e^(-b) alone would be e^(330); the masked form stays finite."""
  r = np.random.default_rng(3)
  q, k = r.normal(size=(2, 1, L, 1, K)).astype(np.float32)
  v = r.normal(size=(1, L, 1, J)).astype(np.float32)
  log_a = np.full((1, L, 1, 1), -30.0, np.float32)
  out, _ = chunked.chunked(q, k, v, log_a, chunk=L)
  # each position keeps only its own write: out_l = (q_l . k_l) v_l
  want = np.einsum("blhk,blhk->blh", q, k)[..., None] * v
  chex.assert_trees_all_close(out, want, atol=1e-5)


def test_a_decay_of_neither_one_nor_k_is_refused():
  x = jnp.zeros((1, 4, 1, K))
  with pytest.raises(ValueError, match="log_a_BLHG: last dimension 2"):
    chunked.chunked(x, x, x, jnp.zeros((1, 4, 1, 2)))


def test_retention_decays_are_retnets():
  gamma = np.exp(np.asarray(chunked.retention_log_decays(3)))
  np.testing.assert_allclose(gamma, [1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128], rtol=1e-6)


@pytest.mark.parametrize("use_jit", [False, True])
@pytest.mark.parametrize("gated", [False, True])  # Gated DeltaNet / DeltaNet
def test_chunked_delta_rule_equals_recurrent_equals_the_loop(gated, use_jit):
  r = np.random.default_rng(5 + gated)
  q, k = r.normal(size=(2, B, L, H, K)).astype(np.float32)
  k /= np.linalg.norm(k, axis=-1, keepdims=True)
  v = r.normal(size=(B, L, H, J)).astype(np.float32)
  beta = r.uniform(0.0, 1.0, size=(B, L, H)).astype(np.float32)
  log_a = (-r.uniform(0.0, 1.0, size=(B, L, H)) if gated else np.zeros((B, L, H))).astype(
    np.float32
  )
  s0 = r.normal(size=(B, H, K, J)).astype(np.float32)
  want = _delta_loop(q, k, v, beta, log_a, s0)
  got_c = _maybe_jit(delta.chunked, use_jit, chunk=CHUNK)(q, k, v, beta, log_a, s0)
  got_r = _maybe_jit(delta.recurrent, use_jit)(q, k, v, beta, log_a, s0)
  chex.assert_trees_all_close(got_c, want, atol=ATOL)
  chex.assert_trees_all_close(got_r, want, atol=ATOL)


@pytest.mark.parametrize("size", [1, 2, 3, 16, 17])
def test_unit_lower_inverse_inverts(size):
  r = np.random.default_rng(size)
  a = np.tril(r.uniform(-1.0, 1.0, size=(3, size, size)), -1).astype(np.float32)
  want = np.linalg.inv(np.eye(size) + a.astype(np.float64))
  got = np.asarray(delta.unit_lower_inverse(jnp.asarray(a)))
  np.testing.assert_allclose(got, want, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_the_chunked_delta_rule_at_its_default_chunk_calls_no_solver():
  """At chunk 16 (four doubling factors) the chunked form still equals the loop, and neither
  it nor its gradient calls LAPACK's triangular solve (jaxlib 0.10's batched CPU solve can
  deadlock its thread pool)."""
  r = np.random.default_rng(9)
  length = 37
  q, k = r.normal(size=(2, B, length, H, K)).astype(np.float32)
  k /= np.linalg.norm(k, axis=-1, keepdims=True)
  v = r.normal(size=(B, length, H, J)).astype(np.float32)
  beta = r.uniform(0.0, 1.0, size=(B, length, H)).astype(np.float32)
  log_a = -r.uniform(0.0, 0.5, size=(B, length, H)).astype(np.float32)
  s0 = r.normal(size=(B, H, K, J)).astype(np.float32)
  got = jax.jit(lambda *a: delta.chunked(*a, chunk=16))(q, k, v, beta, log_a, s0)
  chex.assert_trees_all_close(got, _delta_loop(q, k, v, beta, log_a, s0), atol=1e-4)
  loss = lambda *a: delta.chunked(*a, chunk=16)[0].sum()  # noqa: E731
  program = str(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))(q, k, v, beta, log_a, s0))
  assert "triangular_solve" not in program


def test_the_delta_rule_overwrites_a_repeated_key_where_linear_attention_sums():
  k = jnp.zeros((1, 2, 1, K)).at[..., 0].set(1.0)  # the same unit key twice
  v = jnp.stack([jnp.ones((1, 1, J)), -jnp.ones((1, 1, J))], axis=1)  # values +1 then -1
  beta = jnp.ones((1, 2, 1))
  out, _ = delta.chunked(k, k, v, beta, chunk=2)
  chex.assert_trees_all_close(out[:, 1], -jnp.ones((1, 1, J)), atol=1e-6)  # the last value
  linear, _ = chunked.chunked(k, k, v, jnp.zeros((1, 2, 1, 1)), chunk=2)
  chex.assert_trees_all_close(linear[:, 1], jnp.zeros((1, 1, J)), atol=1e-6)  # their sum


@pytest.mark.parametrize("use_jit", [False, True])
def test_long_convolution_equals_the_recurrence_equals_the_loop(use_jit):
  r = np.random.default_rng(7)
  D, N = 3, 5
  u = r.normal(size=(B, L, D)).astype(np.float32)
  log_a = -r.uniform(0.01, 1.0, size=(D, N)).astype(np.float32)
  b, c = r.normal(size=(2, D, N)).astype(np.float32)
  h, outs = np.zeros((B, D, N)), []
  for t in range(L):
    h = np.exp(log_a) * h + b * u[:, t, :, None]
    outs.append((h * c).sum(-1))
  want = np.stack(outs, 1)
  chex.assert_trees_all_close(_maybe_jit(long_conv.conv, use_jit)(u, log_a, b, c), want, atol=ATOL)
  got, final = _maybe_jit(long_conv.recurrent, use_jit)(u, log_a, b, c)
  chex.assert_trees_all_close((got, final), (want, h), atol=ATOL)
  # continued from a state: the second half after the first equals the whole
  first, state = long_conv.recurrent(u[:, :5], log_a, b, c)
  second, _ = long_conv.recurrent(u[:, 5:], log_a, b, c, state)
  chex.assert_trees_all_close(jnp.concatenate([first, second], 1), want, atol=ATOL)


def test_taylor_features_expand_exp_to_second_order():
  r = np.random.default_rng(9)
  q, k = r.normal(size=(2, 3, K)).astype(np.float32)
  fq, fk = feature_maps.taylor(q), feature_maps.taylor(k)
  assert fq.shape == (3, feature_maps.taylor_dim(K)) == (3, 1 + K + K * K)
  dot = (q * k).sum(-1)
  np.testing.assert_allclose((fq * fk).sum(-1), 1 + dot + dot**2 / 2, rtol=1e-5)


def test_rotation_makes_scores_depend_on_the_offset_alone():
  r = np.random.default_rng(11)
  q, k = r.normal(size=(2, 1, 1, 1, K)).astype(np.float32)

  def score(n, m):
    rq = feature_maps.rotate(q, jnp.array([n]))
    rk = feature_maps.rotate(k, jnp.array([m]))
    return float((rq * rk).sum())

  assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-5)
  assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)
  with pytest.raises(ValueError, match="K=3 must be even"):
    feature_maps.rotate(jnp.zeros((1, 1, 1, 3)), jnp.zeros(1))
