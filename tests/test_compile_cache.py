"""The persistent compilation cache: where it lives, how to turn it off, and that a second
process reads a program the first one compiled (jax 0.10 on CPU)."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp

from jaxformer import compile_cache

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_directory_default_override_and_off(monkeypatch):
  monkeypatch.delenv(compile_cache.JAX_ENV, raising=False)
  monkeypatch.delenv(compile_cache.ENV, raising=False)
  home = os.path.expanduser("~")
  assert compile_cache.directory() == os.path.join(home, ".cache", "jaxformer", "jax")
  monkeypatch.setenv(compile_cache.ENV, "~/elsewhere")
  assert compile_cache.directory() == os.path.join(home, "elsewhere")
  for off in ("off", "0", "", "None"):
    monkeypatch.setenv(compile_cache.ENV, off)
    assert compile_cache.directory() is None, off
  monkeypatch.setenv(compile_cache.JAX_ENV, "/tmp/jax-own")  # JAX's own variable wins
  assert compile_cache.directory() == "/tmp/jax-own"


def test_libtpu_compiler_fibers_get_a_larger_stack_unless_the_user_set_one(monkeypatch):
  monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
  assert compile_cache.libtpu_flags() == compile_cache.LIBTPU_FIBER_STACK
  assert compile_cache.libtpu_flags() == compile_cache.LIBTPU_FIBER_STACK  # added once
  monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_a=1")
  assert compile_cache.libtpu_flags() == f"--xla_tpu_a=1 {compile_cache.LIBTPU_FIBER_STACK}"
  mine = "--fibers_default_thread_stack_size=1048576 --xla_tpu_a=1"
  monkeypatch.setenv("LIBTPU_INIT_ARGS", mine)
  assert compile_cache.libtpu_flags() == mine  # the user's own value is left alone


_PROGRAM = """
import json, jax, jax.numpy as jnp
from jaxformer import compile_cache
path = compile_cache.enable()
def f(x):
  for _ in range(40):
    x = jnp.tanh(x @ x.T) + x
  return x.sum()
jax.jit(jax.grad(f))(jnp.ones((64, 64))).block_until_ready()
print(json.dumps({"dir": path, **compile_cache.counts()}))
"""


def _run(env):
  out = subprocess.run(
    [sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def _cache_env(path):
  """This environment with jaxformer's cache at `path`, JAX's own cache settings removed, and
  every program written, however fast it compiled on this machine (JAX's own override)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT")}
  env.pop(compile_cache.JAX_ENV, None)
  env.update(PYTHONPATH=REPO, JAX_PLATFORMS="cpu", **{compile_cache.ENV: str(path)})
  env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  return env


def test_a_second_process_reads_what_the_first_compiled(tmp_path):
  env = _cache_env(tmp_path)
  first, second = _run(env), _run(env)
  assert first["dir"] == second["dir"] == str(tmp_path)
  assert first["cache_hits"] == 0 and first["cache_misses"] >= 1
  assert second["cache_hits"] >= 1  # the gradient program, compiled once, read back
  assert any(name.endswith("-cache") for name in os.listdir(tmp_path))
  env[compile_cache.ENV] = "off"
  assert _run(env) == {"dir": None, "cache_hits": 0, "cache_misses": 0}


_DISABLED = """
import json, os, sys, jax, jax.numpy as jnp
from jaxformer import compile_cache
compile_cache.enable()
def files():
  return len(os.listdir(sys.argv[1]))
jax.jit(lambda x: jnp.tanh(x) + 1)(jnp.ones(3)).block_until_ready()
first = files()
with compile_cache.disabled():
  jax.jit(lambda x: jnp.sin(x) * 3)(jnp.ones(5)).block_until_ready()
within = files()
jax.jit(lambda x: jnp.cos(x) - 2)(jnp.ones(7)).block_until_ready()
print(json.dumps({"first": first, "within": within, "after": files()}))
"""


def test_disabled_writes_nothing_within_and_the_cache_works_after(tmp_path):
  # JAX reads jax_enable_compilation_cache once, at its first compile: turning it off later
  # must still stop the writes (and the reads: compile_only's HLO dump needs a real compile)
  env = _cache_env(tmp_path)
  env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
  out = subprocess.run(
    [sys.executable, "-c", _DISABLED, str(tmp_path)],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 0, out.stderr[-2000:]
  counts = json.loads(out.stdout.strip().splitlines()[-1])
  assert counts["first"] >= 1  # the cache is on and writes
  assert counts["within"] == counts["first"]
  assert counts["after"] > counts["within"]


def test_compile_seconds_add_up_each_compile_and_nothing_for_a_cached_call():
  compile_cache.enable()
  f = jax.jit(lambda x: jnp.sin(x) * 3.0 + x)
  before = compile_cache.compile_seconds()
  f(jnp.arange(7.0)).block_until_ready()
  compiled = compile_cache.compile_seconds()
  assert compiled > before  # traced, lowered and compiled
  f(jnp.arange(7.0)).block_until_ready()
  assert compile_cache.compile_seconds() == compiled  # the same program: nothing compiles


def test_compile_seconds_count_a_nested_trace_once(monkeypatch):
  monkeypatch.setattr(compile_cache, "_SPANS", [])
  monkeypatch.setattr(compile_cache, "_COMPILING", {"seconds": 0.0})
  trace, xla = compile_cache.COMPILE_EVENTS[0], compile_cache.COMPILE_EVENTS[2]
  # events as they end: two inner traces inside an outer one (0-5 s), then its XLA compile
  compile_cache._time(trace, 1.0, now=2.0)  # [1, 2]
  compile_cache._time(trace, 1.0, now=4.0)  # [3, 4]
  assert compile_cache.compile_seconds() == 2.0
  compile_cache._time(trace, 5.0, now=5.0)  # [0, 5]: holds both
  assert compile_cache.compile_seconds() == 5.0
  compile_cache._time(xla, 2.0, now=8.0)  # [6, 8]
  compile_cache._time("/jax/some/other_duration", 100.0, now=9.0)  # not compiling
  assert compile_cache.compile_seconds() == 7.0
