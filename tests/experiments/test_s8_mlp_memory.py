"""The MLP-memory declaration (experiments/s8_mlp_memory.py): its arms differ in the MLP alone
(the blind arm adds its mask), every claim criterion reads real arms both ways (one analytic
case, stated), the probe sees each fact often enough to fill a unit's top contexts, and the
tiny size runs end to end in a scratch registry."""

import importlib
import os

import numpy as np
import pytest

from experiments.engine import declare, page, records, stats
from experiments.engine import run as engine_run
from jaxformer.data import parse_spec
from tests.experiments import scratch

m = importlib.import_module("experiments.s8_mlp_memory")
E = m.EXPERIMENT
MLP_FIELDS = {"d_ff", "mlp_w2", "mlp_w2_trained"}


def test_the_declaration_validates():
  assert declare.validate(E) is E
  assert E.name == "mlp_memory" and E.section == 8 and E.claims == ("8.2",)
  assert {c.tests for c in E.criteria} == {"8.2", "extension", "control"}


def test_the_arms_differ_only_in_the_mlp():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"transformer"}
  base = {"num_heads": 1, "d_ff": m.D}
  assert fields == {
    "w2": base,
    "no_w2": base | {"mlp_w2": False},
    "fixed_w2": base | {"mlp_w2_trained": False},
    "w2_4d": base | {"d_ff": 4 * m.D},
    "blind": base | {"mask": "self"},
  }
  for size in E.sizes.values():  # no size overrides what sets the arms apart
    assert size.model["d_model"] == m.D and not (MLP_FIELDS | {"mask"}) & set(size.model)
    assert set(size.arm_steps) <= {"blind"}  # only the arm at chance by construction stops early


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  arms = {a.name for a in E.arms}
  claimed = {c.name: c for c in E.criteria if c.tests != "control"}
  assert {n for n, c in claimed.items() if c.tests == "8.2"} == {
    "w2_writes_faster",
    "keys_match_patterns",
    "values_write_answers",
    "ablation_lowers_promoted",
  }
  for c in claimed.values():
    assert not c.falsification.analytic, c.name
    assert c.positive.analytic == (c.name == "keys_beat_random_directions"), c.name
    for case in (c.positive, c.falsification):
      assert case.analytic or {case.arm, case.against} - {None} <= arms
  # W2 at equal width: the same ratio against a W2 that is not learned must be rejected
  faster = claimed["w2_writes_faster"]
  assert (faster.arm, faster.against, faster.falsification.against) == ("no_w2", "w2", "fixed_w2")
  assert set(faster.guarded_by) == {"w2_recalls", "no_w2_learns"}
  # the probes read w2 and must reject the arm that cannot see the pair
  for name in ("keys_match_patterns", "values_write_answers", "ablation_lowers_promoted"):
    c = claimed[name]
    assert (c.arm, c.positive.arm, c.falsification.arm) == ("w2", "w2_4d", "blind")
  # trained minus the same networks at init where training alone can make the reading
  assert claimed["keys_match_patterns"].statistic == "gain"
  assert claimed["ablation_lowers_promoted"].statistic == "gain"


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_probe_sees_every_fact_often_enough_to_fill_a_units_top_contexts(size):
  s = E.sizes[size]
  facts = s.task["num_subjects"] * max(s.points)
  per_fact = s.extra["probe"] * (s.task["seq_len"] // 3) / facts
  assert per_fact >= s.extra["top"]
  assert 2 * s.extra["probe"] <= s.task["num_test_examples"]  # the eval half holds them


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"8.2"}
  assert result["claims"]["8.2"]["verdict"] in stats.VERDICTS
  assert parse_spec(result["tasks"]["2"])[1]["vocab_size"] == 1 + 2 * 4 + 2  # S = 4, R = 2
  seeds = len(result["seeds"]["exploratory"]) + len(result["seeds"]["confirmatory"])
  metrics = result["metrics"]
  assert {a: len(v["2"]) for a, v in metrics["steps_to"].items()} == dict.fromkeys(
    [a.name for a in E.arms], seeds
  )
  for name in (mt.name for mt in m.METRICS):
    assert set(metrics[name]) == set(m.PROBED), name
    values = np.array([metrics[name][a]["2"] for a in m.PROBED])
    assert values.shape == (3, seeds) and np.all(np.isfinite(values)), name
  for arm in m.PROBED:
    read = {
      k: np.array(metrics[k][arm]["2"]) for k in metrics if k in {mt.name for mt in m.METRICS}
    }
    for side in ("key", "value"):
      assert np.all((read[f"{side}_units"] >= 0) & (read[f"{side}_units"] <= 1))
    np.testing.assert_allclose(read["keys_over_random"], read["key_units"] - read["key_random"])
    best = np.maximum(read["value_random"], read["value_untrained"])
    np.testing.assert_allclose(read["values"], read["value_units"] - best)
  (faster,) = [c for c in result["criteria"] if c["name"] == "w2_writes_faster"]
  assert faster["falsification"]["case"].startswith("no_w2 against fixed_w2")
  (keys,) = [c for c in result["criteria"] if c["name"] == "keys_beat_random_directions"]
  assert keys["positive"]["analytic"]
  engine_run.record(result, E, results_dir=results)
  folder = os.path.join(results, "mlp_memory")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  assert os.path.getsize(os.path.join(folder, page.figure_name(result))) > 1000
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
