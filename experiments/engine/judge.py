"""Judging: measurements in, a verdict per criterion and per claim out.

`judge(experiment, measured)` reads every criterion of the declaration on `measured` (a
Measured: per-seed metrics and plateau statuses by arm and point, and which seeds are
exploratory and which confirmatory). In order:

1. Refusal, before anything is judged: a criterion whose threshold its statistic cannot reach
   (for a gain, given the untrained readings) raises DesignError. A design error is never a
   verdict.
2. Each criterion's statistic is read on the confirmatory seeds (the verdict of record), on
   the exploratory seeds, on its positive case and on its falsification case
   (experiments/engine/stats.py). A reading of an arm still learning at its step cap is
   UNRESOLVED ("still learning"). A replica that never rose above chance (policy's `chance`)
   counts as finished only where the reading expects that arm to be the low one: the
   criterion's arm under `<=` or its `against` under `>=`, read as the criterion expects
   (the claim, its positive case), and the other way round for the falsification case,
   which the criterion must reject. Elsewhere it counts as still learning.
3. The verdict, first rule that applies:
     a control it names in `guarded_by` is not met          INCONCLUSIVE
     its positive case is not SUPPORTED (cannot accept)     INCONCLUSIVE
     its falsification case is not REFUTED (cannot reject)  INCONCLUSIVE
     its confirmatory reading is UNRESOLVED                 UNRESOLVED
     exploratory and confirmatory readings are opposite     UNRESOLVED
       (a size with `confirm_only` reads no exploratory seed: its grid is one point, so they
       train in its sizing run alone)
     otherwise                                              the confirmatory reading
   The one rule for reading controls: a control is met when its confirmatory reading is
   SUPPORTED at the arm's final budget, finished learning or not (a floor that is reached
   stays reached); anything else is not met.
4. A claim's verdict combines the criteria that name it: SUPPORTED when all are; REFUTED when
   any is; else UNRESOLVED when any is; else INCONCLUSIVE. Extensions and controls are
   reported beside the claims and never enter a claim's verdict.
"""

import dataclasses

from experiments.engine import declare, stats
from experiments.engine.stats import INCONCLUSIVE, REFUTED, SUPPORTED, UNRESOLVED


def label(point):
  """The key of an axis point in measurements and results ("*": no axis, or the mixture)."""
  return "*" if point is None else str(point)


@dataclasses.dataclass
class Measured:
  """metrics[metric][arm][label(point)] = per-seed values in `seeds` order; plateau[arm]
  [label(point)] = per-seed status of the unit that trained it; budget likewise."""

  metrics: dict
  plateau: dict
  budget: dict
  exploratory: tuple
  confirmatory: tuple
  points: tuple = ()  # the size's axis points ("first" and "last" name its ends)
  trained: dict = dataclasses.field(default_factory=dict)  # label(point) -> its unit's label

  @property
  def seeds(self):
    return tuple(dict.fromkeys((*self.exploratory, *self.confirmatory)))

  def resolve(self, point):
    if point in declare.ENDS:
      return self.points[0 if point == "first" else -1]
    return point

  def values(self, metric, arm, point, group):
    point = self.resolve(point)
    try:
      per_seed = self.metrics[metric][arm][label(point)]
    except KeyError:
      raise declare.DesignError(
        f"metric {metric!r} of arm {arm!r} at point {label(point)}: not measured"
      ) from None
    keep = self.exploratory if group == "exploratory" else self.confirmatory
    return [v for s, v in zip(self.seeds, per_seed, strict=True) if s in keep]

  def unit(self, arm, point):
    key = label(self.resolve(point))
    return self.trained.get(key, key)

  def learning(self, arm, point, group, low=False):
    """The budget when a replica of `group` at (arm, point) is still learning, else None
    (`low`: the reading expects this arm to fail, so one at chance has finished). A metric of
    no one unit (a statistic across an arm's settings) reads every unit of the arm; an arm
    that trained nothing (an analytic quantity) is never learning."""
    units = self.plateau.get(arm, {})
    key = self.unit(arm, point)
    keys = [key] if key in units else list(units)
    keep = self.exploratory if group == "exploratory" else self.confirmatory
    growing = ("learning",) if low else ("learning", "chance")
    budgets = [
      self.budget[arm][k]
      for k in keys
      if any(st in growing for s, st in zip(self.seeds, units[k], strict=True) if s in keep)
    ]
    return max(budgets) if budgets else None


def _case(criterion, case):
  """(arm, against, at) of `case` (None: the criterion's own reading)."""
  c = criterion
  if case is None:
    return c.arm, c.against, c.at
  return case.arm or c.arm, case.against or c.against, c.at if case.at is None else case.at


def _untrained(experiment, criterion):
  return declare.metric(experiment, criterion.metric).untrained


def _statistic(experiment, criterion, measured, where, group):
  arm, against, at = where
  c = criterion
  values = measured.values(c.metric, arm, at, group)
  other = measured.values(c.metric, against, at, group) if against else None
  untrained = None
  if c.statistic == "gain":
    untrained = measured.values(_untrained(experiment, c), arm, at, group)
  return stats.statistic(c.statistic, values, other, untrained)


def low_arms(criterion, rejects=False):
  """The arms a reading of `criterion` expects to be the low ones: its arm under `<=`, its
  `against` under `>=`; swapped where the reading must reject (`rejects`: the falsification
  case). None for steps_to, where the low arm is the one that learns."""
  if criterion.metric == "steps_to":
    return ()
  first, second = ("arm", "against") if criterion.compare == "<=" else ("against", "arm")
  return (second,) if rejects else (first,)


def reading(experiment, criterion, measured, case=None, group="confirmatory", plateau=True,
            rejects=False):  # fmt: skip
  """The stats.Reading of `criterion` (or its `case`, `rejects`: the falsification case) on
  `group`'s seeds."""
  c = criterion
  if case is not None and case.analytic:
    return stats.read(case.values, c.compare, c.threshold, c.rule)
  where = _case(c, case)
  values = _statistic(experiment, c, measured, where, group)
  r = stats.read(values, c.compare, c.threshold, c.rule)
  if plateau:
    low = {dict(zip(("arm", "against"), where[:2], strict=True))[k] for k in low_arms(c, rejects)}
    for arm in dict.fromkeys(a for a in where[:2] if a is not None):  # in order: a stable note
      budget = measured.learning(arm, where[2], group, low=arm in low)
      if budget is not None:
        note = f"{arm} still learning at its step cap ({budget} steps)"
        return dataclasses.replace(r, verdict=UNRESOLVED, note=note)
  return r


def refuse_unreachable(experiment, measured):
  """DesignError for the first criterion (or case) whose threshold cannot be reached."""
  for c in experiment.criteria:
    declare.check_reach(experiment, c)
    if c.statistic != "gain":
      continue
    for case in (None, c.positive, c.falsification):
      if case is not None and case.analytic:
        continue
      arm, _, at = _case(c, case)
      untrained = measured.values(_untrained(experiment, c), arm, at, "confirmatory")
      declare.check_reach(experiment, c, untrained)


@dataclasses.dataclass
class Judged:
  criterion: declare.Criterion
  verdict: str
  why: str
  confirmatory: stats.Reading
  exploratory: stats.Reading
  positive: stats.Reading | None
  falsification: stats.Reading | None

  def as_json(self):
    c = self.criterion
    cases = {
      "positive": (c.positive, self.positive),
      "falsification": (c.falsification, self.falsification),
    }
    return {
      "name": c.name,
      "tests": c.tests,
      "statement": c.statement(),
      "verdict": self.verdict,
      "why": self.why,
      "confirmatory": self.confirmatory.as_json(),
      "exploratory": self.exploratory.as_json(),
      **{
        key: None
        if case is None
        else {"case": _describe(c, case), "analytic": case.analytic, **r.as_json()}
        for key, (case, r) in cases.items()
      },
    }


def _describe(criterion, case):
  if case.analytic:
    return f"analytic: {case.why}"
  arm, against, at = _case(criterion, case)
  text = arm if against is None else f"{arm} against {against}"
  return text + ("" if at is None else f" at point {at}") + (f" ({case.why})" if case.why else "")


def _verdict(c, confirm, explore, positive, falsification, controls):
  for g in c.guarded_by:
    if controls[g].verdict != SUPPORTED:
      return INCONCLUSIVE, f"control {g} not met ({controls[g].verdict})"
  if c.tests != "control":
    if positive.verdict != SUPPORTED:
      return INCONCLUSIVE, f"cannot be shown to accept: its positive case reads {positive.verdict}"
    if falsification.verdict != REFUTED:
      return INCONCLUSIVE, (
        f"cannot be shown to reject: its falsification case reads {falsification.verdict}"
      )
  if confirm.verdict == UNRESOLVED:
    return UNRESOLVED, confirm.note
  if {confirm.verdict, explore.verdict} == {SUPPORTED, REFUTED}:
    return UNRESOLVED, f"exploratory seeds read {explore.verdict}, confirmatory {confirm.verdict}"
  return confirm.verdict, ""


def judge(experiment, measured):
  """[Judged] for every criterion, controls first (the others read them)."""
  refuse_unreachable(experiment, measured)
  controls, out = {}, []
  ordered = sorted(experiment.criteria, key=lambda c: c.tests != "control")
  for c in ordered:
    is_control = c.tests == "control"
    e = experiment
    confirm = reading(e, c, measured, plateau=not is_control)
    explore = reading(e, c, measured, group="exploratory", plateau=not is_control)
    if not measured.exploratory:  # a confirm_only size: they trained in its sizing run
      explore = dataclasses.replace(explore, note="the exploratory seeds train in the sizing "
                                    "run alone (confirm_only)")  # fmt: skip
    positive = None if c.positive is None else reading(e, c, measured, c.positive)
    falsified = None if c.falsification is None else reading(
      e, c, measured, c.falsification, rejects=True)  # fmt: skip
    if is_control:
      verdict, why = (SUPPORTED, "met") if confirm.verdict == SUPPORTED else (
        confirm.verdict, confirm.note or "not met")  # fmt: skip
      judged = Judged(c, verdict, why, confirm, explore, positive, falsified)
      controls[c.name] = judged
    else:
      verdict, why = _verdict(c, confirm, explore, positive, falsified, controls)
      judged = Judged(c, verdict, why, confirm, explore, positive, falsified)
    out.append(judged)
  order = {c.name: i for i, c in enumerate(experiment.criteria)}
  return sorted(out, key=lambda j: order[j.criterion.name])


def combine(verdicts):
  """A claim's verdict from its criteria's."""
  verdicts = list(verdicts)
  if not verdicts:
    return UNRESOLVED
  if all(v == SUPPORTED for v in verdicts):
    return SUPPORTED
  for v in (REFUTED, UNRESOLVED):
    if v in verdicts:
      return v
  return INCONCLUSIVE


def claims(experiment, judged):
  """{claim number: verdict} from the criteria that name it (extensions and controls never
  enter)."""
  return {
    n: combine(j.verdict for j in judged if j.criterion.tests == n) for n in experiment.claims
  }
