"""The sweep suite at its tiny size: one compile row and one step row per replica count, each
number consistent with the others; a bad argument is named before anything compiles."""

import math

import pytest

from experiments import bench
from jaxformer.bench import BenchError
from jaxformer.bench import sweep as sweep_bench


def test_sweep_suite_tiny():
  size = sweep_bench.SUITE.sizes["tiny"]
  rows = sweep_bench.SUITE.run(**size)
  compile_rows = [r for r in rows if r["kind"] == "compile"]
  steps = [r for r in rows if r["kind"] == "step"]
  assert [r["arm"] for r in compile_rows] == list(size["arms"])
  assert [r["replicas"] for r in steps] == list(size["replicas"])
  (row,) = compile_rows
  for name in ("cold", "warm"):
    parts = [row[f"{name}_{p}_s"] for p in ("init", "train", "eval")]
    assert all(s > 0 for s in parts)
    assert row[f"{name}_s"] == pytest.approx(sum(parts))
  assert row["train_jaxpr_eqns"] > 0 and row["train_hlo_chars"] > 0
  for r in steps:
    assert 0 < r["step_ms"] < 1e5
    assert r["replica_step_ms"] == pytest.approx(r["step_ms"] / r["replicas"])
    assert r["gflops"] == pytest.approx(
      r["flops_per_replica_step"] * r["replicas"] / (r["step_ms"] / 1e3) / 1e9
    )
    assert r["fraction_of_peak"] == pytest.approx(r["gflops"] / r["peak_gflops"])
    assert math.isfinite(r["fraction_of_peak"]) and r["fraction_of_peak"] > 0
    if r["replicas"] > 1:  # a step with half of the replicas stopped was timed too
      assert 0 < r["half_stopped_step_cpu_ms"] and 0 < r["half_stopped_step_ms"] < 1e5
    else:
      assert r["half_stopped_step_ms"] is None
  # the FLOPs per replica-step do not depend on how many replicas share the step
  assert len({r["flops_per_replica_step"] for r in steps}) == 1
  assert {r["chunk"] for r in rows} == {1}  # a CPU's: one replica at a time


def test_one_vmap_of_every_replica_is_recorded_as_such():
  size = dict(sweep_bench.SUITE.sizes["tiny"], replicas=(2,), chunk="all")
  rows = sweep_bench.SUITE.run(**size)
  assert [r["chunk"] for r in rows] == ["all", "all"]
  assert [r["kind"] for r in rows] == ["compile", "step"] and rows[1]["step_ms"] > 0


@pytest.mark.parametrize(
  "overrides, field",
  [
    ({"arms": ("gru_lm",)}, "arms"),
    ({"replicas": (0,)}, "replicas"),
    ({"steps": 0}, "steps"),
    ({"chunk": 0}, "chunk"),
    ({"chunk": "most"}, "chunk"),
  ],
)
def test_a_bad_argument_is_named(overrides, field):
  with pytest.raises(BenchError, match=field):
    sweep_bench.run(**overrides)


def test_the_cli_names_a_bad_arm_and_exits_2(capsys):
  with pytest.raises(SystemExit) as exit_info:
    bench.main(["sweep", "--set", "arms=('gru_lm',)"])
  assert exit_info.value.code == bench.USAGE
  assert "gru_lm" in capsys.readouterr().err


def test_op_shares_sum_each_kind_of_operation_and_skip_the_runtime():
  events = [
    {"ph": "X", "name": "ynn_fusion.3", "dur": 30},
    {"ph": "X", "name": "dot.11", "dur": 10},
    {"ph": "X", "name": "copy_bitcast_fusion.7", "dur": 20},
    {"ph": "X", "name": "transpose.2", "dur": 5},
    {"ph": "X", "name": "multiply_add_fusion", "dur": 25},
    {"ph": "X", "name": "reduce_bitcast_fusion", "dur": 10},
    {"ph": "X", "name": "ynn_fusion.3", "dur": 0},  # the same operation again
    # not operations: the runtime, a Python frame, a loop whose body is traced on its own,
    # an instant event without a duration
    {"ph": "X", "name": "ThunkExecutor::Execute", "dur": 500},
    {"ph": "X", "name": "SlinkyThreadPool::Await", "dur": 500},
    {"ph": "X", "name": "$profiler.py:307 trace", "dur": 500},
    {"ph": "X", "name": "while.22", "dur": 500},
    {"ph": "i", "name": "copy.1"},
  ]
  shares = sweep_bench.op_shares(events)
  assert shares["products_share"] == pytest.approx(0.4)
  assert shares["copies_share"] == pytest.approx(0.25)
  assert shares["other_share"] == pytest.approx(0.35)
  assert shares["ops"] == 6


def test_a_trace_without_operations_is_an_error():
  with pytest.raises(BenchError, match="profile"):
    sweep_bench.op_shares([{"ph": "X", "name": "ThunkExecutor::Execute", "dur": 5}])


def test_a_profiled_step_row_says_where_the_step_goes():
  size = dict(sweep_bench.SUITE.sizes["tiny"], replicas=(2,), profile=True)
  rows = sweep_bench.SUITE.run(**size)
  (step,) = [r for r in rows if r["kind"] == "step"]
  shares = [step[f"{k}_share"] for k in sweep_bench.OP_KINDS]
  assert sum(shares) == pytest.approx(1.0) and all(0 <= x <= 1 for x in shares)
  assert step["products_share"] > 0 and step["ops"] > 10
