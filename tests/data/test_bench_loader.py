"""Smoke test of the loader benchmark at a tiny size (the numbers are not checked)."""

from experiments import bench_loader


def test_run_reports_every_rate(tmp_path):
  spec = "mqar:vocab_size=64,seq_len=16,num_kv_pairs=2,num_examples=64,num_test_examples=8"
  r = bench_loader.run(spec, batch_size=8, steps=3, data_dir=str(tmp_path))
  assert r["spec"].startswith("mqar:vocab_size=64,seq_len=16")
  rates = [r[f"{k}_examples_per_s"] for k in ("per_record", "batched", "loader")]
  assert all(rate > 0 for rate in rates)
  assert r["speedup"] == rates[1] / rates[0]
