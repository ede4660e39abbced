"""Statistics and rules over seeds: the arithmetic of a reading, with no knowledge of designs.

A reading turns per-seed values into one of three answers:

  interval    the percentile bootstrap 95% interval of the mean (10,000 resamples, fixed
              seed: a report is reproducible). `>= t`: SUPPORTED when the interval's low end
              is at least t, REFUTED when its high end is below t, UNRESOLVED when it
              straddles t. `<= t` mirrors it. One late-escaping seed widens the interval
              instead of flipping the answer (evidence item 6).
  every_seed  SUPPORTED when every seed passes, REFUTED when none does, UNRESOLVED when the
              seeds split.

A value that is not finite (a diverged run) never passes, and makes an interval UNRESOLVED.
"""

import dataclasses
import math

import numpy as np

SUPPORTED, REFUTED, UNRESOLVED, INCONCLUSIVE = "SUPPORTED", "REFUTED", "UNRESOLVED", "INCONCLUSIVE"
VERDICTS = (SUPPORTED, REFUTED, UNRESOLVED, INCONCLUSIVE)
BOOTSTRAP_SAMPLES = 10_000
LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class Reading:
  """One statistic read under one rule: the per-seed values, the interval of their mean,
  and the answer."""

  verdict: str
  values: tuple
  mean: float
  low: float
  high: float
  note: str = ""

  def as_json(self):
    return {
      "verdict": self.verdict,
      "values": [_num(v) for v in self.values],
      "mean": _num(self.mean),
      "interval": [_num(self.low), _num(self.high)],
      "note": self.note,
    }


def _num(v):
  v = float(v)
  return v if math.isfinite(v) else str(v)


def adjust(accuracy, chance):
  """Chance-adjusted accuracy: 1 perfect, 0 a guess at chance, below 0 worse than it."""
  return (accuracy - chance) / (1.0 - chance)


def bootstrap_interval(values, level=LEVEL, seed=0):
  """(low, high) of the mean of `values`: the percentile bootstrap (NaN when any value is
  not finite or there are none)."""
  values = np.asarray([float(v) for v in values])
  if values.size == 0 or not np.all(np.isfinite(values)):
    return math.nan, math.nan
  rng = np.random.default_rng(seed)
  draws = rng.choice(values, size=(BOOTSTRAP_SAMPLES, values.size)).mean(axis=1)
  tail = (1 - level) / 2 * 100
  low, high = np.percentile(draws, [tail, 100 - tail])
  return float(low), float(high)


def passes(value, compare, threshold):
  value = float(value)
  if not math.isfinite(value):
    return False
  return value >= threshold if compare == ">=" else value <= threshold


def read(values, compare, threshold, rule):
  """The Reading of per-seed `values` against `threshold` under `rule`."""
  values = tuple(float(v) for v in values)
  if not values:
    return Reading(UNRESOLVED, (), math.nan, math.nan, math.nan, "no seeds to read")
  mean = float(np.mean(values))
  low, high = bootstrap_interval(values)
  if rule == "every_seed":
    held = [passes(v, compare, threshold) for v in values]
    if all(held):
      return Reading(SUPPORTED, values, mean, low, high)
    if not any(held):
      return Reading(REFUTED, values, mean, low, high)
    return Reading(
      UNRESOLVED, values, mean, low, high, f"the seeds split: {sum(held)} of {len(held)} pass"
    )
  if rule != "interval":
    raise ValueError(f"rule={rule!r}: expected 'interval' or 'every_seed'")
  if math.isnan(low):
    return Reading(UNRESOLVED, values, mean, low, high, "a value is not finite (a diverged run)")
  near, far = (low, high) if compare == ">=" else (high, low)
  if passes(near, compare, threshold):
    return Reading(SUPPORTED, values, mean, low, high)
  if not passes(far, compare, threshold):
    return Reading(REFUTED, values, mean, low, high)
  return Reading(
    UNRESOLVED, values, mean, low, high, f"the interval [{low:.3g}, {high:.3g}] straddles "
    f"{threshold:g}"
  )  # fmt: skip


def statistic(kind, values, against=None, untrained=None):
  """Per-seed values of a statistic: value, difference, ratio (paired with `against`, seed by
  seed) or gain (minus `untrained`, seed by seed)."""
  values = [float(v) for v in values]
  other = {"difference": against, "ratio": against, "gain": untrained}.get(kind)
  if kind == "value":
    return values
  if other is None or len(other) != len(values):
    raise ValueError(f"statistic={kind!r}: needs as many paired values as seeds ({len(values)})")
  if kind == "ratio":
    return [a / b if b else math.inf for a, b in zip(values, other, strict=True)]
  return [a - float(b) for a, b in zip(values, other, strict=True)]
