"""The decode suite at a tiny size: its rows are measured, and the cached step is faster
than recomputing a prefix of a few hundred tokens."""

from jaxformer.bench import decode as decode_bench


def test_decode_suite_tiny():
  result = decode_bench.run("tiny", positions=(64, 256), repeats=3)
  assert [r["position"] for r in result["rows"]] == [64, 256]
  for row in result["rows"]:
    assert 0 < row["cached_ms"] < 1e4 and 0 < row["recompute_ms"] < 1e4
    assert row["speedup"] == row["recompute_ms"] / row["cached_ms"]
  assert result["cache_slots"] == 256 + decode_bench.CHUNK
  assert result["generate_tokens_per_s"] > 0
  assert "flatness_target_met" not in result  # 2048 was not measured: no verdict
  table = decode_bench.format_table(result)
  assert "256" in table and "generate" in table
