"""Results, computed verdicts and the Markdown report shared by every experiment.

An experiment measures, then states its claim as criteria over the measured numbers, and
states controls: the conditions under which the comparison is fair at all.

  report.every_seed("attention recalls: accuracy >= 0.9", acc_per_seed, lambda a: a >= 0.9)
  report.mean_above("with W2 - without W2 (loss), mean > 0", diffs_per_seed, 0.0)

Verdicts: INCONCLUSIVE if any control failed (the models that should learn did not, so the
criteria cannot speak), else PASS if every criterion holds, else FAIL. Each criterion carries
its rule over seeds (`every seed`, or a bootstrap 95% interval of the mean) and the per-seed
values it was computed from. Nothing in a report is written by hand. `write` turns a list of
`Result`s into `results.json` (with every trained replica's record) and `report.md`.
"""

import dataclasses
import json
import math
import os
import time

import numpy as np


@dataclasses.dataclass
class Criterion:
  """One checkable statement about measurements; `passed` must be computed from them.
  `rule` says how numbers over seeds became one answer (empty: a single measurement)."""

  description: str
  passed: bool
  values: dict = dataclasses.field(default_factory=dict)
  rule: str = ""

  def __post_init__(self):
    self.passed = bool(self.passed)


EVERY_SEED = "holds for every seed"
BOOTSTRAP_SAMPLES = 10_000


def every_seed(description, per_seed, test, **values):
  """A criterion that holds only if `test(v)` holds for each seed's value (a NaN never does:
  a missing or diverged run fails it)."""
  per_seed = [float(v) for v in per_seed]
  passed = bool(per_seed) and all(math.isfinite(v) and bool(test(v)) for v in per_seed)
  return Criterion(description, passed, {**values, "per_seed": per_seed}, EVERY_SEED)


def bootstrap_interval(values, level=0.95, seed=0):
  """(low, high): the percentile bootstrap interval of the mean of `values` (fixed seed, so a
  report is reproducible)."""
  values = [float(v) for v in values]
  if not values or not all(math.isfinite(v) for v in values):
    return (math.nan, math.nan)
  rng = np.random.default_rng(seed)
  draws = rng.choice(values, size=(BOOTSTRAP_SAMPLES, len(values)), replace=True).mean(axis=1)
  tail = (1 - level) / 2 * 100
  low, high = np.percentile(draws, [tail, 100 - tail])
  return float(low), float(high)


def mean_above(description, per_seed, threshold, **values):
  """Holds if the bootstrap 95% interval of the mean lies above `threshold`."""
  low, high = bootstrap_interval(per_seed)
  mean = sum(per_seed) / len(per_seed) if per_seed else math.nan
  rule = f"bootstrap 95% interval of the mean > {threshold:g}"
  stats = {"mean": mean, "ci95": [low, high], "per_seed": [float(v) for v in per_seed]}
  return Criterion(description, low > threshold, {**values, **stats}, rule)


def mean_below(description, per_seed, threshold, **values):
  """Holds if the bootstrap 95% interval of the mean lies below `threshold`."""
  low, high = bootstrap_interval(per_seed)
  mean = sum(per_seed) / len(per_seed) if per_seed else math.nan
  rule = f"bootstrap 95% interval of the mean < {threshold:g}"
  stats = {"mean": mean, "ci95": [low, high], "per_seed": [float(v) for v in per_seed]}
  return Criterion(description, high < threshold, {**values, **stats}, rule)


VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")


@dataclasses.dataclass
class Result:
  experiment: str
  claim: str
  setup: str
  criteria: list
  metrics: dict
  table: list = dataclasses.field(default_factory=list)  # rows: dicts with the same keys
  tables: list = dataclasses.field(default_factory=list)  # more: (title, rows) each
  plots: list = dataclasses.field(default_factory=list)  # file names beside the report
  seconds: float = 0.0
  crashed: bool = False  # set when the experiment raised instead of measuring
  controls: list = dataclasses.field(default_factory=list)  # Criterion: the comparison is fair
  size: str = ""
  seeds: list = dataclasses.field(default_factory=list)  # the seeds every trained arm used
  runs: list = dataclasses.field(default_factory=list)  # one record per trained replica

  @property
  def verdict(self):
    if not self.crashed and self.controls and not all(c.passed for c in self.controls):
      return "INCONCLUSIVE"
    return "PASS" if self.criteria and all(c.passed for c in self.criteria) else "FAIL"

  def to_json(self):
    return {
      "experiment": self.experiment,
      "claim": self.claim,
      "verdict": self.verdict,
      "size": self.size,
      "seeds": list(self.seeds),
      "metrics": _jsonable(self.metrics),
      "controls": [_criterion_json(c) for c in self.controls],
      "criteria": [_criterion_json(c) for c in self.criteria],
      "runs": _jsonable(self.runs),
      "seconds": round(self.seconds, 2),
    }


def _criterion_json(c):
  return {
    "description": c.description,
    "passed": c.passed,
    "rule": c.rule,
    "values": _jsonable(c.values),
  }


def _jsonable(value):
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
    value = value.item()
  if hasattr(value, "tolist"):
    return _jsonable(value.tolist())
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def _fmt(value):
  if isinstance(value, float):
    return f"{value:.4g}"
  if isinstance(value, list | tuple):
    return "[" + ", ".join(_fmt(v) for v in value) + "]"
  return str(value)


def _line(c):
  values = ", ".join(f"{k}={_fmt(v)}" for k, v in c.values.items())
  rule = f" _[{c.rule}]_" if c.rule else ""
  return f"- [{'x' if c.passed else ' '}] {c.description}{rule}" + (
    f" ({values})" if values else ""
  )


def markdown_table(rows):
  if not rows:
    return ""
  keys = list(rows[0])
  lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
  lines += ["| " + " | ".join(_fmt(row.get(k, "")) for k in keys) + " |" for row in rows]
  return "\n".join(lines)


def section(result):
  lines = [f"## {result.experiment}: {result.verdict}", "", f"**Claim.** {result.claim}", ""]
  lines += [f"**Setup.** {result.setup}", ""]
  if result.table:
    lines += [markdown_table(result.table), ""]
  for title, rows in result.tables:
    lines += ([f"*{title}*", ""] if title else []) + [markdown_table(rows), ""]
  lines += [f"![{plot}]({plot})" for plot in result.plots]
  if result.controls:
    lines += ["", "**Controls** (if one fails, the verdict is INCONCLUSIVE):", ""]
    lines += [_line(c) for c in result.controls]
  lines += ["", "**Verdict** (computed from the measurements above):", ""]
  lines += [_line(c) for c in result.criteria]
  lines += ["", f"_{result.seconds:.1f} s_", ""]
  return "\n".join(lines)


def tally(results):
  """'7 of 10 experiments PASS, 2 FAIL, 1 INCONCLUSIVE'."""
  counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
  rest = ", ".join(f"{counts[v]} {v}" for v in VERDICTS[1:] if counts[v])
  return f"{counts['PASS']} of {len(results)} experiments PASS" + (f", {rest}" if rest else "")


def write(results, workdir):
  """Writes results.json and report.md under workdir; returns the report path."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump([r.to_json() for r in results], f, indent=2)
  header = [
    "# jaxformer: a measured verdict for every design pressure",
    "",
    f"{tally(results)}. Generated {time.strftime('%Y-%m-%d %H:%M')}"
    f"{' at size ' + results[0].size if results and results[0].size else ''}; every verdict is"
    " computed from the numbers in its section.",
    "",
    "| experiment | verdict | claim |",
    "|---|---|---|",
  ]
  header += [f"| {r.experiment} | {r.verdict} | {r.claim} |" for r in results]
  path = os.path.join(workdir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(header) + "\n\n" + "\n".join(section(r) for r in results))
  return path
