"""Benchmark suites: each measures something and returns rows (one dict per measurement).

A suite is a `Suite`: a `run(**kwargs) -> list[dict]`, named sizes (kwargs presets), the
columns its table shows, and an optional `options` hook that maps command-line values to
run kwargs. `experiments/bench.py` holds the registry {name: Suite}; adding a suite is one
entry there. Helpers here time a jitted function and read its compiled memory.
"""

import dataclasses
import os
import platform
from collections.abc import Callable

import jax


class BenchError(ValueError):
  """A suite argument that cannot be measured; the message starts with it. Raised before any
  work, so `python -m experiments.bench` reports it in one line (exit 2)."""


def check_positive(**values):
  """BenchError naming the first value that is not a positive int (or a non-empty tuple of
  them): a zero length or repeat count fails deep in numpy or divides by zero otherwise."""
  for name, value in values.items():
    items = tuple(value) if isinstance(value, tuple | list) else (value,)
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items)
    if not items or not ok:
      raise BenchError(f"{name}={value!r}: expected positive integers")


def check_choice(name, value, allowed):
  if value not in allowed:
    raise BenchError(f"{name}={value!r}: expected one of {', '.join(map(str, allowed))}")


@dataclasses.dataclass(frozen=True)
class Suite:
  run: Callable[..., list[dict]]  # keyword arguments -> rows
  sizes: dict[str, dict]  # --size NAME -> run kwargs; the first one is the default
  columns: tuple[str, ...]  # row keys the table prints, in order
  description: str = ""


def machine():
  """What the numbers were measured on."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  device = jax.devices()[0]
  return dict(
    backend=jax.default_backend(),
    device=device.device_kind,
    devices=jax.device_count(),
    cpu=cpu,
    cpu_cores=os.cpu_count(),
    jax=jax.__version__,
    python=platform.python_version(),
    # other processes compete for the CPU on a shared machine: read times with this
    load_avg_1m=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
  )


def memory_bytes(compiled):
  """Peak memory estimate of a compiled function from XLA's buffer assignment:
  temp + argument + output - alias bytes (`peak_memory_in_bytes` is not filled on CPU)."""
  ma = compiled.memory_analysis()
  parts = dict(
    temp_bytes=ma.temp_size_in_bytes,
    argument_bytes=ma.argument_size_in_bytes,
    output_bytes=ma.output_size_in_bytes,
  )
  parts["peak_bytes"] = sum(parts.values()) - ma.alias_size_in_bytes
  return parts


def available_memory_bytes():
  """MemAvailable from /proc/meminfo (None where there is none)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def time_compiled(compiled, args, repeats=3):
  """Median wall seconds of `compiled(*args)` over `repeats` runs after one warm-up run, the
  list of wall times, and the median process CPU seconds per run (metrics.time_calls)."""
  from jaxformer.train import metrics

  timed = metrics.time_calls(lambda: compiled(*args), repeats, warmup=True)
  return timed.median, list(timed.wall), timed.median_cpu


def format_table(rows, columns):
  """Plain-text table of `rows` (dicts) restricted to `columns`."""

  def cell(value):
    if isinstance(value, float):
      return f"{value:.4g}"
    return "" if value is None else str(value)

  cells = [[cell(row.get(c)) for c in columns] for row in rows]
  widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
  lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
  lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
  return "\n".join(lines)
