"""The main job: every design-pressure experiment, one report.

  python -m experiments.run_all --workdir runs/ladder --jobs 2     # `make run`: size quick
  python -m experiments.run_all --size full --workdir runs/full    # the full grids
  python -m experiments.run_all --only fixed_memory,cache --size tiny
  python -m experiments.fixed_memory --workdir runs/fixed_memory   # one experiment alone

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
to timing measurements, which the report marks as such).
"""

import argparse
import concurrent.futures
import gzip
import importlib
import json
import multiprocessing
import os
import sys
import time
import traceback

from experiments import protocol, report
from jaxformer import compile_cache

EXPERIMENTS = (
  "fixed_memory",
  "parallelism",
  "symmetry",
  "param_explosion",
  "interaction",
  "cache",
  "normalization",
  "heads",
  "mlp_memory",
  "beyond",
  "skips",
  "positions",
)
SIZES = protocol.SIZES


def experiment(name):
  """The module of experiment `name`, one of EXPERIMENTS (nothing else is imported)."""
  if name not in EXPERIMENTS:
    raise ValueError(f"experiment={name!r}: expected one of {', '.join(EXPERIMENTS)}")
  return importlib.import_module(f"experiments.{name}")


def run_one(module, size, workdir):
  """Runs one experiment module; a crash becomes an UNRESOLVED result that names the error."""
  start, cpu = time.time(), time.process_time()
  try:
    config = module.get_config(size)
    result = protocol.run(module, config, workdir, size)
  except Exception as e:  # report it and keep going: nothing else is lost
    traceback.print_exc()
    result = crashed(module, size, e)
  result.seconds = time.time() - start
  result.cpu_seconds = time.process_time() - cpu
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


def _worker(name, size, workdir, module_path=None):
  """One experiment in a worker process (the module at `module_path` when given, else
  experiment `name`): its lines are prefixed with its name."""
  sys.stdout = _Prefixed(sys.__stdout__, f"{name}| ")
  sys.stderr = _Prefixed(sys.__stderr__, f"{name}| ")
  compile_cache.enable()
  module = importlib.import_module(module_path) if module_path else experiment(name)
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
  experiments.<name> (the tests' declared stand-ins). Each experiment is single-threaded for most of its time (XLA compiles on
  one core, and small models' steps barely use two), so on a 2-core machine two at once finish
  sooner than one after the other. Workers run on the CPU unless JAX_PLATFORMS is set."""
  context = multiprocessing.get_context("spawn")
  done = {}
  # Two processes cannot share one accelerator (a TPU is held by one process, a GPU's memory
  # preallocated by the first), so workers run on the CPU unless JAX_PLATFORMS says otherwise
  # (spawned workers read this process's environment).
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
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


def _parser(single):
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument("--workdir", default="runs/ladder", help="where report.md and plots go")
  parser.add_argument(
    "--size", default="quick", choices=SIZES, help="tiny (tests), quick (make run), full, accel"
  )
  if not single:
    parser.add_argument("--only", default="", help="comma-separated experiment names")
    parser.add_argument(
      "--jobs",
      type=int,
      default=1,
      help="experiments run at once, each in its own process on the CPU (`make run`: 2); "
      "keep 1 on a GPU or TPU host, whose device one process holds",
    )
  return parser


def main(argv=None, single=None):
  args = _parser(single).parse_args(argv)
  names = [single] if single else [n for n in args.only.split(",") if n] or list(EXPERIMENTS)
  unknown = [n for n in names if n not in EXPERIMENTS]
  if unknown:
    print(f"error: --only: unknown experiment(s) {unknown}; choose from {', '.join(EXPERIMENTS)}")
    return 2
  jobs = getattr(args, "jobs", 1)
  if jobs < 1:
    print(f"error: --jobs: must be at least 1, got {jobs}")
    return 2
  start = time.time()
  results = []
  if jobs > 1 and len(names) > 1:
    print(f"{len(names)} experiments (size={args.size}), {jobs} at once ...", flush=True)

    def finished(name, result):
      results.append(result)
      print(
        f"[{len(results)}/{len(names)}] {name}: {result.verdict} in {result.seconds:.1f} s "
        f"({result.cpu_seconds:.0f} CPU s)",
        flush=True,
      )
      report.write(results, args.workdir)  # rewrite after each: a crash later loses nothing

    results = run_parallel(names, args.size, args.workdir, jobs, finished)
  else:
    compile_cache.enable()
    for i, name in enumerate(names, 1):
      print(f"[{i}/{len(names)}] {name} (size={args.size}) ...", flush=True)
      result = run_one(experiment(name), args.size, args.workdir)
      results.append(result)
      print(
        f"[{i}/{len(names)}] {name}: {result.verdict} in {result.seconds:.1f} s "
        f"({result.cpu_seconds:.0f} CPU s)",
        flush=True,
      )
      report.write(results, args.workdir)  # rewrite after each: a crash later loses nothing
  path = report.write(results, args.workdir)
  print(
    f"\n{report.tally(results)}: {sum(r.seconds for r in results):.0f} s of experiments"
    f" ({sum(r.cpu_seconds for r in results):.0f} CPU s) in {time.time() - start:.0f} s wall"
  )
  for r in results:
    why = r.why()
    print(f"  {r.experiment:16s} {r.verdict:12s} {plateau_line(r)}" + (f"  ({why})" if why else ""))
  print(f"report: {path}")
  return 1 if any(r.crashed for r in results) else 0


if __name__ == "__main__":
  sys.exit(main())
