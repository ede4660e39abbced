"""The successor built-ins as modules: the training form (chunked, or H3's FFT convolution)
at several chunks per sequence equals the recurrent form run one token per call from an
empty cache (the contract's check decodes a prompt in one call, then tokens; the pure
forms are compared with a loop of each recurrence in test_successor_math.py); the
decode-state bytes counted from the real cache equal each module's stated `state_size`
formula and do not grow with L. (The contract's causality and decode checks run on every
built-in in test_builtins.py.)"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer import mixers
from jaxformer.mixers import based, deltanet, gla, h3, mamba2, retnet

WIDTH, LENGTH, BATCH = 8, 10, 2
# name -> (fields at WIDTH with chunk 4 where the form is chunked, the stated state size)
CASES = {
  "retnet": ({"num_heads": 2, "chunk": 4}, retnet.state_size(WIDTH, 2)),
  "gla": ({"num_heads": 2, "gate_rank": 4, "chunk": 4}, gla.state_size(WIDTH, 2)),
  "mamba2": ({"num_heads": 2, "state": 4, "chunk": 4}, mamba2.state_size(WIDTH, 2, 4)),
  "deltanet": ({"num_heads": 2, "chunk": 4}, deltanet.state_size(WIDTH, 2)),
  "gated_deltanet": ({"num_heads": 2, "gated": True, "chunk": 4}, deltanet.state_size(WIDTH, 2)),
  "based": (
    {"num_heads": 2, "feature_dim": 2, "window": 3, "chunk": 4},
    based.state_size(WIDTH, 2, 2, 3),
  ),
  "h3": ({"head_dim": 2, "state": 3}, h3.state_size(WIDTH, 2, 3)),
}


def _module(name):
  spec, defaults = mixers.BUILTINS[name]
  return mixers.load(spec)(width=WIDTH, **(defaults | CASES[name][0]))


def _empty_cache(module, x_BLD):
  shapes = jax.eval_shape(lambda x: module.init(jax.random.key(0), x, decode=True)["cache"], x_BLD)
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


@pytest.mark.parametrize("name", list(CASES))
def test_training_form_equals_the_recurrent_form_a_token_at_a_time(name):
  module = _module(name)
  x_BLD = jax.random.normal(jax.random.key(len(name)), (BATCH, LENGTH, WIDTH))
  params = module.init(jax.random.key(1), x_BLD)["params"]
  full = jax.jit(lambda p, x: module.apply({"params": p}, x))
  step = jax.jit(
    lambda p, c, x: module.apply({"params": p, "cache": c}, x, decode=True, mutable=["cache"])
  )
  want_BLD = full(params, x_BLD)
  cache, outs = _empty_cache(module, x_BLD), []
  for t in range(LENGTH):
    out, variables = step(params, cache, x_BLD[:, t : t + 1])
    cache = variables["cache"]
    outs.append(out)
  chex.assert_trees_all_close(jnp.concatenate(outs, 1), want_BLD, atol=1e-5, rtol=1e-5)
  assert float(jnp.abs(want_BLD).max()) > 1e-3  # not a mixer that outputs ~0


def test_without_jit_the_training_form_equals_the_token_loop():
  module = _module("gated_deltanet")
  x_BLD = jax.random.normal(jax.random.key(3), (1, 6, WIDTH))
  params = module.init(jax.random.key(4), x_BLD)["params"]
  want_BLD = module.apply({"params": params}, x_BLD)
  cache, outs = _empty_cache(module, x_BLD), []
  for t in range(6):
    out, variables = module.apply(
      {"params": params, "cache": cache}, x_BLD[:, t : t + 1], decode=True, mutable=["cache"]
    )
    cache = variables["cache"]
    outs.append(out)
  chex.assert_trees_all_close(jnp.concatenate(outs, 1), want_BLD, atol=1e-5, rtol=1e-5)


def _state_bytes(module, length):
  x = jax.ShapeDtypeStruct((1, length, WIDTH), jnp.float32)
  cache = jax.eval_shape(lambda x: module.init(jax.random.key(0), x, decode=True)["cache"], x)
  return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(cache) if leaf.ndim)


@pytest.mark.parametrize("name", list(CASES))
def test_decode_state_bytes_are_the_stated_formula_and_fixed_in_length(name):
  module = _module(name)
  stated = 4 * CASES[name][1]  # float32 numbers
  assert _state_bytes(module, 16) == _state_bytes(module, 256) == stated


def test_the_state_formulas_scale_as_stated():
  # Mamba-2's SSM grows with N; DeltaNet's with K^2; H3's with K^2 N
  assert mamba2.state_size(32, 4, 32, conv=0) == 2 * mamba2.state_size(32, 4, 16, conv=0)
  assert deltanet.state_size(32, 2, conv=0) == 2 * deltanet.state_size(32, 4, conv=0)
  assert h3.state_size(32, 2, 8, shift=0) == 32 * 2 * 8
  assert np.isclose(based.state_size(8, 2, 2, 0), 2 * 7 * 5)


def test_every_state_sweep_names_a_field_whose_values_grow_the_cache():
  from jaxformer.mixers import plug

  assert set(mixers.STATE_SWEEPS) == set(mixers.BUILTINS) - {mixers.REFERENCE}
  for name, (field, values) in mixers.STATE_SWEEPS.items():
    spec, defaults = mixers.BUILTINS[name]
    cls = mixers.load(spec)
    assert field in plug.field_names(cls), name
    sizes = [_state_bytes(cls(width=WIDTH, **(defaults | {field: v})), 32) for v in values]
    assert sizes == sorted(set(sizes)), (name, sizes)  # strictly growing


@pytest.mark.parametrize("name", ["gla", "gated_deltanet", "h3"])
def test_the_training_form_has_depth_about_log_length(name):
  """The chunks' states by an associative scan (H3: an FFT): 16x the length, far less than
  2x the depth (a scan over positions or chunks would grow ~16x or ~L / C)."""
  from jaxformer.analysis import depth

  module = _module(name)
  depths = []
  for length in (64, 1024):
    x = jax.ShapeDtypeStruct((1, length, WIDTH), jnp.float32)
    params = jax.eval_shape(module.init, jax.random.key(0), x)
    depths.append(depth.measure(module.apply, params, x).depth)
  assert depths[1] < 1.5 * depths[0], depths
