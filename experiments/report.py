"""Results, computed verdicts and the Markdown report shared by every experiment.

An experiment measures, then states its claim as criteria over the measured numbers:

  criteria = [report.Criterion("attention accuracy >= 0.9", att_acc >= 0.9, {"accuracy": att_acc})]

The verdict is PASS only if every criterion holds; nothing in a report is written by hand.
`write` turns a list of `Result`s into `results.json` and `report.md` (one section per
experiment: claim, setup, table, plots, verdict with the measured values).
"""

import dataclasses
import json
import math
import os
import time


@dataclasses.dataclass
class Criterion:
  """One checkable statement about measurements; `passed` must be computed from them."""

  description: str
  passed: bool
  values: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    self.passed = bool(self.passed)


@dataclasses.dataclass
class Result:
  experiment: str
  claim: str
  setup: str
  criteria: list
  metrics: dict
  table: list = dataclasses.field(default_factory=list)  # rows: dicts with the same keys
  plots: list = dataclasses.field(default_factory=list)  # file names beside the report
  seconds: float = 0.0
  crashed: bool = False  # set when the experiment raised instead of measuring

  @property
  def verdict(self):
    return "PASS" if self.criteria and all(c.passed for c in self.criteria) else "FAIL"

  def to_json(self):
    return {
      "experiment": self.experiment,
      "claim": self.claim,
      "verdict": self.verdict,
      "metrics": _jsonable(self.metrics),
      "criteria": [
        {"description": c.description, "passed": c.passed, "values": _jsonable(c.values)}
        for c in self.criteria
      ],
      "seconds": round(self.seconds, 2),
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
  return str(value)


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
  lines += [f"![{plot}]({plot})" for plot in result.plots]
  lines += ["", "**Verdict** (computed from the measurements above):", ""]
  for c in result.criteria:
    values = ", ".join(f"{k}={_fmt(v)}" for k, v in c.values.items())
    lines.append(
      f"- [{'x' if c.passed else ' '}] {c.description}" + (f" ({values})" if values else "")
    )
  lines += ["", f"_{result.seconds:.1f} s_", ""]
  return "\n".join(lines)


def write(results, workdir):
  """Writes results.json and report.md under workdir; returns the report path."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump([r.to_json() for r in results], f, indent=2)
  passed = sum(r.verdict == "PASS" for r in results)
  header = [
    "# jaxformer: a measured verdict for every design pressure",
    "",
    f"{passed} of {len(results)} experiments PASS. Generated {time.strftime('%Y-%m-%d %H:%M')}"
    " by `make run`; every verdict is computed from the numbers in its section.",
    "",
    "| experiment | verdict | claim |",
    "|---|---|---|",
  ]
  header += [f"| {r.experiment} | {r.verdict} | {r.claim} |" for r in results]
  path = os.path.join(workdir, "report.md")
  with open(path, "w") as f:
    f.write("\n".join(header) + "\n\n" + "\n".join(section(r) for r in results))
  return path
