import math
import os

import numpy as np
import pytest

from experiments import harness, heads, protocol, report
from jaxformer import ladder

SEEDS = 3
CLAIM = {"concat H=1 r=64": 1.0, "concat H=4 r=16": 0.98, "concat H=16 r=4": 0.2, "summed": 1.0}


def _config():
  c = heads.get_config("quick")
  c.heads_grid = (1, 4, 16)
  return c


def _verdicts(config, changes=None, per_seed=None):
  """Adjusted accuracy per model (CLAIM | changes), the same for every seed, or per_seed."""
  key = heads.setting(config)
  table = CLAIM | (changes or {})
  adjusted = {name: {key: [table[name]] * SEEDS} for name in heads.models(config)}
  for name, values in (per_seed or {}).items():
    adjusted[name][key] = values
  metrics = {"adjusted": adjusted, "value_bytes": {"concat H=4 r=16": 64, "summed": 256}}
  return (
    [c.passed for c in heads.controls(metrics, config)],
    [c.passed for c in heads.criteria(metrics, config)],
  )


def test_the_claim_passes_with_its_controls():
  assert _verdicts(_config()) == ([True, True], [True, True])


def test_the_models_hold_the_parameter_count_fixed_and_name_the_reference():
  config = _config()
  assert heads.models(config) == {
    "concat H=1 r=64": ("concat_wo", 1, 64),
    "concat H=4 r=16": ("concat_wo", 4, 16),
    "concat H=16 r=4": ("concat_wo", 16, 4),
    "summed": ("softmax", 4, 16),
  }
  counts = set()
  for rung, h, r in heads.models(config).values():
    model = ladder.default_config(rung)
    with model.unlocked():
      model.update(harness.model_fields(config, num_heads=h, rank=r))
    params = harness.init_params(ladder.build(rung, model), np.zeros((1, 4), np.int32))
    if rung == "concat_wo":
      counts.add(heads.mixer_params(params))
    else:  # summed heads: H D x D values on top of the same scorer
      assert heads.mixer_params(params) == 2 * 64 * 4 * 16 + 4 * 64 * 64
  assert counts == {4 * 64 * 64}  # 4 D H r with H r = D, whatever the split


def test_full_caps_the_reported_arms_below_the_arms_a_criterion_reads():
  config = heads.get_config("full")
  caps = {arm.model + " @ " + arm.setting: arm.step_cap for arm in heads.arms(config)}
  read = {name + " @ " + heads.setting(config) for name in heads.models(config)}
  reported = set(caps) - read
  assert len(reported) == 4  # two rank splits on MQAR, two text LMs
  assert {caps[name] for name in read} == {None}  # the config's step_cap
  assert {caps[name] for name in reported} == {config.reported_step_cap}
  assert config.reported_step_cap < config.step_cap
  assert "reported_step_cap" not in heads.get_config("quick")  # quick: every arm alike


def test_summed_heads_that_do_not_learn_make_it_inconclusive():
  assert _verdicts(_config(), {"summed": 0.5})[0] == [False, True]


def test_a_task_every_split_solves_makes_it_inconclusive():
  assert _verdicts(_config(), {"concat H=16 r=4": 0.99})[0] == [True, False]


@pytest.mark.parametrize("value, passes", [(0.8, True), (0.79, False)])
def test_the_control_learns_threshold_sides(value, passes):
  changes = {"summed": value, "concat H=4 r=16": value, "concat H=1 r=64": value}
  assert _verdicts(_config(), changes)[0][0] == passes


@pytest.mark.parametrize("worst, passes", [(0.895, True), (0.905, False)])
def test_the_control_matters_threshold_sides(worst, passes):
  assert _verdicts(_config(), {"concat H=16 r=4": worst})[0][1] == passes


@pytest.mark.parametrize("quarter, passes", [(0.955, True), (0.945, False)])
def test_the_rank_quarter_threshold_sides(quarter, passes):
  assert _verdicts(_config(), {"concat H=4 r=16": quarter}) == ([True, True], [passes, True])


@pytest.mark.parametrize("fewest, passes", [(0.955, True), (0.945, False)])
def test_the_fewest_heads_threshold_sides(fewest, passes):
  """More heads beating one wide head at the same parameter count fails claim (b)."""
  changes = {"concat H=1 r=64": fewest, "concat H=4 r=16": 1.0}
  assert _verdicts(_config(), changes) == ([True, True], [True, passes])


def _rank_r_verdict(per_seed):
  config = _config()
  key = heads.setting(config)
  adjusted = {name: {key: [CLAIM[name]] * len(per_seed)} for name in heads.models(config)}
  adjusted["concat H=4 r=16"][key] = per_seed
  return heads.criteria({"adjusted": adjusted, "value_bytes": {}}, config)[0].verdict


def test_rank_r_values_hold_is_an_equivalence_test_over_seeds():
  """summed (1.0) - concat H=4 r=16 per seed: the 90% interval of its mean inside +-0.05 is
  SUPPORTED; straddling the margin (one seed far off) UNRESOLVED; wholly outside it
  REFUTED."""
  assert _rank_r_verdict([0.98, 0.99, 0.97, 0.98, 0.99]) == report.SUPPORTED
  assert _rank_r_verdict([0.98, 0.9, 0.98]) == report.UNRESOLVED
  assert _rank_r_verdict([0.9, 0.91, 0.89]) == report.REFUTED


@pytest.mark.parametrize(
  "field, value", [("heads_grid", (3, 4)), ("summed_heads", 2), ("heads_grid", (1, 16))]
)
def test_a_grid_that_cannot_read_the_claims_is_refused(field, value):
  config = _config()
  config[field] = value
  with pytest.raises(ValueError, match=f"{field}="):
    heads.arms(config)


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_measures_value_caches_of_the_trained_models(tmp_path):
  config = heads.get_config("tiny")
  result = protocol.run(heads, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.experiment == heads.NAME and result.verdict in report.VERDICTS
  names = list(heads.models(config))
  reported = heads.reported_models(config)  # 8 heads with one rank widened; 1 and 4 on text
  assert list(reported) == [
    "concat H=8 qk=4 v=2", "concat H=8 qk=2 v=4", "concat H=1 r=16", "concat H=4 r=4"
  ]  # fmt: skip
  assert [row["model"] for row in result.table] == names + list(reported)
  title, rows = result.tables[1]
  assert title.startswith("reported") and [r["model"] for r in rows] == list(reported)
  assert all(math.isfinite(r["eval loss mean (nats per token)"]) for r in rows)
  assert [(r["scorer rank"], r["value rank"]) for r in rows[:2]] == [(4, 2), (2, 4)]
  assert len(result.runs) == (len(names) + len(reported)) * (
    len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  ) * len(config.learning_rates)
  assert len(result.controls) == 2 and len(result.criteria) == 2
  # Value caches from the real arrays: H r floats per token and layer, H D for summed heads.
  tokens = config.decode_batch * config.seq_len * config.num_layers
  expected = {
    heads.concat_name(h, config.budget // h): tokens * config.budget * 4 for h in config.heads_grid
  }
  expected[heads.SUMMED] = tokens * config.summed_heads * config.d_model * 4
  assert result.metrics["value_bytes"] == expected
  assert len(set(result.metrics["mixer_params"][n] for n in names[:-1])) == 1
  for plot in result.plots:
    assert plot.startswith(heads.NAME) and os.path.getsize(tmp_path / plot) > 1000
