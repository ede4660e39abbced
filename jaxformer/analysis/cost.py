"""What a model costs to train and to decode, measured on its real programs.

  train_step(config, (B, L))      compiled memory (XLA's buffer assignment) and time of the
                                  loop's train step on this machine's first device
  decode_state_bytes(model, L)    bytes of the 'cache' collection after L tokens of one
                                  sequence: what inference must keep (shapes only)
  param_count(model, (B, L))      parameters (shapes only)

Times on a shared CPU are noisy: `cpu_seconds` (process CPU time) is reported beside wall
seconds. A program's memory comes from the compiled executable, not from running it.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxformer import bench
from jaxformer.analysis import depth


def train_step(config, batch_shape, repeats=3, seed=0):
  """{peak_bytes, seconds, cpu_seconds, compile_seconds} of one train step (not donated, so
  the same inputs are timed `repeats` times after a warm-up; the median is kept). The state
  is filled with small random numbers of its shapes: the time of a step does not depend on
  which values it meets."""
  fn, abstract_state, abstract_batch = depth.abstract_train_step(config, batch_shape)
  start = time.perf_counter()
  compiled = jax.jit(fn).lower(abstract_state, abstract_batch).compile()
  compile_seconds = time.perf_counter() - start
  memory = bench.memory_bytes(compiled)
  rng = np.random.default_rng(seed)
  state = _filled(abstract_state, rng)
  vocab = config.model.vocab_size
  batch = {
    "inputs": jnp.asarray(rng.integers(0, vocab, batch_shape, dtype=np.int32)),
    "targets": jnp.asarray(rng.integers(0, vocab, batch_shape, dtype=np.int32)),
    "mask": jnp.ones(batch_shape, jnp.int32),
  }
  seconds, _, cpu_seconds = bench.time_compiled(compiled, (state, batch), repeats=repeats)
  return {
    "peak_bytes": int(memory["peak_bytes"]),
    "seconds": float(seconds),
    "cpu_seconds": float(cpu_seconds),
    "compile_seconds": compile_seconds,
  }


def _filled(abstract, rng):
  """Arrays of the abstract state's shapes (small normal floats, zero integers): what a
  timed step needs, without compiling the initializer as well."""

  def fill(x):
    if jnp.issubdtype(x.dtype, jnp.floating):
      return jnp.asarray(0.02 * rng.standard_normal(x.shape), x.dtype)
    return jnp.zeros(x.shape, x.dtype)

  return jax.tree.map(fill, abstract)


def decode_state_bytes(model, length, batch=1):
  """Bytes the model's 'cache' holds for `batch` sequences of `length` tokens (the 0-d
  position counters are bookkeeping, left out); shapes only, nothing is allocated."""
  tokens_BL = jax.ShapeDtypeStruct((batch, length), jnp.int32)
  cache = jax.eval_shape(
    lambda t: model.init(jax.random.key(0), t, decode=True).get("cache", {}), tokens_BL
  )
  return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache) if x.ndim > 0))


def param_count(model, batch_shape):
  tokens_BL = jax.ShapeDtypeStruct(tuple(batch_shape), jnp.int32)
  params = jax.eval_shape(lambda t: model.init(jax.random.key(0), t)["params"], tokens_BL)
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))
