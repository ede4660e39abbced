"""jaxformer.train.compile_only: the train step compiled for a TPU topology this machine does not
have (libtpu's compile-only devices), its memory, sharding and collectives checked."""

import sys

import jax
import pytest

from jaxformer.train import compile_only, program, sharding
from jaxformer.train import config as config_lib
from tests.train.train_helpers import REPO, TINY_TASK, run

# A transformer whose weight shards keep every minor dimension a multiple of TPU's 128-lane tile
# at fsdp = 8 (D = 1024, heads of 128), so padding stays small; one block keeps compiles short.
MODEL = dict(d_model=1024, num_heads=8, d_ff=2048, num_layers=1, vocab_size=256, max_len=32)
# TPU pads arrays to (8, 128) tiles; the per-device argument bytes may exceed the exact shard
# bytes (state shards + batch shard) by at most this fraction.
PADDING_TOLERANCE = 0.10


def small_config(mesh_shape, dcn_mesh_shape=None, batch_size=16, **model):
  c = config_lib.get_config("transformer")
  with c.unlocked():
    c.task = TINY_TASK
    for field, value in {**MODEL, **model}.items():
      c.model[field] = value
    c.batch_size = batch_size
    c.mesh_shape = mesh_shape
    c.dcn_mesh_shape = dcn_mesh_shape
  return c


def has_reduction(collectives, axis):
  return any(
    axis in key.split("+") and ({"all-reduce", "reduce-scatter"} & set(ops))
    for key, ops in collectives.items()
  )


def has_gather(collectives, axis):
  return any(axis in key.split("+") and "all-gather" in ops for key, ops in collectives.items())


def check_train_step(report):
  step = report["programs"]["train_step"]
  assert step["fits"], report
  shards = report["fsdp_x_tensor"]
  # the sharded state: exact shard bytes about state / (fsdp x tensor) (replicated norms and
  # the step counter add little)
  assert report["state_bytes_per_device"] <= 1.02 * report["state_bytes"] / shards
  batch_bytes = 3 * 16 * 16 * 4 // (report["mesh"]["data"] * report["mesh"]["fsdp"])
  exact = report["state_bytes_per_device"] + batch_bytes
  assert exact <= step["argument_bytes"] <= (1 + PADDING_TOLERANCE) * exact, (step, exact)
  # donation: the new state is written over the old one
  assert step["alias_bytes"] >= report["state_bytes_per_device"], step
  return step["collectives"]


@pytest.mark.parametrize("mesh_shape", [(2, 2, 2), (1, 8, 1)])
def test_train_step_compiles_for_v5e_2x4_sharded_and_donated(mesh_shape):
  report = compile_only.compile_run(small_config(mesh_shape), "v5e:2x4", programs=("train_step",))
  assert report["devices"] == 8 and report["device_kind"] == "TPU v5 lite"
  collectives = check_train_step(report)
  assert has_gather(collectives, "fsdp"), collectives  # params gathered for the matmuls
  assert has_reduction(collectives, "fsdp"), collectives  # their gradients reduced back
  if mesh_shape == (2, 2, 2):
    assert has_reduction(collectives, "tensor"), collectives  # the head / MLP-width partial sums
    assert has_reduction(collectives, "data"), collectives  # gradients over the batch
  compile_only.check_fits(report)


def test_train_step_compiles_across_two_slices():
  config = small_config((2, 4, 2), dcn_mesh_shape=(2, 1, 1))
  report = compile_only.compile_run(config, "v5e:2x4,slices=2", programs=("train_step",))
  assert report["devices"] == 16
  collectives = check_train_step(report)
  assert has_reduction(collectives, "data"), collectives  # the cross-slice gradient reduction
  assert has_gather(collectives, "fsdp"), collectives


def test_main_refuses_a_config_too_large_for_the_device_with_exit_2(tmp_path):
  # 2^20 x 2048 embeddings and output layer, replicated (data parallel): 48 GiB of f32 state
  cmd = [
    sys.executable,
    "-m",
    "experiments.main",
    f"--config={REPO}/experiments/configs/default.py:rung=transformer",
    f"--workdir={tmp_path}",
    f"--config.task={TINY_TASK}",
    "--config.model.vocab_size=1048576",
    "--config.model.d_model=2048",
    "--config.model.num_heads=16",
    "--config.model.num_layers=1",
    "--config.batch_size=16",
    "--compile_only=v5e:2x4",
  ]
  result = run(cmd, tmp_path / "data", timeout=600)
  assert result.returncode == 2, result.stderr[-3000:]
  error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(error_lines) == 1, result.stderr[-3000:]
  assert "compile_only v5e:2x4: init" in error_lines[0], error_lines
  assert "TPU v5 lite" in error_lines[0], error_lines


def test_build_under_a_compile_only_mesh():
  # failed before: program.build ran jax.random.key(0) eagerly, which under a mesh of
  # compile-only devices raised "'Executable' object has no attribute 'local_devices'"
  devices = compile_only.target("v5e:2x4").devices
  mesh = sharding.make_mesh((2, 2, 2), devices=devices)
  config = small_config((2, 2, 2), d_model=64, num_heads=2, d_ff=128)
  with jax.set_mesh(mesh):
    built = program.build(config, mesh, (16, 16))
  assert built.abstract_state["params"]["embed"].shape == (256, 64)


def test_two_slices_without_dcn_mesh_shape_is_a_mesh_error():
  # failed before: jax.make_mesh raised a bare AssertionError on devices of two slices
  devices = compile_only.target("v5e:2x4,slices=2").devices
  with pytest.raises(sharding.MeshError, match="dcn_mesh_shape=None: the 16 devices form 2 TPU"):
    sharding.make_mesh((2, 8, 1), devices=devices)
  mesh = sharding.make_mesh((2, 8, 1), devices=devices, dcn_shape=(2, 1, 1))
  assert {d.slice_index for d in mesh.devices[0].flat} == {0}
