"""The matmul suite: its products are the train step's, and its numbers agree with each other."""

import pytest

from jaxformer.bench import BenchError
from jaxformer.bench import matmul as matmul_bench
from jaxformer.bench import train as train_bench
from jaxformer.train import metrics


@pytest.mark.parametrize("size", ["tiny", "gpt_small"])
def test_products_are_the_train_steps_matmuls(size):
  """Weighted by how often the step runs them, the products add up to the train suite's FLOP
  formula: 6 x tokens x the weight matrices' entries, plus the causal attention, which the
  blockwise kernel computes whole on the diagonal blocks ((n + 1) / n of the half count) and
  partly recomputes (8 block products per block pair where the formula counts 6)."""
  c, seq_len = train_bench.config(size)
  m = c.model
  tokens = c.batch_size * seq_len
  weights = m.num_layers * (4 * m.d_model**2 + 2 * m.d_model * m.d_ff) + m.d_model * m.vocab_size
  n = seq_len // min(matmul_bench.ATTENTION_BLOCK, seq_len)
  attention = metrics.flops_per_token("transformer", m, seq_len, 0) * tokens * (n + 1) / n * 8 / 6
  rows = matmul_bench.products(size)
  total = {True: 0, False: 0}
  for name, lhs, rhs, contracting, batch, per_step in rows:
    total[name.startswith("attention")] += per_step * matmul_bench._flops(
      lhs, rhs, contracting, batch
    )
  assert total[False] == 6 * tokens * weights
  assert total[True] == pytest.approx(attention)


def test_matmul_suite_tiny_beside_torch():
  rows = matmul_bench.run("tiny", repeats=1, calls=1, compare="torch")
  *products, total = rows
  assert len(products) == len(matmul_bench.products("tiny")) and total["product"] == "all"
  for r in products:
    assert r["jax_gflops"] == pytest.approx(r["flops"] / r["jax_s"] / 1e9)
    assert r["speed_vs_torch"] == pytest.approx(r["torch_s"] / r["jax_s"])
    assert r["jax_s"] > 0 and r["torch_s"] > 0
  assert total["dot_s_per_step"] == pytest.approx(sum(r["jax_s"] * r["per_step"] for r in products))
  assert total["speed_vs_torch"] == pytest.approx(
    total["torch_dot_s_per_step"] / total["dot_s_per_step"]
  )


def test_matmul_suite_alone_has_no_torch_columns():
  *products, total = matmul_bench.run("tiny", repeats=1, calls=1)
  assert all("torch_s" not in r and r["jax_gflops"] > 0 for r in products)
  assert "speed_vs_torch" not in total


def test_bad_matmul_arguments_are_named():
  with pytest.raises(BenchError, match="compare='tf'"):
    matmul_bench.run("tiny", compare="tf")
  with pytest.raises(BenchError, match="repeats=0"):
    matmul_bench.run("tiny", repeats=0)
  with pytest.raises(BenchError, match="model_size='huge'"):
    matmul_bench.run("huge")
