"""The main job: every experiment, a few at once, then the claims beside their records.

  python -m experiments.run_all --workdir runs/ladder --jobs 2     # `make run`: size quick
  python -m experiments.run_all --size full --workdir runs/full    # the full grids
  python -m experiments.run_all --only cache,heads --size tiny
  python -m experiments.engine run cache --size quick              # one experiment alone

Every declared experiment that reads the article's claims (experiments/engine/catalog.py:
`main_job`; the scorecard, extensions alone, runs by name) runs through the verdict engine in
one of --jobs worker processes, the longest first (experiments/workers.py); a size not
registered yet (being sized) is skipped with a line. Each running experiment has one live line
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
(<workdir>/claims.png) and a short section per claim. Seeds are fixed, so a rerun gives the
same verdicts (up to timing measurements).
"""

import os
import sys
import time

from experiments import board, cli, compile_all, workers
from experiments.engine import catalog as declared
from experiments.engine import declare, page, records, registry
from experiments.engine import run as engine_run
from experiments.engine import summary as claims_report

SIZES = declare.SIZES


def run_declared(task, tracker):
  """A worker's runner of a declared experiment: the engine's result, its files in
  <workdir>/<name>."""
  experiment_ = declared.load(task.name, task.module)
  return engine_run.run(experiment_, task.size, task.folder, log=tracker.log,
                        progress=tracker.progress)  # fmt: skip


def task(name, size, workdir):
  """The worker task of experiment `name` at `size`."""
  return workers.Task(name, run_declared, size, workdir)


def unregistered(name, size):
  """Why declared experiment `name` cannot run at `size` yet, or None when it can."""
  experiment_ = declared.load(name)
  if size not in experiment_.sizes or not registry.versions(experiment_, size):
    return f"no registered {size} design yet (being sized)"
  return None


def longest_first(names, size, results_dir="results"):
  """`names` ordered by the wall time each took at `size` in its record
  `results_dir`/<name>/<size>.json, longest first, the unmeasured ones first of all; ties keep
  their order. Started in this order, parallel workers finish together instead of waiting on
  one long tail."""

  def seconds(name):
    try:
      return float(records.read(os.path.join(results_dir, name, f"{size}.json"))["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
      return float("inf")

  return sorted(names, key=lambda n: -seconds(n))


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


def _define(values, argv):
  define = cli.definer(values)
  define("string", "workdir", "runs/ladder", "Where each experiment's folder and claims.md go.")
  define("enum", "size", "quick", "tiny (tests), quick (make run), full, accel.", SIZES)
  define(
    "string",
    "compile_only",
    None,
    "Compile every sweep program of the size for TARGET (v5e:2x4, gpu:FILE,topology=1x1x8) "
    "without running anything (experiments/compile_all.py).",
  )
  define(
    "integer",
    "compile_limit",
    0,
    "With --compile_only: at most this many distinct sweep programs of each experiment, "
    "largest first (1: each experiment's largest; 0: all).",
    lower_bound=0,
  )
  define(
    "list",
    "only",
    [],
    "Comma-separated experiment names (default: every experiment "
    "that reads the article's claims; the scorecard runs by name).",
  )
  define(
    "integer",
    "cpu_devices",
    0,
    "CPU devices per experiment process, which lay each sweep's replicas over the cores "
    "(0: the cores shared among the experiments run at once; a full run alone on 2 cores "
    "trains 1.5x as fast on 2 devices as on 1, BENCHMARKS.md). No effect on a GPU or TPU.",
    lower_bound=0,
  )
  define(
    "integer",
    "jobs",
    2,
    "Experiments run at once, in that many worker processes (on the CPU when more than one "
    "runs at once); keep 1 on a GPU or TPU host, whose device one process holds.",
    lower_bound=1,
  )


def compile_only(names, size, target, workdir, limit):
  """--compile_only: each experiment's sweeps at `size` compiled for `target`, nothing run; a
  size an experiment does not declare is skipped with a line. Returns the exit code."""
  items = []
  for name in names:
    try:
      items.append((name, compile_all.declared_sweeps(declared.load(name), size)))
    except declare.DesignError as e:
      print(f"  {name}: {e}: skipped", flush=True)
  return compile_all.main(items, size, target, workdir, limit=limit)


def run_tasks(tasks, jobs, stream=None):
  """Runs `tasks` in worker processes, `jobs` at once, with a live line each; returns (the
  results by name, [(name, error, log path)] of those that failed)."""
  screen, results, failed, ended = board.Board(stream or sys.stdout), {}, [], []

  def done(task_, kind, payload):
    name = task_.name
    if kind == "error":
      failed.append((name, payload, task_.log_path))
      line = f"{name}: FAILED: {payload}"
    else:
      results[name] = payload
      verdicts = ", ".join(f"{n} {c['verdict']}" for n, c in payload["claims"].items())
      line = f"{name}: {verdicts or 'no claims'} in {payload['seconds']:.0f} s"
    ended.append(name)
    screen.finish(name, f"[{len(ended)}/{len(tasks)}] {line}")

  workers.run(tasks, jobs, screen, done)
  return results, failed


def main(argv=None):
  """`python -m experiments.run_all`; argv: the arguments after the program name (None:
  sys.argv's). Returns the exit code."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  size, workdir = values.size, values.workdir
  names = values.only or declared.main_job()
  unknown = [n for n in names if n not in declared.DECLARED]
  if unknown:
    known = ", ".join(declared.DECLARED)
    cli.usage_error(f"--only: unknown experiment(s) {unknown}; choose from {known}")
  if values.compile_only is not None:
    limit = values.compile_limit or None
    return compile_only(names, size, values.compile_only, workdir, limit)
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
  results, failed = run_tasks(tasks, jobs)
  print("\nThe article's claims (experiments/claims.py): the verdict of record beside this run")
  print("\n".join(page.screen(results, registry.RESULTS)))
  claims_md = os.path.join(workdir, "claims.md")
  claims_report.report(results, claims_report.committed(registry.RESULTS), claims_md)
  print(f"the claims, with a figure per claim: {claims_md}")
  for name, error, log in failed:
    print(f"\n{name} FAILED: {error}\n  its log: {log}")
  print(f"{len(tasks)} experiments in {board.duration(time.time() - start)} wall")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
