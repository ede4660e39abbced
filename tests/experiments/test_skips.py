import math
import os
import types

import pytest

from experiments import protocol, report, skips
from tests.experiments.judge import judge

SEEDS = 3
CHANCE = 0.25  # MQAR, K = 4


def _metrics(config, **adjusted):
  """Adjusted accuracy per (model, depth), every seed alike (a list: per seed); the claim
  holds unless `adjusted` ('no_skip__4': value) says otherwise."""
  m = {"chance": {}, "accuracy": {}, "adjusted": {}}
  for depth, names in config.depths:
    m["chance"][skips.setting(depth)] = CHANCE
    for name in names:
      value = 1.0 if name == "residual" or depth == min(d for d, _ in config.depths) else 0.0
      value = adjusted.get(f"{name}__{depth}", value)
      per_seed = list(value) if isinstance(value, list) else [value] * SEEDS
      m["adjusted"].setdefault(name, {})[skips.setting(depth)] = per_seed
      raw = [a * (1 - CHANCE) + CHANCE for a in per_seed]
      m["accuracy"].setdefault(name, {})[skips.setting(depth)] = raw
  return m


def _verdict(config, **adjusted):
  return judge(skips, _metrics(config, **adjusted), config)


def test_the_claim_passes_with_its_control():
  assert _verdict(skips.get_config("quick")) == ([True], [True, True], "SUPPORTED")
  assert _verdict(skips.get_config("full")) == ([True], [True, True], "SUPPORTED")


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"residual__4": 0.5}, [False, True]),  # the residual deep stack does not learn either
    ({"no_skip__4": 0.8}, [True, False]),  # depth does not stop the no-skip stack
  ],
)
def test_each_criterion_fails_alone(change, expected):
  assert _verdict(skips.get_config("quick"), **change) == ([True], expected, "REFUTED")


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"residual__4": skips.RECALLS}, [True, True]),
    ({"residual__4": skips.RECALLS - 0.001}, [False, True]),
    ({"residual__4": [1.0, skips.RECALLS - 0.001, 1.0]}, [False, True]),  # one seed
    ({"no_skip__4": skips.FAILS}, [True, True]),
    ({"no_skip__4": skips.FAILS + 0.001}, [True, False]),
  ],
)
def test_each_threshold_from_both_sides(change, expected):
  assert _verdict(skips.get_config("quick"), **change)[1] == expected


@pytest.mark.parametrize("shallow, verdict", [(skips.CONTROL, "SUPPORTED"), (0.49, "INCONCLUSIVE")])
def test_a_shallow_no_skip_stack_that_cannot_learn_makes_it_inconclusive(shallow, verdict):
  controls, _, got = _verdict(skips.get_config("quick"), no_skip__2=shallow)
  assert controls == [verdict == "SUPPORTED"] and got == verdict


def test_one_seed_short_of_a_threshold_is_unresolved():
  assert _verdict(skips.get_config("quick"), residual__4=[1.0, 0.5, 1.0])[2] == "UNRESOLVED"


def test_a_deep_no_skip_stack_the_learns_criterion_accepts_is_inconclusive():
  # The falsification arm: if the deep plain stack also "learns", the criterion cannot tell.
  assert _verdict(skips.get_config("quick"), no_skip__4=0.95)[2] == "INCONCLUSIVE"


def test_the_deepest_depth_is_judged_at_full_size():
  config = skips.get_config("full")  # depths 2, 4, 8
  assert _verdict(config, no_skip__4=0.8)[1] == [True, True]  # 4 is not the deepest
  assert _verdict(config, no_skip__8=0.8)[1] == [True, False]


def test_steps_to_the_threshold_against_depth_per_seed():
  config = skips.get_config("quick")
  steps = {"no_skip": [400.0, math.nan, 300.0], "residual": [100.0, 150.0, 100.0]}
  trained = types.SimpleNamespace(
    get=lambda name, setting: types.SimpleNamespace(fastest_steps_to=lambda acc: steps[name])
  )
  rows = skips.speed(config, trained)
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
