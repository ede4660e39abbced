"""What attention kernels keep in memory as L grows, from XLA's compiled programs.

  compiled_bytes(impl, L)      temp and peak bytes of one causal self-attention forward +
                               backward pass (grad of sum(attend(q, k, v) * g) in q, k, v)
  slope(lengths, values)       the log-log slope between the two largest L: the growth
                               exponent where the leading term dominates
  growth(impl, lengths)        slope of the compiled temp bytes against L

Compile only: nothing runs, and the numbers are XLA's buffer assignment (deterministic for a
program on a backend), not a timing. Temp bytes leave out the arguments and the gradients
(q, k, v, g and their cotangents: 4 + 3 arrays of L x K each), which every kernel holds alike.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxformer import bench
from jaxformer.math.attention import attend


def compiled_bytes(impl, length, *, head_dim=64, window=256, block_size=128):
  """{temp_bytes, peak_bytes} of the fwd+bwd program of `impl` at L = `length` (1 head,
  batch 1, float32); `window` only for impl 'sliding_window'."""
  fn = functools.partial(attend, impl=impl, causal=True, block_size=block_size,
                         window=window if impl == "sliding_window" else None)  # fmt: skip

  def loss(q_BLHK, k_BLHK, v_BLHK, g_BLHK):
    return jnp.sum(fn(q_BLHK, k_BLHK, v_BLHK) * g_BLHK)

  x = jax.ShapeDtypeStruct((1, length, 1, head_dim), jnp.float32)
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x, x).compile()
  parts = bench.memory_bytes(compiled)
  return {"temp_bytes": int(parts["temp_bytes"]), "peak_bytes": int(parts["peak_bytes"])}


def slope(lengths, values):
  """log-log slope between the two largest lengths."""
  (l1, v1), (l2, v2) = sorted(zip(lengths, values, strict=True))[-2:]
  return float(np.log(v2 / v1) / np.log(l2 / l1))


def growth(impl, lengths, **kw):
  """(slope of temp bytes against L, {L: temp bytes})."""
  temp = {L: compiled_bytes(impl, L, **kw)["temp_bytes"] for L in lengths}
  return slope(list(temp), list(temp.values())), temp
