"""The positions declaration (experiments/s8_positions.py): its arms differ in the position
table and the mask alone, its claim criteria read trained arms both ways, and the tiny size
runs end to end in a scratch registry."""

import importlib
import os

import pytest

from experiments.engine import declare, page, records, run, stats
from tests.experiments import scratch

E = importlib.import_module("experiments.s8_positions").EXPERIMENT
SHARED = {"num_heads": 1, "positions": "none"}


def test_the_declaration_validates():
  assert declare.validate(E) is E
  assert E.name == "positions" and E.section == 8 and E.claims == ("8.4",)


def test_the_arms_differ_only_in_the_position_table_and_the_mask():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"transformer"}
  assert fields == {
    "learned": SHARED | {"positions": "learned"},
    "sinusoidal": SHARED | {"positions": "sinusoidal"},
    "none": SHARED,
    "encoder": SHARED | {"mask": "bidirectional"},
    "encoder_learned": SHARED | {"mask": "bidirectional", "positions": "learned"},
    "self": SHARED | {"mask": "self"},
  }


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  claimed = [c for c in E.criteria if c.tests == "8.4"]
  assert {c.name for c in claimed} == {"positions_copy", "encoder_fails"}
  arms = {a.name for a in E.arms}
  for c in E.criteria:
    if c.tests == "control":
      continue
    for case in (c.positive, c.falsification):
      assert not case.analytic and case.arm in arms and case.arm != c.arm, c.name
  # the encoder's failure is judged against the same mask given positions
  (fails,) = [c for c in claimed if c.name == "encoder_fails"]
  assert fails.falsification.arm == "encoder_learned" and fails.guarded_by == ("encoder_trains",)


@pytest.mark.parametrize("size", ["tiny", "quick", "full"])
def test_every_size_copies_at_least_twice_its_string(size):
  s = E.sizes[size]
  assert 2 * s.task["copy_len"] < s.task["seq_len"]  # the encoder_learned arm reads a next token
  assert s.extra["probe_examples"] <= s.task["num_test_examples"] // 2


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"8.4"}
  assert result["claims"]["8.4"]["verdict"] in stats.VERDICTS
  assert result["tasks"]["*"].startswith("copy:vocab_size=16,seq_len=8,copy_len=3")
  seeds = len(result["seeds"]["exploratory"]) + len(result["seeds"]["confirmatory"])
  arms = [a.name for a in E.arms]
  for metric in ("adjusted", "over_guess"):
    assert {a: len(v["*"]) for a, v in result["metrics"][metric].items()} == dict.fromkeys(
      arms, seeds
    )
  # over_guess is the accuracy over a guess among the c = 3 tokens to copy
  for a in arms:
    accuracy, over = result["metrics"]["accuracy"][a]["*"], result["metrics"]["over_guess"][a]["*"]
    assert over == pytest.approx([3 * x for x in accuracy])
  for metric in ("position_r2", "position_r2_untrained"):
    probed = result["metrics"][metric]
    assert set(probed) == {"none", "encoder"}
    assert all(len(v["*"]) == seeds and max(v["*"]) <= 1.0 for v in probed.values())
  (fails,) = [c for c in result["criteria"] if c["name"] == "encoder_fails"]
  assert fails["positive"]["case"] == "self"
  assert fails["falsification"]["case"] == "encoder_learned"
  run.record(result, E, results_dir=results)
  folder = os.path.join(results, "positions")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  assert os.path.getsize(os.path.join(folder, "positions_tiny.png")) > 1000
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
