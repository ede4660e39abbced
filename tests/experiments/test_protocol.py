"""protocol.ArmResult.fastest_steps_to (steps to an accuracy at each seed's fastest rate) and
protocol.validation_noise (the validation half's standard error beside the plateau reading)."""

import math

import ml_collections

from experiments import protocol
from jaxformer.train import sweep


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
