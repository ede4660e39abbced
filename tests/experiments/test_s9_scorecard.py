"""The scorecard on the recall sweep (experiments/s9_scorecard.py): pinned to fixed_memory's
hard end, every built-in at two states differing in the swept field alone, the delta rule
read against no less state, the orderings reading as designed on stated readings (both
directions, and INCONCLUSIVE where attention does not recall), and a tiny run end to end
with one reading per arm per P."""

import dataclasses
import json
import os
import re

import numpy as np
import pytest

from experiments import s1_fixed_memory as fixed_memory
from experiments import s9_scorecard as m
from experiments.engine import declare, judge, page, records, registry, run, stats
from jaxformer import data, ladder, mixers
from jaxformer.analysis import cost
from jaxformer.data import tasks
from tests.experiments import scratch

E = m.EXPERIMENT


def test_the_declaration_validates_as_extensions_and_controls():
  assert declare.validate(E) is E and (E.name, E.section, E.claims) == ("scorecard", 9, ())
  assert {c.tests for c in E.criteria} == {"extension", "control"}
  for c in E.criteria:
    if c.tests == "extension":
      assert c.guarded_by[0] == m.EVERY and c.guarded_by[1] == f"{c.arm}_recalls_fewest", c.name


def test_the_full_size_is_fixed_memorys_hard_end():
  full, hard = E.sizes["full"], fixed_memory.SIZES["full"]
  assert E.points("full") == ("hard:2", "hard:4", "hard:8", "hard:16")
  assert full.task["hard"] == {"vocab_size": 256, "seq_len": 64}
  for point in ("hard", *E.points("full")):
    assert E.task(full, point) == fixed_memory.EXPERIMENT.task(hard, point)
  assert (full.steps, full.exploratory_seeds, full.confirmatory) == (3000, (100,), 5)
  assert len(full.learning_rates) == 2
  assert len(E.points("quick")) >= 3 and E.sizes["quick"].model["d_model"] == 32


def test_every_built_in_trains_at_two_states_that_differ_in_its_field_alone():
  fields = {a.name: (a.fields["mixer"], json.loads(a.fields["mixer_fields"])) for a in E.arms}
  assert {a.rung for a in E.arms} == {"custom"} and fields[m.REF] == mixers.BUILTINS[m.REF]
  for family, (field, values) in mixers.STATE_SWEEPS.items():
    small, large = fields[m.SMALL[family]], fields[m.LARGE[family]]
    lo, hi = small[1].pop(field), large[1].pop(field)
    spec, builtin = mixers.BUILTINS[family]
    assert small == large == (spec, {k: v for k, v in builtin.items() if k != field}), family
    assert lo == values[0] and 2 <= hi / lo <= 4, family
  assert len(E.arms) == 1 + 2 * len(mixers.STATE_SWEEPS)
  for size in E.sizes.values():  # no size sets what tells the arms apart
    assert not {"mixer", "mixer_fields"} & set(size.model)
    for arm in E.arms:
      config = ladder.default_config("custom")
      config.update({**size.model, **arm.fields})
      ladder.build("custom", config)  # builds at every size's width


def _state(arm, size):
  config = ladder.default_config("custom")
  (setting,) = size.points
  length = size.task[setting]["seq_len"]
  config.update({**size.model, **E.arm(arm).fields, "vocab_size": 256, "max_len": length})
  return cost.decode_state_bytes(ladder.build("custom", config), length)


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_delta_rule_is_read_against_no_less_state(size):
  delta = [c for c in E.criteria if c.name.endswith(("_over_linear", "_over_retnet"))]
  assert len(delta) == 4
  for c in delta:
    assert _state(c.against, E.sizes[size]) >= _state(c.arm, E.sizes[size]), c.name


# Stated readings at full's points P = 2, 4, 8, 16 (adjusted recall, means per arm)
ZOOLOGY = {
  "softmax": (1, 1, 1, 1),
  "sliding_window_4": (0.28, 0.1, 0.02, 0),
  "sliding_window_16": (0.66, 0.6, 0.39, 0.04),
}  # fmt: skip (the shares in view)
FALLS, FALLS_LESS = (0.8, 0.5, 0.2, 0), (1, 0.85, 0.5, 0.2)  # a small state, a large one
DELTA_FALLS, DELTA_HOLDS = (1, 0.95, 0.8, 0.5), (1, 1, 1, 0.98)  # the delta rule's


def _levels(**changes):
  levels = dict(ZOOLOGY)
  for family in mixers.STATE_SWEEPS:
    if family != m.WINDOW:
      delta = family in m.DELTA
      levels[m.SMALL[family]] = DELTA_FALLS if delta else FALLS
      levels[m.LARGE[family]] = DELTA_HOLDS if delta else FALLS_LESS
  return levels | changes


def _gap_growth(adjusted, first, last):
  """{arm: {"*": per seed}}: (softmax - arm) at `last` minus at `first`, seed by seed."""
  ref = adjusted[m.REF]
  return {a: {"*": [(r1 - x1) - (r0 - x0) for r0, x0, r1, x1 in zip(ref[first], by[first],
          ref[last], by[last], strict=True)]} for a, by in adjusted.items()}  # fmt: skip


def _over_p(adjusted):
  """{metric: {arm: {"*": per seed}}} of the readings over P: recall (the mean, below the
  guess as 0) and the least adjusted recall, from {arm: {point: per seed}}."""
  stacked = {a: np.asarray(list(by.values())) for a, by in adjusted.items()}  # [P, seed]
  return {"recall": {a: {"*": list(np.maximum(x, 0).mean(0))} for a, x in stacked.items()},
          "least_adjusted": {a: {"*": list(x.min(0))} for a, x in stacked.items()}}  # fmt: skip


def _judged(levels):
  points, n = E.points("full"), 6
  rng = np.random.default_rng(0)
  adjusted = {a: {p: list(np.clip(np.asarray(v) + rng.normal(0, 0.01, n), -1, 1))
                  for p, v in zip(points, levels[a], strict=True)} for a in levels}  # fmt: skip
  metrics = {
    "adjusted": adjusted,
    "gap_growth": _gap_growth(adjusted, points[0], points[-1]),
    **_over_p(adjusted),
  }
  measured = judge.Measured(metrics, {a: {"hard": ["flat"] * n} for a in levels},
                            {a: {"hard": 3000} for a in levels}, (100,), (1, 2, 3, 4, 5), points,
                            {p: "hard" for p in points})  # fmt: skip
  return {j.criterion.name: j for j in judge.judge(E, measured)}


def test_the_orderings_read_as_designed_where_the_literature_holds():
  judged = _judged(_levels())
  # a delta-rule state large enough holds at every P: its gap does not grow
  holds = {f"{m.LARGE[d]}_gap_grows" for d in m.DELTA}
  for name, j in judged.items():
    want = stats.REFUTED if name in holds else stats.SUPPORTED
    assert j.verdict == want, (name, j.verdict, j.why)
    if j.criterion.tests == "extension":
      assert (j.positive.verdict, j.falsification.verdict) == (stats.SUPPORTED, stats.REFUTED)


def test_a_delta_rule_below_linear_attention_is_refuted():
  judged = _judged(_levels(**{m.SMALL[d]: (1, 0.9, 0.6, 0.4) for d in m.DELTA},
                           **{m.LARGE[o]: (1, 0.95, 0.85, 0.7) for o in m.COMPARED}))  # fmt: skip
  for d in m.DELTA:
    for o in m.COMPARED:
      assert judged[f"{d}_over_{o}"].verdict == stats.REFUTED


def test_an_arm_that_fails_the_fewest_pairs_gives_no_gap_reading():
  """Flat at chance along P its gap does not grow, yet it failed at the smallest K (a
  learnability reading): INCONCLUSIVE, naming its control, never REFUTED. The same arm
  recalling the fewest pairs and falling along P reads SUPPORTED (capacity)."""
  arm = m.SMALL["linear"]
  judged = _judged(_levels(**{arm: (0, 0, 0, 0)}))
  assert judged[f"{arm}_recalls_fewest"].verdict == stats.REFUTED
  j = judged[f"{arm}_gap_grows"]
  assert j.verdict == stats.INCONCLUSIVE and f"{arm}_recalls_fewest" in j.why, j.why
  assert j.confirmatory.verdict == stats.REFUTED  # what it would have read
  grows = _judged(_levels(**{arm: (1, 0.5, 0.1, 0)}))[f"{arm}_gap_grows"]
  assert grows.verdict == stats.SUPPORTED


def test_where_attention_does_not_recall_the_orderings_there_are_inconclusive():
  judged = _judged(_levels(softmax=(1, 1, 0.9, 0.5)))
  assert judged[m.EVERY].verdict == stats.REFUTED
  for name, j in judged.items():
    if j.criterion.tests == "extension":
      assert j.verdict == stats.INCONCLUSIVE and m.EVERY in j.why, name


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_small_window_falls_with_p_by_where_mqar_puts_a_query(size):
  """The gap growth's positive case: the share of queries whose pair lies within the small
  window's 4 tokens (what it can recall; adjusted recall reads that share) falls along P."""
  s = E.sizes[size]
  (_, (width, _)), (setting, pairs) = m.STATES[m.WINDOW], next(iter(s.points.items()))
  share = {}
  for p in (pairs[0], pairs[-1]):
    _, params = data.parse_spec(E.task(s, f"{setting}:{p}"))
    keep = ("vocab_size", "seq_len", "num_kv_pairs", "power_a", "random_non_queries")
    batch = tasks.mqar(np.random.default_rng(0), 400, **{k: params[k] for k in keep})
    seen = []
    for x, t, mask in zip(batch["inputs"], batch["targets"], batch["mask"], strict=True):
      for q in np.nonzero(mask)[0]:  # the value first appears at its pair: 2i + 1
        seen.append(q - np.nonzero(x[:q] == t[q])[0][0] < width)
    share[p] = np.mean(seen)
  assert share[pairs[0]] - share[pairs[-1]] >= 2 * m.ORDERED, share


def _subset(experiment, arms):
  """The experiment with `arms` alone and the criteria that read nothing else."""

  def reads(c):
    cases = [x for x in (c.positive, c.falsification) if x]
    return {c.arm, c.against, *(x.arm for x in cases), *(x.against for x in cases)} - {None}

  kept = tuple(a for a in experiment.arms if a.name in arms)
  criteria = tuple(c for c in experiment.criteria if reads(c) <= arms)
  sizes = {name: dataclasses.replace(size, arm_steps={a: v for a, v in size.arm_steps.items()
                                                      if a in arms},
                                     arm_rates={a: v for a, v in size.arm_rates.items()
                                                if a in arms})
           for name, size in experiment.sizes.items()}  # fmt: skip
  return dataclasses.replace(experiment, arms=kept, criteria=criteria, sizes=sizes)


def test_the_tiny_size_runs_end_to_end_with_one_reading_per_arm_per_p(tmp_path):
  """Five arms of the tiny size (all 23 compile for minutes): linear attention at both states,
  both windows and the reference."""
  arms = {m.REF, m.SMALL["linear"], m.LARGE["linear"], m.SMALL[m.WINDOW], m.LARGE[m.WINDOW]}
  small = _subset(E, arms)
  linear = {f"{a}_{c}" for a in ("linear_4", "linear_16") for c in ("gap_grows", "recalls_fewest")}
  linear.add("linear_gap_shrinks")
  assert {c.name for c in small.criteria} == {m.EVERY, *linear}
  entry, result, results = scratch.run_tiny(small, tmp_path)
  assert result["claims"] == {}
  seeds = len(result["seeds"]["exploratory"]) + len(result["seeds"]["confirmatory"])
  adjusted = result["metrics"]["adjusted"]
  for arm in arms:
    assert {p: len(v) for p, v in adjusted[arm].items()} == dict.fromkeys(
      ("mix", "mix:2", "mix:4"), seeds
    )
    assert len(set(result["metrics"]["state_bytes"][arm]["*"])) == 1
  per_p = {a: {p: v for p, v in by.items() if ":" in p} for a, by in adjusted.items()}
  growth = _gap_growth(per_p, "mix:2", "mix:4")
  assert result["metrics"]["gap_growth"].keys() == growth.keys()
  for arm, by in growth.items():
    np.testing.assert_allclose(result["metrics"]["gap_growth"][arm]["*"], by["*"], atol=1e-12)
  assert result["metrics"]["gap_growth"][m.REF]["*"] == [0.0] * seeds
  for metric, by in _over_p(per_p).items():  # the recall-vs-P curve's mean, its least
    assert result["metrics"][metric].keys() == by.keys()
    for arm, want in by.items():
      np.testing.assert_allclose(result["metrics"][metric][arm]["*"], want["*"], atol=1e-12)
  states = {a: v["*"][0] for a, v in result["metrics"]["state_bytes"].items()}
  assert states[m.SMALL["linear"]] < states[m.LARGE["linear"]]
  for c in result["criteria"]:
    assert c["verdict"] in stats.VERDICTS
  run.record(result, small, results_dir=results)  # no claims: the log counts the extensions
  counts = {v: sum(c["verdict"] == v for c in result["criteria"] if c["tests"] == "extension")
            for v in stats.VERDICTS}  # fmt: skip
  line = open(os.path.join(results, "scorecard", "log.md")).read().splitlines()[-1]
  want = ", ".join(f"{v} {n}" for v, n in sorted(counts.items()) if n)
  assert line.endswith(f"on seeds {entry['confirmatory']}: no claims; extensions {want}"), line
  run.record(result, small, results_dir=results)
  folder = os.path.join(results, "scorecard")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  assert os.path.getsize(os.path.join(folder, "scorecard_tiny.png")) > 1000
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(small, folder)


def test_the_readme_draws_the_scorecard_of_the_largest_size_on_file():
  """The README's scorecard figure is the recall-vs-state figure of the largest record in
  results/scorecard/ (full once filed, else quick): a new record leaves it stale, failing here,
  until the README follows."""
  folder = os.path.join(registry.RESULTS, "scorecard")
  size = next(
    s for s in ("accel", "full", "quick") if os.path.exists(os.path.join(folder, f"{s}.json"))
  )
  with open(os.path.join(os.path.dirname(registry.RESULTS), "README.md"), encoding="utf-8") as f:
    shown = re.findall(r"results/scorecard/scorecard_(\w+)\.png", f.read())
  assert shown == [size], f"README.md draws {shown}; the largest scorecard record is {size}"
  assert os.path.getsize(os.path.join(folder, f"scorecard_{size}.png")) > 1000
