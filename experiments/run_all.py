"""The main job: every experiment, a few at once, then the claims beside their records.

  python -m experiments.run_all --workdir runs/ladder --jobs 2     # `make run`: size quick
  python -m experiments.run_all --size full --workdir runs/full    # the full grids
  python -m experiments.run_all --only cache,heads --size tiny
  python -m experiments.engine run cache --size quick              # one declared experiment alone
  python -m experiments.fixed_memory --workdir runs/fixed_memory   # one old-protocol one alone
  python -m experiments.fixed_memory --size tiny --config.confirmatory_seeds='(0,)'  # overridden

Every experiment runs in its own worker process, --jobs at once, the longest first
(experiments/workers.py): the declared ones (experiments/engine/catalog.py) through the verdict
engine, a size not registered yet (being sized) skipped with a line, and those still on the
old protocol (EXPERIMENTS) through it. Each running experiment has one live line
(experiments/board.py): its units done (an arm at a point, trained to its plateau or cap), the
unit training now and its step, the time left at its pace so far; a bar on a terminal, an
occasional plain line when piped. Every step's detail goes to <workdir>/<name>/train.log. An
experiment that fails is reported with its error and its log, and the others still run; the
exit code is then 1.

Sizes: tiny (the tests: seconds), quick (`make run`: minutes each on 2 CPU cores; a model still
learning at its step cap is UNRESOLVED, an honest verdict at quick), full (the verdicts of
record), accel (one GPU or TPU host).

The last screen (experiments/engine/page.py) pairs each of the article's claims with its verdict
of record and this run's reading; <workdir>/claims.md is the report a person reads in five
minutes (experiments/engine/summary.py): that table, a figure with one panel per claim
(<workdir>/claims.png) and a short section per claim. The old protocol's experiments also write <workdir>/report.md,
<workdir>/results.json and their plots, rewritten after each, and print a summary: each one's
verdict, plateau count and what it rests on. Seeds are fixed, so a rerun gives the same verdicts
(up to timing measurements). One old-protocol experiment alone takes `--config.FIELD=VALUE`
overrides of its config at the size; its results record that the config is not the registered
design's (`config_as_registered`).
"""

import gzip
import importlib
import os
import sys
import time
import traceback
import types

from absl import flags

from experiments import board, cli, compile_all, protocol, report, workers
from experiments.engine import catalog as declared
from experiments.engine import declare, page, records, registry
from experiments.engine import run as engine_run
from experiments.engine import summary as claims_report
from jaxformer import compile_cache

# Experiments still on the old protocol (experiments/protocol.py), run the old way until their
# declarations' sizes are registered: each port removes its line here.
EXPERIMENTS = (
  "fixed_memory",
  "mlp_memory",
)
SIZES = protocol.SIZES


def experiment(name, module_path=None):
  """The module of experiment `name`, one of EXPERIMENTS: experiments.<name>, or the module
  `module_path` a Python caller names in its place (the tests' stand-ins; never from the
  command line). Nothing else is imported."""
  if name not in EXPERIMENTS:
    raise ValueError(f"experiment={name!r}: expected one of {', '.join(EXPERIMENTS)}")
  return importlib.import_module(module_path or f"experiments.{name}")


def run_one(module, size, workdir, config=None, log=print):
  """Runs one old-protocol module (at `config`, default its config at `size`); a crash
  becomes an UNRESOLVED result that names the error."""
  start, cpu, compiling = time.time(), time.process_time(), compile_cache.compile_seconds()
  try:
    import jax

    log(f"  {module.NAME}: on {jax.local_device_count()} {jax.default_backend()} device(s)")
    config = module.get_config(size) if config is None else config
    result = protocol.run(module, config, workdir, size, log=log)
  except Exception as e:  # report it and keep going: nothing else is lost
    traceback.print_exc()
    result = crashed(module, size, e)
  result.seconds = time.time() - start
  result.cpu_seconds = time.process_time() - cpu
  result.compile_seconds = compile_cache.compile_seconds() - compiling
  result.size = size
  return result


def crashed(module, size, error):
  """The UNRESOLVED result of an experiment stopped by `error` (an exception, or its text)."""
  why = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
  return report.Result(
    experiment=module.NAME,
    claim=module.CLAIM,
    setup=f"size={size}",
    criteria=[report.Criterion(f"ran to completion (crashed: {why})", verdict=report.UNRESOLVED)],
    metrics={"error": why},
    crashed=True,
    size=size,
  )


def run_protocol(task, tracker):
  """A worker's runner of an old-protocol experiment: its report.Result."""
  module = experiment(task.name, task.module)
  return run_one(module, task.size, task.workdir, log=tracker.log)


def run_declared(task, tracker):
  """A worker's runner of a declared experiment: the engine's result, its files in
  <workdir>/<name>."""
  experiment_ = declared.load(task.name, task.module)
  return engine_run.run(experiment_, task.size, task.folder, log=tracker.log,
                        progress=tracker.progress)  # fmt: skip


def task(name, size, workdir):
  """The worker task of experiment `name` at `size`."""
  runner = run_protocol if name in EXPERIMENTS else run_declared
  return workers.Task(name, runner, size, workdir)


def unregistered(name, size):
  """Why declared experiment `name` cannot run at `size` yet, or None when it can."""
  if name in EXPERIMENTS:
    return None
  experiment_ = declared.load(name)
  if size not in experiment_.sizes or not registry.versions(experiment_, size):
    return f"no registered {size} design yet (being sized)"
  return None


def longest_first(names, size, results_dir="results"):
  """`names` ordered by the wall time each took at `size` in `results_dir` (a declared
  experiment's record results/<name>/<size>.json, an old one's results/<name>_<size>.json.gz),
  longest first, the unmeasured ones first of all; ties keep their order. Started in this
  order, parallel workers finish together instead of waiting on one long tail."""

  def seconds(name):
    for path in (os.path.join(results_dir, name, f"{size}.json"),
                 os.path.join(results_dir, f"{name}_{size}.json.gz")):  # fmt: skip
      try:
        return float(records.read(path)["seconds"])
      except (OSError, ValueError, KeyError, TypeError, gzip.BadGzipFile):
        continue
    return float("inf")

  return sorted(names, key=lambda n: -seconds(n))


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
    2,
    "Experiments run at once, each in its own worker process (on the CPU when more than one "
    "runs at once); keep 1 on a GPU or TPU host, whose device one process holds.",
    lower_bound=1,
    flag_values=values,
  )


def summary(results, workdir, wall):
  """The old protocol's summary of `results` (report.md rewritten); returns its path."""
  path = report.write(results, workdir)
  seconds, compiling = sum(r.seconds for r in results), sum(r.compile_seconds for r in results)
  print(
    f"\n{report.tally(results)}: {seconds:.0f} s of experiments"
    f" ({sum(r.cpu_seconds for r in results):.0f} CPU s; {compiling:.0f} s compiling, "
    f"{compiling / max(seconds, 1e-9):.0%}) in {wall:.0f} s wall"
  )
  for r in results:
    why = r.why()
    print(f"  {r.experiment:16s} {r.verdict:12s} {plateau_line(r)}" + (f"  ({why})" if why else ""))
  return path


def one_alone(name, size, workdir, config):
  """`python -m experiments.<name>`: one old-protocol experiment in this process, its detail
  printed."""
  lay_over_cores(0, 1)
  compile_cache.enable()
  start = time.time()
  print(f"{name} (size={size}) ...", flush=True)
  result = run_one(experiment(name), size, workdir, config)
  path = summary([result], workdir, time.time() - start)
  print(f"report: {path}")
  return 1 if result.crashed else 0


def run_tasks(tasks, jobs, workdir, stream=None):
  """Runs `tasks` in worker processes, `jobs` at once, with a live line each; returns (the
  old protocol's results, the declared results by name, [(name, error, log path)] of those
  that failed). The old protocol's report.md is rewritten after each of its results."""
  stream = stream or sys.stdout
  screen, old, quick, failed, ended = board.Board(stream), [], {}, [], []

  def done(task_, kind, payload):
    name = task_.name
    if kind == "error" and name in EXPERIMENTS:  # its worker died: no result came back
      payload = crashed(types.SimpleNamespace(NAME=name, CLAIM=""), task_.size, payload)
      kind = "result"
    if kind == "error":
      failed.append((name, payload, task_.log_path))
      line = f"{name}: FAILED: {payload}"
    elif isinstance(payload, report.Result):
      old.append(payload)
      report.write(old, workdir)  # rewritten after each: a crash later loses nothing
      line = (f"{name}: {payload.verdict} in {payload.seconds:.0f} s ({payload.cpu_seconds:.0f} "
              f"CPU s, {payload.compile_seconds:.0f} s compiling)")  # fmt: skip
      if payload.crashed:
        failed.append((name, payload.metrics["error"], task_.log_path))
    else:
      quick[name] = payload
      verdicts = ", ".join(f"{n} {c['verdict']}" for n, c in payload["claims"].items())
      line = f"{name}: {verdicts or 'no claims'} in {payload['seconds']:.0f} s"
    ended.append(name)
    screen.finish(name, f"[{len(ended)}/{len(tasks)}] {line}")

  workers.run(tasks, jobs, screen, done)
  return old, quick, failed


def main(argv=None, single=None):
  """`python -m experiments.run_all` (or, with `single`, one old-protocol experiment's command
  line); argv: the arguments after the program name (None: sys.argv's). Returns the exit
  code."""
  doc = __doc__ if not single else f"{experiment(single).__doc__.strip()}\n\n{__doc__}"
  values, rest = cli.command_line(doc, lambda v, a: _define(v, a, single), argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  size, workdir = values.size, values.workdir
  # an experiment whose old module still runs (not yet ported) runs the old way
  ported = [n for n in declared.DECLARED if n not in EXPERIMENTS]
  names = [single] if single else values.only or [*EXPERIMENTS, *ported]
  unknown = [n for n in names if n not in EXPERIMENTS and n not in ported]
  if unknown:
    known = ", ".join([*EXPERIMENTS, *ported])
    cli.usage_error(f"--only: unknown experiment(s) {unknown}; choose from {known}")
  if values.compile_only is not None:
    items = [experiment(n) for n in names if n in EXPERIMENTS]
    for name in (n for n in names if n not in EXPERIMENTS):
      try:
        items.append((name, compile_all.declared_sweeps(declared.load(name), size)))
      except declare.DesignError as e:
        print(f"  {name}: {e}: skipped", flush=True)
    limit = values.compile_limit or None
    return compile_all.main(items, size, values.compile_only, workdir, limit=limit)
  if single:
    return one_alone(single, size, workdir, values.config)
  skipped = {n: why for n in names if (why := unregistered(n, size))}
  for name, why in skipped.items():
    print(f"  {name}: {why}: skipped", flush=True)
  names = [n for n in names if n not in skipped]
  tasks = [task(n, size, workdir) for n in longest_first(names, size)]
  jobs = min(values.jobs, len(tasks)) or 1
  lay_over_cores(values.cpu_devices, jobs)
  print(f"{len(tasks)} experiments (size={size}), {jobs} at once; each one's detail in "
        f"{os.path.join(workdir, '<name>', workers.LOG)}", flush=True)  # fmt: skip
  start = time.time()
  old, quick, failed = run_tasks(tasks, jobs, workdir)
  path = summary(old, workdir, time.time() - start) if old else None
  if any(n not in EXPERIMENTS for n in names):
    print("\nThe article's claims (experiments/claims.py): the verdict of record beside this run")
    print("\n".join(page.screen(quick, registry.RESULTS)))
    claims_md = os.path.join(workdir, "claims.md")
    claims_report.report(quick, claims_report.committed(registry.RESULTS), claims_md)
    print(f"the claims, with a figure per claim: {claims_md}")
  for name, error, log in failed:
    print(f"\n{name} FAILED: {error}\n  its log: {log}")
  if path:
    print(f"report: {path}")
  print(f"{len(tasks)} experiments in {board.duration(time.time() - start)} wall")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
