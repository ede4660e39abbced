import os

import pytest

from experiments import positions, protocol, report
from tests.experiments.judge import judge

SEEDS = 3


def _chance(config):
  return 1 / (config.vocab_size - 2)  # copy: a guess among the V - 2 data ids


def _metrics(config, **adjusted):
  """Adjusted accuracy per (positions, c), every seed alike (a list: per seed); the claim
  holds unless `adjusted` ('none__6': value) says otherwise. Without positions (causal or the
  encoder) the default is a guess among the c tokens to copy."""
  chance = _chance(config)
  m = {"chance": {}, "accuracy": {}, "adjusted": {}}
  for c in config.copy_lens:
    key = positions.setting(c)
    m["chance"][key] = chance
    for name in (*positions.POSITIONS, positions.BIDIRECTIONAL):
      guess = name in ("none", positions.BIDIRECTIONAL)
      value = protocol.adjust(1 / c, chance) if guess else 1.0
      value = adjusted.get(f"{name}__{c}", value)
      per_seed = list(value) if isinstance(value, list) else [value] * SEEDS
      m["adjusted"].setdefault(name, {})[key] = per_seed
      m["accuracy"].setdefault(name, {})[key] = [a * (1 - chance) + chance for a in per_seed]
  return m


def _verdict(config, **adjusted):
  return judge(positions, _metrics(config, **adjusted), config)


def test_the_claim_passes_with_its_control():
  # criteria per c: learned copies, sinusoidal copies, none does not
  assert _verdict(positions.get_config("quick")) == ([True], [True] * 3, "SUPPORTED")
  assert _verdict(positions.get_config("full")) == ([True] * 2, [True] * 6, "SUPPORTED")


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"learned__6": 0.5}, [False, True, True]),
    ({"sinusoidal__6": 0.5}, [True, False, True]),
    ({"none__6": 0.95}, [True, True, False]),  # order without positions: the claim is wrong
  ],
)
def test_each_criterion_fails_alone(change, expected):
  assert _verdict(positions.get_config("quick"), **change) == ([True], expected, "REFUTED")


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"learned__6": positions.RECALLS}, [True, True, True]),
    ({"learned__6": positions.RECALLS - 0.001}, [False, True, True]),
    ({"sinusoidal__6": positions.RECALLS}, [True, True, True]),
    ({"sinusoidal__6": [1.0, 1.0, positions.RECALLS - 0.001]}, [True, False, True]),
    ({"none__6": positions.FAILS}, [True, True, True]),
    ({"none__6": positions.FAILS + 0.001}, [True, True, False]),
  ],
)
def test_each_threshold_from_both_sides(change, expected):
  assert _verdict(positions.get_config("quick"), **change)[1] == expected


@pytest.mark.parametrize("raw, passes", [(0.8 / 6, True), (0.8 / 6 - 0.001, False)])
def test_a_model_that_did_not_learn_what_to_copy_makes_it_inconclusive(raw, passes):
  config = positions.get_config("quick")
  adjusted = protocol.adjust(raw, _chance(config))
  controls, _, verdict = _verdict(config, none__6=adjusted)
  assert controls == [passes] and verdict == ("SUPPORTED" if passes else "INCONCLUSIVE")


@pytest.mark.parametrize(
  "encoder, verdict",
  [(positions.RECALLS - 0.001, "SUPPORTED"), (positions.RECALLS, "INCONCLUSIVE")],
)
def test_an_encoder_without_positions_that_copies_means_the_criterion_cannot_tell(encoder, verdict):
  """The falsification arm read by the copy criterion: rejected below RECALLS (the claim
  stands), accepted at it (the criterion would pass a model the set argument rules out)."""
  assert _verdict(positions.get_config("quick"), bidirectional_none__6=encoder)[2] == verdict


def test_the_encoder_arm_differs_from_none_only_in_its_mask():
  arms = {arm.model: arm for arm in positions.arms(positions.get_config("quick"))}
  encoder, none = arms[positions.BIDIRECTIONAL], arms["none"]
  assert encoder.fields == none.fields | {"mask": "bidirectional"}
  assert (encoder.rung, encoder.task, encoder.setting) == (none.rung, none.task, none.setting)


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_trains_every_table(tmp_path):
  config = positions.get_config("tiny")
  result = protocol.run(positions, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.verdict in report.VERDICTS
  assert len(result.controls) == 1 and len(result.criteria) == 3
  assert len(result.falsification) == 1  # the encoder, read by the copy criterion
  probed = {(row["model"], row["activation"]) for row in result.metrics["position_probe"]}
  assert probed == {
    (model, activation)
    for model in ("none", "none (untrained)", positions.BIDIRECTIONAL)
    for activation in ("embedded", "layers_0/resid_post", "layers_1/resid_post")
  }
  assert len(result.runs) == 4 * (
    len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  ) * len(config.learning_rates)
  assert result.metrics["chance"]["c=3"] == pytest.approx(1 / (config.vocab_size - 2))
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
