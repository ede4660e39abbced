"""The main job: every design-pressure experiment, one report.

  python -m experiments.run_all --workdir runs/ladder --jobs 2     # `make run`: size quick
  python -m experiments.run_all --size full --workdir runs/full    # the full grids
  python -m experiments.run_all --only fixed_memory,cache --size tiny
  python -m experiments.fixed_memory --workdir runs/fixed_memory   # one experiment alone
  python -m experiments.heads --size tiny --config.confirmatory_seeds='(0,)'  # overridden

Sizes: tiny (the tests: seconds), quick (`make run`: budget 10 minutes on 2 CPU cores for
all of them; 3 confirmatory + 1 exploratory seeds per trained arm, one learning rate, no
budget growth, so a model still learning is UNRESOLVED), full (the capacity grids, 5 + 2
seeds, the full learning-rate grid, budgets growing to their caps: 30 minutes per experiment
on 2 CPU cores), accel (one GPU or TPU host).

Writes <workdir>/report.md, <workdir>/results.json and the plots beside them, rewritten after
each experiment. Verdicts: SUPPORTED, REFUTED, UNRESOLVED (e.g. a model still learning at its
step cap: an honest verdict at quick), INCONCLUSIVE (a control failed, or the falsification arm
was accepted); the summary prints each experiment's plateau count and what its verdict rests
on. An experiment that crashes is reported as UNRESOLVED with its error and the others still
run; the exit code is 1 if any crashed. Seeds are fixed, so a rerun gives the same verdicts (up
to timing measurements, which the report marks as such). One experiment alone takes
`--config.FIELD=VALUE` overrides of its config at the size; its results record that the
config is not the registered design's (`config_as_registered`).
"""

import concurrent.futures
import gzip
import importlib
import json
import multiprocessing
import os
import sys
import time
import traceback

from absl import flags

from experiments import cli, protocol, report
from experiments.engine import catalog as declared
from experiments.engine import declare, page, registry
from experiments.engine import run as engine_run
from jaxformer import compile_cache

EXPERIMENTS = (
  "fixed_memory",
  "parallelism",
  "cache",
  "heads",
  "mlp_memory",
  "beyond",
  "skips",
)
SIZES = protocol.SIZES
# Experiments whose criteria read time on the CPU: with several at once they run after the
# others, alone, so that no neighbour's load enters their timings (beyond's quick
# sliding-window CPU-time slope read 0.97-1.07 alone and 1.27-1.48 beside another worker,
# against the 1.2 it allows: BENCHMARKS.md, `make run` at a81fe15)
ALONE = ("beyond",)


def run_declared(names, size, workdir):
  """The declared experiments (experiments/engine/) at `size`, one after another; a size not
  registered yet (being sized) is skipped with a line. One progress line per trained unit;
  each step's detail goes to <workdir>/<name>/train.log. Returns their results (dicts)."""
  out = []
  for name in names:
    experiment_ = declared.load(name)
    if size not in experiment_.sizes or not registry.versions(experiment_, size):
      print(f"  {name}: no registered {size} design yet (being sized): skipped", flush=True)
      continue
    folder = os.path.join(workdir, name)
    os.makedirs(folder, exist_ok=True)
    try:
      with open(os.path.join(folder, "train.log"), "a") as detail:
        out.append(engine_run.run(
          experiment_, size, folder, log=lambda t, f=detail: print(t, file=f, flush=True),
          progress=lambda t: print(f"  {t}", flush=True)))  # fmt: skip
    except (declare.DesignError, OSError, ValueError) as e:
      print(f"  {name}: did not run: {e}", flush=True)
  return out


def experiment(name, module_path=None):
  """The module of experiment `name`, one of EXPERIMENTS: experiments.<name>, or the module
  `module_path` a Python caller names in its place (the tests' stand-ins; never from the
  command line). Nothing else is imported."""
  if name not in EXPERIMENTS:
    raise ValueError(f"experiment={name!r}: expected one of {', '.join(EXPERIMENTS)}")
  return importlib.import_module(module_path or f"experiments.{name}")


def run_one(module, size, workdir, config=None):
  """Runs one experiment module (at `config`, default its config at `size`); a crash becomes
  an UNRESOLVED result that names the error."""
  start, cpu, compiling = time.time(), time.process_time(), compile_cache.compile_seconds()
  try:
    import jax

    print(f"  {module.NAME}: on {jax.local_device_count()} {jax.default_backend()} device(s)")
    config = module.get_config(size) if config is None else config
    result = protocol.run(module, config, workdir, size)
  except Exception as e:  # report it and keep going: nothing else is lost
    traceback.print_exc()
    result = crashed(module, size, e)
  result.seconds = time.time() - start
  result.cpu_seconds = time.process_time() - cpu
  result.compile_seconds = compile_cache.compile_seconds() - compiling
  result.size = size
  return result


def crashed(module, size, error):
  """The UNRESOLVED result of an experiment that raised `error` instead of measuring."""
  return report.Result(
    experiment=module.NAME,
    claim=module.CLAIM,
    setup=f"size={size}",
    criteria=[
      report.Criterion(
        f"ran to completion (crashed: {type(error).__name__}: {error})",
        verdict=report.UNRESOLVED,
      )
    ],
    metrics={"error": f"{type(error).__name__}: {error}"},
    crashed=True,
    size=size,
  )


class _Prefixed:
  """A text stream that starts every line written through it with `prefix` (a worker's
  progress lines stay readable when two experiments print at once)."""

  def __init__(self, stream, prefix):
    self.stream, self.prefix, self.at_start = stream, prefix, True

  def write(self, text):
    for line in text.splitlines(keepends=True):
      self.stream.write((self.prefix if self.at_start else "") + line)
      self.at_start = line.endswith("\n")
    return len(text)

  def flush(self):
    self.stream.flush()


def core_sets(jobs):
  """The cores this process may run on, dealt into `jobs` disjoint sets (cores 0 2 4 ... and
  1 3 5 ... for two jobs); None when there are fewer cores than jobs or the platform cannot
  pin a process to cores."""
  if not hasattr(os, "sched_setaffinity"):
    return None
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < jobs:
    return None
  return [cores[i::jobs] for i in range(jobs)]


def _pin_to_cores(sets):
  """A worker's initializer: takes one set of cores from the queue `sets` and keeps this
  process on them, before JAX sizes its thread pools from the cores it may use."""
  os.sched_setaffinity(0, sets.get())


def _worker(name, size, workdir, module_path=None):
  """One experiment in a worker process (the module at `module_path` when given, else
  experiment `name`): its lines are prefixed with its name."""
  sys.stdout = _Prefixed(sys.__stdout__, f"{name}| ")
  sys.stderr = _Prefixed(sys.__stderr__, f"{name}| ")
  compile_cache.enable()
  module = experiment(name, module_path)
  return run_one(module, size, workdir)


def longest_first(names, size, results_dir="results"):
  """`names` ordered by the wall time each took at `size` in `results_dir` (the committed
  results), longest first, the unmeasured ones first of all; ties keep their order. Started in
  this order, parallel workers finish together instead of waiting on one long tail."""

  def seconds(name):
    path = os.path.join(results_dir, f"{name}_{size}.json.gz")
    try:
      with gzip.open(path, "rt") as f:
        return float(json.load(f)["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
      return float("inf")

  return sorted(names, key=lambda n: -seconds(n))


def run_parallel(names, size, workdir, jobs, on_result, module_paths=None):
  """Runs experiments `names` in `jobs` worker processes (spawned: each its own JAX runtime),
  the longest first; calls on_result(name, result) as each finishes; returns the results in the
  order of `names`. `module_paths` maps a name to the module to import instead of
  experiments.<name> (the tests' declared stand-ins). XLA compiles on one core, so one
  experiment alone leaves a core idle while it compiles; in `make run` at two workers each
  experiment used about one core (BENCHMARKS.md). Each worker keeps to its own share of the
  cores (`core_sets`): unpinned, two workers' XLA thread pools each sized for every core and
  contended for both, which cost about 13% more CPU time and wall time (BENCHMARKS.md, `make
  run` workers pinned to cores). Workers run on the CPU unless JAX_PLATFORMS is set."""
  context = multiprocessing.get_context("spawn")
  jobs = min(jobs, len(names))
  sets = core_sets(jobs)
  pinning = {}
  if sets is not None:
    queue = context.SimpleQueue()
    for cores in sets:
      queue.put(cores)
    pinning = {"initializer": _pin_to_cores, "initargs": (queue,)}
  done = {}
  # Two processes cannot share one accelerator (a TPU is held by one process, a GPU's memory
  # preallocated by the first), so workers run on the CPU unless JAX_PLATFORMS says otherwise
  # (spawned workers read this process's environment).
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, **pinning) as pool:
    futures = {
      pool.submit(_worker, name, size, workdir, (module_paths or {}).get(name)): name
      for name in longest_first(names, size)
    }
    for future in concurrent.futures.as_completed(futures):
      name = futures[future]
      try:
        done[name] = future.result()
      except Exception as e:  # the worker process died (run_one catches what it raises)
        done[name] = crashed(experiment(name), size, e)
      on_result(name, done[name])
  return [done[name] for name in names]


def plateau_line(result):
  """'plateau 11/12 replicas (still learning: m @ s seeds 0, 2)': the replicas at their arms'
  selected points that finished learning, and which did not."""
  done, total, learning = 0, 0, []
  for row in result.plateau:
    seeds = [
      s.split(":") for part in (row["exploratory"], row["confirmatory"]) for s in part.split()
    ]
    total += len(seeds)
    done += sum(status in protocol.FINISHED for _, status in seeds)
    still = [seed for seed, status in seeds if status not in protocol.FINISHED]
    if still:
      learning.append(f"{row['model']} @ {row['setting']} seeds {', '.join(still)}")
  if not total:
    return "(nothing trained)"
  return f"plateau {done}/{total} replicas" + (
    f" (still learning: {'; '.join(learning)})" if learning else ""
  )


def host_cores():
  """The cores this process may run on."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def lay_over_cores(count, jobs):
  """Sets the CPU device count of this process and the workers it starts: `count`, or with 0
  the host's cores divided among `jobs` (left alone when XLA_FLAGS already sets a count, as
  the tests do, or when that is one device). Must run before jax starts its backend."""
  if count == 0:
    if cli.DEVICE_COUNT_FLAG in os.environ.get("XLA_FLAGS", ""):
      return
    count = max(1, (host_cores() or 1) // max(1, jobs))
    if count == 1:
      return
  cli.cpu_devices(count, "--cpu_devices")


def _define(values, argv, single):
  flags.DEFINE_string("workdir", "runs/ladder", "Where report.md and plots go.", flag_values=values)
  flags.DEFINE_enum(
    "size", "quick", SIZES, "tiny (tests), quick (make run), full, accel.", flag_values=values
  )
  flags.DEFINE_string(
    "compile_only",
    None,
    "Compile every sweep program of the size for TARGET (v5e:2x4, gpu:FILE,topology=1x1x8) "
    "without running anything (experiments/compile_all.py).",
    flag_values=values,
  )
  flags.DEFINE_integer(
    "compile_limit",
    0,
    "With --compile_only: at most this many distinct sweep programs of each experiment, "
    "largest first (1: each experiment's largest; 0: all).",
    lower_bound=0,
    flag_values=values,
  )
  if single:
    size = cli.pre_parse(argv, "size", "quick", SIZES)
    help_string = f"The config of {single} at --size (--config.FIELD=VALUE sets a field)."
    cli.config_flag(values, argv, "config", experiment(single).get_config(size), help_string)
    return
  flags.DEFINE_list("only", [], "Comma-separated experiment names.", flag_values=values)
  flags.DEFINE_integer(
    "cpu_devices",
    0,
    "CPU devices per experiment process, which lay each sweep's replicas over the cores "
    "(0: the cores shared among the experiments run at once; a full run alone on 2 cores "
    "trains 1.5x as fast on 2 devices as on 1, BENCHMARKS.md). No effect on a GPU or TPU.",
    lower_bound=0,
    flag_values=values,
  )
  flags.DEFINE_integer(
    "jobs",
    1,
    "Experiments run at once, each in its own process on the CPU (`make run`: 2); keep 1 on "
    "a GPU or TPU host, whose device one process holds.",
    lower_bound=1,
    flag_values=values,
  )


def main(argv=None, single=None):
  """`python -m experiments.run_all` (or, with `single`, one experiment's command line);
  argv: the arguments after the program name (None: sys.argv's). Returns the exit code."""
  doc = __doc__ if not single else f"{experiment(single).__doc__.strip()}\n\n{__doc__}"
  values, rest = cli.command_line(doc, lambda v, a: _define(v, a, single), argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  size, workdir = values.size, values.workdir
  # a declared experiment whose old module still runs (not yet ported) runs the old way
  ported = [n for n in declared.DECLARED if n not in EXPERIMENTS]
  names = [single] if single else values.only or [*EXPERIMENTS, *ported]
  unknown = [n for n in names if n not in EXPERIMENTS and n not in ported]
  if unknown:
    known = ", ".join([*EXPERIMENTS, *ported])
    cli.usage_error(f"--only: unknown experiment(s) {unknown}; choose from {known}")
  engine_names = [n for n in names if n in ported]
  names = [n for n in names if n not in ported]
  if values.compile_only is not None:
    from experiments import compile_all

    modules = [experiment(n) for n in names]
    limit = values.compile_limit or None
    return compile_all.main(modules, size, values.compile_only, workdir, limit=limit)
  config = values.config if single else None
  jobs = 1 if single else values.jobs
  lay_over_cores(0 if single else values.cpu_devices, min(jobs, len(names)))
  start = time.time()
  results = []

  def finished(name, result):
    results.append(result)
    print(
      f"[{len(results)}/{len(names)}] {name}: {result.verdict} in {result.seconds:.1f} s "
      f"({result.cpu_seconds:.0f} CPU s, {result.compile_seconds:.0f} s compiling)",
      flush=True,
    )
    report.write(results, workdir)  # rewrite after each: a crash later loses nothing

  if jobs > 1 and len(names) > 1:
    alone = [n for n in names if n in ALONE]
    together = [n for n in names if n not in ALONE]
    after = f", then {', '.join(alone)} alone (it times the CPU)" if alone else ""
    print(f"{len(names)} experiments (size={size}), {jobs} at once{after} ...", flush=True)
    done = {}
    for group, at_once in ((together, jobs), *(([n], 1) for n in alone)):  # alone: after
      if group:
        done.update(zip(group, run_parallel(group, size, workdir, at_once, finished), strict=True))
    results[:] = [done[n] for n in names]
  else:
    compile_cache.enable()
    for i, name in enumerate(names, 1):
      print(f"[{i}/{len(names)}] {name} (size={size}) ...", flush=True)
      finished(name, run_one(experiment(name), size, workdir, config))
  path = report.write(results, workdir)
  seconds, compiling = sum(r.seconds for r in results), sum(r.compile_seconds for r in results)
  print(
    f"\n{report.tally(results)}: {seconds:.0f} s of experiments"
    f" ({sum(r.cpu_seconds for r in results):.0f} CPU s; {compiling:.0f} s compiling, "
    f"{compiling / max(seconds, 1e-9):.0%}) in {time.time() - start:.0f} s wall"
  )
  for r in results:
    why = r.why()
    print(f"  {r.experiment:16s} {r.verdict:12s} {plateau_line(r)}" + (f"  ({why})" if why else ""))
  if engine_names:
    quick = {r["experiment"]: r for r in run_declared(engine_names, size, workdir)}
    print("\nThe article's claims (experiments/claims.py): the verdict of record beside this run")
    print("\n".join(page.screen(quick, registry.RESULTS)))
  print(f"report: {path}")
  return 1 if any(r.crashed for r in results) else 0


if __name__ == "__main__":
  sys.exit(main())
