import os

from experiments import harness, symmetry


def _metrics(matrix_sum, source_only, stateless, sim_source, sim_matrix):
  tasks = ("mqar", "induction")
  acc = {"matrix_sum": matrix_sum, "source_only": source_only, "stateless": stateless}
  return {
    "accuracy": {m: dict.fromkeys(tasks, a) for m, a in acc.items()},
    "similarity": {
      "source_only": dict.fromkeys(tasks, sim_source),
      "matrix_sum": dict.fromkeys(tasks, sim_matrix),
      "stateless": dict.fromkeys(tasks, 0.1),
    },
  }


def test_criteria_pass_when_only_the_two_argument_function_recalls():
  config = symmetry.get_config("quick")
  metrics = _metrics(0.99, 0.3, 0.03, sim_source=0.9, sim_matrix=0.2)
  assert [c.passed for c in symmetry.criteria(metrics, config)] == [True] * 4


def test_criteria_fail_when_the_symmetric_models_recall_or_differ_little():
  config = symmetry.get_config("quick")
  metrics = _metrics(0.6, 0.9, 0.6, sim_source=0.5, sim_matrix=0.45)
  assert [c.passed for c in symmetry.criteria(metrics, config)] == [False] * 4


def test_one_task_failing_fails_the_criterion():
  config = symmetry.get_config("quick")
  metrics = _metrics(0.99, 0.3, 0.03, sim_source=0.9, sim_matrix=0.2)
  metrics["accuracy"]["matrix_sum"]["induction"] = 0.4
  assert [c.passed for c in symmetry.criteria(metrics, config)] == [False, True, True, True]


def test_tiny_run(tmp_path):
  config = symmetry.get_config("tiny")
  result = symmetry.run(config, str(tmp_path))
  assert result.experiment == symmetry.NAME and len(result.criteria) == 4
  for model in symmetry.MODELS:
    assert set(result.metrics["accuracy"][model]) == set(config.tasks)
    for value in result.metrics["similarity"][model].values():
      assert -1.0 <= value <= 1.0
  assert harness.finite(result.metrics)
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
