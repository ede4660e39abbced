"""The pilot declaration (experiments/s5_interaction.py): what its arms share, and the engine's
refusal of the criterion the previous design could never meet."""

import dataclasses

import pytest

from experiments import s5_interaction
from experiments.engine import declare, judge
from experiments.engine.declare import Case, Criterion

E = s5_interaction.EXPERIMENT


def test_the_scorer_is_the_one_factor_the_four_scorers_differ_in():
  fields = {a.name: dict(a.fields) for a in E.arms}
  for name in s5_interaction.SCORERS:
    assert fields[name] == {"num_heads": 1, "normalizer": "softmax", "interaction": name}
  assert fields["stateless"] == fields["lowrank"] | {"mask": "self"}


def test_every_claim_criterion_reads_both_directions_on_trained_arms():
  for c in E.criteria:
    if c.tests != "control":
      assert not c.positive.analytic and not c.falsification.analytic, c.name


def test_a_rise_beyond_the_room_above_the_untrained_share_is_refused_before_judging():
  # the previous design's pure_share_strong: a rise >= 0.5 over an untrained share of 0.78-0.80
  old = Criterion("pure_share_strong", "extension", "training makes the product's scores interaction",
                  metric="share", statistic="gain", arm="lowrank", threshold=0.5,
                  positive=Case(arm="bilinear"), falsification=Case(arm="additive"))  # fmt: skip
  e = declare.validate(dataclasses.replace(E, criteria=(*E.criteria, old)))
  seeds = (100, 1000, 1001)
  arms = [a.name for a in E.arms]
  metrics = {m: {a: {"*": [0.5, 0.6, 0.7]} for a in arms} for m in ("accuracy", "adjusted",
             "over_chance", "steps_to")}  # fmt: skip
  metrics["share"] = {a: {"*": [0.9, 0.9, 0.9]} for a in arms}
  metrics["share_untrained"] = {a: {"*": [0.78, 0.80, 0.79]} for a in arms}
  measured = judge.Measured(metrics, {}, {}, seeds[:1], seeds[1:])
  with pytest.raises(
    declare.DesignError, match="pure_share_strong: threshold 0.5 cannot be reached"
  ):
    judge.judge(e, measured)
