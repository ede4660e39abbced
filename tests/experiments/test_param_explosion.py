import os

import pytest

from experiments import harness, param_explosion


def _metrics(config, accuracy, full_functions=262_144, off_by_one=False):
  widths = list(config.widths)
  formula = {
    f: [param_explosion.closed_form(f, d, config) for d in widths] for f in param_explosion.FORMS
  }
  counts = {f: list(v) for f, v in formula.items()}
  if off_by_one:
    counts["diagonal"][-1] += 1
  full = [min(d * d, full_functions) for d in widths]  # full_functions: the most at any D
  functions = {"full": full, "diagonal": widths, "matrix_sum": [2] * len(widths)}
  return {
    "widths": widths,
    "counts": counts,
    "closed_form": formula,
    "functions": functions,
    "accuracy": dict(zip(param_explosion.FORMS, accuracy, strict=True)),
  }


def test_criteria_pass_when_counts_match_and_the_matrix_sum_wins():
  config = param_explosion.get_config("quick")
  result = param_explosion.criteria(_metrics(config, [0.2, 0.3, 0.98]), config)
  assert [c.passed for c in result] == [True, True, True]


def test_criteria_fail_on_a_miscount_few_functions_or_no_quality_gap():
  config = param_explosion.get_config("quick")
  miscount = param_explosion.criteria(_metrics(config, [0.2, 0.3, 0.98], off_by_one=True), config)
  assert [c.passed for c in miscount] == [False, True, True]
  few = param_explosion.criteria(_metrics(config, [0.2, 0.3, 0.98], full_functions=90_000), config)
  assert [c.passed for c in few] == [True, False, True]
  close = param_explosion.criteria(_metrics(config, [0.2, 0.9, 0.95]), config)
  assert [c.passed for c in close] == [True, True, False]


@pytest.mark.parametrize("form", list(param_explosion.FORMS))
@pytest.mark.parametrize("train", [False, True])
def test_counts_from_the_real_modules_equal_the_closed_forms(form, train):
  config = param_explosion.get_config("quick")
  for width in (4, 12, 32):
    params, functions = param_explosion.count(form, width, config, train=train)
    assert params == param_explosion.closed_form(form, width, config, train=train)
    heads = 1 if train else config.count_heads
    assert functions == {"full": width * width, "diagonal": width, "matrix_sum": heads}[form]


def test_full_form_at_width_512_is_counted_without_allocating():
  config = param_explosion.get_config("quick")
  params, functions = param_explosion.count("full", 512, config)  # 1.07e9 parameters
  assert params == 2 * config.scorer_rank * 512**3 and functions == 512**2


def test_matched_width_is_the_widest_that_fits():
  config = param_explosion.get_config("quick")
  budget = param_explosion.closed_form("matrix_sum", 64, config, train=True)
  assert budget == 3 * 64**2
  for form in param_explosion.FORMS:
    width = param_explosion.matched_width(form, budget, config)
    assert param_explosion.closed_form(form, width, config, train=True) <= budget
    assert param_explosion.closed_form(form, width + 1, config, train=True) > budget
  assert param_explosion.matched_width("matrix_sum", budget, config) == 64


def test_tiny_run_counts_and_trains_every_form(tmp_path):
  config = param_explosion.get_config("tiny")
  result = param_explosion.run(config, str(tmp_path))
  assert result.experiment == param_explosion.NAME and len(result.criteria) == 3
  assert result.criteria[0].passed  # counts are exact at any size
  assert set(result.metrics["accuracy"]) == set(param_explosion.FORMS)
  for form, matched in result.metrics["matched"].items():
    assert matched["mixing_params_per_layer"] <= result.metrics["budget"], form
  assert harness.finite(result.metrics)
  for plot in result.plots:
    assert plot.startswith(param_explosion.NAME) and os.path.getsize(tmp_path / plot) > 1000
