"""The main job: every design-pressure experiment, one report.

  python -m experiments.run_all --workdir runs/ladder              # `make run`: size quick
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
import importlib
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
  start = time.time()
  try:
    config = module.get_config(size)
    result = protocol.run(module, config, workdir, size)
  except Exception as e:  # report it and keep going: nothing else is lost
    traceback.print_exc()
    result = report.Result(
      experiment=module.NAME,
      claim=module.CLAIM,
      setup=f"size={size}",
      criteria=[
        report.Criterion(
          f"ran to completion (crashed: {type(e).__name__}: {e})", verdict=report.UNRESOLVED
        )
      ],
      metrics={"error": f"{type(e).__name__}: {e}"},
      crashed=True,
    )
  result.seconds = time.time() - start
  result.size = size
  return result


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
    "--compile_only",
    metavar="TARGET",
    help="compile every sweep program of the size for TARGET (v5e:2x4, "
    "gpu:FILE,topology=1x1x8) without running anything (experiments/compile_all.py)",
  )
  return parser


def main(argv=None, single=None):
  args = _parser(single).parse_args(argv)
  names = [single] if single else [n for n in args.only.split(",") if n] or list(EXPERIMENTS)
  unknown = [n for n in names if n not in EXPERIMENTS]
  if unknown:
    print(f"error: --only: unknown experiment(s) {unknown}; choose from {', '.join(EXPERIMENTS)}")
    return 2
  if args.compile_only is not None:
    from experiments import compile_all

    modules = [experiment(n) for n in names]
    return compile_all.main(modules, args.size, args.compile_only, args.workdir)
  compile_cache.enable()
  results = []
  for i, name in enumerate(names, 1):
    print(f"[{i}/{len(names)}] {name} (size={args.size}) ...", flush=True)
    module = experiment(name)
    result = run_one(module, args.size, args.workdir)
    results.append(result)
    print(f"[{i}/{len(names)}] {name}: {result.verdict} in {result.seconds:.1f} s", flush=True)
    report.write(results, args.workdir)  # rewrite after each: a crash later loses nothing
  path = report.write(results, args.workdir)
  print(f"\n{report.tally(results)} in {sum(r.seconds for r in results):.0f} s")
  for r in results:
    why = r.why()
    print(f"  {r.experiment:16s} {r.verdict:12s} {plateau_line(r)}" + (f"  ({why})" if why else ""))
  print(f"report: {path}")
  return 1 if any(r.crashed for r in results) else 0


if __name__ == "__main__":
  sys.exit(main())
