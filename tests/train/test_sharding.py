"""Mesh shapes, logical rules -> shardings, and the errors for meshes that cannot work."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxformer import ladder
from jaxformer.train import sharding, step


@pytest.mark.parametrize(
  "shape,devices,expected",
  [((-1, 1, 1), 8, (8, 1, 1)), ((2, -1, 2), 8, (2, 2, 2)), ((1, 1, 1), 1, (1, 1, 1))],
)
def test_resolve_mesh_shape(shape, devices, expected):
  assert sharding.resolve_mesh_shape(shape, devices) == expected


@pytest.mark.parametrize(
  "shape,match",
  [
    ((3, 1, 1), "has 3 devices but 8"),
    ((2, 2), "expected 3 integers"),
    ((-1, -1, 2), "sizes must be positive"),
    ((0, 1, 8), "sizes must be positive"),
    ((3, -1, 1), "do not divide 8"),
  ],
)
def test_bad_mesh_shape_names_the_field(shape, match):
  with pytest.raises(sharding.MeshError, match=match) as info:
    sharding.resolve_mesh_shape(shape, 8)
  assert str(info.value).startswith("mesh_shape=")
  assert isinstance(info.value, ladder.ConfigError)


def test_mesh_axes_are_auto_and_batch_split_over_data_fsdp():
  mesh = sharding.make_mesh((2, 2, 2))
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
  assert sharding.data_parallel_size(mesh) == 4
  batch = jax.device_put(np.arange(8 * 4).reshape(8, 4), sharding.batch_sharding(mesh))
  # 8 rows over data x fsdp = 4 shards of 2 rows, each held by the 2 tensor devices.
  assert {s.data.shape for s in batch.addressable_shards} == {(2, 4)}
  assert sharding.describe(mesh).startswith("data=2 fsdp=2 tensor=2 (8 devices")


def _abstract_params(mesh, rung="transformer"):
  model = ladder.build(rung)
  with sharding.active(mesh):
    boxed = jax.eval_shape(
      lambda k: model.init(k, jax.numpy.zeros((8, 16), jax.numpy.int32)), jax.random.key(0)
    )["params"]
    return boxed, sharding.logical_shardings(boxed, mesh)


def test_logical_rules_shard_params_as_declared():
  mesh = sharding.make_mesh((2, 2, 2))
  boxed, shardings = _abstract_params(mesh)
  assert shardings["unembed"].spec == P("fsdp", "tensor")  # (embed, vocab)
  assert shardings["layers_0"]["ffn"]["w1"].spec == P("fsdp", "tensor")  # (embed, mlp)
  assert shardings["layers_0"]["mixer"]["scorer"]["wq"].spec == P("fsdp", "tensor", None)
  assert shardings["pos_embed"].spec == P(None, "fsdp")
  abstract = sharding.with_shardings(sharding.strip_boxes(boxed), shardings)
  assert abstract["embed"].shape == (64, 64) and abstract["embed"].sharding == shardings["embed"]


def test_indivisible_param_names_the_leaf():
  mesh = sharding.make_mesh((1, 1, 8))  # 2 heads cannot split 8 ways
  boxed, shardings = _abstract_params(mesh)
  abstract = sharding.strip_boxes(boxed)
  with pytest.raises(sharding.MeshError, match=r"\['layers_0'\].*tensor=8"):
    sharding.check_divisible(abstract, shardings)


def test_state_created_sharded_by_jitted_init():
  mesh = sharding.make_mesh((1, 2, 2), jax.devices()[:4])
  model = ladder.build("softmax")
  import optax

  tx = optax.adam(1e-3)
  with sharding.active(mesh):
    init = lambda k: step.init_state(model, tx, k, (4, 16))  # noqa: E731
    shardings = sharding.logical_shardings(jax.eval_shape(init, jax.random.key(0)), mesh)
    state = jax.jit(
      lambda k: jax.tree.map(lambda x: x, sharding.strip_boxes(init(k))), out_shardings=shardings
    )(jax.random.key(0))
  embed = state["params"]["embed"]
  assert embed.sharding.spec == P("tensor", "fsdp")
  assert {s.data.shape for s in embed.addressable_shards} == {(32, 32)}
  mu = state["opt_state"][0].mu["embed"]
  assert mu.sharding.spec == P("tensor", "fsdp")
