"""The train suite at a tiny size: the numbers it reports are consistent with each other."""

import math

import pytest

from jaxformer.bench import train as train_bench
from jaxformer.train import metrics


def test_train_suite_tiny(monkeypatch):
  monkeypatch.setattr(train_bench, "CPU_PEAK_SIZES", (256,))  # a quick peak for the test
  r = train_bench.run("tiny", steps=2, windows=1)
  for key in ("tokens_per_s", "step_time_s", "mfu", "peak_flops"):
    assert math.isfinite(r[key]) and r[key] > 0, key
  assert r["tokens_per_s"] == pytest.approx(r["batch"] * r["seq_len"] / r["step_time_s"])
  assert r["mfu"] == pytest.approx(r["flops_per_step"] / r["step_time_s"] / r["peak_flops"])
  assert math.isfinite(r["final_loss"])
  # the FLOP count is the training metrics' formula: 6 N + attention per token
  c, seq_len = train_bench.config("tiny")
  matmul_params = r["params"] - (c.model.vocab_size + c.model.max_len) * c.model.d_model
  attention = 12 * c.model.num_layers * seq_len * c.model.d_model
  want = metrics.flops_per_token("transformer", c.model, seq_len, matmul_params)
  assert want == 6 * matmul_params + attention
  assert r["flops_per_step"] == want * r["batch"] * seq_len
  assert "MFU" in train_bench.format_table(r)
