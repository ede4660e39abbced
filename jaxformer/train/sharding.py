"""Device mesh and shardings: the one module that builds PartitionSpecs.

The mesh has three axes (`jaxformer.nn.axes.MESH_AXES`):
  data    pure data parallelism: batch split, params replicated
  fsdp    batch split and params sharded along `embed` (ZeRO-3 style)
  tensor  params and activations split along heads / MLP width / vocab
The model names its dimensions logically (`nn.with_logical_partitioning`); `RULES` maps
those names to mesh axes, so the same model runs on 1 CPU, 8 simulated devices or a slice.
Axes are `AxisType.Auto`: with Explicit axes (the 0.10 default) Linen's embedding gather
raises a ShardingTypeError.

Several slices (TPU pods joined over the data-center network, or GPU hosts): `dcn_mesh_shape`
says how many slices each axis spans; the mesh is the hybrid layout of
`mesh_utils.create_hybrid_device_mesh`: each slice holds a block of `mesh_shape / dcn_mesh_shape`
devices laid out over its fast interconnect (ICI), and the slow network (DCN) carries only the
axes that span slices. A slice is a TPU slice (`device.slice_index`) or, where devices have no
such slices, a process (one host).

Each process feeds the batch rows of the batch shards its devices hold (`process_batch_shard`):
processes whose devices hold the same shards (the tensor axis spanning processes) read the same
rows.
"""

import collections
import contextlib
import math

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

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


def resolve_dcn_shape(dcn_shape, mesh_shape, devices):
  """(dcn_mesh_shape checked, slice key): 3 positive integers, each dividing its axis of the
  resolved `mesh_shape`, whose product is the number of slices the devices form."""
  dcn = tuple(dcn_shape)
  if len(dcn) != len(MESH_AXES) or not all(type(s) is int and s > 0 for s in dcn):
    raise MeshError(
      f"dcn_mesh_shape={dcn!r}: expected 3 positive integers for axes {MESH_AXES} "
      "(slices along each axis), or None for one slice"
    )
  for name, size, slices in zip(MESH_AXES, mesh_shape, dcn, strict=True):
    if size % slices:
      raise MeshError(
        f"dcn_mesh_shape={dcn!r}: {name} spans {slices} slices, which does not divide "
        f"mesh_shape {name}={size} (mesh_shape={tuple(mesh_shape)})"
      )
  key = slice_key(devices, math.prod(dcn))
  num_slices = len({getattr(d, key) for d in devices})
  if math.prod(dcn) != num_slices:
    raise MeshError(
      f"dcn_mesh_shape={dcn!r} spans {math.prod(dcn)} slices but the devices form {num_slices} "
      f"({'TPU slices' if key == 'slice_index' else 'processes'})"
    )
  return dcn, key


def slice_key(devices, num_slices):
  """'slice_index' when the devices' TPU slices number `num_slices`, else 'process_index'
  (GPU hosts and CPU processes have no slices: each process is one)."""
  if all(hasattr(d, "slice_index") for d in devices):
    if len({d.slice_index for d in devices}) == num_slices:
      return "slice_index"
  return "process_index"


def device_grid(shape, dcn_shape=None, devices=None):
  """The devices as a (data, fsdp, tensor) array: `jax.make_mesh`'s layout for one slice; with
  `dcn_shape`, the hybrid layout, slice s holding the block at position s of the
  `dcn_shape` grid (each axis index = slice coordinate x per-slice size + ICI coordinate)."""
  devices = jax.devices() if devices is None else list(devices)
  shape = resolve_mesh_shape(shape, len(devices))
  if dcn_shape is None:
    slices = {d.slice_index for d in devices if hasattr(d, "slice_index")}
    if len(slices) > 1:  # jax.make_mesh would fail its own assertion on these
      raise MeshError(
        f"dcn_mesh_shape=None: the {len(devices)} devices form {len(slices)} TPU slices; "
        "set dcn_mesh_shape to say how many slices each axis spans, e.g. "
        f"({len(slices)}, 1, 1) for data parallelism across slices"
      )
    try:
      return jax.make_mesh(shape, MESH_AXES, devices=devices).devices
    except ValueError as e:
      if "multi-slice" not in str(e):
        raise
      raise MeshError(f"dcn_mesh_shape=None: {e}; set dcn_mesh_shape to span the slices") from e
  dcn, key = resolve_dcn_shape(dcn_shape, shape, devices)
  ici = tuple(size // slices for size, slices in zip(shape, dcn, strict=True))
  try:
    return mesh_utils.create_hybrid_device_mesh(
      ici, dcn, devices, process_is_granule=key == "process_index"
    )
  except ValueError as e:  # e.g. slices of unequal sizes
    raise MeshError(f"dcn_mesh_shape={dcn!r} (per slice {ici}): {e}") from e


def make_mesh(shape, devices=None, dcn_shape=None):
  """A (data, fsdp, tensor) mesh over all devices (every process's, when multi-host); with
  `dcn_shape`, the hybrid multi-slice layout of `device_grid`."""
  grid = device_grid(shape, dcn_shape, devices)
  return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


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


def process_batch_shard(mesh, process_index=None):
  """(index, count): the batch rows this process feeds are block `index` of `count` equal
  contiguous blocks of the global batch, the rows its devices hold under `batch_sharding`.
  Processes whose devices hold the same batch shards get the same index."""
  dp = data_parallel_size(mesh)
  rows = batch_sharding(mesh).devices_indices_map((dp,))  # device -> (slice of the dp shards,)
  shards = collections.defaultdict(set)
  for device, (rows_of_device,) in rows.items():
    shards[device.process_index].add(rows_of_device.start or 0)
  index = jax.process_index() if process_index is None else process_index
  return shard_blocks(shards, dp)[index]


def shard_blocks(shards, num_shards):
  """{process: batch shard ids its devices hold} -> {process: (block index, block count)}.

  Every process must hold one contiguous, aligned run of the same length (the layout
  `jax.make_array_from_process_local_data` assembles from contiguous per-process rows)."""
  size = len(next(iter(shards.values())))
  blocks = {}
  for process, held in shards.items():
    start = min(held)
    if held != set(range(start, start + size)) or start % size:
      raise MeshError(
        f"mesh_shape: process {process} holds batch shards {sorted(held)} of {num_shards}, "
        f"not one contiguous block of {size}; with dcn_mesh_shape, span slices with the data "
        "axis rather than fsdp"
      )
    blocks[process] = (start // size, num_shards // size)
  return blocks


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
