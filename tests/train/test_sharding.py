"""Mesh shapes, logical rules -> shardings, and the errors for meshes that cannot work."""

import re

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


class FakeDevice:
  """What the hybrid layout reads of a device: its id, process and (TPU) slice."""

  platform = device_kind = "cpu"

  def __init__(self, id, process_index, slice_index=None):
    self.id, self.process_index = id, process_index
    if slice_index is not None:
      self.slice_index = slice_index

  def __repr__(self):
    return f"d{self.id}"


def _ids(grid):
  return np.vectorize(lambda d: d.id)(grid).tolist()


@pytest.mark.parametrize(
  "devices",
  [
    [FakeDevice(i, 0, slice_index=i // 4) for i in range(8)],  # 2 TPU slices, 1 host
    [FakeDevice(i, i // 4) for i in range(8)],  # 2 hosts without slices
    [FakeDevice(i, i // 4, slice_index=0) for i in range(8)],  # 2 hosts, one slice index
  ],
)
def test_hybrid_mesh_puts_the_dcn_axis_across_slices(devices):
  # tensor=2 spans the 2 slices; data=4 stays inside each: slice s holds tensor column s
  grid = sharding.device_grid((4, 1, 2), (1, 1, 2), devices)
  assert _ids(grid) == [[[0, 4]], [[1, 5]], [[2, 6]], [[3, 7]]]
  # data over the slices instead: the first two data rows are slice 0's
  grid = sharding.device_grid((4, 1, 2), (2, 1, 1), devices)
  assert _ids(grid) == [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]]


def test_one_slice_hybrid_mesh_is_the_default_mesh():
  mesh = sharding.make_mesh((2, 2, 2), dcn_shape=(1, 1, 1))
  assert mesh.shape == {"data": 2, "fsdp": 2, "tensor": 2}
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
  np.testing.assert_array_equal(mesh.devices, sharding.make_mesh((2, 2, 2)).devices)


@pytest.mark.parametrize(
  "dcn,match",
  [
    ((2, 1), "expected 3 positive integers"),
    ((0, 1, 1), "expected 3 positive integers"),
    ((1, 1, 3), r"tensor spans 3 slices, which does not divide mesh_shape tensor=2"),
    ((2, 1, 1), r"spans 2 slices but the devices form 1 \(processes\)"),
  ],
)
def test_bad_dcn_mesh_shape_names_the_field(dcn, match):
  with pytest.raises(sharding.MeshError, match=match) as info:
    sharding.make_mesh((4, 1, 2), dcn_shape=dcn)
  assert str(info.value).startswith("dcn_mesh_shape=")


def test_dcn_mesh_shape_is_a_config_field():
  from jaxformer.train import config as config_lib

  c = config_lib.get_config("transformer")
  assert c.dcn_mesh_shape is None
  c.dcn_mesh_shape = (1, 1, 2)  # a typed field: the command line parses a tuple into it
  assert c.dcn_mesh_shape == (1, 1, 2)


@pytest.mark.parametrize(
  "held,expected",
  [
    ({0: {0, 1}, 1: {2, 3}}, {0: (0, 2), 1: (1, 2)}),  # data over processes
    ({0: {0, 1}, 1: {0, 1}}, {0: (0, 1), 1: (0, 1)}),  # tensor over processes: same rows
    ({0: {0}, 1: {0}, 2: {1}, 3: {1}}, {0: (0, 2), 1: (0, 2), 2: (1, 2), 3: (1, 2)}),
  ],
)
def test_each_process_feeds_the_block_its_devices_hold(held, expected):
  assert sharding.shard_blocks(held, num_shards=len(set().union(*held.values()))) == expected


def test_scattered_batch_shards_are_refused():
  with pytest.raises(sharding.MeshError, match=r"process 0 holds batch shards \[0, 2\] of 4"):
    sharding.shard_blocks({0: {0, 2}, 1: {1, 3}}, num_shards=4)


def test_one_process_feeds_the_whole_batch():
  assert sharding.process_batch_shard(sharding.make_mesh((2, 2, 2))) == (0, 1)


def _constraints(rung, mesh, **fields):
  """{(shape, spec)} of the activation sharding constraints (batch split over data x fsdp) in
  the rung's forward, as Shardy lowers them: ('4x16x2x32', '{"tensor"}, {}') ..."""
  config = ladder.default_config(rung)
  config.update(fields)
  model = ladder.build(rung, config)
  tokens = jax.numpy.zeros((4, 16), jax.numpy.int32)
  with sharding.active(mesh):
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)
    text = jax.jit(model.apply).lower(params, tokens).as_text()
  found = re.findall(
    r'sdy.sharding_constraint %\S+ <@mesh, \[\{"data", "fsdp"\}, \{\}, (.*)\]> : tensor<(\S+)xf32>',
    text,
  )
  return {(shape, spec) for spec, shape in found}


@pytest.mark.parametrize("rung", ["transformer", "matrix_sum"])
def test_heads_mlp_and_logits_activations_split_over_tensor(rung):
  # B=4 over data x fsdp; heads H=2 (K=32 or E=D=64), MLP F=96 and vocab V=48 over tensor
  found = _constraints(rung, sharding.make_mesh((2, 2, 2)), vocab_size=48, d_ff=96)
  assert ("4x16x64", "{}") in found  # the residual stream, as before
  heads = "4x16x2x32" if rung == "transformer" else "4x16x2x64"
  assert (heads, '{"tensor"}, {}') in found
  assert ("4x16x48", '{"tensor"}') in found  # logits
  if rung == "transformer":
    assert ("4x16x96", '{"tensor"}') in found  # MLP hidden
