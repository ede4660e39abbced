import os

import numpy as np

from experiments import harness, mlp_memory


def _metrics(loss_w2, loss_no_w2, single, split, top_rate, random_rate):
  return {
    "eval_loss": {"w2": loss_w2, "no_w2": loss_no_w2},
    "gap_single_init": single,
    "gap_single_trained": single,
    "gap_split_init": split,
    "shared_char_rate": top_rate,
    "shared_char_rate_random": random_rate,
  }


def test_criteria_pass():
  config = mlp_memory.get_config("quick")
  metrics = _metrics(2.0, 2.2, single=1e-7, split=0.5, top_rate=0.8, random_rate=0.3)
  assert [c.passed for c in mlp_memory.criteria(metrics, config)] == [True] * 4


def test_criteria_fail():
  config = mlp_memory.get_config("quick")
  metrics = _metrics(2.2, 2.2, single=1e-2, split=1e-5, top_rate=0.35, random_rate=0.3)
  assert [c.passed for c in mlp_memory.criteria(metrics, config)] == [False] * 4


def test_shared_char_rate_counts_the_most_common_current_token():
  sequences = np.array([[5, 5, 7, 5], [5, 9, 9, 9]])
  seq = np.array([[0, 0, 0, 1], [1, 1, 0, 0]])
  pos = np.array([[0, 1, 3, 0], [1, 2, 2, 3]])  # tokens [5, 5, 5, 5] and [9, 9, 7, 5]
  np.testing.assert_allclose(mlp_memory.shared_char_rate(sequences, seq, pos), [1.0, 0.5])


def test_tiny_run(tmp_path):
  config = mlp_memory.get_config("tiny")
  result = mlp_memory.run(config, str(tmp_path))
  assert result.experiment == mlp_memory.NAME and len(result.criteria) == 4
  assert set(result.metrics["eval_loss"]) == {"w2", "no_w2"}
  # W1 folds into Wo in the real single-skip blocks, not in the split-skip block.
  assert result.metrics["gap_single_init"] < 1e-4 < 1e-2 < result.metrics["gap_split_init"]
  assert result.metrics["gap_single_trained"] < 1e-4
  assert 0.0 < result.metrics["shared_char_rate"] <= 1.0
  assert len(result.table) == config.shown_units * min(3, config.top_k)
  assert harness.finite(result.metrics)
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
