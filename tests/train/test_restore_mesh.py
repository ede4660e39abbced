"""A checkpoint written on one mesh restores onto another and training continues alike."""

import os
import shutil

import chex
import jax
import numpy as np
import pytest

from jaxformer.train import checkpoint, loop, sharding
from jaxformer.train import program as program_lib
from tests.train.train_helpers import tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


def test_restore_onto_a_different_mesh(data_dir, tmp_path):
  fields = {"model.use_bias": False, "learning_rate": 3e-3}  # see test_step: no key bias noise
  base = tiny_config("softmax", data_dir=data_dir, total_steps=2, mesh_shape=(2, 2, 2), **fields)
  first = loop.train(base, str(tmp_path / "a"))
  saved_params = jax.device_get(first["params"])
  shutil.copytree(tmp_path / "a", tmp_path / "b")

  # Restoring onto (4, 1, 2) gives the saved values with the new mesh's shardings.
  mesh = sharding.make_mesh((4, 1, 2))
  with sharding.active(mesh):
    program = program_lib.build(base, mesh, (16, 16))
  ckpt = checkpoint.Checkpointer(tmp_path / "a" / "checkpoints")
  restored_step, state, extra = ckpt.restore_latest(program.abstract_state)
  ckpt.close()
  assert restored_step == 2 and extra["loader"]["step"] == 2
  chex.assert_trees_all_equal(jax.device_get(state["params"]), saved_params)
  assert state["params"]["unembed"].sharding.mesh.shape == mesh.shape

  # Continuing on another mesh matches continuing on the saved one, to float tolerance.
  cont = {"total_steps": 4}
  other = loop.train(
    tiny_config("softmax", data_dir=data_dir, mesh_shape=(1, 8, 1), **fields, **cont),
    str(tmp_path / "a"),
  )
  same = loop.train(
    tiny_config("softmax", data_dir=data_dir, mesh_shape=(2, 2, 2), **fields, **cont),
    str(tmp_path / "b"),
  )
  assert other["first_step"] == same["first_step"] == 2 and other["final_step"] == 4
  np.testing.assert_allclose(other["losses"], same["losses"], rtol=1e-5)
  assert os.path.isdir(tmp_path / "a" / "checkpoints" / "4")
