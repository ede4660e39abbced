import os

from experiments import harness, heads


def _metrics(gap, bytes_ok, acc_quarter, acc_summed=0.95):
  config = heads.get_config("quick")
  tokens = 64 * 16
  formula = {
    str(r): heads.value_cache_formula(tokens, config.num_layers, config.num_heads, r)
    for r in config.ranks
  }
  measured = dict(formula) if bytes_ok else {k: v + 4 for k, v in formula.items()}
  acc = {str(r): 0.5 for r in config.ranks} | {"16": acc_quarter, "summed": acc_summed}
  return config, {
    "equivalence_gap": gap,
    "max_logit": 3.0,
    "accuracy": acc,
    "cache_bytes": measured,
    "cache_bytes_formula": formula,
  }


def test_criteria_pass_on_equal_outputs_exact_bytes_and_held_quality():
  config, metrics = _metrics(gap=2e-7, bytes_ok=True, acc_quarter=0.9)
  assert [c.passed for c in heads.criteria(metrics, config)] == [True, True, True]


def test_criteria_fail_on_a_gap_wrong_bytes_or_lost_quality():
  config, metrics = _metrics(gap=1e-2, bytes_ok=False, acc_quarter=0.5)
  assert [c.passed for c in heads.criteria(metrics, config)] == [False, False, False]


def test_value_cache_formula_is_the_product():
  assert heads.value_cache_formula(1024, 2, 2, 16) == 1024 * 2 * 2 * 16 * 4
  assert heads.value_cache_formula(1024, 2, 2, 16, itemsize=2) == 1024 * 2 * 2 * 16 * 2


def test_tiny_run(tmp_path):
  config = heads.get_config("tiny")
  result = heads.run(config, str(tmp_path))
  assert result.experiment == heads.NAME and len(result.criteria) == 3
  assert set(result.metrics["accuracy"]) == {"summed", *map(str, config.ranks)}
  # The cache bytes come from the models' real value arrays and match the formula.
  assert result.metrics["cache_bytes"] == result.metrics["cache_bytes_formula"]
  assert result.criteria[1].passed
  # Concat + Wo with identity blocks reproduces the summed heads' logits on real modules.
  assert result.metrics["equivalence_gap"] <= 1e-5 and result.metrics["max_logit"] > 0.0
  assert harness.finite(result.metrics)
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
