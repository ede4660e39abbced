"""protocol.ArmResult.fastest_steps_to (steps to an accuracy at each seed's fastest rate),
protocol.validation_noise (the validation half's standard error beside the plateau reading)
and a design's confirm_below (each seed read at the better of the selected rate and the rates
below it)."""

import dataclasses
import math

import ml_collections
import pytest

from experiments import protocol
from jaxformer import ladder
from jaxformer.train import sweep

_ARM = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")


def _run(seed, lr, accuracies, stop="completed"):
  """A replica evaluated every 100 steps with these validation accuracies."""
  evals = [(100 * (i + 1), 0.0, a, 0.0, a) for i, a in enumerate(accuracies)]
  return sweep.Run(seed, lr, 0.1, [], evals, 100 * len(accuracies), stop)


def _arm(runs, selected):
  result = sweep.SweepResult(None, runs, None, 0.25, "1/K", 0.0, 0.0, 0)
  return protocol.ArmResult(None, None, result, selected, 0.0)


RUNS = [
  _run(0, 1e-3, [0.5, 0.95, 0.99]),  # reaches 0.9 at 200
  _run(0, 3e-3, [0.92, 0.96, 0.97]),  # at 100: the fastest, not the best final accuracy
  _run(1, 1e-3, [0.5, 0.7, 0.91]),  # at 300
  _run(1, 3e-3, [0.95, math.nan], stop="diverged"),  # at 100, but diverged: excluded
  _run(2, 1e-3, [0.5, 0.6, 0.7]),  # never
  _run(2, 3e-3, [0.5, 0.6, 0.8]),  # never
]


def test_fastest_steps_to_takes_each_seeds_fewest_over_the_finite_runs():
  fastest = _arm(RUNS, (1e-3, 0.1)).fastest_steps_to(0.9)
  assert fastest[:2] == [100.0, 300.0]
  assert math.isnan(fastest[2])


def test_fastest_steps_to_does_not_depend_on_the_selection():
  for selected in ((1e-3, 0.1), (3e-3, 0.1), None):
    assert _arm(RUNS, selected).fastest_steps_to(0.9)[:2] == [100.0, 300.0]


def test_the_runs_records_recompute_the_fastest_steps():
  arm = _arm(RUNS, (1e-3, 0.1))
  arm.arm = protocol.Arm("m", "s", "transformer", "mqar")
  records = protocol.Trained([arm]).records()
  fewest = {}
  for rec in records:
    if rec["metrics"]["stop_reason"] != "diverged":
      hits = [step for step, va in rec["metrics"]["val_accuracy_by_step"] if va >= 0.9]
      fewest[rec["seed"]] = min(hits + [fewest.get(rec["seed"], math.inf)])
  assert [fewest[seed] for seed in (0, 1)] == arm.fastest_steps_to(0.9)[:2] == [100.0, 300.0]
  assert fewest[2] == math.inf and math.isnan(arm.fastest_steps_to(0.9)[2])


def test_validation_noise_counts_the_validation_halfs_targets_and_warns_when_noisy():
  """32 held-out MQAR examples of 2 queries: a validation half of 16 x 2 targets, a standard
  error at 0.5 of 0.5 / sqrt(32) = 0.088, above half of 0.02 (a flat replica can read as
  learning); 8,192 of 8 queries: 4,096 x 8 targets, 0.5 / sqrt(32,768) = 0.0028, below it."""
  small = ml_collections.ConfigDict(
    {"task": "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2,num_examples=8,num_test_examples=32"}
  )
  assert sweep.validation_targets(small.task) == 32
  assert protocol.validation_noise(small, 0.02) == (
    "0.0884 (32 targets; above 0.01, half the plateau tolerance)"
  )
  large = ml_collections.ConfigDict(
    {"task": "mqar:vocab_size=64,seq_len=32,num_kv_pairs=8,num_examples=8,num_test_examples=8192"}
  )
  assert protocol.validation_noise(large, 0.02) == "0.0028 (32768 targets)"


READ = [  # the selected rate 1e-2, the grid 1e-3 < 3e-3 < 1e-2
  _run(0, 1e-2, [0.5, 0.5, 0.5]),  # stalled at the selected rate ...
  _run(0, 3e-3, [0.6, 0.9, 0.99]),  # ... learns one rate below: read here
  _run(0, 1e-3, [0.6, 0.9, 1.0]),  # two below: never read with confirm_below = 1
  _run(1, 1e-2, [0.9, 0.99, 0.99]),  # better at the selected rate: read there
  _run(1, 3e-3, [0.5, 0.9, 0.95]),
  _run(2, 1e-2, [0.9, 0.99]),  # a tie (the same accuracy and loss): the selected rate
  _run(2, 3e-3, [0.5, 0.99]),
  _run(3, 1e-2, [0.9, math.nan], stop="diverged"),  # diverged: the finite one below
  _run(3, 3e-3, [0.5, 0.8]),
]


def _read(rule):
  arm = _arm(READ, (1e-2, 0.1))
  return dataclasses.replace(arm, rule=rule)


def test_read_rates_are_the_selected_rate_and_the_grid_rates_below_it():
  grid = [1e-3, 3e-3, 1e-2, 3e-2]
  assert protocol.read_rates(grid, 1e-2, 0) == (1e-2,)
  assert protocol.read_rates(grid, 1e-2, 1) == (1e-2, 3e-3)
  assert protocol.read_rates(grid, 1e-2, 2) == (1e-2, 3e-3, 1e-3)
  assert protocol.read_rates(grid, 1e-3, 1) == (1e-3,)  # nothing below the grid's lowest


def test_confirm_below_reads_each_seed_at_its_better_rate_and_only_then():
  below = _read({"confirm_below": 1})
  assert [(r.seed, r.learning_rate) for r in below.selected_runs()] == [
    (0, 3e-3),
    (1, 1e-2),
    (2, 1e-2),
    (3, 3e-3),
  ]
  assert below.per_seed("val_accuracy") == [0.99, 0.99, 0.99, 0.8]
  # without it, and in the per-rate readings, each seed is read at the one rate
  for arm in (_read({}), below.at_rate(1e-2)):
    assert [r.learning_rate for r in arm.selected_runs()] == [1e-2] * 4
    assert arm.per_seed("val_accuracy")[0] == 0.5
  assert [r.learning_rate for r in below.at_rate(3e-3).selected_runs()] == [3e-3] * 4


def test_confirm_below_is_in_the_metrics_and_the_records():
  trained = protocol.Trained([dataclasses.replace(_read({"confirm_below": 1}), arm=_ARM)])
  assert trained.metrics()["read_rate"]["model"]["s"] == [3e-3, 1e-2, 1e-2, 3e-3]
  read = {(x["seed"], x["learning_rate"]) for x in trained.records() if x["metrics"]["read"]}
  assert read == {(0, 3e-3), (1, 1e-2), (2, 1e-2), (3, 3e-3)}
  plain = protocol.Trained([dataclasses.replace(_read({}), arm=_ARM)])
  assert "read_rate" not in plain.metrics()
  assert all("read" not in x["metrics"] for x in plain.records())


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_confirm_below_must_be_a_count(bad):
  config = ml_collections.ConfigDict({"learning_rates": (1e-3,), "confirm_below": bad})
  with pytest.raises(ladder.ConfigError, match="confirm_below"):
    protocol.budget_rule(config)
