import math
import os

import pytest

from experiments import fixed_memory, harness, protocol, report

SEEDS = 3


def _config():
  c = fixed_memory.get_config("quick")
  c.models = ("lstm", "linear_attention", "transformer")
  c.widths, c.grid, c.attention_from_width = (32, 128), ((2, 16), (8, 32)), 32
  return c


def _metrics(config, acc):
  """acc(model, width, pairs) -> raw accuracy, the same for every seed; adjusted from 1/K."""
  m = {"accuracy": {}, "adjusted": {}}
  for name in config.models:
    for width in config.widths:
      for pairs, length in config.grid:
        a = acc(name, width, pairs)
        key = fixed_memory.setting(width, pairs, length)
        m["accuracy"].setdefault(name, {})[key] = [a] * SEEDS
        m["adjusted"].setdefault(name, {})[key] = [protocol.adjust(a, 1 / pairs)] * SEEDS
  return m


def _claim_holds(name, width, pairs):
  if name in fixed_memory.ATTENTION:
    return 1.0
  if pairs == 2:  # the fixed state recalls 2 pairs when wide, not when narrow
    return 0.95 if width == 128 else 0.8
  return 0.3  # 8 pairs: too many for any width in the grid


def _verdicts(config, acc):
  metrics = _metrics(config, acc)
  return (
    [c.passed for c in fixed_memory.controls(metrics, config)],
    [c.passed for c in fixed_memory.criteria(metrics, config)],
  )


def test_the_claim_passes_with_its_controls():
  config = _config()
  controls, criteria = _verdicts(config, _claim_holds)
  assert controls == [True, True]  # lstm, linear_attention
  # per fixed-state model: (drop, D* grows); then the transformer recalls
  assert criteria == [True, True, True, True, True]


def test_a_fixed_state_model_that_never_learns_makes_it_inconclusive():
  config = _config()

  def stuck(name, width, pairs):  # the LSTM guesses (adjusted 0) even with a wide state
    return 1 / pairs if name == "lstm" else _claim_holds(name, width, pairs)

  controls, _ = _verdicts(config, stuck)
  assert controls == [False, True]


@pytest.mark.parametrize("adjusted, passes", [(0.5, True), (0.49, False)])
def test_the_control_threshold_sides(adjusted, passes):
  config = _config()

  def at(name, width, pairs):
    if name == "lstm" and width == 128 and pairs == 2:
      return adjusted * (1 - 1 / pairs) + 1 / pairs  # raw accuracy with that adjusted score
    return _claim_holds(name, width, pairs)

  assert _verdicts(config, at)[0][0] == passes


@pytest.mark.parametrize("large_k, passes", [(0.73, True), (0.745, False)])
def test_the_drop_threshold_sides(large_k, passes):
  """At D=128 the LSTM's adjusted accuracy is 0.9 at K=2 (raw 0.95, chance 1/2); a drop of
  0.2 puts it at 0.7 adjusted at K=8, raw 0.7 * 7/8 + 1/8 = 0.7375."""
  config = _config()

  def at(name, width, pairs):
    if name == "lstm" and pairs == 8:
      return large_k
    return _claim_holds(name, width, pairs)

  metrics = _metrics(config, at)
  key_small, key_large = "D=128 K=2 L=16", "D=128 K=8 L=32"
  drop = metrics["adjusted"]["lstm"][key_small][0] - metrics["adjusted"]["lstm"][key_large][0]
  assert (drop >= fixed_memory.DROP) == passes
  criteria = [c.passed for c in fixed_memory.criteria(metrics, config)]
  assert criteria == [passes, True, True, True, True]  # only the LSTM's drop criterion moves


def test_a_fixed_state_that_recalls_more_pairs_with_no_more_width_fails_the_growth():
  config = _config()

  def at(name, width, pairs):  # the LSTM reaches 0.9 at D=32 for K=2 and K=8 alike
    if name == "lstm":
      return 0.95 if pairs == 2 else (0.92 if width >= 32 else 0.3)
    return _claim_holds(name, width, pairs)

  criteria = [c.passed for c in fixed_memory.criteria(_metrics(config, at), config)]
  assert criteria[1] is False  # D* did not grow
  assert criteria[2:] == [True, True, True]


def test_d_star_not_reached_anywhere_counts_as_growth_and_inf_is_reported():
  config = _config()
  metrics = _metrics(config, _claim_holds)
  assert fixed_memory.smallest_width(metrics, config, "lstm", 8, 32) == math.inf
  assert fixed_memory.smallest_width(metrics, config, "lstm", 2, 16) == 128
  assert fixed_memory.smallest_width(metrics, config, "transformer", 8, 32) == 32


@pytest.mark.parametrize("lowest, passes", [(0.9, True), (0.89, False)])
def test_attention_must_recall_at_every_point_sides(lowest, passes):
  config = _config()

  def at(name, width, pairs):
    if name == "transformer" and width == 32 and pairs == 8:
      return lowest
    return _claim_holds(name, width, pairs)

  assert _verdicts(config, at)[1] == [True, True, True, True, passes]


def test_one_seed_below_fails_an_every_seed_criterion():
  config = _config()
  metrics = _metrics(config, _claim_holds)
  metrics["accuracy"]["transformer"]["D=128 K=8 L=32"] = [1.0, 0.5, 1.0]
  assert [c.passed for c in fixed_memory.criteria(metrics, config)][-1] is False


def test_tiny_run_trains_every_arm_over_seeds(tmp_path):
  config = fixed_memory.get_config("tiny")
  result = protocol.run(fixed_memory, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.experiment == fixed_memory.NAME and result.verdict in report.VERDICTS
  arms = len(config.models) * len(config.widths) * len(config.grid)
  assert len(result.table) == arms
  replicas = len(config.seeds) * len(config.learning_rates)
  assert len(result.runs) == arms * replicas
  assert sum(r["metrics"]["selected"] for r in result.runs) == arms * len(config.seeds)
  for name in config.models:
    for values in result.metrics["accuracy"][name].values():
      assert len(values) == len(config.seeds) and all(0.0 <= a <= 1.0 for a in values)
  assert harness.finite(result.metrics["accuracy"])
  assert len(result.controls) == 1 and len(result.criteria) == 3
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
