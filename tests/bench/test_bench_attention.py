"""The attention benchmark suite and the bench entry point, on tiny sizes."""

import json

import pytest

from experiments import bench
from jaxformer.bench import attention


def test_rows_have_time_memory_and_ratios():
  rows = attention.run(lengths=(64,), impls=("dense", "blockwise"), block_size=16, repeats=1)
  assert [(r["impl"], r["L"], r["status"]) for r in rows] == [
    ("dense", 64, "ok"),
    ("blockwise", 64, "ok"),
  ]
  dense, blockwise = rows
  assert dense["time_s"] > 0 and dense["peak_bytes"] >= 64 * 64 * 4  # holds the scores
  assert blockwise["memory_vs_dense"] == blockwise["peak_bytes"] / dense["peak_bytes"]
  assert dense["time_vs_dense"] == 1.0


def test_rows_are_timed_in_interleaved_rounds(monkeypatch):
  """Round r times every row once, in order; a row keeps each round's time and reports the
  median: a clock that drifts one tick per call gives the two rows alternate ticks."""
  from jaxformer.train import metrics

  ticks = iter(range(100))

  def time_calls(fn, repeats, calls=1, warmup=False):
    fn()
    tick = float(next(ticks))
    return metrics.Timings((tick,), (10 * tick,))

  monkeypatch.setattr(metrics, "time_calls", time_calls)
  dense, linear = attention.run(lengths=(32,), impls=("dense", "linear"), repeats=3)
  assert (dense["times_s"], linear["times_s"]) == ([0.0, 2.0, 4.0], [1.0, 3.0, 5.0])
  assert (dense["cpu_times_s"], linear["cpu_s"]) == ([0.0, 20.0, 40.0], 30.0)
  assert (dense["time_s"], linear["time_s"]) == (2.0, 3.0)


def test_over_budget_is_reported_not_run():
  (row,) = attention.run(lengths=(32,), impls=("dense",), memory_fraction=0.0, repeats=1)
  assert row["status"].startswith("skipped: needs") and "time_s" not in row
  assert row["peak_bytes"] > 0


def test_unknown_impl_is_named():
  with pytest.raises(ValueError, match="flash"):
    attention.run(lengths=(32,), impls=("flash",))


def test_cli_json_is_one_object(capsys):
  bench.main(["attention", "--lengths", "32", "--impls", "linear", "--set", "repeats=1", "--json"])
  out = json.loads(capsys.readouterr().out)
  (row,) = out["suites"]["attention"]["rows"]
  assert (row["impl"], row["L"], row["status"]) == ("linear", 32, "ok")
  assert out["suites"]["attention"]["config"]["repeats"] == 1
  assert out["machine"]["backend"] == "cpu"


def test_every_suite_has_sizes_and_columns():
  for name, suite in bench.SUITES.items():
    assert suite.sizes and suite.columns, name
