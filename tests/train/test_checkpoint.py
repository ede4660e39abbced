"""Checkpointer: bitwise round trips across meshes, checksums, and falling back past damage."""

import asyncio
import json
import logging
import os
import shutil
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxformer.train import checkpoint
from jaxformer.train.checkpoint import Checkpointer, CheckpointError, checksums
from tests import launcher

AXES = ("data", "fsdp", "tensor")
SPECS = {"w": P("data", ("fsdp", "tensor")), "e": P(None, "tensor"), "step": P(), "count": P()}


def _mesh(shape):
  return jax.make_mesh(shape, AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)


def _state(seed: int, mesh):
  """A small TrainState-like dict: f32 + bf16 sharded params, an int step, a numpy leaf."""
  k1, k2 = jax.random.split(jax.random.key(seed))
  w = jax.random.normal(k1, (16, 32), jnp.float32)
  e = jax.random.normal(k2, (8, 16), jnp.float32).astype(jnp.bfloat16)
  return {
    "params": {
      "w": jax.device_put(w, NamedSharding(mesh, SPECS["w"])),
      "e": jax.device_put(e, NamedSharding(mesh, SPECS["e"])),
    },
    "step": jax.device_put(jnp.int32(seed), NamedSharding(mesh, P())),
    "count": np.arange(5, dtype=np.int32) * seed,
  }


def _abstract(mesh=None):
  def sds(shape, dtype, spec):
    sharding = NamedSharding(mesh, spec) if mesh else SingleDeviceSharding(jax.devices()[0])
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

  return {
    "params": {
      "w": sds((16, 32), jnp.float32, P("data", None)),
      "e": sds((8, 16), jnp.bfloat16, P(None, "data")),
    },
    "step": sds((), jnp.int32, P()),
    "count": sds((5,), jnp.int32, P()),
  }


def _bits(tree):
  """Host copies viewed as unsigned ints, so equality is bitwise."""

  def view(x):
    a = np.asarray(jax.device_get(x))
    return a.view(f"u{a.dtype.itemsize}")

  return jax.tree.map(view, tree)


def _assert_bitwise_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(_bits(a)), jax.tree.leaves(_bits(b)), strict=True):
    np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def mesh222():
  return _mesh((2, 2, 2))


def _saved(tmp_path, mesh, steps=(1, 2), **kw):
  ck = Checkpointer(tmp_path / "ckpt", **kw)
  for s in steps:
    assert ck.save(s, _state(s, mesh), extra={"data": {"pos": 10 * s}})
  ck.wait()
  return ck


# -- round trip -----------------------------------------------------------------------------------


def test_round_trip_onto_other_mesh_and_single_device(tmp_path, mesh222):
  ck = _saved(tmp_path, mesh222, steps=(3,))
  want = _state(3, mesh222)
  for target in (_abstract(_mesh((8, 1, 1))), _abstract(None)):
    step, got, extra = ck.restore_latest(target)
    assert step == 3 and extra == {"data": {"pos": 30}}
    _assert_bitwise_equal(got, want)
    for leaf, t in zip(jax.tree.leaves(got), jax.tree.leaves(target), strict=True):
      assert leaf.sharding.is_equivalent_to(t.sharding, leaf.ndim)
  ck.close()


def test_empty_directory_restores_none(tmp_path):
  ck = Checkpointer(tmp_path / "new")
  assert ck.restore_latest(_abstract()) is None and ck.latest_step() is None
  assert (tmp_path / "new").is_dir()


def test_unwritable_directory_is_named(tmp_path):
  (tmp_path / "afile").write_text("x")
  with pytest.raises(CheckpointError, match="afile"):
    Checkpointer(tmp_path / "afile" / "ckpt")


def test_async_save_survives_deleting_the_source_buffers(tmp_path, mesh222):
  """Orbax copies device arrays before save() returns, so donating state right after is safe."""
  ck = Checkpointer(tmp_path / "ckpt", async_save=True)
  state = _state(5, mesh222)
  want = jax.tree.map(lambda x: np.array(jax.device_get(x)), state)
  assert ck.save(5, state)
  for leaf in jax.tree.leaves(state):
    if isinstance(leaf, jax.Array):
      leaf.delete()  # what donating the buffers to the next train step does
    else:
      leaf += 1  # a host array updated in place
  ck.wait()
  assert ck.latest_step() == 5
  step, got, _ = ck.restore_latest(_abstract(None))
  _assert_bitwise_equal(got, want)
  ck.close()


def test_save_same_step_twice_and_force(tmp_path, mesh222):
  ck = _saved(tmp_path, mesh222, steps=(1,))
  assert not ck.save(1, _state(9, mesh222))
  assert ck.save(1, _state(9, mesh222), force=True)
  ck.wait()
  _, got, _ = ck.restore_latest(_abstract(None))
  _assert_bitwise_equal(got, _state(9, mesh222))
  with pytest.raises(CheckpointError, match="extra"):
    ck.save(2, _state(2, mesh222), extra={"bad": object()})
  with pytest.raises(CheckpointError, match=r"state\['params'\]\['name'\] is a str"):
    ck.save(2, {"params": {"name": "w"}})
  ck.close()


def test_older_step_is_not_saved_over_newer(tmp_path, mesh222, caplog):
  ck = _saved(tmp_path, mesh222, steps=(4,))
  with caplog.at_level(logging.WARNING):
    assert not ck.save(3, _state(3, mesh222))
  assert any("step 3 not saved" in r.getMessage() for r in caplog.records)
  assert ck.all_steps() == [4]
  ck.close()


def test_max_to_keep(tmp_path, mesh222):
  ck = _saved(tmp_path, mesh222, steps=(1, 2, 3, 4), max_to_keep=2)
  assert ck.all_steps() == [3, 4]
  assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.isdigit()) == ["3", "4"]
  ck.close()


# -- checksums ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32, jnp.int8, jnp.bool_])
def test_checksum_ignores_sharding_and_sees_one_bit(dtype, mesh222):
  x = jax.random.normal(jax.random.key(1), (16, 24)) * 50
  x = (x > 0) if dtype == jnp.bool_ else x.astype(dtype)
  placements = [
    jax.device_put(x, SingleDeviceSharding(jax.devices()[3])),
    jax.device_put(x, NamedSharding(mesh222, P("data", ("fsdp", "tensor")))),
    jax.device_put(x, NamedSharding(_mesh((8, 1, 1)), P(None, "data"))),
  ]
  sums = {checksums({"x": a})["['x']"] for a in placements}
  assert len(sums) == 1
  bits = np.asarray(x).view(f"u{np.dtype(x.dtype).itemsize}").copy()
  flat = bits.reshape(-1)
  nbits = 1 if dtype == jnp.bool_ else 8 * flat.itemsize
  rng = np.random.default_rng(0)
  for i, b in zip(rng.integers(0, flat.size, 6), rng.integers(0, nbits, 6), strict=True):
    flipped = flat.copy()
    flipped[i] ^= flipped.dtype.type(1 << int(b))
    y = jnp.asarray(flipped.reshape(bits.shape).view(np.asarray(x).dtype))
    assert checksums({"x": y})["['x']"] not in sums, (i, b)
  swapped = np.asarray(x).copy()
  swapped[[0, 1]] = swapped[[1, 0]]
  if not np.array_equal(swapped, np.asarray(x)):
    assert checksums({"x": jnp.asarray(swapped)})["['x']"] not in sums


# -- damage and fallback --------------------------------------------------------------------------


def _data_files(step_dir):
  files = [os.path.join(r, f) for r, _, fs in os.walk(step_dir / "state") for f in fs]
  files = [f for f in files if f"{os.sep}d{os.sep}" in f]
  assert files, f"no array data files under {step_dir}"
  return sorted(files, key=os.path.getsize)


def _flip_bit(step_dir):
  path = _data_files(step_dir)[-1]
  with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    byte = f.read(1)[0]
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte ^ 0x10]))


def _truncate(step_dir):
  path = _data_files(step_dir)[-1]
  os.truncate(path, os.path.getsize(path) // 2)


def _garble_metadata(step_dir):
  (step_dir / "state" / "_METADATA").write_text("{not json")


def _delete_data_file(step_dir):
  os.remove(_data_files(step_dir)[-1])


def _delete_manifest(step_dir):
  os.remove(step_dir / "state" / "manifest.ocdbt")


def _delete_checksums(step_dir):
  os.remove(step_dir / "extra" / "metadata")


def _garble_checksums(step_dir):
  (step_dir / "extra" / "metadata").write_text("{not json")


def _tamper_checksum(step_dir):
  """Same bytes, different stored sum: the path a silently wrong restore takes."""
  path = step_dir / "extra" / "metadata"
  meta = json.loads(path.read_text())
  entry = meta["manifest"]["['params']['w']"]
  entry["sum"] = f"{int(entry['sum'], 16) ^ 1:016x}"
  meta["digest"] = checkpoint.digest(meta)  # consistent metadata: the arrays' sums must catch it
  path.write_text(json.dumps(meta))


def _tamper_user_field(step_dir):
  """The caller's extra (a data position) changed by one digit: the digest catches it."""
  path = step_dir / "extra" / "metadata"
  text = path.read_text()
  assert '"pos": 20' in text
  path.write_text(text.replace('"pos": 20', '"pos": 21'))


DAMAGE = [
  _flip_bit,
  _truncate,
  _delete_data_file,
  _garble_metadata,
  _delete_manifest,
  _delete_checksums,
  _garble_checksums,
  _tamper_checksum,
  _tamper_user_field,
]


# A restore that fails inside Orbax leaves a TensorStore callback aimed at Orbax's closed event
# loop; Python reports it as unraisable. It is Orbax-internal and harmless here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_damaged_newest_step_falls_back(damage, tmp_path, mesh222, caplog):
  ck = _saved(tmp_path, mesh222)
  damage(tmp_path / "ckpt" / "2")
  with caplog.at_level(logging.WARNING):
    step, got, extra = ck.restore_latest(_abstract(None))
  assert step == 1 and extra == {"data": {"pos": 10}}
  _assert_bitwise_equal(got, _state(1, mesh222))
  lines = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
  assert any("step 2" in m for m in lines), lines
  assert all("\n" not in m for m in lines)
  # The bad step was moved aside, so training can save step 2 again.
  assert ck.latest_step() == 1 and any((tmp_path / "ckpt" / "corrupt").iterdir())
  assert ck.save(2, _state(7, mesh222))
  ck.wait()
  assert ck.restore_latest(_abstract(None))[0] == 2
  ck.close()


def test_caller_check_makes_a_step_unusable(tmp_path, mesh222, caplog):
  """A step whose arrays and digest verify but that the caller's check refuses (its data
  position disagrees with its state) is fallen back from like a damaged one."""
  ck = _saved(tmp_path, mesh222)
  seen = []

  def check(step, state, extra):
    seen.append((step, extra["data"]["pos"], int(state["step"])))
    return "data position is off" if step == 2 else None

  with caplog.at_level(logging.WARNING):
    step, _, extra = ck.restore_latest(_abstract(None), check=check)
  assert step == 1 and extra == {"data": {"pos": 10}}
  assert seen == [(2, 20, 2), (1, 10, 1)]
  lines = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
  assert len(lines) == 1 and "step 2" in lines[0] and "data position is off" in lines[0], lines
  ck.close()


def test_metadata_of_another_step_is_refused(tmp_path, mesh222, caplog):
  """Step 1's metadata copied over step 2's (digest intact) does not restore as step 2."""
  ck = _saved(tmp_path, mesh222, steps=(1, 2, 3))
  ck.close()
  root = tmp_path / "ckpt"
  shutil.copyfile(root / "1" / "extra" / "metadata", root / "3" / "extra" / "metadata")
  ck = Checkpointer(root)
  with caplog.at_level(logging.WARNING):
    assert ck.restore_latest(_abstract(None))[0] == 2
  lines = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
  assert len(lines) == 1 and "not of its directory's step" in lines[0], lines
  ck.close()


def test_deleted_tree_metadata_still_restores_verified(tmp_path, mesh222):
  """With a full abstract target Orbax does not need state/_METADATA; the checksums confirm it."""
  ck = _saved(tmp_path, mesh222)
  os.remove(tmp_path / "ckpt" / "2" / "state" / "_METADATA")
  step, got, _ = ck.restore_latest(_abstract(None))
  assert step == 2
  _assert_bitwise_equal(got, _state(2, mesh222))
  ck.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_all_steps_damaged_raises(tmp_path, mesh222):
  ck = _saved(tmp_path, mesh222)
  _flip_bit(tmp_path / "ckpt" / "2")
  _truncate(tmp_path / "ckpt" / "1")
  with pytest.raises(CheckpointError, match="no checkpoint .* verifies.*step 2.*step 1"):
    ck.restore_latest(_abstract(None))
  assert ck.all_steps() == [1, 2]  # nothing moved when no step is good
  ck.close()


def test_leftover_tmp_directory_is_ignored(tmp_path, mesh222):
  ck = _saved(tmp_path, mesh222)
  ck.close()
  # What SIGKILL during an async save of step 3 leaves behind.
  shutil.copytree(tmp_path / "ckpt" / "2", tmp_path / "ckpt" / "3.orbax-checkpoint-tmp")
  _truncate(tmp_path / "ckpt" / "3.orbax-checkpoint-tmp")
  ck = Checkpointer(tmp_path / "ckpt")
  assert ck.latest_step() == 2 and ck.all_steps() == [1, 2]
  assert ck.restore_latest(_abstract(None))[0] == 2
  assert ck.save(3, _state(3, mesh222))  # replaces the stale tmp directory
  ck.close()
  step, got, _ = ck.restore_latest(_abstract(None))
  assert step == 3 and not (tmp_path / "ckpt" / "3.orbax-checkpoint-tmp").exists()
  _assert_bitwise_equal(got, _state(3, mesh222))


# -- a reader: part of the state, nothing written ------------------------------------------------


def _tree_listing(root):
  return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_reader_restores_the_params_alone_onto_a_mesh(tmp_path, mesh222):
  _saved(tmp_path, mesh222).close()
  before = _tree_listing(tmp_path)
  reader = Checkpointer(tmp_path / "ckpt", read_only=True)
  for target in (_abstract(_mesh((8, 1, 1)))["params"], _abstract(None)["params"]):
    step, got, extra = reader.restore_latest({"params": target})
    assert step == 2 and extra == {"data": {"pos": 20}} and set(got) == {"params"}
    _assert_bitwise_equal(got["params"], _state(2, mesh222)["params"])
    for leaf, t in zip(jax.tree.leaves(got), jax.tree.leaves(target), strict=True):
      assert leaf.sharding.is_equivalent_to(t.sharding, leaf.ndim)
  with pytest.raises(CheckpointError, match="read-only"):
    reader.save(3, _state(3, mesh222))
  reader.close()
  assert _tree_listing(tmp_path) == before  # no write probe, no save
  assert Checkpointer(tmp_path / "nothing", read_only=True).restore_latest({}) is None
  assert not (tmp_path / "nothing").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
  "damage",
  [_tamper_checksum, _delete_manifest, _delete_checksums, _garble_checksums],
  ids=lambda f: f.__name__.strip("_"),
)
def test_reader_verifies_what_it_reads_and_moves_nothing(damage, tmp_path, mesh222, caplog):
  _saved(tmp_path, mesh222).close()
  damage(tmp_path / "ckpt" / "2")
  reader = Checkpointer(tmp_path / "ckpt", read_only=True)
  with caplog.at_level(logging.WARNING):
    step, got, _ = reader.restore_latest({"params": _abstract(None)["params"]})
  assert step == 1
  _assert_bitwise_equal(got["params"], _state(1, mesh222)["params"])
  assert any("step 2" in r.getMessage() for r in caplog.records)
  assert reader.all_steps() == [1, 2] and not (tmp_path / "ckpt" / "corrupt").exists()
  reader.close()


def test_reader_refuses_another_config_and_other_shapes(tmp_path, mesh222):
  _saved(tmp_path, mesh222, fingerprint={"model": {"d_model": 64}}).close()
  other = Checkpointer(tmp_path / "ckpt", read_only=True, fingerprint={"model": {"d_model": 8}})
  with pytest.raises(CheckpointError, match=r"model\.d_model: checkpoint 64 vs now 8"):
    other.restore_latest({"params": _abstract(None)["params"]})
  target = {"params": {"w": jax.ShapeDtypeStruct((16, 64), jnp.float32)}}
  with pytest.raises(CheckpointError, match=r"\['params'\]\['w'\].*\[16, 32\].*\[16, 64\]"):
    Checkpointer(tmp_path / "ckpt", read_only=True).restore_latest(target)
  target = {"params": {"nope": jax.ShapeDtypeStruct((2,), jnp.float32)}}
  with pytest.raises(CheckpointError, match=r"not in the checkpoint, e.g. state\['params'\]"):
    Checkpointer(tmp_path / "ckpt", read_only=True).restore_latest(target)


# -- incompatible configs -------------------------------------------------------------------------


def test_fingerprint_mismatch_names_the_field(tmp_path, mesh222):
  fp = {"rung": "softmax", "model": {"d_model": 64, "heads": 4}}
  _saved(tmp_path, mesh222, fingerprint=fp).close()
  other = {"rung": "softmax", "model": {"d_model": 128, "heads": 4}}
  with pytest.raises(CheckpointError, match=r"incompatible config.*model\.d_model.*64.*128"):
    Checkpointer(tmp_path / "ckpt", fingerprint=other).restore_latest(_abstract(None))
  step, _, _ = Checkpointer(tmp_path / "ckpt", fingerprint=fp).restore_latest(_abstract(None))
  assert step == 2


def test_shape_mismatch_names_the_leaf(tmp_path, mesh222):
  _saved(tmp_path, mesh222).close()
  target = _abstract(None)
  target["params"]["w"] = jax.ShapeDtypeStruct((16, 64), jnp.float32)
  with pytest.raises(CheckpointError, match=r"\['params'\]\['w'\].*\[16, 32\].*\[16, 64\]"):
    Checkpointer(tmp_path / "ckpt").restore_latest(target)


# -- two processes --------------------------------------------------------------------------------

_WORKER = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
pid, port, directory = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid,
                           initialization_timeout=60)
import json
import jax.numpy as jnp
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxformer.train.checkpoint import Checkpointer, checksums
mesh = jax.make_mesh((2, 4), ("data", "fsdp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
def state(s, spec):
  w = jnp.arange(64 * 32, dtype=jnp.float32).reshape(64, 32) * s
  return {"w": jax.jit(lambda: w, out_shardings=NamedSharding(mesh, spec))(),
          "step": jax.jit(lambda: jnp.int32(s), out_shardings=NamedSharding(mesh, P()))()}
ck = Checkpointer(directory, fingerprint={"d": 32})
for s in (1, 2):
  ck.save(s, state(s, P("data", "fsdp")), extra={"s": s})
ck.wait()
sums = [checksums(state(2, spec))["['w']"] for spec in (P("data", "fsdp"), P(None, "data"))]
if pid == 0:
  with open(os.path.join(directory, "2", "extra", "metadata"), "w") as f:
    f.write("{broken")
multihost_utils.sync_global_devices("damaged")
abstract = {"w": jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=NamedSharding(mesh, P("fsdp"))),
            "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))}
step, got, extra = ck.restore_latest(abstract)
ok = bool(jnp.array_equal(got["w"], state(1, P("fsdp"))["w"]))
resaved = ck.save(2, state(2, P("data", "fsdp")))
ck.close()
print("RESULT", json.dumps({"sums": sums, "step": step, "extra": extra, "ok": ok,
                            "resaved": resaved, "latest": ck.latest_step()}), flush=True)
"""


def test_two_processes_share_checksums_and_fallback(tmp_path):
  """Arrays sharded across processes: equal checksums everywhere, one fallback, one quarantine."""
  import socket
  import subprocess
  import sys

  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = {**os.environ, "PYTHONPATH": repo_root}
  env.pop("XLA_FLAGS", None)
  procs = [
    launcher.Popen(
      [sys.executable, "-c", _WORKER, str(i), str(port), str(tmp_path / "ckpt")],
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      env=env,
    )
    for i in range(2)
  ]
  results = []
  try:
    for p in procs:
      out, _ = p.communicate(timeout=180)
      assert p.returncode == 0, out[-3000:]
      results.append(json.loads(out.split("RESULT ", 1)[1].splitlines()[0]))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  sums = {s for r in results for s in r["sums"]}
  assert len(sums) == 1, results
  for r in results:
    assert (r["step"], r["extra"], r["ok"], r["resaved"], r["latest"]) == (
      1,
      {"s": 1},
      True,
      True,
      2,
    )
  assert [p.name.split("-")[0] for p in (tmp_path / "ckpt" / "corrupt").iterdir()] == ["2"]


def test_only_orbax_leftovers_of_a_failed_restore_are_silenced():
  """The two tracebacks a failed restore leaves behind are dropped; others are not."""

  def unraisable(exc, obj=None):
    return types.SimpleNamespace(exc_value=exc, object=obj, exc_type=type(exc))

  def call_soon_threadsafe():  # the frame asyncio raises "Event loop is closed" from
    raise RuntimeError("Event loop is closed")

  try:
    call_soon_threadsafe()
  except RuntimeError as e:
    closed = e
  namespace = {}
  exec(compile("async def read(): pass", f"{os.sep}x{os.sep}orbax{os.sep}s.py", "exec"), namespace)
  orbax_coroutine, own_coroutine = namespace["read"](), asyncio.sleep(0)
  try:
    assert checkpoint._is_orbax_leftover(unraisable(closed))
    assert checkpoint._is_orbax_leftover(unraisable(ValueError("x"), orbax_coroutine))
    assert not checkpoint._is_orbax_leftover(unraisable(RuntimeError("Event loop is closed")))
    assert not checkpoint._is_orbax_leftover(unraisable(ValueError("x"), own_coroutine))
  finally:
    orbax_coroutine.close()
    own_coroutine.close()
