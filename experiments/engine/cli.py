"""python -m experiments.engine COMMAND NAME [--size SIZE] ...

run NAME --size quick [--workdir runs/NAME_SIZE] [--record | --explore]
    train, measure and judge the registered design; --record files the result under
    results/<name>/ (the record of that size) and regenerates the page; --explore trains the
    exploratory seeds alone (sizing: unregistered, never recorded)
register NAME --size full --why "what changed and why"
    record the declaration at SIZE as a new version with fresh confirmatory seeds
page NAME
    regenerate results/<name>/README.md from the records beside it
check [NAME]
    validate every declaration and check each size is its registered design
summary
    draw docs/img/claims.png, one panel per trained claim, from the committed records (full
    where there is one, else quick), and docs/img/claims.json, the hash they were drawn from
"""

import argparse
import os
import sys

from experiments import harness
from experiments.engine import catalog, declare, page, records, registry, run, summary


def _parser():
  p = argparse.ArgumentParser(prog="python -m experiments.engine", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
  sub = p.add_subparsers(dest="command", required=True)
  r = sub.add_parser("run", help="train, measure and judge one experiment at a size")
  r.add_argument("name")
  r.add_argument("--size", default="quick", choices=declare.SIZES)
  r.add_argument("--workdir", default=None, help="default: runs/NAME_SIZE")
  r.add_argument("--record", action="store_true", help="file the result under results/<name>/")
  r.add_argument(
    "--explore",
    action="store_true",
    help="the sizing run: exploratory seeds alone, unregistered, never recorded",
  )
  g = sub.add_parser("register", help="register the declaration at a size as a new version")
  g.add_argument("name")
  g.add_argument("--size", required=True, choices=declare.SIZES)
  g.add_argument("--why", required=True)
  j = sub.add_parser("rejudge", help="judge a record again from its measurements (no training)")
  j.add_argument("name")
  j.add_argument("--size", required=True, choices=declare.SIZES)
  j.add_argument("--why", required=True, help="the rule that changed, for the log")
  pg = sub.add_parser("page", help="regenerate results/<name>/README.md")
  pg.add_argument("name")
  sub.add_parser("claims", help="regenerate README.md's claims table from results/")
  sub.add_parser("summary", help="draw docs/img/claims.png from the committed records")
  c = sub.add_parser("check", help="validate declarations against the registry")
  c.add_argument("name", nargs="?")
  return p


def main(argv=None):
  args = _parser().parse_args(argv)
  try:
    if args.command == "check":
      names = [args.name] if args.name else list(catalog.DECLARED)
      for name in names:
        experiment = declare.validate(catalog.load(name))
        for size in experiment.sizes:
          e = registry.entry(experiment, size)
          print(f"{name} {size}: version {e['version']} ({e['hash'][:12]})")
      return 0
    if args.command == "claims":
      readme = os.path.join(harness.REPO_ROOT, "README.md")
      with open(readme) as f:
        text = page.with_claims_table(f.read(), registry.RESULTS)
      with open(readme, "w") as f:
        f.write(text)
      return 0
    if args.command == "summary":
      found = summary.committed(registry.RESULTS)
      summary.write(found)
      drawn = ", ".join(f"{name} {r['size']}" for name, r in found.items())
      print(f"{os.path.relpath(summary.FIGURE)}: drawn from {drawn or 'no records'}")
      return 0
    experiment = declare.validate(catalog.load(args.name))
    if args.command == "register":
      new = registry.register(experiment, args.size, args.why)
      print(f"{args.name} {args.size}: version {new['version']}, seeds {new['confirmatory']}")
    elif args.command == "rejudge":
      path = os.path.join(registry.RESULTS, args.name, f"{args.size}.json")
      result = run.rejudge(records.read(path), experiment)
      run.record(result, experiment, note=f"re-judged at {result['rejudged']}: {args.why}")
      for number, c in result["claims"].items():
        print(f"{number} {c['verdict']:<12} {c['text']}")
    elif args.command == "page":
      folder = os.path.join(registry.RESULTS, args.name)
      with open(os.path.join(folder, page.PAGE), "w") as f:
        f.write(page.render(experiment, folder))
    else:
      workdir = args.workdir or os.path.join("runs", f"{args.name}_{args.size}")
      result = run.run(experiment, args.size, workdir, explore=args.explore)
      for number, c in result["claims"].items():
        print(f"{number} {c['verdict']:<12} {c['text']}")
      if args.record:
        run.record(result, experiment)
  except (declare.DesignError, KeyError, ValueError) as err:
    print(f"error: {err.args[0] if err.args else err}", file=sys.stderr)
    return 2
  return 0
