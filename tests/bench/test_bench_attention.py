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


def test_over_budget_is_reported_not_run():
    (row,) = attention.run(lengths=(32,), impls=("dense",), memory_fraction=0.0, repeats=1)
    assert row["status"].startswith("skipped: needs") and "time_s" not in row
    assert row["peak_bytes"] > 0


def test_unknown_impl_is_named():
    with pytest.raises(ValueError, match="flash"):
        attention.run(lengths=(32,), impls=("flash",))


def test_cli_json_is_one_object(capsys):
    bench.main(
        ["attention", "--lengths", "32", "--impls", "linear", "--set", "repeats=1", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    (row,) = out["suites"]["attention"]["rows"]
    assert (row["impl"], row["L"], row["status"]) == ("linear", 32, "ok")
    assert out["suites"]["attention"]["config"]["repeats"] == 1
    assert out["machine"]["backend"] == "cpu"


def test_every_suite_has_sizes_and_columns():
    for name, suite in bench.SUITES.items():
        assert suite.sizes and suite.columns, name
