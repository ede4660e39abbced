"""The declaration format: an experiment is data that reads top to bottom.

  Experiment(
    name="interaction", section=5, claims=("5.1", "5.2"),
    arms=(Arm("lowrank", "matrix_sum", {"interaction": "lowrank"}, "(Wq x_L) . (Wk x_i)"), ...),
    metrics=(Metric("share", 0.0, 1.0, untrained="share_untrained"), ...),
    criteria=(Criterion("pure_recalls", tests="5.1", says="...", metric="adjusted",
                        arm="lowrank", compare=">=", threshold=0.9,
                        positive=Case(arm="bilinear"), falsification=Case(arm="additive")),
              ...),
    sizes={"tiny": Size(...), "quick": Size(...), "full": Size(...)},
    task=lambda size, point: "mqar:...",        # the spec string of a trained unit
    measure=analysis_fn,                         # optional: probes of the trained models
  )

A criterion is a statistic of per-seed measurements compared with a threshold under a rule
over seeds (experiments/engine/stats.py). Its statistic reads `metric` on `arm` (at axis point
`at`), and, with `against`, pairs it seed by seed with the same metric on another arm:

  value       metric(arm)                               one arm
  difference  metric(arm) - metric(against)             paired by seed
  ratio       metric(arm) / metric(against)             paired by seed
  gain        metric(arm) - its untrained reading       trained minus untrained, same nets

`positive` is a case the criterion must accept and `falsification` one it must reject: the
same statistic with the arm (or `against`, or `at`) swapped for a real trained arm, or, where
no trained arm can exist, stated per-seed values (`Case(values=..., why=...)`, listed as
analytic). `tests` names a claim number of experiments/claims.py, or "extension" or
"control"; a control guards the criteria that name it in `guarded_by`.

`validate(experiment)` raises DesignError, naming the field, for anything the engine could
not judge: an unknown arm, metric, claim or point; a claim or extension criterion without
both directions; a threshold the statistic cannot reach given the metric's range.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping

from experiments import claims as claims_lib

STATISTICS = ("value", "difference", "ratio", "gain")
ENDS = ("first", "last")  # a criterion's `at`: the size's first or last axis point
COMPARES = (">=", "<=")
RULES = ("interval", "every_seed")
SIZES = ("tiny", "quick", "full", "accel")


class DesignError(ValueError):
  """A declaration the engine refuses to judge; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Arm:
  name: str
  rung: str
  fields: Mapping = dataclasses.field(default_factory=dict)  # model fields beyond the size's
  note: str = ""  # what it is, in a few words
  learning_rates: tuple | None = None  # its own grid at every size (None: the size's)


@dataclasses.dataclass(frozen=True)
class Metric:
  """A per-seed measurement with the range it can take (what a threshold can reach)."""

  name: str
  low: float
  high: float
  untrained: str = ""  # the metric holding the same networks' reading at init (for "gain")
  note: str = ""


@dataclasses.dataclass(frozen=True)
class Case:
  """A reading the criterion must accept (positive) or reject (falsification): the same
  statistic on other arms, or analytic per-seed `values` with the reason no arm exists."""

  arm: str | None = None
  against: str | None = None
  at: object = None
  values: tuple | None = None
  why: str = ""

  @property
  def analytic(self):
    return self.values is not None


@dataclasses.dataclass(frozen=True)
class Criterion:
  name: str
  tests: str  # a claim number, "extension" or "control"
  says: str  # the statement, one line, without the threshold (rendered from the data)
  metric: str
  arm: str
  threshold: float
  compare: str = ">="
  statistic: str = "value"
  against: str | None = None
  # an axis point: a value of every size's `points`, or "first" / "last" (that size's first or
  # last point); None: the experiment's one setting (no axis, or the mixture of a mixed one)
  at: object = None
  rule: str = "interval"
  positive: Case | None = None
  falsification: Case | None = None
  guarded_by: tuple = ()  # names of control criteria that must be met

  def statement(self):
    """The criterion as a sentence, its threshold rendered from the data."""
    what = {
      "value": f"{self.metric}({self.arm})",
      "difference": f"{self.metric}({self.arm}) - {self.metric}({self.against})",
      "ratio": f"{self.metric}({self.arm}) / {self.metric}({self.against})",
      "gain": f"{self.metric}({self.arm}) trained - untrained",
    }[self.statistic]
    where = f" at point {self.at}" if self.at is not None else ""
    rule = "mean's 95% interval" if self.rule == "interval" else "every seed"
    return f"{self.says}: {what}{where} {self.compare} {self.threshold:g} ({rule})"


@dataclasses.dataclass(frozen=True)
class Size:
  """Everything a size trains with. `task` holds the task's parameters, `model` the fields
  every arm shares; `points` the axis points trained (or, with a mixed axis, read). A mixed
  axis may group its points by the setting each trains on, as a mapping {setting: points}:
  each arm then trains one model per setting and is read at "setting:point"."""

  task: Mapping
  model: Mapping
  steps: int  # the first budget
  step_cap: int  # the budget rule doubles up to this
  learning_rates: tuple
  exploratory_seeds: tuple
  confirmatory: int  # how many confirmatory seeds the registry's ledger hands out
  weight_decays: tuple = (0.1,)
  batch_size: int = 32
  eval_every: int = 50
  warmup_steps: int = 50
  early_stop_accuracy: float = 0.99
  reach: float = 0.9  # steps_to: the first step at this validation accuracy
  points: tuple | Mapping = ()
  # "arm" or "arm @ trained point" -> its own (steps, step_cap); the second wins
  arm_steps: Mapping = dataclasses.field(default_factory=dict)
  # arm -> its learning-rate grid at this size, where it differs from the arm's own (a quick
  # size trains each arm at the rate its sizing run selected)
  arm_rates: Mapping = dataclasses.field(default_factory=dict)
  extra: Mapping = dataclasses.field(default_factory=dict)  # the measure's own settings
  # a confirmatory run trains the confirmatory seeds alone (every arm's grid must be one
  # point: the exploratory seeds select nothing there; they train in the sizing run)
  confirm_only: bool = False

  def rates(self, arm):
    """The arm's learning-rate grid here: its arm_rates entry, else the arm's own grid, else
    the size's."""
    return tuple(self.arm_rates.get(arm.name) or arm.learning_rates or self.learning_rates)

  def schedule(self):
    """The training-config fields of every arm at this size (the first budget)."""
    return {
      "batch_size": self.batch_size,
      "total_steps": self.steps,
      "eval_every": self.eval_every,
      "warmup_steps": self.warmup_steps,
      "early_stop_accuracy": self.early_stop_accuracy,
    }


@dataclasses.dataclass(frozen=True)
class Axis:
  """The pressure's own axis. `mixed`: one model per arm (per setting, where the size groups
  its points by setting) trains on the setting's one task and is read at each of its points:
  Zoology's mixed-pair recall, where that task is the mixture of the points, or a model
  trained at a short length and read at longer ones. Else each point trains its own model."""

  name: str  # e.g. "P" (MQAR pairs), "L", "depth", "rank"
  mixed: bool = False
  note: str = ""


@dataclasses.dataclass(frozen=True)
class Experiment:
  name: str
  section: int
  claims: tuple
  summary: str  # what it compares, two or three lines
  arms: tuple
  criteria: tuple
  sizes: Mapping
  task: Callable  # (size: Size, point) -> task spec string; point None without an axis
  metrics: tuple = ()
  axis: Axis | None = None
  measure: Callable | None = None  # (trained, size) -> {metric: {arm: {point: [per seed]}}}
  figure: Callable | None = None  # (result, path) -> None: the figure that decides the claims
  label: Callable | None = None  # (result) -> {arm: label}: a failure's kind, by a registered rule
  # (ax, result, number) -> None: claim `number`'s summary panel, where the generic one of
  # experiments/engine/summary.py cannot show it well (not judged, not hashed)
  panel: Callable | None = None

  def arm(self, name):
    for a in self.arms:
      if a.name == name:
        return a
    raise DesignError(f"{self.name}: arm {name!r}: no such arm")

  def criterion(self, name):
    for c in self.criteria:
      if c.name == name:
        return c
    raise DesignError(f"{self.name}: criterion {name!r}: no such criterion")

  def points(self, size):
    """The points each arm is read at (None: no axis)."""
    if self.axis is None:
      return (None,)
    points = self.sizes[size].points
    if isinstance(points, Mapping):
      return tuple(f"{setting}:{p}" for setting, ps in points.items() for p in ps)
    return tuple(points)

  def trained_points(self, size):
    """The points at which each arm trains a model: every point; with a mixed axis, one
    (None) or one per setting."""
    if self.axis is None:
      return (None,)
    if not self.axis.mixed:
      return self.points(size)
    points = self.sizes[size].points
    return tuple(points) if isinstance(points, Mapping) else (None,)

  def trained_at(self, point):
    """The trained point whose model is read at `point`."""
    if self.axis is None or not self.axis.mixed:
      return point
    return point.split(":")[0] if isinstance(point, str) and ":" in point else None


def spec(task, params):
  """A task spec string: spec("mqar", {"vocab_size": 64}) -> "mqar:vocab_size=64"."""
  return f"{task}:" + ",".join(f"{k}={v}" for k, v in params.items())


# Metrics every trained arm gets from the engine (experiments/engine/policy.py).
ACCURACY = Metric("accuracy", 0.0, 1.0, note="raw accuracy on the eval half")
ADJUSTED = Metric(
  "adjusted",
  -1.0,
  1.0,
  note="(accuracy - chance) / (1 - chance): 1 perfect, 0 a guess at chance, below 0 worse "
  "than that guess (the model puts its answers where chance would not)",
)
OVER_CHANCE = Metric("over_chance", 0.0, math.inf, note="accuracy / chance")
STEPS_TO = Metric(
  "steps_to",
  0.0,
  math.inf,
  note="the first evaluated step whose validation accuracy reaches the size's `reach`; "
  "never reached: the arm's final budget (a censored reading)",
)
ENGINE_METRICS = (ACCURACY, ADJUSTED, OVER_CHANCE, STEPS_TO)


def metric(experiment, name):
  for m in (*ENGINE_METRICS, *experiment.metrics):
    if m.name == name:
      return m
  raise DesignError(f"{experiment.name}: metric {name!r}: no such metric")


def reach(metric_, statistic, compare, untrained=None):
  """The furthest the statistic can go in the criterion's direction: the bound a threshold
  must not pass. `untrained`: per-seed untrained readings (gain)."""
  up = compare == ">="
  if statistic == "value":
    return metric_.high if up else metric_.low
  if statistic == "difference":
    return metric_.high - metric_.low if up else metric_.low - metric_.high
  if statistic == "ratio":
    if metric_.low < 0:
      return math.nan
    return math.inf if up else 0.0
  if untrained is None:  # gain: known once the untrained networks are read
    return math.inf if up else -math.inf
  room = [(metric_.high if up else metric_.low) - u for u in untrained]
  return sum(room) / len(room)


def check_reach(experiment, criterion, untrained=None):
  """DesignError when `criterion`'s threshold lies beyond what its statistic can reach."""
  m = metric(experiment, criterion.metric)
  bound = reach(m, criterion.statistic, criterion.compare, untrained)
  if math.isnan(bound):
    raise DesignError(
      f"{experiment.name}.{criterion.name}: statistic='ratio' needs a metric that cannot go "
      f"below 0 ({m.name} reaches {m.low:g})"
    )
  beyond = criterion.threshold > bound if criterion.compare == ">=" else criterion.threshold < bound
  if beyond:
    given = " given its untrained reading" if untrained is not None else ""
    raise DesignError(
      f"{experiment.name}.{criterion.name}: threshold {criterion.threshold:g} cannot be "
      f"reached: {criterion.statistic} of {m.name} {criterion.compare} at most {bound:.3g}"
      f"{given} (a design error, not a verdict)"
    )


def _check_case(experiment, criterion, case, field):
  where = f"{experiment.name}.{criterion.name}.{field}"
  if case is None:
    raise DesignError(f"{where}: a {criterion.tests} criterion needs both directions")
  if case.analytic:
    if not case.why:
      raise DesignError(f"{where}: analytic values need `why` (no trained arm can exist)")
    if not case.values or not all(isinstance(v, (int, float)) for v in case.values):
      raise DesignError(f"{where}.values: a non-empty tuple of numbers")
    return
  for name in (case.arm, case.against):
    if name is not None:
      experiment.arm(name)
  if (case.arm, case.against, case.at) == (None, None, None):
    raise DesignError(f"{where}: swaps nothing (name an arm, `against` or `at`)")


def validate(experiment):
  """Raises DesignError naming the field of anything the engine cannot judge."""
  e = experiment
  for number in e.claims:
    try:
      claims_lib.claim(number)
    except KeyError as err:
      raise DesignError(f"{e.name}.claims: {err.args[0]}") from None
  names = [a.name for a in e.arms]
  if len(set(names)) != len(names):
    raise DesignError(f"{e.name}.arms: names repeat: {names}")
  if not e.sizes:
    raise DesignError(f"{e.name}.sizes: none declared")
  for size_name, size in e.sizes.items():
    if size_name not in SIZES:
      raise DesignError(f"{e.name}.sizes: {size_name!r} is not one of {SIZES}")
    if size.step_cap < size.steps:
      raise DesignError(f"{e.name}.sizes[{size_name}].step_cap: below steps ({size.steps})")
    if size.confirm_only:
      for arm in e.arms:
        points = len(size.rates(arm)) * len(size.weight_decays)
        if points != 1:
          raise DesignError(
            f"{e.name}.sizes[{size_name}].confirm_only: {arm.name}'s grid "
            f"has {points} points (the exploratory seeds select among them)"
          )
    for key, (first, cap) in size.arm_steps.items():
      name, _, point = key.partition(" @ ")
      e.arm(name)
      if point and point not in map(str, e.trained_points(size_name)):
        raise DesignError(f"{e.name}.sizes[{size_name}].arm_steps[{key}]: no such trained point")
      if cap < first:
        raise DesignError(f"{e.name}.sizes[{size_name}].arm_steps[{key}]: cap below steps")
    for name, rates in size.arm_rates.items():
      e.arm(name)
      if not rates or any(not 0 < r < 1 for r in rates):
        raise DesignError(f"{e.name}.sizes[{size_name}].arm_rates[{name}]: {rates!r} is not a "
                          "grid of learning rates in (0, 1)")  # fmt: skip
    if e.axis and not size.points:
      raise DesignError(f"{e.name}.sizes[{size_name}].points: an axis needs its points")
  controls = {c.name for c in e.criteria if c.tests == "control"}
  for c in e.criteria:
    where = f"{e.name}.{c.name}"
    if c.tests not in claims_lib.TAGS and c.tests not in e.claims:
      raise DesignError(f"{where}.tests: {c.tests!r} is not one of this experiment's claims "
                        f"{e.claims} or {claims_lib.TAGS}")  # fmt: skip
    for field, allowed, value in (
      ("statistic", STATISTICS, c.statistic),
      ("compare", COMPARES, c.compare),
      ("rule", RULES, c.rule),
    ):
      if value not in allowed:
        raise DesignError(f"{where}.{field}: {value!r} is not one of {allowed}")
    e.arm(c.arm)
    if (c.statistic in ("difference", "ratio")) != (c.against is not None):
      raise DesignError(f"{where}.against: needed by difference and ratio, and only by them")
    if c.against is not None:
      e.arm(c.against)
    m = metric(e, c.metric)
    if c.statistic == "gain" and not m.untrained:
      raise DesignError(f"{where}.statistic: gain needs metric {m.name!r} to name `untrained`")
    for size_name in e.sizes:
      points = e.points(size_name)
      for at in {c.at, *(x.at for x in (c.positive, c.falsification) if x)} - {None}:
        if at not in (*points, *(ENDS if e.axis else ())):
          raise DesignError(f"{where}.at: {at!r} is not a point of size {size_name}: {points}")
    for g in c.guarded_by:
      if g not in controls:
        raise DesignError(f"{where}.guarded_by: {g!r} is not a control criterion")
    if c.tests != "control":
      _check_case(e, c, c.positive, "positive")
      _check_case(e, c, c.falsification, "falsification")
    check_reach(e, c)
  return experiment
