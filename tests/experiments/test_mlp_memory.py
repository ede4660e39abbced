import os

import jax
import jax.numpy as jnp
import pytest

from experiments import mlp_memory, protocol, report
from jaxformer import ladder

SEEDS = 3
S = mlp_memory.SETTING


def _config(wide=True):
  c = mlp_memory.get_config("quick")
  c.widths = (64, 256) if wide else (64,)
  return c


def _metrics(config, **changes):
  """The claim's numbers, the same for every seed; `changes` replace entries by name."""
  numbers = {
    "loss F=64 no W2": 2.3,
    "loss F=128 no W2": 2.25,  # the parameter-matched arm
    "loss F=64 W2": 2.2,
    "loss F=64 fixed W2": 2.3,  # the falsification arm: no better than no W2
    "loss F=256 W2": 2.1,
    "adjusted": 0.4,
    "single none": 1e-7,
    "single pre": 2e-7,
    "split none": (0.6, 1e-7),  # (into the mixer alone, with the skip)
    "split pre": (0.7, 0.2),
    "keys": (0.5, 0.2, 0.25),  # units, random, untrained
    "values": (0.2, 0.03, 0.05),
    # per seed: units, another unit, then the same at init
    "ablation": ([0.3, 0.25, 0.35], [0.01, 0.0, 0.02], [0.1, 0.1, 0.1], [0.0, 0.0, 0.0]),
  } | changes
  n = lambda v: [v] * SEEDS  # noqa: E731
  models = mlp_memory.claim_models(config)
  fold = {
    mlp_memory.cell_name("single", "none"): (numbers["single none"], numbers["single none"]),
    mlp_memory.cell_name("single", "pre"): (numbers["single pre"], numbers["single pre"]),
    mlp_memory.cell_name("split", "none"): numbers["split none"],
    mlp_memory.cell_name("split", "pre"): numbers["split pre"],
  }
  who = ("units", "random", "untrained")
  return {
    "eval_loss": {m: {S: n(numbers[f"loss {m}"])} for m in models},
    "adjusted": {m: {S: n(numbers["adjusted"])} for m in models},
    "fold": {cell: {"mixer": n(a), "mixer_and_skip": n(b)} for cell, (a, b) in fold.items()},
    "probe_keys": dict(zip(who, map(n, numbers["keys"]), strict=True)),
    "probe_values": dict(zip(who, map(n, numbers["values"]), strict=True)),
    "ablation": dict(zip(ABLATION, numbers["ablation"], strict=True)),
  }


ABLATION = ("units", "another unit", "untrained units", "untrained another unit")


def _verdicts(config, **changes):
  metrics = _metrics(config, **changes)
  return (
    [c.passed for c in mlp_memory.controls(metrics, config)],
    [c.passed for c in mlp_memory.criteria(metrics, config)],
  )


# controls: no W2 (F=64, 128), F=64 W2, F=256 W2, fixed W2 learn. criteria: a, a', b, f, g, h
# (version 2: the exact folds (c) and (d, with x A) are identity checks; version 3 adds h,
# version 5 a'; version 14: (d) and (e) are architectural checks, the bias control gone)
PASS = ([True] * 5, [True] * 6)


def _flip(passes, index):
  out = [True] * 6
  out[index] = passes
  return ([True] * 5, out)


def test_the_claim_passes_with_its_controls():
  assert _verdicts(_config()) == PASS


def test_without_a_wider_model_there_is_no_width_claim():
  assert _verdicts(_config(wide=False)) == ([True] * 4, [True] * 5)


def test_the_arms_share_the_single_pre_norm_cell_with_the_widest_w2_model():
  config = _config()
  assert mlp_memory.fold_models(config) == {("single", "pre"): "F=256 W2"}
  config.fold_cells = mlp_memory.CELLS  # a user may ask for the other cells' trained folds
  cells = mlp_memory.fold_models(config)
  assert cells[("single", "pre")] == "F=256 W2"
  assert cells[("split", "pre")] == "split skip, LN pre"


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_no_size_trains_a_model_for_the_fold_alone_and_the_probe_s_cell_is_required(size):
  """v14: the folds are checks, so every size trains only the W2 claims' models; a config
  without the cell the probe reads is refused, naming the field."""
  config = mlp_memory.get_config(size)
  names = {a.model for a in mlp_memory.arms(config)}
  assert names == set(mlp_memory.claim_models(config))
  config.fold_cells = (("split", "none"),)
  with pytest.raises(ValueError, match="fold_cells="):
    mlp_memory.arms(config)


def test_a_model_that_does_not_learn_makes_it_inconclusive():
  assert _verdicts(_config(), adjusted=0.1)[0] == [False] * 5


@pytest.mark.parametrize("value, passes", [(0.2, True), (0.19, False)])
def test_the_control_learns_threshold_sides(value, passes):
  assert _verdicts(_config(), adjusted=value)[0][:5] == [passes] * 5


@pytest.mark.parametrize("loss, passes", [(2.225, True), (2.215, False)])
def test_the_w2_at_equal_width_threshold_sides(loss, passes):
  assert _verdicts(_config(), **{"loss F=64 no W2": loss}) == _flip(passes, 0)


@pytest.mark.parametrize("loss, passes", [(2.175, True), (2.185, False)])
def test_the_more_memories_threshold_sides(loss, passes):
  assert _verdicts(_config(), **{"loss F=256 W2": loss}) == _flip(passes, 2)


@pytest.mark.parametrize("loss, passes", [(2.225, True), (2.215, False)])
def test_the_w2_at_equal_parameters_threshold_sides(loss, passes):
  assert _verdicts(_config(), **{"loss F=128 no W2": loss}) == _flip(passes, 1)


@pytest.mark.parametrize(
  "fixed, verdict",
  [(2.3, report.REFUTED), (2.29, report.REFUTED), (2.275, report.SUPPORTED)],
)
def test_the_fixed_w2_falsification_arm_is_read_by_criterion_a(fixed, verdict):
  """A fixed W2 no better than none is rejected; one that (a) would accept makes the
  experiment INCONCLUSIVE (the protocol's reading of a SUPPORTED falsification)."""
  metrics = _metrics(_config(), **{"loss F=64 fixed W2": fixed})
  (reading,) = mlp_memory.falsification(metrics, _config())
  assert reading.name == "w2_helps" and reading.verdict == verdict


def test_the_matched_arm_has_the_parameters_of_w1_and_w2_at_f_equal_d():
  config = mlp_memory.get_config("tiny")
  arms = {a.model: a for a in mlp_memory.arms(config)}
  d = config.d_model

  def count(name):
    c = ladder.default_config("mlp_kv")
    c.update(arms[name].fields)
    c.vocab_size, c.max_len = 64, config.seq_len  # the loop takes them from the corpus
    model = ladder.build("mlp_kv", c)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    return sum(x.size for x in jax.tree.leaves(shapes["params"]))

  matched = mlp_memory.w2_name(mlp_memory.MATCHED * d, False)
  assert count(matched) == count(mlp_memory.w2_name(d))
  assert count(mlp_memory.fixed_name(d)) < count(mlp_memory.w2_name(d))  # W2 is no parameter


@pytest.mark.parametrize(
  "units, untrained, verdict",
  [
    ([0.3, 0.25, 0.35], [0.1, 0.1, 0.1], report.SUPPORTED),
    ([0.12, 0.12, 0.12], [0.1, 0.1, 0.1], report.SUPPORTED),  # 0.02 above init, every seed
    ([0.3, 0.105, 0.35], [0.1, 0.1, 0.1], report.UNRESOLVED),  # one seed below the gain
    # as far above another unit's as at init: the direct path alone, nothing trained
    ([0.3, 0.25, 0.35], [0.3, 0.25, 0.35], report.REFUTED),
  ],
)
def test_the_causal_ablation_against_another_unit_read_from_init(units, untrained, verdict):
  config = _config()
  zeros = [0.0, 0.0, 0.0]
  metrics = _metrics(config, ablation=(units, zeros, untrained, zeros))
  (reading,) = [
    c for c in mlp_memory.criteria(metrics, config) if c.name == "ablation_lowers_promoted"
  ]
  assert reading.verdict == verdict


def test_every_fold_is_a_check_not_a_criterion():
  """v2: the exact folds are identities; v14: the split skip's and the norm's costs, which
  held on untrained networks, are architectural. Each names the test that proves it."""
  checks = {c.name: c for c in mlp_memory.CHECKS}
  assert set(checks) == {
    "single_skip_folds",
    "split_skip_with_xa",
    "split_skip_mixer_only",
    "norm_blocks_fold",
  }
  assert {c.tag for c in checks.values()} == {"identity", "architectural"}
  for check in checks.values():
    path, _, name = check.test.partition("::")
    assert os.path.exists(path) and name.split("::")[-1] in open(path).read(), check.test
  names = [c.name for c in mlp_memory.criteria(_metrics(_config()), _config())]
  assert not set(checks) & set(names)
  # a trained residual that misses no longer moves the verdict: the algebra is tested
  changed = {"single pre": 0.3, "split none": (0.01, 0.3), "split pre": (0.7, 0.001)}
  assert _verdicts(_config(), **changed) == PASS


@pytest.mark.parametrize(
  "keys, passes",
  [((0.455, 0.2, 0.35), True), ((0.445, 0.2, 0.35), False), ((0.445, 0.35, 0.2), False)],
)
def test_the_key_pattern_threshold_sides_against_either_control(keys, passes):
  assert _verdicts(_config(), keys=keys) == _flip(passes, 3)


@pytest.mark.parametrize(
  "values, passes",
  [((0.155, 0.1, 0.05), True), ((0.145, 0.1, 0.05), False), ((0.145, 0.05, 0.1), False)],
)
def test_the_value_agreement_threshold_sides_against_either_control(values, passes):
  assert _verdicts(_config(), values=values) == _flip(passes, 4)


def test_one_seed_below_fails_an_every_seed_criterion():
  config = _config()
  metrics = _metrics(config)
  metrics["eval_loss"]["F=64 no W2"][S] = [2.3, 2.21, 2.3]
  passed = [c.passed for c in mlp_memory.criteria(metrics, config)]
  assert passed == [False] + [True] * 5


def test_every_reading_of_a_trained_model_names_the_arms_whose_plateau_gates_it():
  config = _config()
  metrics = _metrics(config)
  got = {
    c.name: sorted(m for m, _ in c.reads)
    for c in mlp_memory.controls(metrics, config) + mlp_memory.criteria(metrics, config)
  }
  for name in ("keys_beat_controls", "values_beat_controls", "ablation_lowers_promoted"):
    assert got[name] == ["F=256 W2"]  # the probed model
  assert all(got.values())  # none reads a trained model without its plateau


def test_a_grid_without_f_equal_d_is_refused():
  config = _config()
  config.widths = (256,)
  with pytest.raises(ValueError, match="widths="):
    mlp_memory.arms(config)


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_trains_measures_folds_and_probes(tmp_path):
  config = mlp_memory.get_config("tiny")
  result = protocol.run(mlp_memory, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.experiment == mlp_memory.NAME and result.verdict in report.VERDICTS
  arms = mlp_memory.arms(config)
  assert len(arms) == 4  # no W2 (F = D, 2D), fixed W2, W2 (= the single / pre cell)
  assert len(result.runs) == len(arms) * (
    len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  ) * len(config.learning_rates)
  # controls: the four W2-claim models of one width learn; criteria: a, a', f-h
  assert len(result.controls) == 4 and len(result.criteria) == 5
  assert [f.name for f in result.falsification] == ["w2_helps"]
  assert set(result.metrics["ablation"]) == set(ABLATION)
  fold = result.metrics["fold"]
  # the trained (single, pre) cell's fold, exact for any weights, trained for 4 steps or not
  assert list(fold) == ["single skip, LN pre"] and max(fold["single skip, LN pre"]["mixer"]) < 1e-4
  for side in ("probe_keys", "probe_values"):
    for values in result.metrics[side].values():
      assert len(values) == len(config.confirmatory_seeds) and all(0.0 <= v <= 1.0 for v in values)
  for plot in result.plots:
    assert plot.startswith(mlp_memory.NAME) and os.path.getsize(tmp_path / plot) > 1000
