"""The gated linear recurrence: its associative-scan form, its step-by-step form and its
decoding form (a prompt, then one token at a time from the carried state) are one function."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer.math import gated


def _inputs(seed, B=2, L=13, H=3, K=4, J=5):
  keys = jax.random.split(jax.random.key(seed), 5)
  q, k = (jax.random.normal(x, (B, L, H, K)) for x in keys[:2])
  v = jax.random.normal(keys[2], (B, L, H, J))
  a = gated.decay(jax.random.normal(keys[3], (B, L, H, K)) * 3, 2.0)
  state = jax.random.normal(keys[4], (B, H, K, J))
  return q, k, v, a, state


def _loop(q, k, v, a, state):
  """The definition, one position at a time in numpy."""
  q, k, v, a, s = (np.asarray(x, np.float64) for x in (q, k, v, a, state))
  out = np.zeros(v.shape)
  for t in range(q.shape[1]):
    s = a[:, t, ..., None] * s + k[:, t, ..., None] * v[:, t, :, None, :]
    out[:, t] = np.einsum("BHK,BHKJ->BHJ", q[:, t], s)
  return out, s


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("with_state", [False, True])
def test_scan_and_recurrent_forms_equal_the_definition(seed, with_state):
  q, k, v, a, state = _inputs(seed)
  state = state if with_state else None
  want_out, want_state = _loop(q, k, v, a, state if with_state else jnp.zeros((2, 3, 4, 5)))
  for form in gated.FORMS:
    out, final = jax.jit(lambda *x, f=form: gated.gated_linear_attention(*x, form=f))(
      q, k, v, a, state
    )
    chex.assert_trees_all_close((out, final), (want_out, want_state), atol=1e-4, rtol=1e-4)


def test_decoding_from_the_carried_state_equals_one_pass():
  q, k, v, a, _ = _inputs(3)
  full, final = gated.gated_linear_attention(q, k, v, a, form="scan")
  prefill = 5
  out, state = gated.gated_linear_attention(*(x[:, :prefill] for x in (q, k, v, a)))
  outs = [out]
  step = jax.jit(functools.partial(gated.gated_linear_attention, form="recurrent"))
  for t in range(prefill, q.shape[1]):
    out, state = step(*(x[:, t : t + 1] for x in (q, k, v, a)), state)
    outs.append(out)
  chex.assert_trees_all_close((jnp.concatenate(outs, 1), state), (full, final), atol=1e-5)


def test_compose_is_associative_and_is_the_affine_update():
  keys = jax.random.split(jax.random.key(4), 6)
  maps = [
    (jax.random.uniform(keys[i], (3,)), jax.random.normal(keys[i + 3], (3, 2))) for i in range(3)
  ]
  left = gated.compose(gated.compose(maps[0], maps[1]), maps[2])
  right = gated.compose(maps[0], gated.compose(maps[1], maps[2]))
  chex.assert_trees_all_close(left, right, atol=1e-6)
  s = jax.random.normal(jax.random.key(9), (3, 2))
  a, b = gated.compose(maps[0], maps[1])
  step = maps[1][0][:, None] * (maps[0][0][:, None] * s + maps[0][1]) + maps[1][1]
  chex.assert_trees_all_close(a[:, None] * s + b, step, atol=1e-6)


def test_decay_lies_in_the_open_unit_interval_and_starts_near_one():
  a = gated.decay(jnp.array([-30.0, 0.0, 30.0]), 16.0)
  assert bool(jnp.all((a > 0) & (a <= 1)))
  assert float(a[1]) == pytest.approx(0.5 ** (1 / 16))


def test_an_unknown_form_is_named():
  q, k, v, a, _ = _inputs(0)
  with pytest.raises(ValueError, match="form='parallel'"):
    gated.gated_linear_attention(q, k, v, a, form="parallel")


def test_short_conv_is_a_causal_weighted_sum_and_continues_from_its_history():
  x = jax.random.normal(jax.random.key(5), (2, 9, 3))
  w = jax.random.normal(jax.random.key(6), (4, 3))
  y, history = gated.short_conv(x, w)
  xs = np.asarray(x)
  want = sum(
    np.asarray(w[c]) * np.pad(xs, ((0, 0), (c, 0), (0, 0)))[:, : xs.shape[1]] for c in range(4)
  )
  chex.assert_trees_all_close(y, want, atol=1e-5)
  chex.assert_trees_all_close(history, x[:, -3:])
  first, h = gated.short_conv(x[:, :5], w)
  rest, _ = gated.short_conv(x[:, 5:], w, h)
  chex.assert_trees_all_close(jnp.concatenate([first, rest], 1), y, atol=1e-5)
