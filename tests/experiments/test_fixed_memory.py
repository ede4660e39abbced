import os

import numpy as np

from experiments import fixed_memory, harness


def _metrics(rnn, attention):
  """Synthetic accuracies over a 3-point grid: rnn for both cells, attention for both."""
  accuracy = {m: list(rnn) for m in fixed_memory.RNNS}
  accuracy |= {m: list(attention) for m in fixed_memory.ATTENTION}
  return {"accuracy": accuracy}


def test_criteria_pass_when_the_rnn_falls_and_attention_holds():
  config = fixed_memory.get_config("quick")
  criteria = fixed_memory.criteria(_metrics([1.0, 0.6, 0.3], [1.0, 0.95, 0.9]), config)
  assert len(criteria) == 4
  assert [c.passed for c in criteria] == [True, True, True, True]


def test_criteria_fail_when_attention_drops_or_the_rnn_holds():
  config = fixed_memory.get_config("quick")
  attention_drops = fixed_memory.criteria(_metrics([1.0, 0.6, 0.3], [1.0, 0.9, 0.5]), config)
  assert [c.passed for c in attention_drops] == [False, False, True, True]
  rnn_holds = fixed_memory.criteria(_metrics([1.0, 0.95, 0.9], [1.0, 1.0, 1.0]), config)
  assert [c.passed for c in rnn_holds] == [True, True, False, False]
  one_fails = _metrics([1.0, 0.6, 0.3], [1.0, 1.0, 1.0])
  one_fails["accuracy"]["rnn_attention"] = [1.0, 0.5, 0.3]
  assert [c.passed for c in fixed_memory.criteria(one_fails, config)] == [False, True, True, True]
  never_learns = fixed_memory.criteria(_metrics([0.1, 0.1, 0.1], [1.0, 1.0, 1.0]), config)
  assert [c.passed for c in never_learns] == [True, True, True, False]


def test_tiny_run_measures_every_model_at_every_point(tmp_path):
  config = fixed_memory.get_config("tiny")
  result = fixed_memory.run(config, str(tmp_path))
  assert result.experiment == fixed_memory.NAME and len(result.criteria) == 4
  for model in config.models:
    acc = result.metrics["accuracy"][model]
    assert len(acc) == len(config.grid) and all(0.0 <= a <= 1.0 for a in acc)
  assert harness.finite(result.metrics)
  assert len(result.table) == len(config.models)
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
  assert np.isfinite(result.metrics["train_cpu_seconds"])
