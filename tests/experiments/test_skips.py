import math
import os
import types

import pytest

from experiments import protocol, report, skips
from tests.experiments.judge import judge
from tests.train.train_helpers import tiny_config

SEEDS = 3
CHANCE = 0.25  # MQAR, K = 4


RESIDUAL_STEPS = 100.0  # the residual stack's steps to 0.9 at every depth
BOUND = 6400.0  # a no-skip stack that never reached 0.9: not by this step in any longer run


def _metrics(config, passage=None, **adjusted):
  """Adjusted accuracy and steps to 0.9 (first_passage) per (model, depth), every seed alike
  (a list: per seed); the claim holds unless `adjusted` ('no_skip__4': value) or `passage`
  ('no_skip__4': (steps, bound)) says otherwise: the residual stack reaches 0.9 in 100 steps,
  the shallowest no-skip one in 200 (2x), a deeper one never by its bound 6,400 (64x)."""
  passage = passage or {}
  shallow = min(d for d, _ in config.depths)
  m = {"chance": {}, "accuracy": {}, "adjusted": {}, "first_passage": {}}
  for depth, names in config.depths:
    m["chance"][skips.setting(depth)] = CHANCE
    for name in names:
      value = 1.0 if name == "residual" or depth == shallow else 0.0
      value = adjusted.get(f"{name}__{depth}", value)
      per_seed = list(value) if isinstance(value, list) else [value] * SEEDS
      m["adjusted"].setdefault(name, {})[skips.setting(depth)] = per_seed
      raw = [a * (1 - CHANCE) + CHANCE for a in per_seed]
      m["accuracy"].setdefault(name, {})[skips.setting(depth)] = raw
      steps = RESIDUAL_STEPS if name == "residual" else 200.0 if depth == shallow else math.nan
      steps, bound = passage.get(f"{name}__{depth}", (steps, BOUND))
      steps = list(steps) if isinstance(steps, list) else [steps] * SEEDS
      m["first_passage"].setdefault(name, {})[skips.setting(depth)] = {
        "steps": steps,
        "bound": [bound] * SEEDS,
      }
  return m


def _verdict(config, passage=None, **adjusted):
  return judge(skips, _metrics(config, passage, **adjusted), config)


def test_the_claim_passes_with_its_control():
  assert _verdict(skips.get_config("quick")) == ([True], [True, True], "SUPPORTED")
  assert _verdict(skips.get_config("full")) == ([True], [True, True], "SUPPORTED")


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"adjusted": {"residual__4": 0.5}}, [False, True]),  # the residual deep stack fails too
    ({"passage": {"no_skip__4": (500.0, BOUND)}}, [True, False]),  # 5x: not much slower
  ],
)
def test_each_criterion_fails_alone(change, expected):
  got = _verdict(skips.get_config("quick"), change.get("passage"), **change.get("adjusted", {}))
  assert got == ([True], expected, "REFUTED")


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"residual__4": skips.RECALLS}, [True, True]),
    ({"residual__4": skips.RECALLS - 0.001}, [False, True]),
    ({"residual__4": [1.0, skips.RECALLS - 0.001, 1.0]}, [False, True]),  # one seed
  ],
)
def test_each_threshold_from_both_sides(change, expected):
  assert _verdict(skips.get_config("quick"), **change)[1] == expected


@pytest.mark.parametrize(
  "passage, verdict, note",
  [
    ((skips.SLOWER * RESIDUAL_STEPS, BOUND), "SUPPORTED", ""),  # reached, exactly 10x
    ((skips.SLOWER * RESIDUAL_STEPS - 1, BOUND), "REFUTED", ""),  # reached, under 10x
    ((math.nan, skips.SLOWER * RESIDUAL_STEPS), "SUPPORTED", ""),  # never, its bound 10x
    ((math.nan, skips.SLOWER * RESIDUAL_STEPS - 1), "UNRESOLVED", "censored"),  # bound < 10x
    (([math.nan, 500.0, math.nan], BOUND), "UNRESOLVED", "the seeds split"),  # 64x, 5x, 64x
  ],
)
def test_the_slowdown_threshold_from_both_sides_and_censored(passage, verdict, note):
  """A no-skip stack that never reached 0.9 is slower by at least its bound: enough when the
  bound is 10x the residual's steps, undecided (not refuted) when it is less."""
  criterion = skips.slowdown(_metrics(skips.get_config("quick"), {"no_skip__4": passage}), 4)
  assert criterion.verdict == verdict and criterion.note.startswith(note)


def test_a_residual_stack_that_never_reaches_the_threshold_leaves_the_slowdown_undecided():
  m = _metrics(skips.get_config("quick"), {"residual__4": (math.nan, BOUND)})
  assert skips.slowdown(m, 4).verdict == "UNRESOLVED"


@pytest.mark.parametrize("shallow, verdict", [(skips.CONTROL, "SUPPORTED"), (0.49, "INCONCLUSIVE")])
def test_a_shallow_no_skip_stack_that_cannot_learn_makes_it_inconclusive(shallow, verdict):
  controls, _, got = _verdict(skips.get_config("quick"), no_skip__2=shallow)
  assert controls == [verdict == "SUPPORTED"] and got == verdict


def test_one_seed_short_of_a_threshold_is_unresolved():
  assert _verdict(skips.get_config("quick"), residual__4=[1.0, 0.5, 1.0])[2] == "UNRESOLVED"


def test_a_shallow_no_skip_stack_the_slowdown_criterion_accepts_is_inconclusive():
  # The falsification arm: if the shallow plain stack is also 10x slower, the criterion
  # cannot tell depth's slowdown from the missing skip's
  config = skips.get_config("quick")
  assert _verdict(config, {"no_skip__2": (1000.0, BOUND)})[2] == "INCONCLUSIVE"
  (reading,) = skips.falsification(_metrics(config), config)
  assert reading.name == "no_skip_slower" and reading.verdict == "REFUTED"  # 2x: rejected
  assert reading.reads == (("no_skip", "depth=2"), ("residual", "depth=2"))


def test_the_deepest_depth_is_judged_at_full_size():
  config = skips.get_config("full")  # depths 2, 4, 8
  assert _verdict(config, {"no_skip__4": (300.0, BOUND)})[1] == [True, True]  # not the deepest
  assert _verdict(config, {"no_skip__8": (300.0, BOUND)})[1] == [True, False]


def test_the_bound_of_a_stack_that_never_reached_is_its_decay_s_start():
  """Under "wsd" every longer run shares the steps before the decay (0.8 x 1,000 here): a
  run that had not reached 0.9 by then has not in any longer one; under a cosine schedule
  (no shared steps) the bound is the budget itself."""
  for schedule, bound in ((dict(lr_schedule="wsd", lr_decay_fraction=0.2), 800.0), ({}, 1000.0)):
    config = tiny_config(total_steps=1000, warmup_steps=10, **schedule)
    arm = types.SimpleNamespace(
      config=config,
      fastest_steps_to=lambda acc: [math.nan, 300.0],
    )
    trained = types.SimpleNamespace(get=lambda name, setting, arm=arm: arm)
    got = skips.first_passage(trained, "no_skip", 8)
    assert got["steps"][1] == 300.0 and math.isnan(got["steps"][0])
    assert got["bound"] == [bound, bound]


def test_steps_to_the_threshold_against_depth_per_seed():
  config = skips.get_config("quick")
  steps = {"no_skip": [400.0, math.nan, 300.0], "residual": [100.0, 150.0, 100.0]}
  passage = {
    name: {skips.setting(d): {"steps": steps[name], "bound": [BOUND] * 3} for d, _ in config.depths}
    for name in steps
  }
  rows = skips.speed(config, passage)
  assert [(r["model"], r["blocks"]) for r in rows] == [
    (name, depth) for depth, names in config.depths for name in names
  ]
  no_skip = next(r for r in rows if r["model"] == "no_skip")
  assert no_skip["median (reached)"] == 350.0 and no_skip["seeds reached"] == "2/3"


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_trains_both_wirings(tmp_path):
  config = skips.get_config("tiny")
  result = protocol.run(skips, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.verdict in report.VERDICTS
  assert len(result.controls) == 1 and len(result.criteria) == 2
  assert [c.name for c in result.criteria] == ["residual_learns", "no_skip_slower"]
  passage = result.metrics["first_passage"]
  assert set(passage) == {"no_skip", "residual"} and set(passage["residual"]) == {
    "depth=1",
    "depth=2",
  }
  arms = sum(len(names) for _, names in config.depths)
  seeds = len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  assert len(result.runs) == arms * seeds * len(config.learning_rates)
  assert result.design["version"] == skips.VERSION and result.design["config_as_registered"]
  assert len(result.falsification) == 1 and len(result.plateau) == arms
  assert [r["learning_rate"] for r in result.per_rate] == list(config.learning_rates)
  assert set(result.metrics["adjusted"]["no_skip"]) == {"depth=1", "depth=2"}
  assert len(result.metrics["steps_to"]) == arms  # steps to 0.9 against depth, every arm
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
