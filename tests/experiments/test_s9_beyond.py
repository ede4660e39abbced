"""experiments/s9_beyond.py: the declaration, its tiny size end to end, and claim 9.2's check
on the real attention kernels (compiled memory against L)."""

import importlib
import os

import pytest

from experiments.engine import declare, page, records, run, stats
from jaxformer.analysis import attention_memory
from tests.experiments import scratch

E = importlib.import_module("experiments.s9_beyond").EXPERIMENT
M = importlib.import_module("experiments.s9_beyond")


def test_the_declaration_validates():
  assert declare.validate(E) is E and E.name == "beyond" and E.section == 9


def test_the_arms_differ_only_in_what_each_position_may_read():
  fields = {a.name: dict(a.fields) for a in E.arms}
  assert {a.rung for a in E.arms} == {"softmax"}
  assert fields["window"] == fields["full"] | {"window": M.WINDOW}
  assert fields["self"] == fields["full"] | {"mask": "self"}


def test_every_claim_criterion_reads_trained_arms_in_both_directions():
  for c in E.criteria:
    if c.tests == "control":
      continue
    for case in (c.positive, c.falsification):
      assert not case.analytic, c.name
      assert (case.arm, case.at) != (None, None), c.name


def test_every_size_has_distances_on_both_sides_of_the_window():
  for size in E.sizes.values():
    assert any(d <= M.WINDOW for d in size.points) and any(d > M.WINDOW for d in size.points)
    assert max(size.points) < size.task["seq_len"]


def test_claim_9_2_dense_memory_grows_as_l_squared_the_others_as_l():
  """The check claim 9.2 reduces to: each kernel's log-log slope of compiled temp bytes
  against L meets its threshold, and each statement accepts its positive kernel and rejects
  its falsification kernel."""
  lengths, kw = (256, 512, 1024), {"window": 32, "block_size": 32, "head_dim": 16}
  kernels = {k for row in M.CHECKS for k in (row[0], row[3], row[4])}
  slopes = {k: attention_memory.growth(k, lengths, **kw)[0] for k in kernels}
  for kernel, compare, threshold, positive, falsification in M.CHECKS:
    for name, want in ((kernel, True), (positive, True), (falsification, False)):
      assert stats.passes(slopes[name], compare, threshold) == want, (kernel, name, slopes)
  assert slopes["dense"] == pytest.approx(2.0, abs=0.05)


def test_slope_reads_the_two_largest_lengths():
  assert attention_memory.slope((4, 1, 2), (16, 1, 4)) == pytest.approx(2.0)
  assert attention_memory.slope((1, 2, 4), (3, 5, 10)) == pytest.approx(1.0)


def test_the_tiny_size_runs_end_to_end(tmp_path):
  entry, result, results = scratch.run_tiny(E, tmp_path)
  assert set(result["claims"]) == {"9.1"}
  assert result["claims"]["9.1"]["verdict"] in stats.VERDICTS
  seeds = len(entry["exploratory"]) + len(entry["confirmatory"])
  metrics = result["metrics"]
  for arm in ("full", "window", "self"):
    assert set(metrics["adjusted"][arm]) == {"4", "12"}
    assert set(metrics["lowest"][arm]) == {"*", "4", "12"}
    for metric in ("within", "beyond", "lowest"):
      assert len(metrics[metric][arm]["*"]) == seeds
    assert metrics["within"][arm]["*"] == metrics["adjusted"][arm]["4"]
    assert metrics["beyond"][arm]["*"] == metrics["adjusted"][arm]["12"]
  assert "needle:vocab_size=16,seq_len=16" in result["tasks"]["12"]
  run.record(result, E, results_dir=results)
  folder = os.path.join(results, "beyond")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  assert os.path.exists(os.path.join(folder, page.figure_name(result)))
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(E, folder)
