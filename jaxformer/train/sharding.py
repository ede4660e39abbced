"""Device mesh and shardings: the one module that builds PartitionSpecs.

The mesh has three axes (`jaxformer.nn.axes.MESH_AXES`):
  data    pure data parallelism: batch split, params replicated
  fsdp    batch split and params sharded along `embed` (ZeRO-3 style)
  tensor  params and activations split along heads / MLP width / vocab
The model names its dimensions logically (`nn.with_logical_partitioning`); `RULES` maps
those names to mesh axes, so the same model runs on 1 CPU, 8 simulated devices or a slice.
Axes are `AxisType.Auto`: with Explicit axes (the 0.10 default) Linen's embedding gather
raises a ShardingTypeError (docs: jax-notes.md).
"""

import contextlib
import math

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from jaxformer import ladder
from jaxformer.nn import axes

RULES = axes.RULES
MESH_AXES = axes.MESH_AXES
BATCH_AXES = ("data", "fsdp")


class MeshError(ladder.ConfigError):
  """mesh_shape does not fit the devices; the message names the field."""


def resolve_mesh_shape(shape, num_devices):
  """(data, fsdp, tensor) with at most one -1 ('all remaining devices') filled in."""
  shape = tuple(shape)
  if len(shape) != len(MESH_AXES) or not all(isinstance(s, int) for s in shape):
    raise MeshError(f"mesh_shape={shape!r}: expected 3 integers for axes {MESH_AXES}")
  if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
    raise MeshError(f"mesh_shape={shape!r}: sizes must be positive (one may be -1)")
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    if num_devices % known:
      raise MeshError(
        f"mesh_shape={shape!r}: the other axes ({known}) do not divide {num_devices} devices"
      )
    shape = tuple(num_devices // known if s == -1 else s for s in shape)
  if math.prod(shape) != num_devices:
    raise MeshError(
      f"mesh_shape={shape!r} has {math.prod(shape)} devices but {num_devices} are available"
    )
  return shape


def make_mesh(shape, devices=None):
  """A (data, fsdp, tensor) mesh over all devices (every process's, when multi-host)."""
  devices = jax.devices() if devices is None else devices
  shape = resolve_mesh_shape(shape, len(devices))
  return jax.make_mesh(
    shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES), devices=devices
  )


def data_parallel_size(mesh):
  """How many ways the batch is split: data x fsdp."""
  return mesh.shape["data"] * mesh.shape["fsdp"]


@contextlib.contextmanager
def active(mesh):
  """The mesh and the logical rules, for tracing a model under logical constraints."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
    yield


def logical_shardings(boxed_tree, mesh):
  """NamedShardings for a tree whose leaves are `nn.Partitioned` (or plain arrays: replicated)."""
  specs = nn.get_partition_spec(boxed_tree)
  return nn.logical_to_mesh_sharding(specs, mesh, RULES)


def check_divisible(abstract_tree, shardings):
  """Raises MeshError naming the first leaf whose dimension the mesh axes do not divide."""
  for (path, leaf), sharding in zip(
    jax.tree_util.tree_leaves_with_path(abstract_tree), jax.tree.leaves(shardings), strict=True
  ):
    for dim, (size, axes_) in enumerate(zip(leaf.shape, sharding.spec, strict=False)):
      names = (axes_,) if isinstance(axes_, str) else tuple(axes_ or ())
      parts = math.prod(sharding.mesh.shape[n] for n in names)
      if size % parts:
        where = jax.tree_util.keystr(path)
        raise MeshError(
          f"mesh_shape={tuple(sharding.mesh.shape.values())}: {where} dimension {dim} "
          f"(size {size}) is split over {'x'.join(names)}={parts}, which does not divide it"
        )


def batch_sharding(mesh):
  """Batches [B, L] are split over (data, fsdp) along B and replicated over tensor."""
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def replicated(mesh):
  return NamedSharding(mesh, PartitionSpec())


def strip_boxes(tree):
  """The values inside `nn.Partitioned` boxes, with no sharding constraint applied."""
  boxed = lambda x: isinstance(x, nn.Partitioned)  # noqa: E731
  return jax.tree.map(lambda x: x.value if boxed(x) else x, tree, is_leaf=boxed)


def with_shardings(abstract_tree, shardings):
  """ShapeDtypeStructs that carry target shardings (what a restore onto this mesh needs)."""
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_tree, shardings
  )


def describe(mesh):
  """'data=2 fsdp=2 tensor=2 (8 devices, cpu)' for log lines."""
  sizes = " ".join(f"{name}={mesh.shape[name]}" for name in MESH_AXES)
  platform = np.asarray(mesh.devices).flat[0].platform
  return f"{sizes} ({mesh.size} devices, {platform})"
