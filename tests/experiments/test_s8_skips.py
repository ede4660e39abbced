"""The skips declaration (experiments/s8_skips.py): its arms differ in the skip and the depth
alone (the by-construction arm adds one field), its claim criteria read trained arms both
ways, the slowdown's falsification case is the shallowest depth, and the tiny size runs end to
end in a scratch registry."""

import importlib
import os

import pytest

from experiments.engine import declare, page, records, run, stats
from tests.experiments import scratch

m = importlib.import_module("experiments.s8_skips")
E = m.EXPERIMENT


def test_the_declaration_validates():
  assert declare.validate(E) is E
  assert E.name == "skips" and E.section == 8 and E.claims == ("8.3",)


def test_the_arms_differ_only_in_the_skip_and_the_depth():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"transformer"}
  expected = {
    f"{family}_{d}": m.SHARED | {"skip": skip, "num_layers": d}
    for d in m.DEPTHS
    for family, skip in {"residual": "split", "plain": "none"}.items()
  }
  assert fields == expected | {"blind": expected[m.RESIDUAL_SHALLOW] | {"mask": "self"}}
  for size in E.sizes.values():  # no size overrides what sets the arms apart
    assert not {"skip", "num_layers", "mask"} & set(size.model)
    assert not size.arm_steps  # every arm starts at the same budget and cap


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  arms = {a.name for a in E.arms}
  claimed = [c for c in E.criteria if c.tests in ("8.3", "extension")]
  assert {c.name for c in claimed if c.tests == "8.3"} == {
    "residual_trains_deep",
    "plain_fails_deep",
  }
  for c in claimed:
    for case in (c.positive, c.falsification):
      assert not case.analytic and case.arm in arms, c.name
  # the plain stack's failure at the deepest depth is rejected at the shallowest, where it
  # learns; likewise the slowdown, where the two are alike
  (fails,) = [c for c in claimed if c.name == "plain_fails_deep"]
  assert (fails.arm, fails.falsification.arm) == (m.PLAIN_DEEP, m.PLAIN_SHALLOW)
  (slower,) = [c for c in claimed if c.name == "plain_slower_deep"]
  assert (slower.arm, slower.against) == (m.PLAIN_DEEP, m.RESIDUAL_DEEP)
  assert (slower.falsification.arm, slower.falsification.against) == (
    m.PLAIN_SHALLOW, m.RESIDUAL_SHALLOW)  # fmt: skip
  (trains,) = [c for c in claimed if c.name == "residual_trains_deep"]
  assert trains.falsification.arm == m.PLAIN_DEEP


# the most steps a residual stack took to reach 0.9 in each size's sizing runs
# (results/skips/log.md): 150-200 at quick, about 300 in the full draft's
RESIDUAL_STEPS = {"quick": 200, "full": 300}


@pytest.mark.parametrize("size", ["quick", "full"])
def test_a_flat_plain_stack_reads_a_ratio_the_threshold_can_judge(size):
  # a stack that never reaches 0.9 reads its first budget (every arm's: none has its own),
  # which must put the censored ratio above the extension's threshold, not on it
  s = E.sizes[size]
  (slower,) = [c for c in E.criteria if c.name == "plain_slower_deep"]
  assert s.steps / RESIDUAL_STEPS[size] > slower.threshold


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"8.3"}
  assert result["claims"]["8.3"]["verdict"] in stats.VERDICTS
  assert result["tasks"]["*"].startswith("mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  seeds = len(result["seeds"]["exploratory"]) + len(result["seeds"]["confirmatory"])
  arms = [a.name for a in E.arms]
  for metric in ("adjusted", "steps_to"):
    assert {a: len(v["*"]) for a, v in result["metrics"][metric].items()} == dict.fromkeys(
      arms, seeds
    )
  (slower,) = [c for c in result["criteria"] if c["name"] == "plain_slower_deep"]
  assert slower["positive"]["case"] == f"blind against {m.RESIDUAL_DEEP}"
  assert slower["falsification"]["case"] == f"{m.PLAIN_SHALLOW} against {m.RESIDUAL_SHALLOW}"
  run.record(result, E, results_dir=results)
  folder = os.path.join(results, "skips")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  assert os.path.getsize(os.path.join(folder, "skips_tiny.png")) > 1000
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
