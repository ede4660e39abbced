"""Benchmark suite `attention`: forward + backward time and peak memory vs L per impl.

Each measurement jits grad_{q,k,v} sum(attend(q, k, v) * g) (one forward and one backward
pass, causal self-attention, L = M), reads the compiled memory (temp + argument + output
bytes from `compiled.memory_analysis()`, see `jaxformer.bench.memory_bytes`) and times it
in `repeats` rounds after a warm-up, each round running every (L, impl) once (interleaved: a
drift of the machine's speed reaches every row of a round alike); the median over rounds is
reported, and each round's time kept. An impl whose compiled memory exceeds
`memory_fraction` of the machine's available memory is not run (status says so); the
memory column still reports what it would have needed.
"""

import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.bench import (
  BenchError,
  Suite,
  available_memory_bytes,
  check_choice,
  check_positive,
  memory_bytes,
)
from jaxformer.math.attention import IMPLEMENTATIONS, attend

_GIB = 2**30
DTYPES = ("float32", "bfloat16", "float16")


def _step(impl, *, causal, block_size, window):
  window = window if impl == "sliding_window" else None
  fn = functools.partial(attend, impl=impl, causal=causal, block_size=block_size, window=window)

  def loss(q_BLHK, k_BMHK, v_BMHK, g_BLHK):
    return jnp.sum(fn(q_BLHK, k_BMHK, v_BMHK).astype(jnp.float32) * g_BLHK)

  return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _inputs(L, *, batch, heads, head_dim, dtype, seed=0):
  rng = np.random.default_rng(seed)
  q, k, v, g = rng.standard_normal((4, batch, L, heads, head_dim), np.float32)
  return (*(jnp.asarray(x, dtype) for x in (q, k, v)), jnp.asarray(g))


def run(
  lengths=(1024, 4096),
  impls=IMPLEMENTATIONS,
  heads=1,
  head_dim=64,
  batch=1,
  dtype="float32",
  causal=True,
  block_size=512,
  window=256,
  repeats=3,
  memory_fraction=0.6,
):
  """One row per (L, impl): time_s (median fwd+bwd wall seconds over the rounds), cpu_s
  (median process CPU seconds), times_s and cpu_times_s (per round), peak_bytes and its
  parts, compile_s, status ('ok' or why not run), and time/memory relative to dense at that
  L."""
  unknown = set(impls) - set(IMPLEMENTATIONS)
  if unknown:
    raise BenchError(
      f"impls={tuple(impls)!r}: unknown {sorted(unknown)}; allowed: {IMPLEMENTATIONS}"
    )
  check_positive(
    lengths=lengths,
    heads=heads,
    head_dim=head_dim,
    batch=batch,
    block_size=block_size,
    window=window,
    repeats=repeats,
  )
  check_choice("dtype", dtype, DTYPES)
  if not 0 <= memory_fraction <= 1:
    raise BenchError(f"memory_fraction={memory_fraction!r}: expected a fraction in [0, 1]")
  available = available_memory_bytes()
  budget = None if available is None else memory_fraction * available
  rows, timed = [], []  # timed: (row, compiled, args) of those that run
  for L in lengths:
    args = _inputs(L, batch=batch, heads=heads, head_dim=head_dim, dtype=dtype)
    for impl in impls:
      row = dict(
        impl=impl,
        L=L,
        batch=batch,
        heads=heads,
        head_dim=head_dim,
        dtype=dtype,
        causal=causal,
        block_size=block_size,
        window=window if impl == "sliding_window" else None,
      )
      start = time.perf_counter()
      step = _step(impl, causal=causal, block_size=block_size, window=window)
      compiled = step.lower(*args).compile()
      row["compile_s"] = time.perf_counter() - start
      row.update(memory_bytes(compiled))
      row["peak_MiB"] = row["peak_bytes"] / 2**20
      if budget is not None and row["peak_bytes"] > budget:
        row["status"] = (
          f"skipped: needs {row['peak_bytes'] / _GIB:.1f} GiB > "
          f"{memory_fraction:.0%} of {available / _GIB:.1f} GiB available"
        )
      else:
        row["status"] = "ok"
        timed.append((row, compiled, args))
      rows.append(row)
  _time_in_rounds(timed, repeats)
  _relative_to_dense(rows)
  return rows


def _time_in_rounds(timed, repeats):
  """Times each (row, compiled, args) once per round, `repeats` rounds after one warm-up
  call each: a drift of the machine's speed during the run reaches every (L, impl) of a
  round alike, so a ratio of two of them read within a round (a slope between two L) is
  free of it. Sets time_s / cpu_s (medians over rounds) and times_s / cpu_times_s (per
  round)."""
  from jaxformer.train import metrics

  for _, compiled, args in timed:
    jax.block_until_ready(compiled(*args))
  for row, _, _ in timed:
    row["times_s"], row["cpu_times_s"] = [], []
  for _ in range(repeats):
    for row, compiled, args in timed:
      once = metrics.time_calls(lambda c=compiled, a=args: c(*a), 1)
      row["times_s"].append(once.wall[0])
      row["cpu_times_s"].append(once.cpu[0])
  for row, _, _ in timed:
    row["time_s"] = statistics.median(row["times_s"])
    row["cpu_s"] = statistics.median(row["cpu_times_s"])


def _relative_to_dense(rows):
  dense = {r["L"]: r for r in rows if r["impl"] == "dense"}
  for row in rows:
    ref = dense.get(row["L"])
    if ref is None:
      continue
    row["memory_vs_dense"] = row["peak_bytes"] / ref["peak_bytes"]
    if "time_s" in row and "time_s" in ref:
      row["time_vs_dense"] = row["time_s"] / ref["time_s"]
      row["cpu_vs_dense"] = row["cpu_s"] / ref["cpu_s"]


SUITE = Suite(
  run=run,
  sizes={
    "small": dict(lengths=(256, 1024)),
    "medium": dict(lengths=(1024, 4096)),
    "large": dict(lengths=(1024, 4096, 16384)),
    # the blockwise targets: L = 16384, 1 head of 64, fwd + bwd
    "target": dict(lengths=(4096, 16384), impls=("dense", "blockwise")),
  },
  columns=(
    "impl",
    "L",
    "time_s",
    "cpu_s",
    "peak_MiB",
    "time_vs_dense",
    "cpu_vs_dense",
    "memory_vs_dense",
    "compile_s",
    "status",
  ),
  description="attention fwd+bwd time and compiled peak memory vs L per implementation",
)
