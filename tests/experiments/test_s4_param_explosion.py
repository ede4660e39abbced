"""param_explosion's declaration (experiments/s4_param_explosion.py): what its arms share, the
cost its criteria read on the real modules (a property of the forms, no training needed), and
the tiny size end to end in a scratch registry."""

import importlib
import math
import os

import pytest

from experiments import harness
from experiments.engine import declare, page, records, run, stats
from jaxformer.analysis import explosion
from tests.experiments import scratch

M = importlib.import_module("experiments.s4_param_explosion")
E = M.EXPERIMENT


def test_the_declaration_validates_and_reads_the_trained_claim():
  """4.1 is a check (the cost test below); the run reads 4.2 on trained models."""
  declare.validate(E)
  assert (E.name, E.section, E.claims) == ("param_explosion", 4, ("4.2",))
  assert {c.tests for c in E.criteria} == {"4.2", "control", "extension"}
  assert {c.tests for c in M.CHECKS} == {"4.1"}


def test_the_arms_differ_only_in_the_form_of_w():
  arms = {a.name: a for a in E.arms}
  assert {n: a.rung for n, a in arms.items()} == {
    "full": "full_dynamic", "diagonal": "diagonal_dynamic", "matrix_sum": "matrix_sum",
    "wide_sum": "matrix_sum", "stateless": "matrix_sum"}  # fmt: skip
  assert dict(arms["diagonal"].fields) == dict(arms["matrix_sum"].fields) == M.SHARED
  assert dict(arms["wide_sum"].fields) == M.SHARED | {"num_heads": 1}
  assert dict(arms["stateless"].fields) == M.SHARED | {"mask": "self"}
  # full alone trains narrower: at the others' width its step is the explosion the claim names
  assert dict(arms["full"].fields) == M.SHARED | {"d_model": 8}
  assert all(a.learning_rates is None for a in E.arms)


def test_the_sum_never_has_more_mixing_parameters_than_the_diagonal():
  for size in E.sizes.values():
    d, h, k = size.model["d_model"], size.model["num_heads"], M.RANK
    assert 2 * h * k * d + h * d * d <= 2 * k * d * d < 2 * (h + 1) * k * d + (h + 1) * d * d


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  for c in E.criteria:
    if c.tests != "control":
      assert not c.positive.analytic and not c.falsification.analytic, c.name
  guarded = {c.name for c in E.criteria if c.guarded_by}
  assert guarded == {c.name for c in E.criteria if c.tests == "4.2"}


def _arm_config(name, size):
  arm = E.arm(name)
  fields = dict(size.model) | dict(arm.fields) | {"vocab_size": 32, "max_len": 16}
  return harness.train_config(arm.rung, E.task(size, "mqar"), fields)


def test_the_cost_criteria_decide_on_the_forms_alone():
  """The 4.1 readings without training: the measure's slopes on the quick size's widths,
  each criterion accepting its positive case and rejecting its falsification (the check the
  claim reduces to)."""
  size = E.sizes["quick"]
  widths = size.extra["widths"]
  slopes = {}
  for name in M.FORMS:
    rows = [explosion.counts(explosion.at_width(_arm_config(name, size), w)) for w in widths]
    slopes[name] = {k: explosion.slope(widths, [r[k] for r in rows]) for k in rows[0]}
  assert [slopes[n]["functions"] for n in M.FORMS] == pytest.approx([2.0, 1.0, 0.0], abs=1e-9)
  assert slopes["full"]["params"] == pytest.approx(3.0) and slopes["diagonal"]["params"] == (
    pytest.approx(2.0))  # fmt: skip
  assert 1.0 < slopes["matrix_sum"]["params"] < 2.0
  for c in M.CHECKS:
    if c.metric == "flops_slope":
      continue
    key = c.metric.removesuffix("_slope")
    for case, want in ((None, True), (c.positive, True), (c.falsification, False)):
      arm, against = (c.arm, c.against) if case is None else (
        case.arm or c.arm, case.against or c.against)  # fmt: skip
      assert (slopes[arm][key] - slopes[against][key] >= c.threshold) == want, (c.name, case)


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"4.2"}
  assert all(c["verdict"] in stats.VERDICTS for c in result["claims"].values())
  seeds = len(entry["exploratory"]) + len(entry["confirmatory"])
  metrics = result["metrics"]
  for arm in ("full", "diagonal", "matrix_sum", "wide_sum", "stateless"):
    for metric in ("functions_slope", "params_slope", "flops_slope"):
      (value,) = set(metrics[metric][arm]["mqar"])  # the same on every seed
      assert len(metrics[metric][arm]["mqar"]) == seeds and math.isfinite(value)
    assert len(metrics["adjusted"][arm]["induction"]) == seeds
  assert metrics["functions"]["full"]["D=32"][0] == 32**2 and metrics["functions_slope"]["full"][
    "mqar"][0] == pytest.approx(2.0)  # fmt: skip
  assert metrics["params"]["diagonal"]["D=32"][0] == 2 * M.RANK * 32**2
  assert metrics["params_slope"]["full"]["mqar"][0] == pytest.approx(3.0)
  assert metrics["params_slope"]["diagonal"]["mqar"][0] == pytest.approx(2.0)
  run.record(result, E, results_dir=results)
  folder = os.path.join(results, "param_explosion")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  assert os.path.getsize(os.path.join(folder, page.figure_name(result))) > 1000
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
