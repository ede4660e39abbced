import os

import pytest

from experiments import harness, parallelism


def _metrics(config, recurrent_ms_per_token, parallel_ms_per_token, example=(5, 2)):
  lengths = list(config.path_lengths)
  layers = config.num_layers
  return {
    "spec_example": {"recurrent": example[0], "non_recurrent": example[1]},
    "critical_path": {
      "L": lengths,
      "rnn": [n + layers - 1 for n in lengths],
      "transformer": [layers] * len(lengths),
    },
    "slope": {
      parallelism.RECURRENT: recurrent_ms_per_token / 1e3,
      parallelism.PARALLEL: parallel_ms_per_token / 1e3,
    },
  }


def test_criteria_pass_when_recurrent_time_grows_faster():
  config = parallelism.get_config("quick")
  result = parallelism.criteria(_metrics(config, 0.3, 0.1), config)
  assert [c.passed for c in result] == [True, True, True]
  assert result[2].values["slope_ratio"] == pytest.approx(3.0)


def test_criteria_fail_when_slopes_are_close_or_paths_are_wrong():
  config = parallelism.get_config("quick")
  close = parallelism.criteria(_metrics(config, 0.15, 0.1), config)
  assert [c.passed for c in close] == [True, True, False]
  wrong_example = parallelism.criteria(_metrics(config, 0.3, 0.1, example=(4, 2)), config)
  assert [c.passed for c in wrong_example] == [False, True, True]
  metrics = _metrics(config, 0.3, 0.1)
  metrics["critical_path"]["transformer"][-1] += 1  # grows with L: not one step per layer
  assert [c.passed for c in parallelism.criteria(metrics, config)] == [True, False, True]


def test_flat_parallel_time_passes_and_flat_recurrent_time_fails():
  config = parallelism.get_config("quick")
  assert parallelism.criteria(_metrics(config, 0.2, 0.0), config)[2].passed
  assert not parallelism.criteria(_metrics(config, 0.0, 0.0), config)[2].passed


def test_slope_is_seconds_per_token():
  assert parallelism.slope([10, 20, 40], [1.0, 2.0, 4.0]) == pytest.approx(0.1)


def test_path_table_matches_the_spec_closed_forms():
  config = parallelism.get_config("quick")
  table = parallelism.path_table(config)
  for row in table:
    assert row["rnn"] == row["L"] + config.num_layers - 1
    assert row["rnn_attention"] == row["L"] + config.num_layers
    assert row["transformer"] == row["softmax"] == config.num_layers


def test_tiny_run_times_both_models(tmp_path):
  config = parallelism.get_config("tiny")
  result = parallelism.run(config, str(tmp_path))
  assert result.experiment == parallelism.NAME and len(result.criteria) == 3
  assert result.criteria[0].passed and result.criteria[1].passed  # exact graph facts
  for name in parallelism.MODELS:
    seconds = result.metrics["step_seconds"][name]
    assert len(seconds) == len(config.lengths) and all(s > 0 for s in seconds)
  assert harness.finite(result.metrics)
  assert len(result.table) == len(config.lengths)
  for plot in result.plots:
    assert plot.startswith(parallelism.NAME) and os.path.getsize(tmp_path / plot) > 1000
