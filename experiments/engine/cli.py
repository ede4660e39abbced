"""python -m experiments.engine COMMAND NAME [--size SIZE] ...

run NAME --size quick [--workdir runs/NAME_SIZE] [--record | --explore] [--jobs 2]
    train, measure and judge the registered design; --record files the result under
    results/<name>/ (the record of that size) and regenerates the page; --explore trains the
    exploratory seeds alone (sizing: unregistered, never recorded); --jobs N trains the
    units in N worker processes, each on its own cores, then reads them back
run scorecard --size quick --mixer path/to/file.py:Class [--mixer_fields '{"k": 1}']
    your mixer beside every built-in: its contract first (jaxformer.mixers.plug.check), then
    the sweep with it as one more arm, explored (never a registered design, never recorded)
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
import json
import os
import sys

from experiments import harness
from experiments import s9_scorecard as scorecard
from experiments.engine import catalog, declare, page, records, registry, run, summary
from jaxformer import ladder, mixers
from jaxformer.mixers import plug


def _parser():
  p = argparse.ArgumentParser(prog="python -m experiments.engine", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
  sub = p.add_subparsers(dest="command", required=True)
  r = sub.add_parser("run", help="train, measure and judge one experiment at a size")
  r.add_argument("name")
  r.add_argument("--size", default="quick", choices=declare.SIZES)
  r.add_argument(
    "--workdir",
    default=None,
    help="default: runs/NAME_SIZE; with --mixer runs/scorecard_SIZE_CLASS_SHA",
  )
  r.add_argument("--record", action="store_true", help="file the result under results/<name>/")
  r.add_argument(
    "--explore",
    action="store_true",
    help="the sizing run: exploratory seeds alone, unregistered, never recorded",
  )
  r.add_argument("--jobs", type=int, default=1,
                 help="worker processes that train the units, each on its own cores, costliest first")  # fmt: skip
  r.add_argument("--mixer", help="scorecard: your mixer, 'package.module:Class' or 'file.py:Class'")
  r.add_argument("--mixer_fields", help="scorecard: your mixer's fields, a JSON object")
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


def _user_mixer(args):
  """The scorecard with the user's mixer as one more arm, once its contract holds at the
  size's width and it decodes (the scorecard reads every mixer's decode-state bytes);
  ValueError (one line) naming what is wrong."""
  if args.name != scorecard.EXPERIMENT.name:
    given = "--mixer" if args.mixer else "--mixer_fields"
    raise ValueError(f"{given}: only the scorecard takes a mixer, not {args.name}")
  if args.mixer is None:
    raise ValueError("--mixer_fields: given without --mixer")
  if args.record:
    raise ValueError("--record: a user's mixer is no registered design; its run is never recorded")
  if args.size not in scorecard.SIZES:
    raise ValueError(f"--size {args.size}: the scorecard declares {', '.join(scorecard.SIZES)}")
  try:
    fields = json.loads(args.mixer_fields or "{}")
  except json.JSONDecodeError as e:
    raise ValueError(f"--mixer_fields={args.mixer_fields!r}: not JSON ({e})") from e
  if not isinstance(fields, dict):
    raise ValueError(f"--mixer_fields={args.mixer_fields!r}: must be a JSON object")
  model = ladder.default_config(ladder.CUSTOM)
  model.update(scorecard.SIZES[args.size].model)
  where, _, name = args.mixer.rpartition(":")
  spec = f"{os.path.abspath(where)}:{name}" if where.endswith(".py") or "/" in where else args.mixer
  info = mixers.check(mixers.load(spec), fields, model.d_model)
  if not info["decode"]:
    raise mixers.MixerError(f"mixer {name}: its __call__ takes no `decode`, and the scorecard "
                            "reads every mixer's decode-state bytes")  # fmt: skip
  print(f"contract: {args.mixer} ok at D = {model.d_model} ({info['params']} parameters)")
  return scorecard.with_mixer(spec, fields)


def _mixer_workdir(args):
  """runs/scorecard_SIZE_CLASS_SHA: one folder per version of the mixer's file (the sweep
  store keys its sweeps by the file's hash too, so nothing stale is read back either way)."""
  digest = plug.source(args.mixer)["sha256"] or "nofile"
  return os.path.join("runs", f"{args.name}_{args.size}_{args.mixer.rpartition(':')[2]}_"
                      f"{digest[:10]}")  # fmt: skip


def _mixer_lines(result, arm):
  """The user's arm's adjusted recall at each P beside attention's, then every criterion."""
  adjusted = result["metrics"]["adjusted"]
  points = [p for p in adjusted[arm] if ":" in p]
  w = max(len(scorecard.REF), len(arm))
  lines = ["adjusted recall (0: chance 1/P), mean over seeds", f"  {'P':<{w}} " + " ".join(
    f"{p.split(':')[1]:>6}" for p in points)]  # fmt: skip
  for a in (scorecard.REF, arm):
    means = (sum(adjusted[a][p]) / len(adjusted[a][p]) for p in points)
    lines.append(f"  {a:<{w}} " + " ".join(f"{m:6.2f}" for m in means))
  return lines + [f"{c['verdict']:<12} {c['name']}" for c in result["criteria"]]


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
    user = args.command == "run" and (args.mixer, args.mixer_fields) != (None, None)
    experiment = declare.validate(_user_mixer(args) if user else catalog.load(args.name))
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
      default = _mixer_workdir(args) if user else os.path.join("runs", f"{args.name}_{args.size}")
      workdir = args.workdir or default
      if args.jobs < 1:
        raise ValueError(f"--jobs={args.jobs}: must be at least 1")
      result = run.run(experiment, args.size, workdir, explore=args.explore or user, jobs=args.jobs)
      for number, c in result["claims"].items():
        print(f"{number} {c['verdict']:<12} {c['text']}")
      if user:
        print("\n".join(_mixer_lines(result, experiment.arms[-1].name)))
        print(
          f"exploratory, never recorded: {os.path.join(workdir, 'scorecard_' + args.size)}.json"
        )
      if args.record:
        run.record(result, experiment)
  except (declare.DesignError, KeyError, ValueError) as err:
    print(f"error: {err.args[0] if err.args else err}", file=sys.stderr)
    return 2
  return 0
