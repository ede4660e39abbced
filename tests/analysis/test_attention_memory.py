"""jaxformer.analysis.attention_memory: compiled bytes of one attention fwd+bwd pass."""

import pytest

from jaxformer.analysis import attention_memory


def test_dense_temp_memory_holds_the_l_by_l_scores():
  small = attention_memory.compiled_bytes("dense", 128, head_dim=8)
  assert small["temp_bytes"] >= 128 * 128 * 4  # the float32 scores, at least once
  assert small["peak_bytes"] >= small["temp_bytes"]


def test_growth_reports_the_slope_of_the_bytes_it_returns():
  b, temp = attention_memory.growth("sliding_window", (64, 128), window=8, block_size=8,
                                    head_dim=8)  # fmt: skip
  assert list(temp) == [64, 128]
  assert b == pytest.approx(attention_memory.slope([64, 128], [temp[64], temp[128]]))
