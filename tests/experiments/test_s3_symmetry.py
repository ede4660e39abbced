"""symmetry's declaration (experiments/s3_symmetry.py): what its arms share, where its claims
are read, and the tiny size end to end in a scratch registry."""

import importlib
import os

from experiments.engine import declare, page, records, run, stats
from tests.experiments import scratch

E = importlib.import_module("experiments.s3_symmetry").EXPERIMENT


def test_the_declaration_validates_and_reads_every_claim():
  declare.validate(E)
  assert E.name == "symmetry" and E.section == 3
  assert E.claims == ("3.1", "3.2", "3.3", "3.4", "3.5")
  assert {c.tests for c in E.criteria} >= set(E.claims)


def test_the_arms_differ_only_in_the_weight_function():
  arms = {a.name: a for a in E.arms}
  assert {a.rung for a in E.arms} == {"source_only", "stateless", "matrix_sum"}
  shared = {"num_heads": 1, "normalizer": "softmax"}
  assert dict(arms["source_only"].fields) == dict(arms["stateless"].fields) == shared
  assert dict(arms["matrix_sum"].fields) == shared | {"interaction": "lowrank"}
  assert all(a.learning_rates is None for a in E.arms)


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  for c in E.criteria:
    if c.tests != "control":
      assert not c.positive.analytic and not c.falsification.analytic, c.name


def test_pairs_sweep_at_a_fixed_width_and_induction_is_read_apart():
  for name, size in E.sizes.items():
    assert E.trained_points(name) == ("induction", "mqar")
    assert E.points(name)[0] == "induction:1" and E.points(name)[1] == "mqar:2"
    assert "num_kv_pairs=" + "+".join(map(str, size.points["mqar"])) in E.task(size, "mqar")
    assert E.task(size, "induction:1") == E.task(size, "induction")
  full = E.sizes["full"]
  assert max(full.points["mqar"]) >= 16 and full.model["d_model"] == 64
  assert E.points("full")[-1] == "mqar:16" and "num_kv_pairs=16," in E.task(full, "mqar:16")
  # induction's informed guess (1/(L - 2)) must sit above a uniform guess over the ids
  for size in E.sizes.values():
    assert size.task["induction"]["vocab_size"] >= size.task["induction"]["seq_len"]


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == set(E.claims)
  assert all(c["verdict"] in stats.VERDICTS for c in result["claims"].values())
  seeds = len(entry["exploratory"]) + len(entry["confirmatory"])
  points = ("induction:1", "mqar:2", "mqar:4")
  for metric in ("adjusted", "over_chance", "contrast", "contrast_untrained", "contrast_rise"):
    for arm in ("source_only", "stateless", "matrix_sum"):
      assert all(len(result["metrics"][metric][arm][p]) == seeds for p in points), (metric, arm)
  dependence = result["metrics"]["dependence"]
  assert "stateless" not in dependence  # a self mask shares no sources
  assert max(v for p in points for v in dependence["source_only"][p]) <= 1e-5
  assert min(v for p in points for v in dependence["matrix_sum"][p]) > 0.0
  run.record(result, E, results_dir=results)
  folder = os.path.join(results, "symmetry")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
  assert os.path.getsize(os.path.join(folder, page.figure_name(result))) > 1000
