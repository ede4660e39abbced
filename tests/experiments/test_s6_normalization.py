"""The normalization declaration (experiments/s6_normalization.py): its arms differ in the
normalizer alone (the two by-construction arms add one field each), its claim criteria read
trained arms both ways, every length but the trained one is read only, and the tiny size runs
end to end in a scratch registry."""

import importlib

import pytest

from experiments.engine import declare, stats
from jaxformer import data
from tests.experiments import scratch

m = importlib.import_module("experiments.s6_normalization")
E = m.EXPERIMENT
SHARED = {"num_heads": 1, "normalizer": "softmax"}


def test_the_declaration_validates():
  assert declare.validate(E) is E
  assert E.name == "normalization" and E.section == 6 and E.claims == ("6.2",)


def test_the_arms_differ_only_in_the_normalizer():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"softmax"}
  assert fields == {
    "none": SHARED | {"normalizer": "none"},
    "softmax": SHARED,
    "window": SHARED | {"window": m.WINDOW},
    "self": SHARED | {"mask": "self"},
  }


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  arms = {a.name for a in E.arms}
  claimed = [c for c in E.criteria if c.tests == "6.2"]
  assert {c.name for c in claimed} == {"none_degrades", "softmax_holds"}
  for c in claimed:
    for case in (c.positive, c.falsification):
      assert not case.analytic and case.arm in arms and case.arm != c.arm, c.name
    assert c.guarded_by, c.name
  # the raw sum's fall is judged against the softmax's, and the softmax's hold against a fall
  (degrades,) = [c for c in claimed if c.name == "none_degrades"]
  (holds,) = [c for c in claimed if c.name == "softmax_holds"]
  assert degrades.falsification.arm == "softmax" and holds.falsification.arm == "window"


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_each_model_trains_at_the_short_length_and_is_read_at_4x_and_8x(size):
  s = E.sizes[size]
  short = s.task["short"]["seq_len"]
  assert E.trained_points(size) == ("short",)
  assert E.points(size) == (f"short:{short}", f"short:{4 * short}", f"short:{8 * short}")
  assert s.model["max_len"] == 8 * short  # the table covers the longest read
  assert short <= m.WINDOW < 4 * short  # the window is the softmax at the trained L only
  trained = data.parse_spec(E.task(s, "short"))[1]
  for point in E.points(size):
    read = data.parse_spec(E.task(s, point))[1]
    assert read["seq_len"] == int(point.split(":")[1])
    # the same pairs, vocabulary and seed: the length is what changes
    for key in ("vocab_size", "num_kv_pairs", "power_a", "random_non_queries", "seed"):
      assert read[key] == trained[key], key


def test_full_tests_the_claim_where_the_ids_fill_the_dimensions():
  full = E.sizes["full"]
  assert full.task["short"]["vocab_size"] >= full.model["d_model"]
  assert len(full.learning_rates) == 2 and full.confirmatory == 5


def test_the_tiny_size_runs_end_to_end(tmp_path):
  _, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"6.2"}
  assert result["claims"]["6.2"]["verdict"] in stats.VERDICTS
  arms = [a.name for a in E.arms]
  for point in E.points("tiny"):
    assert {a: len(result["metrics"]["adjusted"][a][point]) for a in arms} == dict.fromkeys(arms, 3)
  drops = result["metrics"]["drop"]
  for arm in arms:
    first, last = (result["metrics"]["adjusted"][arm][p] for p in ("short:8", "short:64"))
    assert drops[arm]["*"] == pytest.approx([a - b for a, b in zip(first, last, strict=True)])
  assert "seq_len=64" in result["tasks"]["short:64"]
