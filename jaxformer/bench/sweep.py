"""Sweep suite: what the experiments' sweep engine (jaxformer.train.sweep) costs per arm.

  python -m experiments.bench sweep                 # the quick sizes of three arms
  python -m experiments.bench sweep --size tiny     # the smoke test's size: seconds
  python -m experiments.bench sweep --set arms="('lstm',)" --set replicas="(1,24)"

Three arms stand for the experiments' quick size (`make run`), fixed so that BENCHMARKS.md's
rows compare across commits (they are the quick arms of the old protocol's fixed_memory and
mlp_memory modules, retired since):
  lstm         rung rnn, one LSTM layer, D = 64, MQAR V = 32 L = 16 K = 2, batch 64 (the
               layer of experiments/s1_fixed_memory.py's rnn_64)
  transformer  rung transformer, 2 layers, 1 head, D = 64, F = 256, the same task and batch
  text_lm      rung mlp_kv, 2 layers, 2 heads, D = F = 64, char-level text of jaxformer's own
               source, L = 32, batch 32

Per arm, one `compile` row: the sweep's three programs (init, train step, eval) at
`compile_replicas` replicas, each timed from trace to compiled executable, cold (a fresh,
empty persistent compilation cache and no program in memory) and warm (the same programs
again, read back from that cache), in wall seconds and in process CPU seconds (all threads;
a shared machine disturbs them less), with the train step's jaxpr equation count and the
size of its optimized HLO text. Then one `step` row per replica count N: the train step on
a fixed batch (best of `repeats` loops of `steps` steps, after one warm-up step), per
program step and per replica-step, in wall and CPU milliseconds; the same program step with
half of the N replicas stopped (as early-stopped replicas are; on a CPU a stopped replica's
step is skipped, so it costs about half); and the achieved FLOP/s
(jaxformer.train.metrics' flops_per_token x tokens x N / wall step time) against the
measured float32 matmul peak. With `profile=True` each step row also says where a program
step goes: the same step traced (`jax.profiler.trace`), each XLA operation's time summed by
kind (`op_shares`: products, copies and transposes, the rest), read as shares because the
tracer's own cost per operation inflates the traced wall time.
"""

import collections
import glob
import gzip
import json
import os
import shutil
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.compilation_cache import compilation_cache

from jaxformer import data
from jaxformer.bench import BenchError, Suite, check_positive
from jaxformer.train import config as config_lib
from jaxformer.train import metrics, program, sweep

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MQAR = "mqar:vocab_size=32,seq_len=16,num_kv_pairs=2,num_examples=20000,num_test_examples=512"
TEXT = os.path.join(REPO_ROOT, "jaxformer", "**", "*.py")

# name -> (rung, model fields, training fields, task); the quick sizes named in the docstring
ARMS = {
  "lstm": (
    "rnn",
    dict(cell="lstm", num_layers=1, d_model=64),
    dict(batch_size=64, learning_rate=1e-2),
    MQAR,
  ),
  "transformer": (
    "transformer",
    dict(num_layers=2, num_heads=1, d_model=64, d_ff=256),
    dict(batch_size=64, learning_rate=3e-3),
    MQAR,
  ),
  "text_lm": (
    "mlp_kv",
    dict(num_layers=2, num_heads=2, d_model=64, d_ff=64, use_bias=True, norm="pre"),
    dict(batch_size=32, learning_rate=3e-3),
    f"text:path={TEXT},level=char,seq_len=32,stride=16",
  ),
}
# The smoke test's size: the same arms at width 8, batch 4, a short task.
TINY = dict(d_model=8, d_ff=16)
TINY_MQAR = "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2,num_examples=64,num_test_examples=16"
TINY_TEXT = os.path.join(REPO_ROOT, "jaxformer", "math", "*.py")


def config(arm, tiny=False, total_steps=300):
  """The training config of `arm` (resolved: sized for its task) and its train dataset;
  `total_steps` is its step budget, which picks the XLA options (sweep.compiler_options)."""
  if arm not in ARMS:
    raise BenchError(f"arms: {arm!r} is not one of {', '.join(ARMS)}")
  rung, fields, train, task = ARMS[arm]
  if tiny:
    fields = fields | {k: v for k, v in TINY.items() if k in fields}
    train = train | {"batch_size": 4}
    task = TINY_MQAR if task == MQAR else f"text:path={TINY_TEXT},level=char,seq_len=8,stride=8"
  c = config_lib.get_config(rung)
  c.task = task
  c.peak_flops_per_device = 1e11  # the suite measures its own peak
  c.update(
    total_steps=total_steps, warmup_steps=50, eval_every=100, early_stop_accuracy=0.99, **train
  )
  with c.model.unlocked():
    c.model.update(fields)
  program.check_config(c)
  dataset = data.get_dataset(c.task, "train", c.data_dir)
  return program.resolve(c, dataset), dataset


def _fresh_cache():
  """Points JAX's persistent compilation cache at a new empty directory; returns it."""
  path = tempfile.mkdtemp(prefix="jaxformer_sweep_bench_")
  compilation_cache.reset_cache()
  compilation_cache.set_cache_dir(path)
  return path


def _restore_cache(saved):
  compilation_cache.reset_cache()
  for name, value in saved.items():
    jax.config.update(name, value)


def _cache_settings():
  names = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
  )
  return {name: getattr(jax.config, name) for name in names}


def _compile(c, n, shape, chunk):
  """(Programs compiled from nothing in memory (the persistent cache as set), the process
  CPU seconds that took: all threads; on a shared machine steadier than wall time)."""
  sweep.clear_compiled()
  jax.clear_caches()
  start = time.process_time()
  compiled, _ = sweep.programs(c, n, shape, shape, chunk)
  return compiled, time.process_time() - start


def _program_sizes(n, shape, compiled):
  """(jaxpr equations of the vmapped train step, characters of its optimized HLO text)."""
  state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), compiled.state)
  token = jax.ShapeDtypeStruct((n, *shape), jnp.int32)
  hyper = {k: jax.ShapeDtypeStruct((n,), jnp.float32) for k in ("learning_rate", "weight_decay")}
  batch = {"inputs": token, "targets": token, "mask": token}
  active = jax.ShapeDtypeStruct((n,), jnp.bool_)
  jaxpr = jax.make_jaxpr(compiled.step_fn)(state, batch, hyper, active)
  return _count_eqns(jaxpr.jaxpr), len(compiled.train.as_text() or "")


def _count_eqns(jaxpr):
  """Equations of a jaxpr, those of its sub-jaxprs (scan, cond, custom_vjp bodies) included."""
  total = 0
  for eqn in jaxpr.eqns:
    total += 1
    for param in eqn.params.values():
      for sub in param if isinstance(param, tuple | list) else (param,):
        inner = getattr(sub, "jaxpr", None)
        if inner is not None:
          total += _count_eqns(getattr(inner, "jaxpr", inner))
  return total


def _state(compiled, n, c):
  put = (lambda x: jax.device_put(x, compiled.sharding)) if compiled.sharding else jnp.asarray
  seeds = jnp.arange(n, dtype=jnp.uint32)
  keys = put(jax.vmap(jax.random.key)(seeds))
  rates = np.geomspace(1e-3, 1e-2, n).astype(np.float32) if n > 1 else np.full(1, 3e-3, np.float32)
  hyper = {"learning_rate": put(rates), "weight_decay": put(np.full(n, 0.1, np.float32))}
  return compiled.init(keys, hyper), hyper, put


def _batch(c, n, shape, put):
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, c.model.vocab_size, (n, shape[0], shape[1] + 1), dtype=np.int32)
  batch = {"inputs": tokens[..., :-1], "targets": tokens[..., 1:]}
  batch["mask"] = np.ones(batch["inputs"].shape, np.int32)
  return {k: put(v) for k, v in batch.items()}


def _fixed_step(compiled, c, n, shape, running=None):
  """(state after one warm-up step, batch, hyper, active) of the train step on one fixed
  batch; `running` replicas are active (None: all), the others stopped as an early-stopped
  replica is."""
  state, hyper, put = _state(compiled, n, c)
  batch = _batch(c, n, shape, put)
  active = put(np.arange(n) < (n if running is None else running))
  state = compiled.train(state, batch, hyper, active)[0]
  return jax.block_until_ready(state), batch, hyper, active


def step_seconds(compiled, c, n, shape, steps, repeats, running=None):
  """Best (wall, process CPU) seconds per program step of the train step on one fixed batch,
  each the best of the same `repeats` loops of `steps` steps; `running` replicas are active
  (None: all), the others stopped as an early-stopped replica is."""
  state, batch, hyper, active = _fixed_step(compiled, c, n, shape, running)
  box = {"state": state}

  def window():
    s = box["state"]
    for _ in range(steps):
      s, loss, _ = compiled.train(s, batch, hyper, active)
    box["state"] = s
    return loss

  timed = metrics.time_calls(window, repeats)
  return timed.best / steps, timed.best_cpu / steps


# Trace events that are not one XLA operation of the program: the runtime's own spans (the
# executor, argument handling, waits on its thread pool), Python frames ("$..."), and the
# control-flow operations whose bodies' operations are traced on their own
_NOT_AN_OP = (
  "$",
  "ThunkExecutor",
  "PjitFunction",
  "CommonPjRt",
  "ParseArguments",
  "Handle inputs",
  "Allocate",
  "SlinkyThreadPool",
  "Latent",
  "while",
  "cond",
  "call",
)
OP_KINDS = ("products", "copies", "other")


def op_kind(name):
  """An XLA operation's kind from its name in a CPU trace: 'products' (YNNPACK fusions, dots,
  convolutions), 'copies' (copies and transposes), 'other' (elementwise and reductions); None
  for an event that is not one operation (`_NOT_AN_OP`)."""
  if name.startswith(_NOT_AN_OP):
    return None
  if "ynn" in name or name.startswith(("dot", "convolution")):
    return "products"
  if name.startswith(("copy", "transpose")):
    return "copies"
  return "other"


def op_shares(events):
  """{'<kind>_share': share of the summed operation time for each of OP_KINDS, 'ops': distinct
  operations} of trace events (Chrome trace dicts: 'ph' 'X' spans with 'name' and 'dur')."""
  kinds, names = collections.Counter(), set()
  for e in events:
    kind = op_kind(e.get("name", "")) if e.get("ph") == "X" and "dur" in e else None
    if kind is not None:
      kinds[kind] += e["dur"]
      names.add(e["name"])
  total = sum(kinds.values())
  if not total:
    raise BenchError("profile: the trace holds no XLA operation (is this a CPU backend?)")
  return {f"{k}_share": kinds[k] / total for k in OP_KINDS} | {"ops": len(names)}


def traced_shares(compiled, c, n, shape, steps):
  """op_shares of `steps` train steps on one fixed batch under jax.profiler.trace."""
  state, batch, hyper, active = _fixed_step(compiled, c, n, shape)  # warm-up: outside the trace
  directory = tempfile.mkdtemp(prefix="jaxformer_sweep_profile_")
  try:
    with jax.profiler.trace(directory, create_perfetto_trace=True):
      for _ in range(steps):
        state = compiled.train(state, batch, hyper, active)[0]
      jax.block_until_ready(state)
    (path,) = glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"), recursive=True)
    with gzip.open(path) as f:
      trace = json.load(f)
  finally:
    shutil.rmtree(directory, ignore_errors=True)
  return op_shares(trace["traceEvents"] if isinstance(trace, dict) else trace)


def run(
  arms=tuple(ARMS),
  replicas=(1, 3, 12, 24),
  compile_replicas=3,
  steps=10,
  repeats=3,
  tiny=False,
  total_steps=300,
  chunk=None,
  profile=False,
):
  """A compile row per arm, a step row per (arm, replica count). `total_steps`: the arms'
  step budget, 300 as at the quick sizes; above sweep.FAST_COMPILE_STEPS the programs compile
  with XLA's default options, as at the full sizes (`--set total_steps=3000`). `chunk`:
  replicas per vmapped group (None: the platform's, sweep.programs: a CPU's one at a time, an
  accelerator's one group where it fits; a count, or 'all' for one vmap of every replica:
  `--set chunk=\"'all'\"`). Each row records the group its programs ran in. `profile`: each
  step row also holds op_shares of `steps` traced steps (a CPU's operation names)."""
  check_positive(replicas=replicas, compile_replicas=compile_replicas, steps=steps)
  check_positive(repeats=repeats, total_steps=total_steps)
  try:
    sweep.replica_chunk(jax.default_backend(), chunk)
  except ValueError as e:
    raise BenchError(str(e)) from None
  if not arms or isinstance(arms, str):
    raise BenchError(f"arms={arms!r}: expected a tuple of names from {', '.join(ARMS)}")
  configs = {arm: config(arm, tiny, total_steps)[0] for arm in arms}  # BenchError before any work
  peak = metrics.measure_matmul_peak()
  rows = []
  saved = _cache_settings()
  caches = []  # the cold runs' cache directories, removed at the end
  try:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    for arm, c in configs.items():
      shape = (c.batch_size, c.model.max_len)
      caches.append(_fresh_cache())
      cold, cold_cpu = _compile(c, compile_replicas, shape, chunk)
      warm, warm_cpu = _compile(c, compile_replicas, shape, chunk)
      equations, hlo_bytes = _program_sizes(compile_replicas, shape, cold)
      row = dict(arm=arm, kind="compile", rung=c.rung, replicas=compile_replicas, chunk=cold.chunk)
      row["fast_compile"] = (
        sweep.compiler_options(c, jax.default_backend())["train_step"] is not None
      )
      for name, programs in (("cold", cold), ("warm", warm)):
        for part, seconds in programs.seconds.items():
          row[f"{name}_{part}_s"] = seconds
          row[f"{name}_{part}_cpu_s"] = programs.cpu_seconds[part]
        row[f"{name}_s"] = sum(programs.seconds.values())
      row.update(cold_cpu_s=cold_cpu, warm_cpu_s=warm_cpu)
      row.update(train_jaxpr_eqns=equations, train_hlo_chars=hlo_bytes)
      row["load_avg_1m"] = os.getloadavg()[0]
      rows.append(row)
      params = cold.flat.unflatten_stacked(
        {g: np.empty((1, x.shape[1]), np.int8) for g, x in cold.state["params"].items()}
      )
      flops_token = metrics.flops_per_token(
        c.rung, c.model, shape[1], metrics.matmul_param_count(params, c.model.tie_embeddings)
      )
      for n in replicas:
        start = time.perf_counter()
        compiled, _ = sweep.programs(c, n, shape, shape, chunk)
        compile_s = time.perf_counter() - start
        step_s, step_cpu_s = step_seconds(compiled, c, n, shape, steps, repeats)
        # half of them stopped (early stop): what a sweep pays once its fast replicas are done
        half_s, half_cpu_s = (
          step_seconds(compiled, c, n, shape, steps, repeats, n // 2) if n > 1 else (None, None)
        )
        flops = flops_token * shape[0] * shape[1] * n
        shares = traced_shares(compiled, c, n, shape, steps) if profile else {}
        rows.append(
          shares
          | dict(
            arm=arm,
            kind="step",
            rung=c.rung,
            replicas=n,
            chunk=compiled.chunk,
            compile_s=compile_s,
            step_ms=step_s * 1e3,
            replica_step_ms=step_s * 1e3 / n,
            step_cpu_ms=step_cpu_s * 1e3,
            replica_step_cpu_ms=step_cpu_s * 1e3 / n,
            half_stopped_step_ms=None if half_s is None else half_s * 1e3,
            half_stopped_step_cpu_ms=None if half_cpu_s is None else half_cpu_s * 1e3,
            flops_per_replica_step=flops / n,
            gflops=flops / step_s / 1e9,
            peak_gflops=peak / 1e9,
            fraction_of_peak=flops / step_s / peak,
            load_avg_1m=os.getloadavg()[0],
          )
        )
  finally:
    for path in caches:
      shutil.rmtree(path, ignore_errors=True)
    _restore_cache(saved)
    sweep.clear_compiled()
  return rows


SUITE = Suite(
  run=run,
  sizes={
    "quick": dict(),
    "tiny": dict(
      arms=("lstm",), replicas=(1, 2), compile_replicas=2, steps=2, repeats=1, tiny=True
    ),
  },
  columns=(
    "arm",
    "kind",
    "replicas",
    "chunk",
    "cold_init_s",
    "cold_train_s",
    "cold_eval_s",
    "cold_s",
    "cold_cpu_s",
    "warm_s",
    "warm_cpu_s",
    "train_jaxpr_eqns",
    "train_hlo_chars",
    "step_ms",
    "replica_step_ms",
    "replica_step_cpu_ms",
    "half_stopped_step_cpu_ms",
    "gflops",
    "fraction_of_peak",
    "ops",
    "products_share",
    "copies_share",
    "other_share",
    "load_avg_1m",
  ),
  description="the sweep engine per arm: cold / warm compile of its programs, ms per "
  "replica-step at N replicas, a step with half of them stopped, achieved FLOP/s against the "
  "matmul peak",
)
