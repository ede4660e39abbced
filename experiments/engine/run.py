"""Running a declaration: train every unit, measure, judge, write the result.

  result = run(experiment, "quick", "runs/interaction")     # -> runs/interaction/<name>_<size>.json
  record(result, experiment)                                 # -> results/<name>/<size>.json + page

`run` checks the declaration is the registered design at that size (registry.entry) and takes
its seeds from there; each unit trains under experiments/engine/policy.py with its sweeps
stored under <workdir>/sweeps, so the same command after a stop resumes where it was. The
result records the design's version and hash, the commit, every task spec, every replica of
every sweep (its evaluations and stop), the per-seed metrics, and every criterion's four
readings (confirmatory, exploratory, positive, falsification) with its verdict.
"""

import concurrent.futures
import datetime
import multiprocessing
import os
import platform
import subprocess
import time

from experiments import claims as claims_lib
from experiments import harness, workers
from experiments.engine import declare, judge, page, policy, records, registry, stats


class Trained:
  """What measure() reads: every Unit by (arm, point), and the seeds in order."""

  def __init__(self, units, seeds):
    self.units, self.seeds = units, tuple(seeds)

  def unit(self, arm, point=None):
    return self.units[(arm, judge.label(point))]


def commit():
  """HEAD's short hash, "-dirty" when the code has changes ("unknown" outside git); records
  under results/ are not code (a run filed before the next one leaves it clean)."""
  try:
    git = ["git", "-C", harness.REPO_ROOT]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)results"], capture_output=True, text=True,
                           check=True).stdout.strip()  # fmt: skip
  except (OSError, subprocess.CalledProcessError):
    return "unknown"
  return head + ("-dirty" if dirty else "")


def engine_metrics(unit, size):
  chance = unit.result.chance
  accuracy = unit.final("eval_accuracy")
  return {
    "accuracy": accuracy,
    "adjusted": [stats.adjust(a, chance) for a in accuracy],
    "over_chance": [a / chance for a in accuracy],
    "steps_to": unit.steps_to(size.reach),
  }


def read_seeds(experiment, size_name, entry):
  """(exploratory, confirmatory): the seeds a run of the registered `entry` trains and reads.
  A size with `confirm_only` trains its confirmatory seeds alone: its grid is one point, so
  the exploratory seeds select nothing; they train in its sizing run."""
  if experiment.sizes[size_name].confirm_only:
    return (), tuple(entry["confirmatory"])
  return tuple(entry["exploratory"]), tuple(entry["confirmatory"])


def seed_order(experiment, size_name, entry):
  """The seeds of a run's per-seed lists, in order: read_seeds' exploratory, then confirmatory."""
  return tuple(dict.fromkeys(sum(read_seeds(experiment, size_name, entry), ())))


def _merge(into, more):
  for metric, by_arm in more.items():
    for arm, by_point in by_arm.items():
      into.setdefault(metric, {}).setdefault(arm, {}).update(
        {judge.label(p) if not isinstance(p, str) else p: list(v) for p, v in by_point.items()}
      )


# Sizes whose sweeps compile at XLA's short-sweep options on a CPU (sweep.FAST_COMPILE): their
# training is short next to the compile (BENCHMARKS.md, "make run"); the others by budget
SHORT_SIZES = ("tiny", "quick")


def fast_compile(size_name):
  """The `fast_compile` of a size's sweeps (jaxformer/train/config.py): True or None."""
  return True if size_name in SHORT_SIZES else None


def _units(experiment, size_name):
  return [(arm, point) for arm in experiment.arms for point in experiment.trained_points(size_name)]


def _pin(cores):
  """A worker process's first act (`train`'s jobs): keep to the next core set of `cores` (a
  queue), before JAX sizes its thread pools from the cores it may use."""
  mine = cores.get()
  if mine is not None:
    os.sched_setaffinity(0, mine)


def _train_one(experiment, size_name, seeds, workdir, index):
  """In a worker process: unit number `index` into the sweep store; ((arm, label), seconds)."""
  arm, point = _units(experiment, size_name)[index]
  size, store = experiment.sizes[size_name], os.path.join(workdir, "sweeps")
  unit = policy.train_unit(arm, point, experiment.task(size, point), size, seeds, store=store,
                           fast_compile=fast_compile(size_name))  # fmt: skip
  return (arm.name, judge.label(point)), unit.seconds


def longest_first(experiment, size_name, seeds):
  """The indices of the size's units, the most replica-steps first (policy.replica_steps),
  in declared order among equals: the order `jobs` workers take them in, so that the longest
  unit does not start last while the other workers idle."""
  size, units = experiment.sizes[size_name], _units(experiment, size_name)
  cost = [policy.replica_steps(size, arm, point, seeds) for arm, point in units]
  return sorted(range(len(units)), key=lambda i: -cost[i])


def _train_in_workers(experiment, size_name, seeds, workdir, jobs):
  """The units, longest first (`longest_first`), to `jobs` spawned processes, each on its own
  cores (JAX does not fork safely), each taking the next unit as it comes free (units differ
  in cost by 10x: dealt out in advance, one worker could idle for hours); {(arm, label):
  seconds} of the training each did."""
  context = multiprocessing.get_context("spawn")
  cores = context.Queue()
  for mine in workers.core_sets(jobs) or [None] * jobs:
    cores.put(mine)
  order = longest_first(experiment, size_name, seeds)
  with concurrent.futures.ProcessPoolExecutor(
    jobs, mp_context=context, initializer=_pin, initargs=(cores,)
  ) as pool:
    done = [pool.submit(_train_one, experiment, size_name, seeds, workdir, i) for i in order]
    return dict(future.result() for future in done)


def train(experiment, size_name, seeds, workdir, log=print, progress=None, jobs=1):
  """Every unit of the experiment at the size: {(arm, label(point)): policy.Unit}. `log`
  gets every sweep's progress lines; `progress(done, total, unit)` is called before each unit
  (the units done, of how many, and the one starting: "arm" or "arm @ point") and once all
  are done (unit None). `jobs` > 1: the units train first in that many worker processes
  (their lines go to stdout), into the sweep store this then reads every unit back from."""
  size, units = experiment.sizes[size_name], {}
  store = os.path.join(workdir, "sweeps")
  seconds = _train_in_workers(experiment, size_name, seeds, workdir, jobs) if jobs > 1 else {}
  todo = _units(experiment, size_name)
  for i, (arm, point) in enumerate(todo):
    if progress is not None:  # the unit as its sweeps' lines name it (policy.train_unit)
      progress(i, len(todo), arm.name if point is None else f"{arm.name} @ {judge.label(point)}")
    task = experiment.task(size, point)
    unit = policy.train_unit(arm, point, task, size, seeds, store=store, log=log,
                             fast_compile=fast_compile(size_name))  # fmt: skip
    unit.seconds = seconds.get((arm.name, judge.label(point)), unit.seconds)
    units[(arm.name, judge.label(point))] = unit
    log(f"{experiment.name}: {arm.name} @ {judge.label(point)} done: budget {unit.budget}, "
        f"plateau {', '.join(unit.plateau())}")  # fmt: skip
  if progress is not None:
    progress(len(todo), len(todo), None)
  return units


def measure(experiment, size_name, units, entry):
  """The Measured of the trained units: the engine's metrics, then the measure's."""
  size, metrics, plateau, budget = experiment.sizes[size_name], {}, {}, {}
  for (arm, key), unit in units.items():
    _merge(metrics, {m: {arm: {key: v}} for m, v in engine_metrics(unit, size).items()})
    plateau.setdefault(arm, {})[key] = unit.plateau()
    budget.setdefault(arm, {})[key] = unit.budget
  seeds = seed_order(experiment, size_name, entry)
  if experiment.measure is not None:
    _merge(metrics, experiment.measure(Trained(units, seeds), size))
  return _measured(experiment, size_name, metrics, plateau, budget, entry)


def _measured(experiment, size_name, metrics, plateau, budget, entry):
  """The judge's Measured: the readings, the registered seeds, the size's axis points and the
  unit each point is read from."""
  points = experiment.points(size_name)
  trained = {judge.label(p): judge.label(experiment.trained_at(p)) for p in points}
  return judge.Measured(metrics, plateau, budget, *read_seeds(experiment, size_name, entry),
                        points, trained)  # fmt: skip


def _unit_json(unit):
  return {
    "arm": unit.arm,
    "point": judge.label(unit.point),
    "rung": unit.rung,
    "selected": None
    if unit.selected is None
    else dict(zip(("learning_rate", "weight_decay"), unit.selected, strict=True)),  # fmt: skip
    "budget": unit.budget,
    "history": unit.history,
    "plateau": unit.plateau(),
    "chance": unit.result.chance,
    "chance_rule": unit.result.chance_rule,
    "seconds": round(unit.seconds, 1),
    "sweep_seconds": round(unit.sweep_seconds, 1),
    "replicas": [
      {
        "seed": r.seed,
        "learning_rate": r.learning_rate,
        "weight_decay": r.weight_decay,
        "final_step": r.final_step,
        "stop_reason": r.stop_reason,
        "val_accuracy_by_step": [[s, va] for s, _, va, _, _ in r.evals],
        **r.final(),
      }
      for r, _, _ in unit.all_runs()
    ],
  }


def exploratory_entry(experiment, size_name):
  """An unregistered stand-in entry that trains the size's exploratory seeds alone and reads
  them as if confirmatory: the sizing run, logged, never a verdict of record."""
  seeds = list(experiment.sizes[size_name].exploratory_seeds)
  design = registry.design_hash(experiment, size_name)
  return {"version": 0, "hash": design, "exploratory": seeds, "confirmatory": seeds}


def run(experiment, size_name, workdir, *, registry_path=registry.REGISTRY, log=print,
        explore=False, progress=None, jobs=1):  # fmt: skip
  """Trains, measures and judges the registered design at `size_name` (`explore`: the
  exploratory seeds alone, unregistered); writes and returns the result (plain JSON).
  `progress(done, total, unit)`: the units trained so far (`train`; the main job's live
  line), beside `log`'s detail. `jobs`: worker processes that train the units (`train`)."""
  declare.validate(experiment)
  if explore:
    entry = exploratory_entry(experiment, size_name)
  else:
    entry = registry.entry(experiment, size_name, registry_path)
  start = time.time()
  seeds = seed_order(experiment, size_name, entry)
  units = train(experiment, size_name, seeds, workdir, log, progress, jobs)
  measured = measure(experiment, size_name, units, entry)
  judged = judge.judge(experiment, measured)
  verdicts = judge.claims(experiment, judged)
  size = experiment.sizes[size_name]
  result = {
    "experiment": experiment.name,
    "section": experiment.section,
    "size": size_name,
    "exploratory_only": explore,
    "version": entry["version"],
    "hash": entry["hash"],
    "commit": commit(),
    "date": datetime.date.today().isoformat(),
    "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_version()}",
    "seconds": round(time.time() - start, 1),
    "scale": page.scale(experiment, size_name),
    "claims": {n: {"text": claims_lib.claim(n).text, "verdict": v} for n, v in verdicts.items()},
    "criteria": [j.as_json() for j in judged],
    # the seeds the per-seed lists hold, in order (a confirm_only run reads no exploratory
    # seed: it trained in the sizing run; the registry keeps which)
    "seeds": dict(
      zip(
        ("exploratory", "confirmatory"),
        map(list, read_seeds(experiment, size_name, entry)),
        strict=True,
      )
    ),
    "tasks": {
      judge.label(p): experiment.task(size, p)
      for p in dict.fromkeys((*experiment.trained_points(size_name), *experiment.points(size_name)))
    },  # fmt: skip
    "units": [_unit_json(u) for u in units.values()],
    "metrics": measured.metrics,
  }
  if experiment.label is not None:
    result["labels"] = experiment.label(result)
  os.makedirs(workdir, exist_ok=True)
  records.write(result, os.path.join(workdir, f"{experiment.name}_{size_name}.json"))
  if experiment.figure is not None:
    experiment.figure(result, os.path.join(workdir, page.figure_name(result)))
  return result


def _statuses(unit, seeds):
  """Per seed, the plateau status of a recorded unit's selected replica, by today's rule."""
  chosen = unit["selected"] or {}
  by_seed = {r["seed"]: r for r in unit["replicas"]
             if (r["learning_rate"], r["weight_decay"]) == tuple(chosen.values())}  # fmt: skip
  out = []
  for seed in seeds:
    r = by_seed.get(seed)
    if r is None:
      out.append("missing")
    else:
      curve = [tuple(point) for point in r["val_accuracy_by_step"]]
      out.append(policy.curve_status(r["stop_reason"], curve, unit["budget"], unit["chance"]))
  return out


def rejudge(result, experiment, registry_path=registry.REGISTRY):
  """`result` (a record) judged again from its own measurements by today's judge and plateau
  rule, nothing retrained; DesignError unless it is the registered design's latest version.
  The record keeps its run's commit and date and gains `rejudged` (the judge's commit)."""
  entry = registry.entry(experiment, result["size"], registry_path)
  if (entry["version"], entry["hash"]) != (result["version"], result["hash"]):
    raise declare.DesignError(f"{experiment.name} {result['size']}: the record is version "
                              f"{result['version']}, the registered design version "
                              f"{entry['version']}: rerun it instead")  # fmt: skip
  seeds = seed_order(experiment, result["size"], entry)
  plateau, budget = {}, {}
  for unit in result["units"]:
    plateau.setdefault(unit["arm"], {})[unit["point"]] = _statuses(unit, seeds)
    budget.setdefault(unit["arm"], {})[unit["point"]] = unit["budget"]
  measured = _measured(experiment, result["size"], result["metrics"], plateau, budget, entry)
  points = measured.points
  judged = judge.judge(experiment, measured)
  verdicts = judge.claims(experiment, judged)
  # a record read back has its points in sorted order ("hard:16" before "hard:2"): the label
  # and the figure read them in the declaration's
  order = [judge.label(p) for p in dict.fromkeys((*experiment.trained_points(result["size"]),
                                                  *points))]  # fmt: skip
  rank = {k: i for i, k in enumerate(order)}
  metrics = {m: {a: dict(sorted(by_point.items(), key=lambda kv: rank.get(kv[0], len(rank))))
                 for a, by_point in arms.items()} for m, arms in result["metrics"].items()}  # fmt: skip
  out = dict(result, metrics=metrics, criteria=[j.as_json() for j in judged], rejudged=commit())
  out["claims"] = {n: {"text": claims_lib.claim(n).text, "verdict": v} for n, v in verdicts.items()}
  for unit in out["units"]:
    unit["plateau"] = plateau[unit["arm"]][unit["point"]]
  if experiment.label is not None:
    out["labels"] = experiment.label(out)
  return out


def record(result, experiment, results_dir=registry.RESULTS, note=""):
  """Files `result` as the record of its size: results/<name>/<size>.json, the figure, the
  page, and a line in the log (`note`: what it says instead of the run, e.g. a re-judging)."""
  if result["exploratory_only"]:
    raise declare.DesignError("record: an exploratory run is sizing, never a record")
  folder = os.path.join(results_dir, experiment.name)
  path = os.path.join(folder, f"{result['size']}.json")
  if os.path.exists(path) and (old := records.read(path))["version"] != result["version"]:
    os.replace(path, os.path.join(folder, f"{result['size']}_v{old['version']}.json"))
  records.write(result, path)
  if experiment.figure is not None:
    experiment.figure(result, os.path.join(folder, page.figure_name(result)))
  with open(os.path.join(folder, "README.md"), "w") as f:
    f.write(page.render(experiment, folder))
  verdicts = ", ".join(f"{n} {c['verdict']}" for n, c in result["claims"].items())
  if not verdicts:  # an experiment of extensions alone (the scorecard): their verdicts counted
    counts = sorted(page.extension_verdicts(result).items())
    verdicts = "no claims; extensions " + ", ".join(f"{k} {n}" for k, n in counts)
  what = note or f"run at {result['commit']} on seeds {result['seeds']['confirmatory']}"
  when = datetime.date.today().isoformat() if note else result["date"]
  registry.log_line(experiment.name, f"{when}: {result['size']} version {result['version']} "
                    f"{what}: {verdicts}", results_dir)  # fmt: skip
