"""Design and registry: what is judged is what is hashed, and every version is on file.

The design of an experiment at a size is its declaration's judged content as canonical JSON:
arms (rung and fields), metrics (ranges), axis, criteria (every field but the prose), the
size (schedule, grids, seeds, points), every trained unit's task spec, the source of its
measure and label functions, and the engine's own rules (the plateau and budget rule, the bootstrap). Its
sha256 is the design hash. Prose (`says`, notes, the summary) is not judged and not hashed.

results/registry.json holds, per experiment and size, every registered version:

  {"interaction": {"full": [{"version": 1, "hash": "...", "exploratory": [100, 101],
                             "confirmatory": [1000, ...], "registered": "2026-12-07"}]}}

`entry(experiment, size)` is the latest version, and fails when the declaration's hash is not
its hash: a threshold or a statistic edited without registering a new version.
`register(...)` records a new version with fresh confirmatory seeds from the ledger (seeds
this experiment never used at any size or version, from FIRST_CONFIRMATORY up), and appends
why to the experiment's log beside its results (results/<name>/log.md). History lives there
and in git, not in the code. Versions are per size: a change to the quick design alone
leaves the full verdict of record standing.
"""

import dataclasses
import datetime
import hashlib
import inspect
import json
import os

from experiments import harness
from experiments.engine import declare, policy, stats

REGISTRY = os.path.join(harness.REPO_ROOT, "results", "registry.json")
RESULTS = os.path.join(harness.REPO_ROOT, "results")
FIRST_CONFIRMATORY = 1000  # above every seed the experiments used before the ledger


class Unregistered(declare.DesignError):
  """The declaration at a size is not the registered design (or none is registered)."""


def _fields(value):
  """A dataclass's fields that differ from their defaults (a field added later with a default
  leaves every registered hash as it was)."""
  out = {}
  for f in dataclasses.fields(value):
    v = getattr(value, f.name)
    if f.default is not dataclasses.MISSING and v == f.default:
      continue
    if f.default_factory is not dataclasses.MISSING and v == f.default_factory():
      continue
    out[f.name] = v
  return out


def _jsonable(value):
  if dataclasses.is_dataclass(value):
    return _jsonable(_fields(value))
  if isinstance(value, dict) or hasattr(value, "items"):
    return {str(k): _jsonable(v) for k, v in sorted(dict(value).items(), key=lambda kv: str(kv[0]))}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  return value


def content(experiment, size):
  """The judged content of `experiment` at `size` (a dict of plain JSON values)."""
  e, s = experiment, experiment.sizes[size]
  criteria = [{k: v for k, v in _fields(c).items() if k != "says"} for c in e.criteria]
  return _jsonable(
    {
      "name": e.name,
      "claims": e.claims,
      "arms": [
        {"name": a.name, "rung": a.rung, "fields": a.fields, "lr": a.learning_rates} for a in e.arms
      ],  # fmt: skip
      "metrics": [
        {k: v for k, v in dataclasses.asdict(m).items() if k != "note"} for m in e.metrics
      ],
      "axis": None if e.axis is None else {"name": e.axis.name, "mixed": e.axis.mixed},
      "criteria": criteria,
      "size": s,
      "tasks": {str(p): e.task(s, p) for p in e.trained_points(size)},
      "read_at": {str(p): e.task(s, p) for p in e.points(size)},
      "measure": inspect.getsource(e.measure) if e.measure else None,
      "label": inspect.getsource(e.label) if e.label else None,
      "rules": {
        "plateau_tolerance": policy.PLATEAU_TOLERANCE,
        "plateau_window": policy.PLATEAU_WINDOW,
        "growth": policy.GROWTH,
        "bootstrap": [stats.BOOTSTRAP_SAMPLES, stats.LEVEL],
      },
    }
  )


def design_hash(experiment, size):
  text = json.dumps(content(experiment, size), sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()


def load(path=REGISTRY):
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def versions(experiment, size, path=REGISTRY):
  return load(path).get(experiment.name, {}).get(size, [])


def entry(experiment, size, path=REGISTRY):
  """The registered version the declaration is; Unregistered when it is none."""
  declared = design_hash(experiment, size)
  history = versions(experiment, size, path)
  command = f"python -m experiments.engine register {experiment.name} --size {size} --why '...'"
  if not history:
    raise Unregistered(f"{experiment.name} at {size}: no registered design; {command}")
  latest = history[-1]
  if latest["hash"] != declared:
    raise Unregistered(
      f"{experiment.name} at {size}: the declaration is not registered version "
      f"{latest['version']} (its judged content changed: hash {declared[:12]} != "
      f"{latest['hash'][:12]}); register a new version with why: {command}"
    )
  return latest


def used_seeds(name, registry):
  return {s for entries in registry.get(name, {}).values() for e in entries
          for s in (*e["exploratory"], *e["confirmatory"])}  # fmt: skip


def register(experiment, size, why, path=REGISTRY, log_dir=RESULTS, today=None):
  """Records the declaration at `size` as a new version, with fresh confirmatory seeds, and
  logs `why`. Refuses an empty why and a design already registered as the latest."""
  if not why.strip():
    raise declare.DesignError("why: say why this version exists (it goes into the log)")
  declare.validate(experiment)
  registry = load(path)
  history = registry.setdefault(experiment.name, {}).setdefault(size, [])
  declared = design_hash(experiment, size)
  if history and history[-1]["hash"] == declared:
    raise declare.DesignError(
      f"{experiment.name} at {size}: already registered as version {history[-1]['version']}"
    )
  s = experiment.sizes[size]
  taken = used_seeds(experiment.name, registry) | set(s.exploratory_seeds)
  fresh, seed = [], FIRST_CONFIRMATORY
  while len(fresh) < s.confirmatory:
    if seed not in taken:
      fresh.append(seed)
    seed += 1
  today = today or datetime.date.today().isoformat()
  new = {
    "version": len(history) + 1,
    "hash": declared,
    "exploratory": list(s.exploratory_seeds),
    "confirmatory": fresh,
    "registered": today,
  }
  history.append(new)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(registry, f, indent=1, sort_keys=True)
    f.write("\n")
  log_line(experiment.name, f"{today}: {size} version {new['version']} registered "
           f"(confirmatory seeds {fresh}): {why.strip()}", log_dir)  # fmt: skip
  return new


def log_line(name, text, log_dir=RESULTS):
  """Appends one entry to results/<name>/log.md (made with its heading when new)."""
  folder = os.path.join(log_dir, name)
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, "log.md")
  new = not os.path.exists(path)
  with open(path, "a") as f:
    if new:
      f.write(f"# {name}: design and run log\n\nEvery registered version and every "
              "confirmatory run, newest last.\n\n")  # fmt: skip
    f.write(f"- {text}\n")
