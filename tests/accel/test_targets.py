"""--compile_only TARGET parsing: TPU topology names with slices, GPU target-config files; every
bad spelling is a ConfigError naming the flag."""

import pytest

from jaxformer import ladder
from jaxformer.train import compile_only


def test_tpu_and_gpu_targets(tmp_path):
  assert compile_only.parse_target("v5e:2x4") == ("tpu", {"name": "v5e:2x4", "slices": 1})
  assert compile_only.parse_target("v4:2x2x1,slices=2") == (
    "tpu",
    {"name": "v4:2x2x1", "slices": 2},
  )
  spec = tmp_path / "h100.txtpb"
  spec.write_text("gpu_device_info { device_memory_size: 85000000000 }\n")
  assert compile_only.parse_target(f"gpu:{spec},topology=1x1x8") == (
    "gpu",
    {"file": str(spec), "topology": "1x1x8"},
  )


@pytest.mark.parametrize(
  "spec, why",
  [
    ("", "expected a TPU topology"),
    ("v5e", "expected a TPU topology name"),
    ("v5e:2x4,slices=0", "slices='0'"),
    ("v5e:2x4,topology=1x1x8", "topology= is for gpu"),
    ("v5e:2x4,mesh=2", "'mesh=2'"),
    ("gpu:missing.txtpb,topology=1x1x8", "no such GPU target-config file"),
    ("gpu:missing.txtpb", "gpu:FILE,topology=AxBxC"),
    ("gpu:missing.txtpb,topology=8", "topology='8'"),
  ],
)
def test_bad_targets_name_the_flag(spec, why):
  with pytest.raises(ladder.ConfigError, match="--compile_only=") as err:
    compile_only.parse_target(spec)
  assert why in str(err.value)
