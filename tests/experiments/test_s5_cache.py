"""The cache declaration (experiments/s5_cache.py): its arms differ only in the key rank, its
claim criterion reads trained arms in both directions, the measured key bytes are the formula's
D/r-fold shrink, and the tiny size runs end to end in a scratch registry."""

import importlib
import os

from experiments.engine import declare, stats
from tests.experiments import scratch

MODULE = importlib.import_module("experiments.s5_cache")
E = MODULE.EXPERIMENT


def test_the_declaration_validates():
  assert declare.validate(E) is E
  assert E.name == "cache" and E.section == 5 and E.claims == ("5.3",)


def test_the_arms_differ_only_in_the_key_rank():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"softmax"}
  assert fields["bilinear"] == {"num_heads": 1, "interaction": "bilinear"}
  for name, rank in MODULE.RANKS.items():
    if name != "bilinear":
      assert fields[name] == {"num_heads": 1, "interaction": "lowrank", "rank": rank}
  assert MODULE.RANKS["r16"] == MODULE.D // 4
  assert {s.model["d_model"] for s in E.sizes.values()} == {MODULE.D}


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  claim = [c for c in E.criteria if c.tests != "control"]
  assert {c.tests for c in claim} == {"5.3", "extension"}
  for c in claim:
    assert not c.positive.analytic and not c.falsification.analytic, c.name
    assert c.falsification.arm == "r1"  # the tiny rank must be rejected
  (quarter,) = [c for c in claim if c.tests == "5.3"]
  assert quarter.arm == "r16" and quarter.positive.arm == "bilinear"


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert result["claims"]["5.3"]["verdict"] in stats.VERDICTS
  assert result["seeds"]["confirmatory"] == entry["confirmatory"]
  seeds = len(entry["exploratory"]) + len(entry["confirmatory"])
  metrics = result["metrics"]
  for metric in ("adjusted", "key_bytes", "key_bytes_formula", "key_shrink"):
    assert {a: len(v["*"]) for a, v in metrics[metric].items()} == dict.fromkeys(
      MODULE.RANKS, seeds
    )
  # the real caches hold the formula's bytes: rank x 4 (float32) per token and layer, one head
  for name, rank in MODULE.RANKS.items():
    assert metrics["key_bytes"][name]["*"] == [rank * 4.0] * seeds
    assert metrics["key_bytes"][name]["*"] == metrics["key_bytes_formula"][name]["*"]
    assert metrics["key_shrink"][name]["*"] == [MODULE.D / rank] * seeds
  assert any(f.endswith(".png") for f in os.listdir(tmp_path / "work"))
