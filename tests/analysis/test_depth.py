"""jaxformer.analysis.depth reads the sequential depth of real programs: chains of dependent
operations, loops as trips x body, and a parallel scan as ~log L."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from experiments import harness
from jaxformer.analysis import depth


def chain(n):
  def f(x):
    for _ in range(n):
      x = jnp.sin(x)
    return x

  return f


def test_a_chain_of_n_operations_has_depth_n_and_side_by_side_ones_do_not_add():
  x = jax.ShapeDtypeStruct((8,), jnp.float32)
  assert depth.measure(chain(5), x).depth == 5
  wide = depth.measure(lambda x: chain(3)(x) + chain(3)(2 * x), x)
  assert wide.depth == 3 + 1 + 1  # the deeper branch (2x, then 3 sines) and the sum
  assert depth.measure(chain(5), x).loops == ()


@pytest.mark.parametrize("length", [4, 32])
def test_a_scan_counts_its_trips_times_its_body(length):
  def f(x):
    return lax.scan(lambda c, _: (chain(3)(c), None), x, None, length=length)[0]

  d = depth.measure(f, jax.ShapeDtypeStruct((8,), jnp.float32))
  assert d.depth == 3 * length
  assert d.loops == (("scan", length),) and d.flops == 3 * 8 * length


def test_nested_loops_multiply_and_a_static_while_is_counted():
  def inner(c):
    return lax.fori_loop(0, 4, lambda i, y: jnp.sin(y), c)  # a scan of 4

  def f(x):
    return lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, inner(c[1])), (0, x))[1]

  d = depth.measure(f, 1.0)
  assert ("while", 5) in d.loops and ("scan", 20) in d.loops
  assert d.depth == 5 * (4 + 1) and d.dynamic_loops == 0  # each trip: 4 sines, then the test


def test_a_while_of_traced_trip_count_counts_once_and_is_flagged():
  def f(x, n):
    return lax.fori_loop(0, n, lambda i, y: jnp.sin(y), x)

  d = depth.measure(f, 1.0, 5)
  assert d.dynamic_loops == 1 and d.depth == 2  # a lower bound: one trip (body, test)

  def by_two(x):  # counts by 2: not a plain range, so not read as 10 trips
    return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 2, jnp.sin(c[1])), (0, x))[1]

  assert depth.measure(by_two, 1.0).dynamic_loops == 1


def test_cond_takes_its_deepest_branch_and_jit_is_walked_inside():
  def f(p, x):
    return lax.cond(p, chain(2), chain(6), x)

  assert depth.measure(f, True, 1.0).depth == 7
  inner = jax.jit(chain(4))
  assert depth.measure(lambda x: inner(jnp.cos(x)), 1.0).depth == 5


def test_matmul_flops_and_parallelism():
  a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
  b = jax.ShapeDtypeStruct((16, 4), jnp.float32)
  d = depth.measure(jnp.matmul, a, b)
  assert d.flops == 2 * 8 * 16 * 4 and d.depth == 1 and d.parallelism == d.flops


def test_an_associative_scan_grows_as_log_length_a_sequential_scan_as_length():
  def prefix(x):
    return lax.associative_scan(jnp.add, x)

  def sequential(x):
    return lax.scan(lambda c, v: (c + v, c + v), 0.0, x)[1]

  lengths = (64, 256, 1024, 4096)
  parallel = [depth.measure(prefix, jax.ShapeDtypeStruct((n,), jnp.float32)).depth for n in lengths]
  serial = [
    depth.measure(sequential, jax.ShapeDtypeStruct((n,), jnp.float32)).depth for n in lengths
  ]
  steps = [b - a for a, b in zip(parallel, parallel[1:], strict=False)]
  assert len(set(steps)) == 1 and steps[0] > 0  # the same few operations per 4x in L
  assert parallel[-1] < 100 and serial == [n * serial[0] // 64 for n in lengths]


def _train_config(rung, length, **model):
  fields = {"d_model": 16, "num_layers": 2, "vocab_size": 16, "max_len": length, **model}
  if rung == "transformer":
    fields |= {"num_heads": 1, "d_ff": 32}
  return harness.train_config(rung, f"mqar:vocab_size=16,seq_len={length}", fields)


def test_train_step_depth_recurrent_grows_with_length_parallel_does_not():
  rnn = [depth.train_step(_train_config("rnn", n), (2, n)).depth for n in (8, 32)]
  tf = [depth.train_step(_train_config("transformer", n), (2, n)).depth for n in (8, 32)]
  assert tf[0] == tf[1]
  assert rnn[1] > 3 * rnn[0]  # 4x the length: the scan's trips, forward and backward
