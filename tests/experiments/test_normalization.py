import math
import os

import pytest

from experiments import normalization, protocol, report

SEEDS = 3


def _config(taus=True):
  c = normalization.get_config("quick")
  c.norms, c.lengths = ("none", "pre"), (16, 64)
  if taus:
    c.tau_ranks, c.tau_factors, c.tau_length = (8, 32), (0.25, 1.0, 4.0), 64
  return c


def _claim_holds(model, norm, length):
  """Adjusted accuracy, the same for every seed: the raw sum falls with L, the softmax holds,
  sqrt(r) is best and a 4x hotter or colder softmax is worse."""
  if model == "none":
    return 0.9 if length == 16 else 0.3
  if model == "softmax":
    return 1.0
  return 1.0 if "tau=1sqrt" in model else 0.7


def _metrics(config, adjusted, diverged=()):
  """adjusted(model, norm, L) per arm; `diverged`: (model, setting) pairs whose every
  learning rate diverged (NaN per seed, as the protocol reports them)."""
  m = {"adjusted": {}, "diverged": {}}
  for arm in normalization.arms(config):
    norm, length = arm.setting.split()
    value = adjusted(arm.model, norm[3:], int(length[2:]))
    lost = (arm.model, arm.setting) in diverged
    m["adjusted"].setdefault(arm.model, {})[arm.setting] = [math.nan if lost else value] * SEEDS
    m["diverged"].setdefault(arm.model, {})[arm.setting] = SEEDS if lost else 0
  return m


def _verdicts(config, adjusted, diverged=()):
  metrics = _metrics(config, adjusted, diverged)
  return (
    [c.passed for c in normalization.controls(metrics, config)],
    [c.passed for c in normalization.criteria(metrics, config)],
  )


def _with(model, value, norm=None, length=None):
  """The claim's numbers with one arm (or a model at every arm) changed."""

  def at(m, n, l):
    if m == model and norm in (None, n) and length in (None, l):
      return value
    return _claim_holds(m, n, l)

  return at


PASS = ([True] * 5, [True] * 5)  # controls: (softmax, none) per LN + tau; criteria: (a, b) x 2 + c


def test_the_claim_passes_with_its_controls():
  assert _verdicts(_config(), _claim_holds) == PASS


def test_the_arms_are_the_grid_the_claims_need():
  config = normalization.get_config("quick")
  names = [(a.model, a.setting) for a in normalization.arms(config)]
  assert names == [
    ("none", "LN=none L=16"),
    ("none", "LN=none L=64"),
    ("softmax", "LN=none L=16"),  # the falsification arm's short end
    ("softmax", "LN=none L=64"),
  ]
  full = normalization.arms(normalization.get_config("full"))
  # per layer-norm setting none and softmax at both L (16, 128), then the tau sweep (3 x 3)
  assert len(full) == 2 * (2 + 2) + 3 * 3
  taus = {a.model: a.fields["temperature"] for a in full if a.model.startswith("softmax r=")}
  assert taus["softmax r=8 tau=1sqrt(r)"] is None  # the rung's own default, sqrt(r)
  assert taus["softmax r=32 tau=4sqrt(r)"] == 4 * math.sqrt(32)
  bare = next(a for a in full if a.setting == "LN=none L=128")
  assert bare.fields["norm"] == "none" and bare.fields["final_norm"] is False


@pytest.mark.parametrize("long, verdict", [(0.81, report.SUPPORTED), (0.79, report.INCONCLUSIVE)])
def test_a_softmax_that_degrades_too_means_the_criterion_cannot_tell(long, verdict):
  """The falsification arm: the softmax (1.0 at L=16) read by the degradation criterion (a
  loss >= 0.2 from the shortest L to the longest): rejected at 0.81, accepted at 0.79."""
  config = _config()
  metrics = _metrics(config, _with("softmax", long, length=64))
  falsif = normalization.falsification(metrics, config)
  result = report.Result(
    "normalization",
    "",
    "",
    normalization.criteria(metrics, config),
    metrics,
    controls=normalization.controls(metrics, config),
    falsification=falsif,
  )
  assert len(falsif) == 2 and {c.name for c in falsif} == {"none_degrades"}
  assert result.verdict == verdict


def test_a_softmax_that_never_learns_the_long_task_makes_it_inconclusive():
  controls, _ = _verdicts(_config(), _with("softmax", 0.3, length=64))
  assert controls == [False, True, False, True, True]


def test_a_raw_sum_that_cannot_learn_even_short_makes_it_inconclusive():
  controls, _ = _verdicts(_config(), _with("none", 0.1, norm="none"))
  assert controls == [True, False, True, True, True]


def test_a_temperature_that_never_matters_makes_it_inconclusive():
  def flat(m, n, l):
    return 1.0 if m.startswith("softmax r=") else _claim_holds(m, n, l)

  controls, criteria = _verdicts(_config(), flat)
  assert controls == [True, True, True, True, False] and criteria == [True] * 5


@pytest.mark.parametrize("value, passes", [(0.5, True), (0.49, False)])
def test_the_control_learns_threshold_sides(value, passes):
  at = _with("none", value, norm="pre", length=16)
  assert _verdicts(_config(), at)[0][3] == passes


@pytest.mark.parametrize("value, passes", [(0.595, True), (0.605, False)])
def test_the_tau_matters_threshold_sides(value, passes):
  """At both ranks sqrt(r) scores 0.7 and the other taus `value`: a spread around 0.1."""

  def at(m, n, l):
    if m.startswith("softmax r="):
      return value if "tau=1sqrt" in m else 0.7
    return _claim_holds(m, n, l)

  assert _verdicts(_config(), at)[0][4] == passes


def test_a_layer_norm_that_hides_the_blow_up_fails_only_its_own_criteria():
  """With a pre-norm the raw sum still recalls at L=64: (a) and (b) fail for LN=pre only."""
  at = _with("none", 0.9, norm="pre")
  assert _verdicts(_config(), at) == ([True] * 5, [True, True, False, False, True])


@pytest.mark.parametrize("long, passes", [(0.65, True), (0.75, False)])
def test_the_degrades_threshold_sides(long, passes):
  """none at L=16 is 0.9: a fall to 0.7 is exactly 0.2; (b) holds either way (1.0 - 0.75)."""
  at = _with("none", long, norm="none", length=64)
  assert _verdicts(_config(), at)[1] == [passes, True, True, True, True]


@pytest.mark.parametrize("soft, passes", [(0.75, True), (0.65, False)])
def test_the_softmax_margin_threshold_sides(soft, passes):
  """none at L=64 is 0.5 (still 0.4 below L=16): the softmax needs 0.7 (its control 0.5)."""

  def at(m, n, l):
    if n == "none" and l == 64 and m in ("none", "softmax"):
      return 0.5 if m == "none" else soft
    return _claim_holds(m, n, l)

  assert _verdicts(_config(), at) == ([True] * 5, [True, passes, True, True, True])


@pytest.mark.parametrize("at_sqrt, passes", [(0.955, True), (0.945, False)])
def test_the_tau_tolerance_threshold_sides(at_sqrt, passes):
  """At r=32 a 4x colder softmax (tau = 4 sqrt(r)) scores 1.0, sqrt(r) `at_sqrt`."""

  def at(m, n, l):
    if m == "softmax r=32 tau=4sqrt(r)":
      return 1.0
    if m == "softmax r=32 tau=1sqrt(r)":
      return at_sqrt
    return _claim_holds(m, n, l)

  config = _config()
  metrics = _metrics(config, at)
  assert normalization.best_factor(metrics["adjusted"], config, 32) == 4.0
  assert normalization.best_factor(metrics["adjusted"], config, 8) == 1.0
  assert [c.passed for c in normalization.criteria(metrics, config)] == [True] * 4 + [passes]


def test_a_raw_sum_that_diverged_at_every_learning_rate_counts_as_recalling_nothing():
  config = _config()
  lost = {("none", "LN=none L=64")}
  controls, criteria = _verdicts(config, _claim_holds, diverged=lost)
  assert controls == [True] * 5 and criteria == [True] * 5
  metrics = _metrics(config, _claim_holds, diverged=lost)
  assert normalization.learned(metrics, "none", "LN=none L=64") == [0.0] * SEEDS
  # A softmax that diverged everywhere also counts as 0, and fails its control.
  lost = {("softmax", "LN=none L=64")}
  controls, criteria = _verdicts(config, _claim_holds, diverged=lost)
  assert controls[0] is False and criteria[1] is False


def test_one_seed_below_fails_an_every_seed_criterion():
  config = _config()
  metrics = _metrics(config, _claim_holds)
  metrics["adjusted"]["none"]["LN=none L=64"] = [0.3, 0.8, 0.3]
  assert [c.passed for c in normalization.criteria(metrics, config)] == [False, False] + [True] * 3


def test_without_a_tau_sweep_there_is_no_temperature_claim():
  config = _config(taus=False)
  assert _verdicts(config, _claim_holds) == ([True] * 4, [True] * 4)


@pytest.mark.parametrize(
  "field, value",
  [
    ("normalizers", ("softmax",)),
    ("all_lengths", ("softmax",)),
    ("lengths", (64, 16)),
    ("norms", ("post",)),
    ("tau_factors", (0.5, 2.0)),
  ],
)
def test_a_grid_that_cannot_read_the_claims_is_refused(field, value):
  config = _config()
  config[field] = value
  with pytest.raises(ValueError, match=f"{field}="):
    normalization.arms(config)


def test_the_temperature_table_shows_every_rank_in_the_same_columns():
  config = _config()
  adj = _metrics(config, _claim_holds)["adjusted"]
  table = normalization.temperature_table(config, adj)
  assert [row["rank r"] for row in table] == [8, 32]
  columns = [f"tau={f:g}sqrt(r)" for f in config.tau_factors]
  for row in table:
    assert list(row) == ["rank r", *columns, "best factor"]
    assert [row[c] for c in columns] == pytest.approx([0.7, 1.0, 0.7])
    assert row["best factor"] == 1.0


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_trains_every_arm_over_seeds(tmp_path):
  config = normalization.get_config("tiny")
  result = protocol.run(normalization, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.experiment == normalization.NAME and result.verdict in report.VERDICTS
  arms = normalization.arms(config)
  assert [(row["model"], row["setting"]) for row in result.table] == [
    (a.model, a.setting) for a in arms
  ]
  assert len(result.runs) == len(arms) * (
    len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  ) * len(config.learning_rates)
  assert len(result.controls) == 3 and len(result.criteria) == 3
  for arm in arms:
    values = result.metrics["accuracy"][arm.model][arm.setting]
    assert len(values) == len(config.confirmatory_seeds)
    assert (
      all(0.0 <= a <= 1.0 for a in values) or result.metrics["diverged"][arm.model][arm.setting]
    )
  assert len(result.plots) == 2
  for plot in result.plots:
    assert plot.startswith(normalization.NAME) and os.path.getsize(tmp_path / plot) > 1000
