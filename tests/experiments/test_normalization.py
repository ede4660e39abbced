import os

from experiments import harness, normalization


def _metrics(none, softmax, taus):
  """none / softmax: accuracy at (short, long) L; taus: {tau: accuracy}."""
  return {
    "accuracy": {
      "none": {"16": none[0], "64": none[1]},
      "sum": {"16": 0.5, "64": 0.5},
      "softmax": {"16": softmax[0], "64": softmax[1]},
    },
    "tau_accuracy": {f"{t:g}": a for t, a in taus.items()},
  }


def test_criteria_pass_when_raw_sums_degrade_and_softmax_holds():
  config = normalization.get_config("quick")
  metrics = _metrics((0.9, 0.3), (1.0, 0.95), {1.0: 0.9, 8.0: 0.95, 64.0: 0.4})
  assert [c.passed for c in normalization.criteria(metrics, config)] == [True, True, True]


def test_criteria_fail_when_raw_sums_hold_and_sqrt_r_is_poor():
  config = normalization.get_config("quick")
  metrics = _metrics((0.9, 0.9), (1.0, 0.95), {1.0: 0.9, 8.0: 0.5, 64.0: 0.4})
  assert [c.passed for c in normalization.criteria(metrics, config)] == [False, False, False]


def test_tiny_run(tmp_path):
  config = normalization.get_config("tiny")
  result = normalization.run(config, str(tmp_path))
  assert result.experiment == normalization.NAME and len(result.criteria) == 3
  for n in normalization.NORMALIZERS:
    assert set(result.metrics["accuracy"][n]) == {str(n_) for n_ in config.lengths}
  assert set(result.metrics["tau_accuracy"]) == {f"{t:g}" for t in config.taus}
  # Entropy of a softmax row over at most L sources lies in [0, log L].
  for h in result.metrics["tau_entropy"].values():
    assert 0.0 <= h <= __import__("math").log(config.lengths[0]) + 1e-4
  assert harness.finite(result.metrics)
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
