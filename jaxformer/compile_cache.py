"""JAX's persistent compilation cache for jaxformer's entry points, benchmarks and tests.

  from jaxformer import compile_cache
  compile_cache.enable()        # before the first jit compiles; returns the directory or None
  with compile_cache.disabled(): ...   # compiles within read and write nothing

A compiled XLA program is written to disk and read back by the next process that compiles the
same program (same HLO, jax version, backend and flags), so a second `make run`, `make test`
or benchmark skips most of its compilation. Where (first match):

  JAX_COMPILATION_CACHE_DIR    JAX's own variable: left to JAX, untouched (tests set it)
  JAXFORMER_COMPILATION_CACHE  a directory, or `off` / `0` / empty to disable the cache
  ~/.cache/jaxformer/jax       the default (delete it to start cold)

`enable` also gives libtpu's compiler fibers a larger stack (LIBTPU_FIBER_STACK, in
LIBTPU_INIT_ARGS unless that already names the flag; read when libtpu loads, so before the
first TPU compile): at libtpu 0.0.42.1's default, heads' accel sweep (an H = 1, r = 256 scorer)
recursed past a fiber's stack in the convolution-window search and crashed the process
(SIGSEGV STACK OVERFLOW in MakeConvWindows); with 8 MiB it compiles (BENCHMARKS.md).

Programs that compile in under MIN_COMPILE_SECS are not written (JAX's own default is 1 s;
a CPU run compiles many programs of 0.2-1 s: measured in BENCHMARKS.md). JAX's
JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, when set, wins. The cache is not size-bounded
(JAX's LRU eviction needs the `filelock` package): it grows by the programs compiled, a few
MB each, and is keyed by jax version, so upgrades start a new set of files.
"""

import contextlib
import os
import time

import jax
from jax.experimental.compilation_cache import compilation_cache

ENV = "JAXFORMER_COMPILATION_CACHE"
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"
DEFAULT = os.path.join("~", ".cache", "jaxformer", "jax")
MIN_COMPILE_SECS = 0.2
_OFF = ("", "0", "off", "none", "false")
LIBTPU_FIBER_STACK = "--fibers_default_thread_stack_size=8388608"  # bytes: 8 MiB per fiber


def libtpu_flags():
  """Adds LIBTPU_FIBER_STACK to LIBTPU_INIT_ARGS unless it sets that flag already (a user's
  own value wins); returns the variable. Without effect once libtpu has loaded, and on a
  machine without libtpu."""
  args = os.environ.get("LIBTPU_INIT_ARGS", "")
  name = LIBTPU_FIBER_STACK.split("=")[0]
  if name + "=" not in args:
    os.environ["LIBTPU_INIT_ARGS"] = f"{args} {LIBTPU_FIBER_STACK}".strip()
  return os.environ["LIBTPU_INIT_ARGS"]


def directory():
  """The cache directory `enable` would use, or None when the cache is off."""
  if os.environ.get(JAX_ENV):
    return os.environ[JAX_ENV]
  path = os.environ.get(ENV, DEFAULT)
  if path.strip().lower() in _OFF:
    return None
  return os.path.abspath(os.path.expanduser(path))


_COUNTS = {"cache_hits": 0, "cache_misses": 0}
# JAX's duration events of compiling a program: tracing to a jaxpr, lowering it, XLA's compile
# (a persistent-cache hit times its read instead)
COMPILE_EVENTS = (
  "/jax/core/compile/jaxpr_trace_duration",
  "/jax/core/compile/jaxpr_to_mlir_module_duration",
  "/jax/core/compile/backend_compile_duration",
)
# The events' time spans, merged: a jit traced inside another's trace reports its own event
# within the outer one's span, and is counted once. Events arrive as they end, so the spans an
# event overlaps are the last ones of the (sorted, disjoint) list.
_SPANS = []  # [start, end] each
_COMPILING = {"seconds": 0.0}  # the spans' total


def _count(event, **kwargs):
  name = event.rsplit("/", 1)[-1]
  if event.startswith("/jax/compilation_cache/") and name in _COUNTS:
    _COUNTS[name] += 1


def _time(event, duration, now=None, **kwargs):
  if event not in COMPILE_EVENTS:
    return
  end = time.perf_counter() if now is None else now
  start = end - duration
  while _SPANS and _SPANS[-1][1] >= start:  # nested in this event's span, or overlapping it
    s, e = _SPANS.pop()
    _COMPILING["seconds"] -= e - s
    start, end = min(start, s), max(end, e)
  _SPANS.append((start, end))
  _COMPILING["seconds"] += end - start


def compile_seconds():
  """Seconds this process has spent compiling since `enable`: the time spans of every jit's
  tracing, lowering and XLA compile, whatever called it, nested traces counted once; whether
  or not the persistent cache is on."""
  return _COMPILING["seconds"]


def counts():
  """{'cache_hits': n, 'cache_misses': m}: compilations read from / missing in the cache
  since `enable` (a program under MIN_COMPILE_SECS is a miss that is not written)."""
  return dict(_COUNTS)


def enable():
  """Turns the persistent cache on (see the module docstring); returns its directory, or
  None when it is off. Call it before the first compilation: JAX reads the setting once."""
  libtpu_flags()
  path = directory()
  if path is not None and not getattr(enable, "listening", False):
    jax.monitoring.register_event_listener(_count)
    jax.monitoring.register_event_duration_secs_listener(_time)
    enable.listening = True
  if path is None or os.environ.get(JAX_ENV):
    return path  # off, or JAX configured it from its own variable already
  jax.config.update("jax_compilation_cache_dir", path)
  if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
  return path


@contextlib.contextmanager
def disabled():
  """The persistent cache off within the block, as it was after it: nothing read, nothing
  written. JAX decides once per process whether the cache is in use, at its first compile, so
  `jax_enable_compilation_cache` alone changes nothing after that: the decision is reset on
  the way in and on the way out."""
  was = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  compilation_cache.reset_cache()
  try:
    yield
  finally:
    jax.config.update("jax_enable_compilation_cache", was)
    compilation_cache.reset_cache()
