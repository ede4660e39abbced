"""The heads declaration (experiments/s7_heads.py): its one-head arms differ in the value rank
alone and the split arm keeps their parameters and cache, its criteria read trained arms both
ways, and the tiny size runs end to end in a scratch registry."""

import importlib
import os

from experiments.engine import declare, page, records, run, stats
from tests.experiments import scratch

E = importlib.import_module("experiments.s7_heads").EXPERIMENT


def test_the_declaration_validates():
  assert declare.validate(E) is E
  assert E.name == "heads" and E.section == 7 and E.claims == ("7.2",)


def test_the_arms_differ_only_in_the_value_rank_or_the_split():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"concat_wo"}
  for r in (1, 4, 8, 32, 64):
    assert fields[f"rv{r}"] == {"num_heads": 1, "value_rank": r}
  # H r_v = D for the split: the same Wq, Wk, Wv, Wo shapes and the same value cache as rv64
  assert fields["heads4"] == {"num_heads": 4, "value_rank": 16}
  assert all(s.model["d_model"] == 64 for s in E.sizes.values())


def test_every_claim_and_extension_criterion_reads_trained_arms_in_both_directions():
  arms = {a.name for a in E.arms}
  assert {c.name for c in E.criteria if c.tests == "7.2"} == {
    "rank_d8_holds", "rank_d8_shrinks_cache"}  # fmt: skip
  for c in E.criteria:
    if c.tests == "control":
      continue
    for case in (c.positive, c.falsification):
      assert not case.analytic and {case.arm, case.against} - {None} <= arms, c.name
      assert (case.arm, case.against) != (None, None), c.name
  holds = E.criterion("rank_d8_holds")
  assert (holds.arm, holds.against, holds.falsification.arm) == ("rv8", "rv64", "rv1")


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"7.2"}
  assert result["claims"]["7.2"]["verdict"] in stats.VERDICTS
  assert result["seeds"]["confirmatory"] == entry["confirmatory"]
  assert result["tasks"]["*"].startswith("mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  arms = [a.name for a in E.arms]
  for metric in ("adjusted", "value_cache"):
    assert {a: len(v["*"]) for a, v in result["metrics"][metric].items()} == dict.fromkeys(arms, 3)
  # the measured value cache: H r_v floats per token and layer, over D = 64
  cache = {a: v["*"][0] for a, v in result["metrics"]["value_cache"].items()}
  assert cache == {"rv1": 1 / 64, "rv4": 4 / 64, "rv8": 8 / 64, "rv32": 0.5, "rv64": 1.0,
                   "heads4": 1.0}  # fmt: skip
  # the cache criterion reads those shares (its verdicts wait on the arms' plateau: 4 steps)
  (shrinks,) = [c for c in result["criteria"] if c["name"] == "rank_d8_shrinks_cache"]
  assert shrinks["confirmatory"]["values"] == [8 / 64] * 2
  assert shrinks["falsification"]["case"] == "rv64"
  assert shrinks["falsification"]["values"] == [1.0] * 2
  run.record(result, E, results_dir=results)
  folder = os.path.join(results, "heads")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
