import math
import os

import numpy as np
import pytest

from experiments import interaction, protocol, report
from jaxformer.analysis import receivers
from tests.experiments.judge import judge

SEEDS = 3
CHANCE = 0.25  # MQAR, K = 4
# criteria, in order: bilinear recalls, lowrank recalls, additive fails, tanh slower,
# bilinear share, lowrank share, tanh share
N_CRITERIA = 7


def _metrics(**changes):
  """The claim holding, every seed alike; `changes` replace one value: model__what ->
  per-seed value (or a per-seed list)."""
  values = {
    "bilinear__adjusted": 1.0,
    "lowrank__adjusted": 1.0,
    "tanh__adjusted": 0.6,
    "additive__adjusted": 0.05,
    "bilinear__steps_to": 200.0,
    "lowrank__steps_to": 250.0,
    "tanh__steps_to": 500.0,
    "additive__steps_to": math.nan,
    "bilinear__share": 0.8,
    "lowrank__share": 0.7,
    "tanh__share": 0.2,
    "additive__share": 0.0,
    "bilinear__share_untrained": 0.0,
    "lowrank__share_untrained": 0.0,
    "tanh__share_untrained": 0.0,
    "additive__share_untrained": 0.0,
  } | changes
  m = {"chance": {"mqar": CHANCE}, "accuracy": {}, "adjusted": {}, "steps_to": {}}
  m |= {"share": {}, "share_untrained": {}}
  for key, value in values.items():
    name, what = key.split("__")
    per_seed = list(value) if isinstance(value, list) else [value] * SEEDS
    if what == "adjusted":
      m["adjusted"][name] = {"mqar": per_seed}
      m["accuracy"][name] = {"mqar": [a * (1 - CHANCE) + CHANCE for a in per_seed]}
    elif what == "raw":
      m["accuracy"][name] = {"mqar": per_seed}
      m["adjusted"][name] = {"mqar": [protocol.adjust(a, CHANCE) for a in per_seed]}
    else:
      m[what][name] = per_seed
  return m


def _verdict(**changes):
  return judge(interaction, _metrics(**changes), interaction.get_config("quick"))[:2]


def _only(index, passes=False):
  return [passes if i == index else True for i in range(N_CRITERIA)]


def test_the_claim_passes_with_its_control():
  assert _verdict() == ([True], [True] * N_CRITERIA)


@pytest.mark.parametrize(
  "change, index",
  [
    ({"bilinear__adjusted": 0.5}, 0),
    ({"lowrank__adjusted": 0.5}, 1),
    ({"additive__adjusted": 0.9}, 2),
    ({"tanh__steps_to": 200.0}, 3),  # tanh as fast as bilinear
    ({"bilinear__share": 0.3}, 4),
    ({"lowrank__share": 0.3}, 5),
    ({"tanh__share": 0.8}, 6),  # trained tanh scores interact strongly
  ],
)
def test_each_criterion_fails_alone(change, index):
  assert _verdict(**change) == ([True], _only(index))


@pytest.mark.parametrize(
  "change, index, passes",
  [
    ({"bilinear__adjusted": interaction.RECALLS}, 0, True),
    ({"bilinear__adjusted": interaction.RECALLS - 0.001}, 0, False),
    ({"lowrank__adjusted": interaction.RECALLS}, 1, True),
    ({"lowrank__adjusted": interaction.RECALLS - 0.001}, 1, False),
    ({"additive__adjusted": interaction.FAILS}, 2, True),
    ({"additive__adjusted": interaction.FAILS + 0.001}, 2, False),
    ({"tanh__steps_to": 300.0, "lowrank__steps_to": [250.0, 250.0, 250.0]}, 3, True),
    ({"tanh__steps_to": [300.0, 250.0, 600.0]}, 3, False),  # one tanh seed ties lowrank
    ({"bilinear__share": interaction.STRONG}, 4, True),
    ({"bilinear__share": interaction.STRONG - 0.001}, 4, False),
    ({"lowrank__share": interaction.STRONG}, 5, True),
    ({"lowrank__share": interaction.STRONG - 0.001}, 5, False),
    ({"tanh__share": interaction.WEAK}, 6, True),
    ({"tanh__share": interaction.WEAK + 0.001}, 6, False),
  ],
)
def test_each_threshold_from_both_sides(change, index, passes):
  assert _verdict(**change)[1] == _only(index, passes)


def test_a_share_that_holds_at_init_fails_read_as_trained_minus_untrained():
  # Version 1 read the trained share alone (0.8 >= 0.5); at init it was already 0.6.
  assert _verdict(bilinear__share_untrained=0.6)[1] == _only(4)
  assert _verdict(tanh__share=0.8, tanh__share_untrained=0.4)[1] == _only(6, True)


def test_the_speed_reading_has_the_four_point_grid_at_full():
  assert len(interaction.get_config("full").learning_rates) == 4


def test_an_additive_scorer_the_recall_criterion_accepts_is_inconclusive():
  config = interaction.get_config("quick")
  assert judge(interaction, _metrics(additive__adjusted=0.95), config)[2] == "INCONCLUSIVE"
  assert judge(interaction, _metrics(), config)[2] == "SUPPORTED"


def test_never_reaching_counts_as_slowest():
  assert _verdict(tanh__steps_to=math.nan)[1] == _only(3, True)  # tanh never: slower
  assert _verdict(lowrank__steps_to=[200.0, math.nan, 200.0])[1] == _only(3, False)
  both_never = _verdict(tanh__steps_to=math.nan, bilinear__steps_to=math.nan)[1]
  assert both_never[3] is False


@pytest.mark.parametrize("raw, passes", [(0.8 * CHANCE, True), (0.8 * CHANCE - 0.001, False)])
def test_the_control_sides_and_inconclusive(raw, passes):
  assert _verdict(additive__raw=raw)[0] == [passes]
  config, metrics = interaction.get_config("quick"), _metrics(additive__raw=1 / 64)
  result = report.Result(
    "interaction",
    "",
    "",
    interaction.criteria(metrics, config),
    metrics,
    controls=interaction.controls(metrics, config),
  )
  assert result.verdict == "INCONCLUSIVE"  # additive at 1/V: it trained nothing


def test_the_contour_surfaces_stay_an_illustration():
  config = interaction.get_config("quick")
  x1, x3 = interaction.grid(config)
  shares = {
    n: receivers.interaction_share(f(x1, x3)[None]) for n, f in interaction.FUNCTIONS.items()
  }
  assert shares["x1 + x3"] == pytest.approx(0.0, abs=1e-12)
  assert shares["x1 * x3"] == pytest.approx(1.0, abs=1e-12)
  assert 0.05 < shares["tanh(x1 + x3)"] < 0.3  # mostly a sum: saturation adds a little


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_measures_the_trained_scorers(tmp_path):
  config = interaction.get_config("tiny")
  result = protocol.run(interaction, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.verdict in report.VERDICTS
  assert len(result.controls) == 1 and len(result.criteria) == N_CRITERIA
  m = result.metrics
  for name in interaction.INTERACTIONS:
    assert len(m["share"][name]) == len(config.confirmatory_seeds)
    assert all(0.0 <= s <= 1.0 for s in m["share"][name])
    assert len(m["steps_to"][name]) == len(config.confirmatory_seeds)
    assert len(m["share_untrained"][name]) == len(config.confirmatory_seeds)
  assert max(m["share"]["additive"] + m["dependence"]["additive"]) <= interaction.CHECK_TOLERANCE
  assert min(m["dependence"]["lowrank"]) > 0.0
  assert np.isclose(m["surface_share"]["x1 * x3"], 1.0)
  assert "additive scorer's interaction share" in result.setup
  assert [row["interaction"] for row in result.tables[0][1]] == list(interaction.INTERACTIONS)
  for plot in result.plots:
    assert plot.startswith(interaction.NAME) and os.path.getsize(tmp_path / plot) > 1000
