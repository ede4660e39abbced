import os

import pytest

from experiments import beyond, harness


def _metrics(config, window_acc, full_acc, dense_memory=2.0, dense_time=1.9, window_time=1.0):
  return {
    "memory_slope": {"dense": dense_memory, "blockwise": 1.0, "sliding_window": 1.0, "linear": 1.0},
    "cpu_time_slope": {
      "dense": dense_time,
      "blockwise": 1.7,
      "sliding_window": window_time,
      "linear": 1.0,
    },
    "needle_accuracy": {f"window={config.window}": window_acc, "full": full_acc},
  }


def test_criteria_pass_when_the_window_is_blind_beyond_it_and_dense_is_quadratic():
  config = beyond.get_config("quick")  # distances (4, 8, 16, 48), window 8
  result = beyond.criteria(_metrics(config, [1.0, 0.98, 0.03, 0.04], [1.0] * 4), config)
  assert [c.passed for c in result] == [True] * 5


def test_criteria_fail_case_by_case():
  config = beyond.get_config("quick")
  good_window, good_full = [1.0, 0.98, 0.03, 0.04], [1.0] * 4
  linear_dense = beyond.criteria(_metrics(config, good_window, good_full, dense_memory=1.0), config)
  assert [c.passed for c in linear_dense] == [False, True, True, True, True]
  slow_window = beyond.criteria(_metrics(config, good_window, good_full, window_time=1.6), config)
  assert [c.passed for c in slow_window] == [True, False, True, True, True]
  misses = beyond.criteria(_metrics(config, [1.0, 0.5, 0.03, 0.04], good_full), config)
  assert [c.passed for c in misses] == [True, True, False, True, True]
  sees_far = beyond.criteria(_metrics(config, [1.0, 1.0, 0.6, 0.04], good_full), config)
  assert [c.passed for c in sees_far] == [True, True, True, False, True]
  full_fails = beyond.criteria(_metrics(config, good_window, [1.0, 1.0, 1.0, 0.2]), config)
  assert [c.passed for c in full_fails] == [True, True, True, True, False]


def test_last_slope_is_the_growth_exponent():
  assert beyond.last_slope([512, 1024, 2048], [1.0, 4.0, 16.0]) == pytest.approx(2.0)
  assert beyond.last_slope([512, 1024, 2048], [3.0, 5.0, 10.0]) == pytest.approx(1.0)


def test_tiny_run_benchmarks_and_trains(tmp_path):
  config = beyond.get_config("tiny")
  result = beyond.run(config, str(tmp_path))
  assert result.experiment == beyond.NAME and len(result.criteria) == 5
  for kernel in config.kernels:
    cost = result.metrics["cost"][kernel]
    assert cost["L"] == list(config.lengths) and cost["all_ran"]
    assert all(b > 0 for b in cost["peak_bytes"])
  dense = result.metrics["cost"]["dense"]["peak_bytes"]
  assert dense[1] > dense[0]
  for name, acc in result.metrics["needle_accuracy"].items():
    assert len(acc) == len(config.distances) and all(0.0 <= a <= 1.0 for a in acc), name
  assert harness.finite(result.metrics)
  assert len({tuple(row) for row in result.table}) == 1  # one header for every row
  for plot in result.plots:
    assert plot.startswith(beyond.NAME) and os.path.getsize(tmp_path / plot) > 1000
