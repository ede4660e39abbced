"""Compile a training run's programs for an accelerator this machine does not have.

  report = compile_only.compile_run(config, "v5e:2x4")          # 8 TPU v5e chips, one slice
  report = compile_only.compile_run(config, "v5e:2x4,slices=2")  # two slices over the DCN
  report = compile_only.compile_run(config, "gpu:h100.txtpb,topology=1x1x8")  # 8 GPUs

Nothing runs: the config's mesh (and DCN mesh) is built over compile-only devices, and every
program a training run executes (init, train step, eval step) is lowered from abstract shapes
and compiled for the target. The report holds, per program and per device: argument, output,
alias, temp and peak bytes against the device's memory, compile seconds, FLOPs (XLA counts a
scanned layer stack's loop body once: undercounted when model.scan_layers), parameter and
state bytes against state / (fsdp x tensor), and the collectives of each mesh axis, read from
the HLO right after SPMD partitioning (the final TPU HLO turns gathers into
collective-permutes fused with matmuls and cross-slice reductions into send/recv pairs).
`check_fits` raises DoesNotFit (a ConfigError: exit 2 on the command line) naming the first
program whose peak exceeds the device memory: a GPU compile does not fail by itself on that.

TARGET: a TPU topology name of `jax.experimental.topologies` (`v5e:2x2`, `v5e:2x4`, `v4:2x2x1`,
`v5p:2x2x1`, `v6e:2x2`, ...) with an optional `,slices=N`, which needs libtpu
(requirements-test.txt); or `gpu:FILE,topology=AxBxC` with FILE a GpuTargetConfigProto text
file (XLA keeps them for H100 and others), which needs the CUDA wheels (requirements-gpu.txt).
"""

import dataclasses
import glob
import json
import math
import os
import re
import tempfile
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from jaxformer import compile_cache, data, ladder
from jaxformer.train import program as program_lib
from jaxformer.train import sharding, sweep

GiB = 2**30
# HBM per chip (Google Cloud's TPU system architecture pages), keyed by jax's device_kind
TPU_MEMORY_BYTES = {
  "TPU v4": 32 * GiB,
  "TPU v5 lite": 16 * GiB,
  "TPU v5": 95 * GiB,
  "TPU v5p": 95 * GiB,
  "TPU v6 lite": 32 * GiB,
}
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
PROGRAMS = ("init", "train_step", "eval_step")
REPORT_FILE = "compile_report.json"


class DoesNotFit(ladder.ConfigError):
  """A program's per-device peak exceeds the device memory (or the compiler refused it)."""


@dataclasses.dataclass(frozen=True)
class Target:
  spec: str  # as given
  platform: str  # 'tpu' or 'cuda'
  devices: tuple  # compile-only devices
  device_kind: str
  memory_bytes: int  # per device


def _spec_error(spec, why):
  return ladder.ConfigError(f"--compile_only={spec}: {why}")


def parse_target(spec):
  """(kind, fields): ('tpu', {'name', 'slices'}) or ('gpu', {'file', 'topology'});
  ConfigError naming what is wrong."""
  if not isinstance(spec, str) or not spec:
    raise _spec_error(spec, "expected a TPU topology (v5e:2x4[,slices=2]) or gpu:FILE,topology=")
  head, *items = spec.split(",")
  fields = {}
  for item in items:
    key, sep, value = item.partition("=")
    if not sep or key not in ("slices", "topology"):
      raise _spec_error(spec, f"{item!r}: expected slices=N (TPU) or topology=AxBxC (GPU)")
    fields[key] = value
  if head.startswith("gpu:"):
    path = head[len("gpu:") :]
    if "slices" in fields or "topology" not in fields:
      raise _spec_error(spec, "a GPU target reads gpu:FILE,topology=AxBxC (e.g. 1x1x8)")
    if not re.fullmatch(r"\d+x\d+x\d+", fields["topology"]):
      raise _spec_error(spec, f"topology={fields['topology']!r}: expected AxBxC, e.g. 1x1x8")
    if not os.path.isfile(path):
      raise _spec_error(spec, f"no such GPU target-config file {path!r}")
    return "gpu", {"file": path, "topology": fields["topology"]}
  if "topology" in fields:
    raise _spec_error(spec, "topology= is for gpu: targets; a TPU target is its topology name")
  slices = fields.get("slices", "1")
  if not slices.isdigit() or int(slices) < 1:
    raise _spec_error(spec, f"slices={slices!r}: expected a positive integer")
  if not re.fullmatch(r"v\d+[a-z]*:\d+(x\d+)+", head):
    raise _spec_error(spec, f"{head!r}: expected a TPU topology name such as v5e:2x4")
  return "tpu", {"name": head, "slices": int(slices)}


def target(spec):
  """The compile-only devices of `spec` (see the module docstring)."""
  from jax.experimental import topologies

  kind, fields = parse_target(spec)
  if kind == "tpu":
    # libtpu warns (and on two processes, refuses) without these; compiling needs neither
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    compile_cache.libtpu_flags()  # heads' accel sweep overflowed a compiler fiber's stack
    try:
      topo = topologies.get_topology_desc(
        fields["name"], "tpu", chip_config_name="default", num_slices=fields["slices"]
      )
    except Exception as e:  # no libtpu, or a name it does not know
      raise _spec_error(spec, f"no TPU topology ({_first_line(e)}); needs libtpu") from e
    devices = tuple(topo.devices)
    device_kind = devices[0].device_kind
    if device_kind not in TPU_MEMORY_BYTES:
      raise _spec_error(spec, f"device kind {device_kind!r} has no known HBM size")
    return Target(spec, "tpu", devices, device_kind, TPU_MEMORY_BYTES[device_kind])
  with open(fields["file"]) as f:
    text = f.read()
  memory = re.search(r"device_memory_size:\s*(\d+)", text)
  if memory is None:
    raise _spec_error(spec, f"{fields['file']}: no device_memory_size in the target config")
  try:
    topo = topologies.get_topology_desc(
      "gpu", "cuda", target_config=text, topology=fields["topology"]
    )
  except Exception as e:
    raise _spec_error(
      spec, f"no CUDA topology ({_first_line(e)}); needs the CUDA wheels, requirements-gpu.txt"
    ) from e
  devices = tuple(topo.devices)
  kind = re.search(r'device_description_str:\s*"([^"]*)"', text)
  return Target(spec, "cuda", devices, kind.group(1) if kind else "GPU", int(memory.group(1)))


def _first_line(e):
  return (str(e).strip().splitlines() or [type(e).__name__])[0]


def task_sizes(config):
  """(seq_len, vocab_size) of the config's task: from its spec where it fixes them (the
  synthetic tasks), else from the prepared dataset (text tasks size their vocabulary)."""
  name, params = data.parse_spec(config.task)
  if params.get("vocab_size") and "seq_len" in params:
    return params["seq_len"], params["vocab_size"]
  ds = data.get_dataset(config.task, "train", config.data_dir)
  return ds.seq_len, ds.vocab_size


def abstract_batch(batch_size, seq_len, batch_sharding):
  sds = jax.ShapeDtypeStruct((batch_size, seq_len), jnp.int32, sharding=batch_sharding)
  return {"inputs": sds, "targets": sds, "mask": sds}


def leaf_bytes(tree, per_device):
  """Bytes of a tree of ShapeDtypeStructs: whole, or the shard each device holds."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    shape = leaf.sharding.shard_shape(leaf.shape) if per_device else leaf.shape
    total += math.prod(shape) * jnp.dtype(leaf.dtype).itemsize
  return total


def compile_run(config, target_spec, programs=PROGRAMS, sizes=None):
  """Compiles `programs` of a training run of `config` for the target; returns the report
  (a JSON-able dict; see the module docstring). sizes: (seq_len, vocab_size) of the batches,
  default the task's. Raises ConfigError / MeshError for a config or target that cannot work,
  DoesNotFit when the target's compiler refuses a program for memory."""
  program_lib.check_config(config, model_on_host=False)
  tgt = target(target_spec) if isinstance(target_spec, str) else target_spec
  mesh = sharding.make_mesh(config.mesh_shape, tgt.devices, dcn_shape=config.dcn_mesh_shape)
  dp = sharding.data_parallel_size(mesh)
  if config.batch_size % dp:
    raise ladder.ConfigError(
      f"batch_size={config.batch_size} is not divisible by the data-parallel size "
      f"data x fsdp = {dp} (mesh_shape={tuple(mesh.shape.values())})"
    )
  seq_len, vocab_size = sizes or task_sizes(config)
  config = program_lib.resolve(
    config, types.SimpleNamespace(seq_len=seq_len, vocab_size=vocab_size)
  )
  with sharding.active(mesh):
    program = program_lib.build(config, mesh, (config.batch_size, seq_len))
    state = program.abstract_state
    batch = abstract_batch(config.batch_size, seq_len, program.batch_sharding)
    key = jax.eval_shape(lambda: jax.random.key(0))
    key = jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=sharding.replicated(mesh))
    args = {
      "init": (program.init, (key,)),
      "train_step": (program.train_step, (state, batch)),
      "eval_step": (program.eval_step, (state["params"], batch)),
    }
    results = {name: compile_program(name, *args[name], mesh, tgt) for name in programs}
  shards = mesh.shape["fsdp"] * mesh.shape["tensor"]
  report = {
    "target": tgt.spec,
    "platform": tgt.platform,
    "device_kind": tgt.device_kind,
    "devices": len(tgt.devices),
    "device_memory_bytes": tgt.memory_bytes,
    "mesh": dict(mesh.shape),
    "dcn_mesh_shape": None if config.dcn_mesh_shape is None else list(config.dcn_mesh_shape),
    "rung": config.rung,
    "batch_shape": [config.batch_size, seq_len],
    "flops_undercounted": bool(config.model.get("scan_layers", False)),
    "state_bytes": leaf_bytes(state, per_device=False),
    "state_bytes_per_device": leaf_bytes(state, per_device=True),
    "params_bytes": leaf_bytes(state["params"], per_device=False),
    "params_bytes_per_device": leaf_bytes(state["params"], per_device=True),
    "fsdp_x_tensor": shards,
    "programs": results,
  }
  return report


SWEEP_PROGRAMS = ("init", "train_step", "eval_step")


def host_devices(tgt):
  """The target's devices of one host (those of the first device's process): what
  `jax.local_devices()` gives a single-process run there, such as a sweep's."""
  first = tgt.devices[0].process_index
  return tuple(d for d in tgt.devices if d.process_index == first)


def sweep_placement(n, devices):
  """(sharding of the replica axis, mesh or None) as jaxformer.train.sweep places n replicas
  over one process's devices: along a 1-D mesh of sweep.replica_devices(n, devices), else all
  n on the first device."""
  devices = sweep.replica_devices(n, devices)
  if len(devices) > 1:
    mesh = jax.sharding.Mesh(np.asarray(devices), (sweep.REPLICA_AXIS,))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(sweep.REPLICA_AXIS)), mesh
  return jax.sharding.SingleDeviceSharding(devices[0]), None


def compile_sweep(config, n, target_spec, sizes=None):
  """Compiles the three programs `sweep.train` runs for n replicas of training config `config`
  (init, the vmapped train step, the vmapped eval sums; jaxformer.train.sweep.programs) for
  the target, placed as a single-process sweep places them on one host of it
  (`sweep_placement` over `host_devices`). Returns a report like compile_run's, with
  `replicas`, `placement_devices` (1: every replica on the first device) and the per-device
  bytes of the replicas' state."""
  program_lib.check_config(config)
  tgt = target(target_spec) if isinstance(target_spec, str) else target_spec
  seq_len, vocab_size = sizes or task_sizes(config)
  config = program_lib.resolve(
    config, types.SimpleNamespace(seq_len=seq_len, vocab_size=vocab_size)
  )
  devices = host_devices(tgt)
  placed, mesh = sweep_placement(n, devices)
  placement = mesh.devices.size if mesh else 1  # the devices the replicas are laid over
  everywhere = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()) if mesh else placed
  batch_shape = (config.batch_size, seq_len)

  def compile_group(group):
    _, _, args = sweep.jitted(
      config, n, batch_shape, batch_shape, placed, everywhere, platform=tgt.platform, chunk=group
    )
    try:
      results = {
        name: compile_program(name, jitted, a, mesh, tgt, options)
        for name, (jitted, a, options) in args.items()
      }
    except DoesNotFit:
      if group == sweep.ALL:  # one group too large: the sweep falls back to groups
        return None
      raise
    return args["train_step"][1][0], results

  def fits(out):
    limit = sweep.GROUP_MEMORY_FRACTION * tgt.memory_bytes
    return all(r["peak_bytes"] <= limit for r in out[1].values())

  chunk, (state, results) = sweep.grouped(compile_group, fits, tgt.platform)
  return {
    "target": tgt.spec,
    "platform": tgt.platform,
    "device_kind": tgt.device_kind,
    "devices": len(tgt.devices),
    "host_devices": len(devices),
    "device_memory_bytes": tgt.memory_bytes,
    "rung": config.rung,
    "replicas": n,
    "placement_devices": placement,
    "batch_shape": list(batch_shape),
    "replica_chunk": chunk,  # replicas per vmapped group, as sweep.programs chooses it
    # a scanned stack, or replicas in groups one after another (a loop on one device)
    "flops_undercounted": bool(config.model.get("scan_layers", False))
    or (chunk not in (None, sweep.ALL) and n // placement > chunk),
    "state_bytes": leaf_bytes(state, per_device=False),
    "state_bytes_per_device": leaf_bytes(state, per_device=True),
    "programs": results,
  }


def compile_with_hlo(lowered, options=None):
  """(compiled, the HLO text right after SPMD partitioning or None) of a Lowered program;
  options: more XLA compiler options."""
  with tempfile.TemporaryDirectory() as dump:
    options = {**(options or {}), "xla_dump_to": dump, "xla_dump_hlo_pass_re": "spmd-partitioning"}
    # a cache hit dumps no HLO, and an executable for a topology without a client (a TPU
    # compiled on this CPU) cannot be read back from the cache anyway
    with compile_cache.disabled():
      compiled = lowered.compile(compiler_options=options)
    return compiled, _partitioned_hlo(dump)


def compile_program(name, jitted, args, mesh, tgt, options=None):
  """One program lowered and compiled for the target: its memory, FLOPs and collectives
  (by the axes of `mesh`; None for a program on one device). options: XLA compiler options."""
  start = time.perf_counter()
  lowered = jitted.trace(*args).lower(lowering_platforms=(tgt.platform,))
  try:
    compiled, partitioned = compile_with_hlo(lowered, options)
  except Exception as e:
    if "RESOURCE_EXHAUSTED" in str(e):
      raise DoesNotFit(
        f"compile_only {tgt.spec}: {name} does not fit {tgt.device_kind}: {_resource_line(e)}"
      ) from e
    raise
  seconds = time.perf_counter() - start
  mem = compiled.memory_analysis()
  peak = sweep.peak_bytes(mem)
  cost = compiled.cost_analysis()
  flops = cost.get("flops") if isinstance(cost, dict) else None
  return {
    "compile_seconds": round(seconds, 2),
    "argument_bytes": mem.argument_size_in_bytes,
    "output_bytes": mem.output_size_in_bytes,
    "alias_bytes": mem.alias_size_in_bytes,
    "temp_bytes": mem.temp_size_in_bytes,
    "code_bytes": mem.generated_code_size_in_bytes,
    "peak_bytes": peak,
    "fits": peak <= tgt.memory_bytes,
    "flops_per_device": flops,
    "collectives": collectives_by_axis(partitioned, mesh) if partitioned and mesh else None,
  }


def _resource_line(e):
  for line in str(e).splitlines():
    if "RESOURCE_EXHAUSTED" in line or "exceeds" in line:
      return line.strip()
  return _first_line(e)


def _partitioned_hlo(dump):
  """The HLO text right after SPMD partitioning (the largest module the compile dumped), or
  None when the compiler dumped none."""
  after = re.compile(r"\.after_([a-z]+-)?spmd-partitioning\.")
  files = [f for f in glob.glob(os.path.join(dump, "*.txt")) if after.search(f)]
  if not files:
    return None
  with open(max(files, key=os.path.getsize)) as f:
    return f.read()


_OP = re.compile(r"=\s*[^=]*?\b(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
_GROUPS = re.compile(
  r"replica_groups=(\{[\d,{} ]*\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?"
  r"|mesh\[[^\]]*\](?:, device_ids=\(\[[\d,]+\](?:T\([\d,]+\))?\))? \{[^}]*\})"
)
_PAIRS = re.compile(r"source_target_pairs=\{([\d,{} ]*)\}")


def _iota(dims, perm):
  ids = np.arange(math.prod(dims)).reshape(dims)
  return ids.transpose(perm) if perm else ids


def _ints(text):
  return [int(i) for i in re.findall(r"\d+", text)]


def replica_groups(text, num_devices):
  """HLO replica_groups as a list of lists of device ids. Three spellings: explicit
  `{{0,1},{2,3}}` (`{}`: one group of every device), iota `[2,4]<=[2,2,2]T(2,1,0)`, and mesh
  axes `mesh['axis_0'=2,'axis_1'=4], device_ids=([2,2,2]T(1,0,2)) {'axis_1'}` (the device ids,
  in order when device_ids is absent, laid out over the named axes; each group spans the
  braced ones)."""
  if text.startswith("{"):
    groups = [_ints(g) for g in re.findall(r"\{([\d,]*)\}", text)]
    groups = [g for g in groups if g]
    return groups or [list(range(num_devices))]
  if text.startswith("mesh"):
    sizes_text, _, rest = text.partition("]")
    names = re.findall(r"'([^']+)'=", sizes_text)
    sizes = [int(v) for v in re.findall(r"'=(\d+)", sizes_text)]
    ids = np.arange(math.prod(sizes))  # no device_ids: the devices in order
    if "device_ids=" in rest:
      ids_text, _, rest = rest.partition("device_ids=")[2].partition(")) ")
      dims_text, _, perm_text = ids_text.partition("T")
      ids = _iota(_ints(dims_text), _ints(perm_text))
    ids = ids.reshape(sizes)
    spanned = re.findall(r"'([^']+)'", rest)
    span = [names.index(n) for n in spanned]
    kept = [i for i in range(len(names)) if i not in span]
    return ids.transpose(kept + span).reshape(-1, math.prod(sizes[i] for i in span)).tolist()
  shape_text, _, rest = text.partition("<=")
  dims_text, _, perm_text = rest.partition("T")
  return _iota(_ints(dims_text), _ints(perm_text)).reshape(_ints(shape_text)).tolist()


def axes_of_group(group, mesh):
  """The mesh axes along which the devices of one group differ (ids: positions in the mesh)."""
  coords = np.array(np.unravel_index(np.asarray(group), mesh.devices.shape)).T
  return tuple(n for i, n in enumerate(mesh.axis_names) if len(set(coords[:, i])) > 1)


def collectives_by_axis(hlo, mesh):
  """{'fsdp': {'all-gather': n, ...}, 'data+fsdp': {...}}: each collective op of the HLO,
  counted under the mesh axes its groups span (one op, one count; all-reduces across every
  device of the mesh count under all the axes joined by '+')."""
  counts = {}
  for line in hlo.splitlines():
    op = _OP.search(line)
    if op is None:
      continue
    kind = op.group(1)
    if kind == "collective-permute":
      pairs = _PAIRS.search(line)
      groups = (
        [] if pairs is None else [_ints(p) for p in re.findall(r"\{([\d,]*)\}", pairs.group(1))]
      )
    else:
      found = _GROUPS.search(line)
      groups = (
        [list(range(mesh.size))] if found is None else replica_groups(found.group(1), mesh.size)
      )
    axes_ = sorted({a for g in groups for a in axes_of_group(g, mesh)}, key=mesh.axis_names.index)
    key = "+".join(axes_) or "none"
    counts.setdefault(key, {}).setdefault(kind, 0)
    counts[key][kind] += 1
  return counts


def check_fits(report):
  """Raises DoesNotFit naming the first program whose peak exceeds the device memory."""
  for name, r in report["programs"].items():
    if not r["fits"]:
      raise DoesNotFit(
        f"compile_only {report['target']}: {name} needs {r['peak_bytes'] / GiB:.2f} GiB per "
        f"device (peak) > {report['device_memory_bytes'] / GiB:.2f} GiB of "
        f"{report['device_kind']} memory"
      )


def table(report):
  """The report as lines of text: one row per program, then the parameter and collective
  lines."""
  gib = lambda b: f"{b / GiB:8.3f}"  # noqa: E731
  rows = [
    f"{report['target']}: {report['devices']} x {report['device_kind']} "
    f"({report['device_memory_bytes'] / GiB:.2f} GiB each), mesh "
    + " ".join(f"{k}={v}" for k, v in report["mesh"].items())
    + (f", dcn {tuple(report['dcn_mesh_shape'])}" if report["dcn_mesh_shape"] else ""),
    f"{'program':<11} {'arg GiB':>8} {'out GiB':>8} {'alias':>8} {'temp':>8} {'peak':>8} "
    f"{'fits':>4} {'compile s':>9} {'TFLOP/dev':>9}",
  ]
  for name, r in report["programs"].items():
    flops = "n/a" if r["flops_per_device"] is None else f"{r['flops_per_device'] / 1e12:.4f}"
    if r["flops_per_device"] is not None and report["flops_undercounted"]:
      flops += "*"
    rows.append(
      f"{name:<11} {gib(r['argument_bytes'])} {gib(r['output_bytes'])} {gib(r['alias_bytes'])} "
      f"{gib(r['temp_bytes'])} {gib(r['peak_bytes'])} {'yes' if r['fits'] else 'NO':>4} "
      f"{r['compile_seconds']:9.1f} {flops:>9}"
    )
  if report["flops_undercounted"]:
    rows.append("* scanned layers: XLA's cost analysis counts the loop body once")
  shards = report["fsdp_x_tensor"]
  rows.append(
    f"params per device {report['params_bytes_per_device'] / GiB:.4f} GiB of "
    f"{report['params_bytes'] / GiB:.4f} (1/{report['params_bytes'] / max(1, report['params_bytes_per_device']):.2f}); "
    f"state per device {report['state_bytes_per_device'] / GiB:.4f} GiB against "
    f"state / (fsdp x tensor) = {report['state_bytes'] / shards / GiB:.4f}"
  )
  for name, r in report["programs"].items():
    if r["collectives"]:
      parts = [
        f"{axes_}: " + ", ".join(f"{k} {n}" for k, n in sorted(ops.items()))
        for axes_, ops in r["collectives"].items()
      ]
      rows.append(f"{name} collectives by mesh axis: " + "; ".join(parts))
  return "\n".join(rows)


def write_report(report, path):
  with open(path, "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)


def report_run(config, target_spec, out_dir, echo=print, sizes=None, name=REPORT_FILE):
  """`--compile_only`: compiles, writes OUT_DIR/NAME (compile_report.json), prints the table,
  then raises DoesNotFit when a program does not fit. Returns the report. For any training
  config (an experiment's accel size included); sizes as in `compile_run`."""
  report = compile_run(config, target_spec, sizes=sizes)
  os.makedirs(out_dir, exist_ok=True)
  write_report(report, os.path.join(out_dir, name))
  echo(table(report))
  check_fits(report)
  return report
