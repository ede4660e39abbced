"""Results, computed verdicts and the Markdown report shared by every experiment.

An experiment measures, then states its claim as criteria over the measured numbers, and
states controls: the conditions under which the comparison is fair at all.

  report.every_seed("attention recalls: accuracy >= 0.9", acc_per_seed, lambda a: a >= 0.9)
  report.mean_above("with W2 - without W2 (loss), mean > 0", diffs_per_seed, 0.0)

  report.equivalent("bilinear - r = D/4, within 0.05", diffs_per_seed, 0.05)
  report.trained_minus_untrained("receiver dependence >= 0.1", trained, untrained, 0.1)

Each criterion has a verdict computed from its numbers: SUPPORTED, REFUTED or UNRESOLVED
(the seeds split, an interval straddles its threshold or margin, a model it reads is still
learning, exploratory and confirmatory seeds disagree). An experiment's verdict:
INCONCLUSIVE if a control failed or its falsification arm was accepted (the criterion cannot
tell); else UNRESOLVED if a control or falsification reading is; else REFUTED if any
criterion is, UNRESOLVED if any is, SUPPORTED if all are (`Result.verdict`). Each criterion
carries its rule over seeds and the per-seed values it was computed from. Nothing in a report
is written by hand. `write` turns a list of `Result`s into `results.json` (with every trained
replica's record) and `report.md`.
"""

import dataclasses
import json
import math
import os
import time

import numpy as np

SUPPORTED, REFUTED, UNRESOLVED, INCONCLUSIVE = "SUPPORTED", "REFUTED", "UNRESOLVED", "INCONCLUSIVE"
VERDICTS = (SUPPORTED, REFUTED, UNRESOLVED, INCONCLUSIVE)


class Criterion:
  """One checkable statement about measurements, with its verdict computed from them:
  SUPPORTED (it holds), REFUTED (it does not) or UNRESOLVED (the numbers cannot say: an
  interval straddles the threshold, the seeds split, a model it reads is still learning, or
  exploratory and confirmatory seeds disagree; `note` says which). `passed` is
  `verdict == SUPPORTED`; setting it sets the verdict. `rule` says how numbers over seeds
  became one answer (empty: a single measurement). `name` is the criterion's name in its
  experiment's registered design (protocol.Spec); `reads` the (model, setting) arms it reads,
  whose plateau the protocol checks; `decided_by` those of them any one of which decides the
  verdict alone once it has plateaued (a claim for every arm, failed on every seed by one
  arm: the gate does not wait on the others, whose training cannot undo it); `bounded` a note
  when the verdict is the same at every corner of what more training can do to the replicas it
  reads that are still learning (protocol.Spec.learning_bounds)."""

  def __init__(
    self,
    description,
    passed=None,
    values=None,
    rule="",
    *,
    verdict=None,
    name="",
    reads=(),
    note="",
    decided_by=(),
    bounded="",
  ):
    if verdict is None:
      verdict = SUPPORTED if passed else REFUTED
    if verdict not in VERDICTS[:3]:
      raise ValueError(f"verdict={verdict!r}: expected one of {VERDICTS[:3]}")
    self.description, self.values, self.rule = description, dict(values or {}), rule
    self.verdict, self.name, self.reads, self.note = verdict, name, tuple(reads), note
    self.decided_by, self.bounded = tuple(decided_by), bounded

  @property
  def passed(self):
    return self.verdict == SUPPORTED

  @passed.setter
  def passed(self, value):
    self.verdict = SUPPORTED if value else REFUTED

  def unresolved(self, note):
    """This criterion, UNRESOLVED with `note` (kept if it already was)."""
    if self.verdict != UNRESOLVED:
      self.verdict, self.note = UNRESOLVED, note
    return self

  def __repr__(self):
    return f"Criterion({self.description!r}, {self.verdict}, {self.values!r})"


EVERY_SEED = "holds for every seed"
BOOTSTRAP_SAMPLES = 10_000


def _split(holds):
  """SUPPORTED if every seed holds, REFUTED if none does, UNRESOLVED if the seeds split."""
  if holds and all(holds):
    return SUPPORTED, ""
  if not any(holds):
    return REFUTED, ""
  return UNRESOLVED, f"the seeds split: {sum(holds)} of {len(holds)} hold"


def every_seed(description, per_seed, test, *, name="", reads=(), **values):
  """Holds if `test(v)` holds for each seed's value (a NaN never does: a missing or diverged
  run does not hold). SUPPORTED if every seed holds, REFUTED if none, UNRESOLVED if they
  split."""
  per_seed = [float(v) for v in per_seed]
  holds = [math.isfinite(v) and bool(test(v)) for v in per_seed]
  verdict, note = _split(holds)
  return Criterion(
    description,
    None,
    {**values, "per_seed": per_seed},
    EVERY_SEED,
    verdict=verdict,
    name=name,
    reads=reads,
    note=note,
  )


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


def _interval(description, per_seed, verdict_of, rule, level, name, reads, values):
  per_seed = [float(v) for v in per_seed]
  low, high = bootstrap_interval(per_seed, level)
  mean = sum(per_seed) / len(per_seed) if per_seed else math.nan
  stats = {"mean": mean, f"ci{round(level * 100)}": [low, high], "per_seed": per_seed}
  if not (math.isfinite(low) and math.isfinite(high)):
    verdict, note = UNRESOLVED, "not measured on every seed"
  else:
    verdict = verdict_of(low, high)
    note = "the interval straddles the threshold" if verdict == UNRESOLVED else ""
  return Criterion(
    description,
    None,
    {**values, **stats},
    rule,
    verdict=verdict,
    name=name,
    reads=reads,
    note=note,
  )


def mean_above(description, per_seed, threshold, *, name="", reads=(), **values):
  """SUPPORTED if the bootstrap 95% interval of the mean lies above `threshold`, REFUTED if it
  lies at or below it, UNRESOLVED if it straddles it."""
  return _interval(
    description,
    per_seed,
    lambda lo, hi: SUPPORTED if lo > threshold else REFUTED if hi <= threshold else UNRESOLVED,
    f"bootstrap 95% interval of the mean > {threshold:g}",
    0.95,
    name,
    reads,
    values,
  )


def mean_below(description, per_seed, threshold, *, name="", reads=(), **values):
  """SUPPORTED if the bootstrap 95% interval of the mean lies below `threshold`, REFUTED if it
  lies at or above it, UNRESOLVED if it straddles it."""
  return _interval(
    description,
    per_seed,
    lambda lo, hi: SUPPORTED if hi < threshold else REFUTED if lo >= threshold else UNRESOLVED,
    f"bootstrap 95% interval of the mean < {threshold:g}",
    0.95,
    name,
    reads,
    values,
  )


def paired_above(description, a_per_seed, b_per_seed, threshold, *, name="", reads=(), **values):
  """a - b paired by seed, its mean's bootstrap 95% interval above `threshold` (mean_above)."""
  diffs = [float(a) - float(b) for a, b in zip(a_per_seed, b_per_seed, strict=True)]
  values = {**values, "a": [float(a) for a in a_per_seed], "b": [float(b) for b in b_per_seed]}
  return mean_above(description, diffs, threshold, name=name, reads=reads, **values)


def equivalent(description, per_seed_differences, margin, *, name="", reads=(), **values):
  """An equivalence test (two one-sided tests) on paired differences: SUPPORTED when both
  one-sided 95% bootstrap bounds of the mean difference (the 90% two-sided interval) lie
  inside (-margin, margin); REFUTED when the interval lies wholly outside it; UNRESOLVED when
  it straddles either end of the margin."""

  def verdict_of(lo, hi):
    if -margin < lo and hi < margin:
      return SUPPORTED
    return REFUTED if lo >= margin or hi <= -margin else UNRESOLVED

  return _interval(
    description,
    per_seed_differences,
    verdict_of,
    f"equivalence: both one-sided 95% bootstrap bounds of the mean inside +-{margin:g}",
    0.90,
    name,
    reads,
    values,
  )


def trained_minus_untrained(
  description, trained, untrained, threshold, *, above=True, name="", reads=(), **values
):
  """A criterion that may already hold at initialisation, read as the change from init: the
  same networks and seeds, trained minus untrained, paired by seed; every seed's change must
  clear `threshold` (above: change >= threshold; else change <= threshold). Both readings
  stay in the values, so the report shows them side by side."""
  trained, untrained = [float(v) for v in trained], [float(v) for v in untrained]
  change = [t - u for t, u in zip(trained, untrained, strict=True)]
  test = (lambda d: d >= threshold) if above else (lambda d: d <= threshold)
  c = every_seed(
    description,
    change,
    test,
    name=name,
    reads=reads,
    trained=trained,
    untrained=untrained,
    **values,
  )
  c.rule = f"trained minus untrained (same networks and seeds), {EVERY_SEED}"
  return c


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
  seconds: float = 0.0  # wall
  cpu_seconds: float = 0.0  # CPU time of the process that ran it (every thread), for loaded boxes
  compile_seconds: float = 0.0  # of `seconds`, compiling (jaxformer.compile_cache)
  crashed: bool = False  # set when the experiment raised instead of measuring
  controls: list = dataclasses.field(default_factory=list)  # Criterion: the comparison is fair
  size: str = ""
  seeds: list = dataclasses.field(default_factory=list)  # the confirmatory seeds
  runs: list = dataclasses.field(default_factory=list)  # one record per trained replica
  # The confirmatory protocol (experiments/protocol.py); empty for an unregistered module.
  design: dict = dataclasses.field(default_factory=dict)  # experiment, version, hash, size
  commit: str = ""
  date: str = ""  # when it ran (UTC)
  exploratory_seeds: list = dataclasses.field(default_factory=list)
  exploratory: list = dataclasses.field(default_factory=list)  # criteria on those seeds
  falsification: list = dataclasses.field(default_factory=list)  # Criterion: must be REFUTED
  proposed: list = dataclasses.field(default_factory=list)  # falsification arms not trained
  checks: list = dataclasses.field(default_factory=list)  # {name, tag, statement, test}
  per_rate: list = dataclasses.field(default_factory=list)  # {learning_rate, verdict, ...}
  plateau: list = dataclasses.field(default_factory=list)  # rows: per arm, per replica
  # what it ran on (jaxformer.bench.machine: backend, devices, CPU model, jax): XLA compiles
  # for the host's CPU, so a replica's numbers can differ bit for bit on another CPU model
  machine: dict = dataclasses.field(default_factory=dict)

  @property
  def verdict(self):
    """INCONCLUSIVE if a control failed or the falsification arm was accepted (the criterion
    cannot tell); else UNRESOLVED if a control or a falsification reading is unresolved; else
    REFUTED if any criterion is, UNRESOLVED if any is (or none was stated, or it crashed),
    SUPPORTED if every one is."""
    if self.crashed:
      return UNRESOLVED
    if any(c.verdict == REFUTED for c in self.controls) or any(
      c.verdict == SUPPORTED for c in self.falsification
    ):
      return INCONCLUSIVE
    if any(c.verdict == UNRESOLVED for c in self.controls + self.falsification):
      return UNRESOLVED
    if not self.criteria:
      return UNRESOLVED
    verdicts = {c.verdict for c in self.criteria}
    return REFUTED if REFUTED in verdicts else UNRESOLVED if UNRESOLVED in verdicts else SUPPORTED

  def why(self):
    """The criteria (or controls, falsification readings) the verdict rests on, one line."""
    v = self.verdict
    if v == SUPPORTED:
      return ""
    if v == INCONCLUSIVE:
      bad = [f"control failed: {c.description}" for c in self.controls if c.verdict == REFUTED]
      bad += [
        f"the criterion cannot tell (falsification arm accepted): {c.description}"
        for c in self.falsification
        if c.verdict == SUPPORTED
      ]
      return "; ".join(bad)
    pool = self.controls + self.falsification + self.criteria
    want = REFUTED if v == REFUTED else UNRESOLVED
    return "; ".join(
      f"{c.description}" + (f" ({c.note})" if c.note else "") for c in pool if c.verdict == want
    )

  def to_json(self):
    return {
      "experiment": self.experiment,
      "claim": self.claim,
      "verdict": self.verdict,
      "size": self.size,
      "design": dict(self.design),
      "commit": self.commit,
      "date": self.date,
      "seeds": list(self.seeds),
      "exploratory_seeds": list(self.exploratory_seeds),
      "metrics": _jsonable(self.metrics),
      "controls": [_criterion_json(c) for c in self.controls],
      "criteria": [_criterion_json(c) for c in self.criteria],
      "exploratory": [_criterion_json(c) for c in self.exploratory],
      "falsification": [_criterion_json(c) for c in self.falsification],
      "proposed_falsification": _jsonable(self.proposed),
      "checks": _jsonable(self.checks),
      "per_rate": _jsonable(self.per_rate),
      "plateau": _jsonable(self.plateau),
      "machine": _jsonable(self.machine),
      "runs": _jsonable(self.runs),
      "seconds": round(self.seconds, 2),
      "cpu_seconds": round(self.cpu_seconds, 2),
      "compile_seconds": round(self.compile_seconds, 2),
    }


def _criterion_json(c):
  return {
    "name": c.name,
    "description": c.description,
    "verdict": c.verdict,
    "note": c.note,
    "rule": c.rule,
    "reads": _jsonable(list(c.reads)),
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
  note = f" — {c.note}" if c.note else ""
  return f"- **{c.verdict}** {c.description}{rule}{note}" + (f" ({values})" if values else "")


def markdown_table(rows):
  if not rows:
    return ""
  keys = list(rows[0])
  lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
  lines += ["| " + " | ".join(_fmt(row.get(k, "")) for k in keys) + " |" for row in rows]
  return "\n".join(lines)


def section(result):
  lines = [f"## {result.experiment}: {result.verdict}", "", f"**Claim.** {result.claim}", ""]
  if result.design:
    d = result.design
    lines += [
      f"**Design** version {d['version']} (hash `{d['hash'][:12]}`, size {d['size']}, commit "
      f"{result.commit or 'unknown'}); confirmatory seeds {list(result.seeds)}, exploratory "
      f"seeds {list(result.exploratory_seeds)}.",
      "",
    ]
  if result.machine:
    m = result.machine
    lines += [
      f"**Machine.** {m.get('cpu')} ({m.get('cpu_cores')} cores), {m.get('devices')} "
      f"{m.get('backend')} device(s), jax {m.get('jax')}, Python {m.get('python')}.",
      "",
    ]
  lines += [f"**Setup.** {result.setup}", ""]
  if result.table:
    lines += [markdown_table(result.table), ""]
  for title, rows in result.tables:
    lines += ([f"*{title}*", ""] if title else []) + [markdown_table(rows), ""]
  lines += [f"![{plot}]({plot})" for plot in result.plots]
  if result.plateau:
    lines += [
      "",
      "**Plateau** (a criterion reading an arm still learning is UNRESOLVED; validation s.e.: "
      "the standard error of a validation accuracy of 0.5 on the arm's validation half):",
      "",
    ]
    lines += [markdown_table(result.plateau), ""]
  if result.controls:
    lines += ["", "**Controls** (if one fails, the verdict is INCONCLUSIVE):", ""]
    lines += [_line(c) for c in result.controls]
  if result.falsification or result.proposed:
    lines += [
      "",
      "**Falsification** (a real trained arm the criterion must reject; if it is "
      "accepted, the criterion cannot tell and the verdict is INCONCLUSIVE):",
      "",
    ]
    lines += [_line(c) for c in result.falsification]
    lines += [
      f"- proposed, not trained: {p['arm']} against {p['criterion']} ({p['note']})"
      for p in result.proposed
    ]
  lines += ["", "**Verdict** (computed from the measurements above, confirmatory seeds):", ""]
  lines += [_line(c) for c in result.criteria]
  if result.exploratory:
    lines += [
      "",
      "*The same criteria on the exploratory seeds* (a disagreement is UNRESOLVED):",
      "",
    ]
    lines += [_line(c) for c in result.exploratory]
  if result.per_rate:
    seeds = result.per_rate[0].get("seeds", "confirmatory")
    lines += ["", f"*The verdict at each learning rate of the grid* ({seeds} seeds):", ""]
    lines += [
      markdown_table(
        [
          {
            "learning rate": r["learning_rate"],
            "verdict": r["verdict"],
            "criteria": ", ".join(f"{k}: {v}" for k, v in r["criteria"].items()),
          }
          for r in result.per_rate
        ]
      ),
      "",
    ]
  if result.checks:
    lines += [
      "",
      "**Checks** (true by construction or by algebra: property tests, not criteria):",
      "",
    ]
    lines += [f"- [{c['tag']}] {c['statement']} (`{c['test']}`)" for c in result.checks]
  lines += ["", f"_{result.seconds:.1f} s_", ""]
  return "\n".join(lines)


def tally(results):
  """'7 of 10 experiments SUPPORTED, 2 REFUTED, 1 UNRESOLVED'."""
  counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
  rest = ", ".join(f"{counts[v]} {v}" for v in VERDICTS[1:] if counts[v])
  return f"{counts[SUPPORTED]} of {len(results)} experiments SUPPORTED" + (
    f", {rest}" if rest else ""
  )


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
