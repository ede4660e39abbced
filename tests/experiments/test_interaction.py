import os

import numpy as np
import pytest

from experiments import harness, interaction


def _metrics(accuracy, tanh_share=0.16):
  return {
    "accuracy": dict(zip(interaction.INTERACTIONS, accuracy, strict=True)),
    "interaction_share": {"tanh(x1 + x3)": tanh_share, "x1 + x3": 0.0, "x1 * x3": 1.0},
  }


def test_criteria_pass_when_pure_interactions_recall_and_additive_fails():
  config = interaction.get_config("quick")
  result = interaction.criteria(_metrics([0.28, 0.3, 0.99, 0.97]), config)
  assert [c.passed for c in result] == [True, True, True]


def test_criteria_fail_when_the_claim_does_not_hold():
  config = interaction.get_config("quick")
  lowrank_fails = interaction.criteria(_metrics([0.28, 0.3, 0.99, 0.6]), config)
  assert [c.passed for c in lowrank_fails] == [False, True, True]
  additive_recalls = interaction.criteria(_metrics([0.9, 0.3, 0.99, 0.97]), config)
  assert [c.passed for c in additive_recalls] == [True, False, True]
  strong_tanh = interaction.criteria(_metrics([0.28, 0.3, 0.99, 0.97], tanh_share=0.7), config)
  assert [c.passed for c in strong_tanh] == [True, True, False]


def test_interaction_share_of_the_three_surfaces():
  x1, x3 = interaction.grid(interaction.get_config("quick"))
  assert interaction.interaction_share(x1 + x3) == pytest.approx(0.0, abs=1e-12)
  assert interaction.interaction_share(x1 * x3) == pytest.approx(1.0, abs=1e-12)
  tanh = interaction.interaction_share(np.tanh(x1 + x3))
  assert 0.05 < tanh < 0.3  # mostly a sum: saturation adds a little interaction
  rng = np.random.default_rng(0)
  g, h = rng.normal(size=(50, 1)), rng.normal(size=(1, 50))
  assert interaction.interaction_share(g + h) == pytest.approx(0.0, abs=1e-12)


def test_tiny_run_trains_every_interaction(tmp_path):
  config = interaction.get_config("tiny")
  result = interaction.run(config, str(tmp_path))
  assert result.experiment == interaction.NAME and len(result.criteria) == 3
  assert set(result.metrics["accuracy"]) == set(config.interactions)
  assert all(0.0 <= a <= 1.0 for a in result.metrics["accuracy"].values())
  assert all(s == config.total_steps for s in result.metrics["steps"].values())
  assert harness.finite(result.metrics)
  assert [row["interaction"] for row in result.table] == list(config.interactions)
  for plot in result.plots:
    assert plot.startswith(interaction.NAME) and os.path.getsize(tmp_path / plot) > 1000
