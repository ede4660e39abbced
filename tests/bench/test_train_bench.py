"""The train suite at its tiny size: the numbers it reports are consistent with each other."""

import math

import pytest

from jaxformer.bench import BenchError
from jaxformer.bench import train as train_bench
from jaxformer.train import metrics


def test_train_suite_tiny(monkeypatch):
  monkeypatch.setattr(train_bench, "CPU_PEAK_SIZES", (256,))  # a quick peak for the test
  (r,) = train_bench.SUITE.run(**train_bench.SUITE.sizes["tiny"])
  for key in ("tokens_per_s", "step_time_s", "mfu", "peak_flops", "mfu_cpu_time"):
    assert math.isfinite(r[key]) and r[key] > 0, key
  assert r["tokens_per_s"] == pytest.approx(r["batch"] * r["seq_len"] / r["step_time_s"])
  assert r["mfu"] == pytest.approx(r["flops_per_step"] / r["step_time_s"] / r["peak_flops"])
  assert r["mfu_target"] == train_bench.TARGET_MFU  # a CPU; an accelerator: ACCEL_TARGET_MFU
  assert r["mfu_target_met"] == (r["mfu"] >= train_bench.TARGET_MFU)
  assert math.isfinite(r["final_loss"])
  # the FLOP count is the training metrics' formula: 6 N + causal attention at half per token
  c, seq_len = train_bench.config("tiny")
  matmul_params = r["params"] - (c.model.vocab_size + c.model.max_len) * c.model.d_model
  attention = 6 * c.model.num_layers * seq_len * c.model.d_model
  want = metrics.flops_per_token("transformer", c.model, seq_len, matmul_params)
  assert want == 6 * matmul_params + attention
  assert r["flops_per_step"] == want * r["batch"] * seq_len


@pytest.mark.slow  # the train suite on a data-parallel mesh: `make test-slow`
def test_train_suite_data_parallel_takes_the_same_step(monkeypatch):
  """Split over 2 devices, the batch gives the single-device loss: the gradients are
  all-reduced, not averaged per device and lost."""
  monkeypatch.setattr(train_bench, "CPU_PEAK_SIZES", (128,))
  one, two = (train_bench.run("tiny", steps=1, windows=1, devices=n)[0] for n in (1, 2))
  assert (one["devices"], two["devices"]) == (1, 2)
  assert two["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5)
  assert math.isfinite(two["mfu"]) and two["peak_flops"] > 0


@pytest.mark.slow  # the train suite in bfloat16 with scanned layers: `make test-slow`
def test_bfloat16_and_scanned_layers_run_on_cpu(monkeypatch):
  """dtype=bfloat16 (fp32 params) and scan_layers with remat train on a CPU; the MFU peak
  stays the measured float32 one (the CPU convention)."""
  monkeypatch.setattr(train_bench, "CPU_PEAK_SIZES", (128,))
  (r,) = train_bench.run(
    "tiny", steps=1, windows=1, dtype="bfloat16", scan_layers=True, remat="dots"
  )
  assert (r["dtype"], r["scan_layers"], r["remat"], r["peak_source"]) == (
    "bfloat16",
    True,
    "dots",
    "measured",
  )
  assert math.isfinite(r["final_loss"]) and r["mfu"] > 0


def test_compare_torch_times_the_same_model_in_alternating_windows(monkeypatch):
  monkeypatch.setattr(train_bench, "CPU_PEAK_SIZES", (128,))
  jax_row, torch_row = train_bench.run("tiny", steps=1, windows=3, compare="torch")
  assert (jax_row["framework"], torch_row["framework"]) == ("jaxformer", "torch")
  # the same model size, FLOP count and peaks: only the step times differ
  assert torch_row["params"] == jax_row["params"]
  for key in ("flops_per_step", "batch", "seq_len", "dtype"):
    assert torch_row[key] == jax_row[key], key
  assert torch_row["attention"] == "sdpa"  # its own kernel, not jaxformer's attention
  assert len(jax_row["speed_vs_torch_windows"]) == 3
  assert jax_row["speed_vs_torch"] == pytest.approx(
    sorted(jax_row["speed_vs_torch_windows"])[1], abs=1e-4
  )
  assert torch_row["mfu"] == pytest.approx(
    torch_row["flops_per_step"] / torch_row["step_time_s"] / torch_row["peak_flops"]
  )


def test_bad_bench_arguments_are_named_before_measuring():
  with pytest.raises(BenchError, match="dtype='float16'"):
    train_bench.run("tiny", dtype="float16")
  with pytest.raises(BenchError, match="compare='tf'"):
    train_bench.run("tiny", compare="tf")
  with pytest.raises(BenchError, match="compare='torch': runs on one CPU device"):
    train_bench.run("tiny", compare="torch", devices=2)
