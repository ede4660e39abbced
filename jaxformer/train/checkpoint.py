"""Checkpoints that verify themselves and fall back to the last good step.

Orbax writes and restores the arrays (async, sharded, onto any mesh shape) but does not notice
corrupted bytes: a flipped bit restores silently wrong, a truncated file or a lost metadata file
fails with a misleading error, and `latest_step()` still names the broken step. So every save also
stores, in a small JSON item next to the arrays, a checksum of every leaf computed on device
(works for arrays sharded across devices and processes without gathering them), the leaf shapes
and dtypes, and a fingerprint of the config. That item is itself covered by a sha256 `digest`
of everything else in it (the step, the fingerprint, the manifest and the caller's `extra`,
such as the data position), so a changed byte there is caught as surely as one in the arrays.
`restore_latest` recomputes the checksums and the digest, runs the caller's own consistency
check (`check`), reports a bad step in one warning line, moves it to `<directory>/corrupt/` (so
the step number can be saved again) and falls back to the previous step.

On-disk layout per step (Orbax composite): `<step>/state` (the pytree, OCDBT) and
`<step>/extra` (JSON: {'format', 'step', 'fingerprint', 'manifest', 'user', 'digest'}).
"""

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import time
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging as absl_logging
from etils import epath

log = logging.getLogger(__name__)

FORMAT = 2  # 2: the metadata carries its step and a digest of itself
CORRUPT_DIR = "corrupt"
# the suffix of a save in flight, `<step>.orbax-checkpoint-tmp...` (Orbax's own constant)
ORBAX_TMP = ocp.path.atomicity_types.TMP_DIR_SUFFIX


class CheckpointError(RuntimeError):
  """A checkpoint problem the user must act on; the message is one line."""


# ----------------------------------------------------------------------------------------------
# Checksums.


def _fmix32(h):
  """MurmurHash3's finaliser: a bijection on uint32 that spreads every input bit."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def _as_uint32(x: jax.Array) -> jax.Array:
  """Reinterprets the bits of `x` as uint32 words (lossless; 64-bit leaves get a trailing 2)."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    x = jnp.stack([x.real, x.imag], axis=-1)
  size = x.dtype.itemsize
  if size == 4:
    return jax.lax.bitcast_convert_type(x, jnp.uint32)
  if size == 8:
    return jax.lax.bitcast_convert_type(x, jnp.uint32)
  if size == 2:
    return jax.lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
  if size == 1 and x.dtype.name not in ("int4", "uint4", "int2", "uint2", "float4_e2m1fn"):
    return jax.lax.bitcast_convert_type(x, jnp.uint8).astype(jnp.uint32)
  # Sub-byte types: widening is lossless, so distinct values stay distinct.
  wide = jnp.float32 if jnp.issubdtype(x.dtype, jnp.floating) else jnp.int32
  return jax.lax.bitcast_convert_type(x.astype(wide), jnp.uint32)


def _leaf_checksum(x: jax.Array) -> jax.Array:
  """Two 32-bit position-dependent sums over the bits of `x`, as uint32[2].

  Each 32-bit word u at flat position i becomes t = fmix32(u + i * golden), a bijection of u, so
  changing any one element changes t. Lane 0 sums t, lane 1 sums t * (2i + 1) (an odd weight, again
  a bijection mod 2^32): both lanes see every single-element change, and moved or multi-element
  damage has to cancel in both at once to go unnoticed. Wrapping uint32 addition is associative and
  commutative, so the result does not depend on the sharding or XLA's reduction order.
  """
  u = _as_uint32(x)
  idx = jnp.zeros(u.shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(u.ndim)):
    idx = idx + jax.lax.broadcasted_iota(jnp.uint32, u.shape, axis) * jnp.uint32(stride % 2**32)
    stride *= u.shape[axis]
  t = _fmix32(u + idx * jnp.uint32(0x9E3779B1))
  weight = idx * jnp.uint32(2) + jnp.uint32(1)
  return jnp.stack([jnp.sum(t, dtype=jnp.uint32), jnp.sum(t * weight, dtype=jnp.uint32)])


_checksums_jit = jax.jit(lambda leaves: [_leaf_checksum(x) for x in leaves])


def _fetch(a: jax.Array) -> np.ndarray:
  """Host copy of a small replicated result (works in multi-process runs too)."""
  if a.is_fully_addressable:
    return np.asarray(jax.device_get(a))
  return np.asarray(a.addressable_data(0))


def checksums(tree) -> dict[str, str]:
  """{keystr(path): 16 hex digits} for every leaf of `tree`, computed on device in one jit."""
  paths_leaves = jax.tree_util.tree_leaves_with_path(tree)
  leaves = [x if isinstance(x, jax.Array) else np.asarray(x) for _, x in paths_leaves]
  sums = _checksums_jit(leaves)
  return {
    jax.tree_util.keystr(p): "".join(f"{int(v):08x}" for v in _fetch(s))
    for (p, _), s in zip(paths_leaves, sums, strict=True)
  }


def digest(meta: dict) -> str:
  """sha256 of `meta` without its 'digest' key, as canonical JSON (sorted keys, no spaces)."""
  body = {k: v for k, v in meta.items() if k != "digest"}
  text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
  return hashlib.sha256(text.encode()).hexdigest()


def _canonical_dtype(x) -> str:
  return str(
    jax.dtypes.canonicalize_dtype(np.asarray(x).dtype if not hasattr(x, "dtype") else x.dtype)
  )


def _manifest(tree) -> dict[str, dict]:
  sums = checksums(tree)
  out = {}
  for path, x in jax.tree_util.tree_leaves_with_path(tree):
    key = jax.tree_util.keystr(path)
    out[key] = {"shape": list(np.shape(x)), "dtype": _canonical_dtype(x), "sum": sums[key]}
  return out


# ----------------------------------------------------------------------------------------------
# Helpers for messages.


def _flatten_json(obj, prefix="") -> dict[str, Any]:
  if isinstance(obj, dict):
    out = {}
    for k, v in obj.items():
      out.update(_flatten_json(v, f"{prefix}.{k}" if prefix else str(k)))
    return out if out or not prefix else {prefix: {}}
  return {prefix: obj}


def _normalise(obj):
  """JSON round trip: tuples become lists, keys strings; raises TypeError if not JSON-able."""
  return json.loads(json.dumps(obj))


def _short(value, limit=60) -> str:
  s = json.dumps(value) if not isinstance(value, str) else repr(value)
  return s if len(s) <= limit else s[: limit - 3] + "..."


def _diff(saved: dict, wanted: dict) -> list[str]:
  a, b = _flatten_json(saved), _flatten_json(wanted)
  out = []
  for key in sorted(set(a) | set(b)):
    if key not in a:
      out.append(f"{key} (not in checkpoint)")
    elif key not in b:
      out.append(f"{key} (only in checkpoint)")
    elif a[key] != b[key]:
      out.append(f"{key}: checkpoint {_short(a[key])} vs now {_short(b[key])}")
  return out


# TensorStore appends its context to an error as [name='value'] (source locations, the whole
# tensorstore_spec as JSON, payloads): often longer than the error, and after the OS's reason
# ("... Failed to write 37263 bytes to file 11: File too large [tensorstore_spec='{...}']").
_STORE_CONTEXT = re.compile(r"\s*\[[A-Za-z_ ]+='[^']*'\]")


def _cause(e: BaseException) -> str:
  """One line naming the innermost cause of an exception chain (Orbax buries it in __cause__),
  without TensorStore's context annotations; a long line keeps its start and its end, where
  the OS's reason is."""
  while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
    e = e.__cause__ or e.__context__
  lines = _STORE_CONTEXT.sub("", str(e)).strip().splitlines()
  msg = lines[0] if lines else ""
  msg = msg if len(msg) <= 240 else msg[:120] + " ... " + msg[-115:]
  return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _checked_leaf(path, leaf):
  """Rejects what Orbax cannot save, naming the leaf (Orbax's own errors name neither)."""
  where = f"state{jax.tree_util.keystr(path)}"
  if isinstance(leaf, jax.Array):
    if jax.process_count() > 1 and leaf.is_fully_addressable:
      raise CheckpointError(
        f"{where} lives on this process's devices only ({type(leaf.sharding).__name__}) in a"
        " multi-process run; give it a sharding over the global mesh (e.g. NamedSharding(mesh,"
        " P()) for a replicated value)"
      )
    return leaf
  if isinstance(leaf, np.ndarray | np.generic | int | float | bool):
    return leaf
  raise CheckpointError(
    f"{where} is a {type(leaf).__name__}; only arrays and scalars can be checkpointed"
    " (put other values in extra)"
  )


_SILENCED = False


def _silence_orbax_leftovers() -> None:
  """Keeps a failed restore to its one-line report.

  A restore that fails inside Orbax (a truncated or missing file) leaves TensorStore reads in
  flight: when they finish, their callbacks find Orbax's event loop closed, and coroutines that
  raised are never awaited. Python prints each as a traceback, at some later moment, after the
  warning that already names the cause. From the first failed restore on, exactly those two
  leftovers are dropped; every other unraisable exception still reaches the previous hook.
  """
  global _SILENCED
  if _SILENCED:
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    if not _is_orbax_leftover(unraisable):
      previous(unraisable)

  sys.unraisablehook = hook
  _SILENCED = True


def _is_orbax_leftover(unraisable) -> bool:
  exc = unraisable.exc_value
  if isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f.name == "call_soon_threadsafe" for f in frames)
  code = getattr(unraisable.object, "cr_code", None)  # a coroutine that was never awaited
  return code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename


@contextlib.contextmanager
def _orbax_warnings_silenced():
  """absl logging at ERROR for the duration (Orbax logs through absl)."""
  previous = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.ERROR)
  try:
    yield
  finally:
    absl_logging.set_verbosity(previous)


class _QuietOrbaxErrors(logging.Filter):
  """Drops Orbax's own ERROR records (with their tracebacks) of a failed save: the
  CheckpointError raised for it names the step and the cause in one line."""

  def filter(self, record):
    return not (record.levelno >= logging.ERROR and f"{os.sep}orbax{os.sep}" in record.pathname)


_QUIET = _QuietOrbaxErrors()


class _QuietOrbaxTasks(logging.Filter):
  """Drops asyncio's "... exception was never retrieved" records of a failed save's writes:
  when several writes fail, the ones Orbax did not await are logged by asyncio at some later
  moment (when they are garbage collected), through the `asyncio` logger rather than Orbax's.
  A task names Orbax's code; a bare future names only its exception, a TensorStore write into
  the save's temporary directory (ORBAX_TMP)."""

  def filter(self, record):
    message = record.getMessage()
    if "Task exception was never retrieved" in message:
      return f"{os.sep}orbax{os.sep}" not in message
    if "Future exception was never retrieved" in message:
      return ORBAX_TMP not in message
    return True


_QUIET_TASKS = _QuietOrbaxTasks()


def quiet_orbax_errors(enabled=True) -> None:
  """Keeps Orbax's error logs and tracebacks of a failed save off stderr (the CLI's default;
  `--debug` leaves them)."""
  logger, tasks = absl_logging.get_absl_logger(), logging.getLogger("asyncio")
  if enabled:
    logger.addFilter(_QUIET)
    tasks.addFilter(_QUIET_TASKS)
    _silence_orbax_leftovers()
  else:
    logger.removeFilter(_QUIET)
    tasks.removeFilter(_QUIET_TASKS)


class _BadStep(Exception):
  """A step that cannot be used; the message is the cause for the warning line."""


# ----------------------------------------------------------------------------------------------


class Checkpointer:
  """Saves pytrees with Orbax; restores the newest step whose checksums verify.

  Args:
    directory: where steps live (local path or any epath URL); created if missing.
    max_to_keep: how many complete steps Orbax keeps (oldest deleted first).
    async_save: write in a background thread; `save` returns once the arrays are copied.
    fingerprint: JSON-able description of the config/model shape. Stored with every save and
      compared on restore, so that a workdir of another config fails with the differing fields
      instead of a deep shape error.
    read_only: a reader (sampling, evaluation, another process): nothing is written or moved,
      the directory need not be writable, and `restore_latest` reads any part of the saved
      state (e.g. `{'params': ...}` without the optimizer state), verifying what it reads.
  """

  def __init__(
    self,
    directory,
    *,
    max_to_keep: int | None = 3,
    async_save: bool = True,
    fingerprint: dict | None = None,
    read_only: bool = False,
  ):
    if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
      raise CheckpointError(f"max_to_keep must be a positive int or None, got {max_to_keep!r}")
    try:
      self._fingerprint = None if fingerprint is None else _normalise(fingerprint)
    except (TypeError, ValueError) as e:
      raise CheckpointError(f"fingerprint is not JSON-serialisable: {e}") from None
    self.directory = epath.Path(directory)
    self.read_only = read_only
    self._in_flight = None  # the step of the last save started and not yet known durable
    self._deferred = None  # a save's failure seen by `settle`, raised by the next `check`
    if read_only:
      # A PyTree handler restores a subset of the saved leaves (partial_restore); the saved
      # layout is the one StandardSave writes.
      options = ocp.CheckpointManagerOptions(
        read_only=True, create=False, save_interval_steps=0, max_to_keep=None
      )
      with _orbax_warnings_silenced():  # "Given directory is read only": what we asked for
        self._mngr = ocp.CheckpointManager(
          self.directory,
          options=options,
          item_handlers={
            "state": ocp.PyTreeCheckpointHandler(),
            "extra": ocp.JsonCheckpointHandler(),
          },
        )
      return
    self._check_writable()
    self._mngr = ocp.CheckpointManager(
      self.directory,
      options=ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        enable_async_checkpointing=async_save,
        # Not True: another process opening the same directory (an evaluator, a notebook) would
        # delete the writer's in-flight save. A stale `<step>.orbax-checkpoint-tmp` is ignored and
        # replaced when that step is saved again.
        cleanup_tmp_directories=False,
      ),
      item_names=("state", "extra"),
    )

  def _check_writable(self):
    d = self.directory
    try:
      if d.exists() and not d.is_dir():
        raise CheckpointError(f"checkpoint directory {d} exists and is not a directory")
      d.mkdir(parents=True, exist_ok=True)
      probe = d / f".write-probe-{jax.process_index()}"
      probe.write_text("ok")
      probe.unlink()
    except CheckpointError:
      raise
    except OSError as e:
      raise CheckpointError(f"checkpoint directory {d} is not writable: {_cause(e)}") from None

  # -- saving ----------------------------------------------------------------------------------

  def save(self, step: int, state, *, extra: dict | None = None, force: bool = False) -> bool:
    """Saves `state` (pytree of arrays/scalars) and `extra` (JSON dict) as `step`.

    Checksums are computed (on device, blocking on `state`) before Orbax starts, and Orbax copies
    the arrays to host before `save` returns, so the caller may donate or overwrite `state` as soon
    as this returns. Returns False (nothing written) if `step` is already saved or older than the
    newest saved step, unless `force` (which replaces an existing `step`).
    """
    if self.read_only:
      raise CheckpointError(f"{self.directory} was opened read-only; nothing can be saved")
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
      raise CheckpointError(f"step must be a non-negative int, got {step!r}")
    step = int(step)
    try:
      user = {} if extra is None else _normalise(extra)
    except (TypeError, ValueError) as e:
      raise CheckpointError(f"extra is not JSON-serialisable: {e}") from None
    if not isinstance(user, dict):
      raise CheckpointError(f"extra must be a dict, got {type(extra).__name__}")
    state = jax.tree_util.tree_map_with_path(_checked_leaf, state)

    steps = self._mngr.all_steps()
    if step in steps:
      if not force:
        return False
      self._mngr.wait_until_finished()
      self._mngr.delete(step)
    elif steps and step < max(steps) and not force:
      log.warning(
        "checkpoint step %d not saved: %s already holds newer step %d",
        step,
        self.directory,
        max(steps),
      )
      return False

    meta = {
      "format": FORMAT,
      "step": step,
      "fingerprint": self._fingerprint,
      "manifest": _manifest(state),
      "user": user,
    }
    meta["digest"] = digest(meta)
    args = ocp.args.Composite(state=ocp.args.StandardSave(state), extra=ocp.args.JsonSave(meta))
    try:
      # Orbax waits for the previous save first and raises its error here: name that step.
      saved = bool(self._mngr.save(step, args=args, force=True))
    except Exception as e:
      raise self._failed(self._in_flight if self._in_flight is not None else step, e) from e
    self._in_flight = step if saved else self._in_flight
    return saved

  def _failed(self, step, e) -> CheckpointError:
    self._in_flight = None
    _silence_orbax_leftovers()  # the failed write's TensorStore callbacks, as after a restore
    kept = self.all_steps()
    return CheckpointError(
      f"saving checkpoint step {step} to {self.directory} failed: {_cause(e)}; "
      + (
        f"the earlier checkpoints (step {', '.join(map(str, kept))}) are intact"
        if kept
        else "no earlier checkpoint exists"
      )
    )

  def check(self) -> None:
    """Raises CheckpointError, naming the step, if an async save has failed; does not block
    (call it after every step, so that training stops within a step of a failed save)."""
    if self._in_flight is None:
      return
    try:
      if self._deferred is not None:
        e, self._deferred = self._deferred, None
        raise e
      self._mngr.check_for_errors()
    except Exception as e:
      raise self._failed(self._in_flight, e) from e

  def settle(self) -> None:
    """Blocks until the save in flight has ended, keeping a failure for the next `check`
    (the fault tests use it to have a failed save happen at a known step)."""
    try:
      self._mngr.wait_until_finished()
    except Exception as e:
      self._deferred = e

  def wait(self) -> None:
    """Blocks until every started save is durable on disk."""
    try:
      if self._deferred is not None:
        e, self._deferred = self._deferred, None
        raise e
      self._mngr.wait_until_finished()
      self._mngr.check_for_errors()
    except Exception as e:
      raise self._failed(self._in_flight, e) from e
    self._in_flight = None

  # -- inspecting ------------------------------------------------------------------------------

  def latest_step(self) -> int | None:
    """Newest complete step on disk (not verified; see `restore_latest`). Does not block."""
    steps = self.all_steps()
    return steps[-1] if steps else None

  def all_steps(self) -> list[int]:
    """Complete steps on disk, oldest first (not verified). In-flight saves are not listed."""
    if self.read_only and not self.directory.exists():
      return []
    return sorted(ocp.step.checkpoint_steps(self.directory))

  # -- restoring -------------------------------------------------------------------------------

  def restore_latest(self, abstract_state, check=None) -> tuple[int, Any, dict] | None:
    """Returns (step, state, extra) of the newest step that verifies, or None if there is none.

    `abstract_state`: pytree of jax.ShapeDtypeStruct with the target shardings (a leaf without a
    sharding goes to the first device), or of concrete arrays whose shardings are reused.
    A bad newer step is reported in one warning line and moved to `<directory>/corrupt/` once an
    older step verifies (a read-only checkpointer leaves it in place). Raises CheckpointError if
    the newest readable step was written for another config (fingerprint or leaf shapes differ),
    or if steps exist but none verifies. Read-only: `abstract_state` may hold any part of the
    saved tree (same paths); only that part is read and verified.

    `check(step, state, extra)`: the caller's own test of a step that verified (e.g. that the
    data position saved in `extra` is the state's step); it returns None, or the cause that
    makes the step unusable (reported and fallen back from like a checksum mismatch).
    """
    self.wait()  # a save still in flight is not restorable yet
    self._mngr.reload()  # see steps written or moved by other processes/instances
    steps = self.all_steps()
    if not steps:
      return None
    target = self._abstract(abstract_state)
    wanted = {
      jax.tree_util.keystr(p): {"shape": list(x.shape), "dtype": str(x.dtype)}
      for p, x in jax.tree_util.tree_leaves_with_path(target)
    }
    bad: list[tuple[int, str]] = []
    for step in reversed(steps):
      try:
        meta = self._read_meta(step)
        self._check_compatible(step, meta, wanted)
        state = self._restore_state(step, target)
        self._verify(step, meta, state)
        problem = None if check is None else check(step, state, meta.get("user", {}))
        if problem:
          raise _BadStep(problem)
      except _BadStep as e:
        cause = str(e)
        log.warning(
          "checkpoint step %d in %s is unusable (%s); trying an older step",
          step,
          self.directory,
          cause,
        )
        bad.append((step, cause))
        continue
      self._quarantine([s for s, _ in bad])
      return step, state, meta.get("user", {})
    causes = "; ".join(f"step {s}: {c}" for s, c in bad)
    raise CheckpointError(f"no checkpoint in {self.directory} verifies ({causes})")

  @staticmethod
  def _abstract(tree):
    default = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def to_struct(x):
      sharding = getattr(x, "sharding", None) or default
      if isinstance(x, jax.ShapeDtypeStruct | jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
      x = np.asarray(x)
      return jax.ShapeDtypeStruct(x.shape, jax.dtypes.canonicalize_dtype(x.dtype), sharding=default)

    return jax.tree.map(to_struct, tree)

  def _read_meta(self, step: int) -> dict:
    try:
      meta = self._mngr.restore(step, args=ocp.args.Composite(extra=ocp.args.JsonRestore()))
      meta = meta["extra"]
    except Exception as e:
      raise _BadStep(f"metadata unreadable: {_cause(e)}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("manifest"), dict):
      raise _BadStep("metadata has no checksum manifest")
    if meta.get("format") != FORMAT:
      raise _BadStep(f"metadata format {meta.get('format')!r}, expected {FORMAT}")
    if meta.get("digest") != digest(meta):
      raise _BadStep("metadata digest mismatch (extra/metadata was changed after the save)")
    if meta.get("step") != step:
      raise _BadStep(f"metadata is of step {meta.get('step')!r}, not of its directory's step")
    if not isinstance(meta.get("user"), dict):
      raise _BadStep("metadata has no user fields")
    return meta

  def _check_compatible(self, step: int, meta: dict, wanted: dict) -> None:
    saved_fp = meta.get("fingerprint")
    if self._fingerprint is not None and saved_fp is not None and saved_fp != self._fingerprint:
      diffs = _diff(saved_fp, self._fingerprint)
      raise CheckpointError(
        f"{self.directory} holds a checkpoint (step {step}) of an incompatible config; "
        f"differing fields: {'; '.join(diffs[:8])}"
        + (f" (+{len(diffs) - 8} more)" if len(diffs) > 8 else "")
        + ". Use another workdir or the matching config."
      )
    saved = {k: (v["shape"], v["dtype"]) for k, v in meta["manifest"].items()}
    now = {k: (v["shape"], v["dtype"]) for k, v in wanted.items()}
    changed = sorted(k for k in set(saved) & set(now) if saved[k] != now[k])
    missing, extra = sorted(set(now) - set(saved)), sorted(set(saved) - set(now))
    if self.read_only:
      extra = []  # a reader asks for part of the state
    parts = []
    if changed:
      (s_shape, s_dtype), (n_shape, n_dtype) = saved[changed[0]], now[changed[0]]
      parts.append(
        f"state{changed[0]}: checkpoint {s_shape} {s_dtype} vs now {n_shape} {n_dtype}"
        + (f" (+{len(changed) - 1} more leaves)" if len(changed) > 1 else "")
      )
    for keys, where in ((missing, "not in the checkpoint"), (extra, "only in the checkpoint")):
      if keys:
        parts.append(f"{len(keys)} leaves {where}, e.g. state{keys[0]}")
    if parts:
      raise CheckpointError(
        f"{self.directory} holds a checkpoint (step {step}) whose state does not match this "
        f"config: {'; '.join(parts)}. Use another workdir or the config that wrote it "
        "(model and optimizer fields)."
      )

  def _restore_state(self, step: int, target):
    step_dir = self.directory / str(step) / "state"
    missing = [n for n in ("_METADATA", "manifest.ocdbt") if not (step_dir / n).exists()]
    # Without its manifest no restore can succeed, so Orbax is not asked: one that fails on it
    # part-way leaves TensorStore reads in flight, whose callbacks can print a traceback from
    # another thread after the loop has closed. (Without _METADATA alone it still restores.)
    if "manifest.ocdbt" in missing:
      raise _BadStep(f"restore failed: state/{missing[0]} is missing")
    if self.read_only:
      restore_args = ocp.checkpoint_utils.construct_restore_args(target)
      state_args = ocp.args.PyTreeRestore(target, restore_args=restore_args, partial_restore=True)
    else:
      state_args = ocp.args.StandardRestore(target)
    try:
      restored = self._mngr.restore(step, args=ocp.args.Composite(state=state_args))
      return restored["state"]
    except Exception as e:
      _silence_orbax_leftovers()
      if missing:
        raise _BadStep(f"restore failed: state/{missing[0]} is missing") from None
      raise _BadStep(f"restore failed: {_cause(e)}") from None

  @staticmethod
  def _verify(step: int, meta: dict, state) -> None:
    got = checksums(state)
    saved = {k: v["sum"] for k, v in meta["manifest"].items()}
    # every saved leaf restored (all of them, unless a reader asked for part of the state)
    wrong = sorted(k for k in saved if k in got and got[k] != saved[k])
    if wrong:
      more = f" (+{len(wrong) - 1} more leaves)" if len(wrong) > 1 else ""
      raise _BadStep(f"checksum mismatch in state{wrong[0]}{more}")

  def _quarantine(self, steps: list[int]) -> None:
    """Moves bad steps aside so their numbers can be saved again (Orbax refuses older steps)."""
    if not steps or self.read_only:
      return
    if jax.process_index() == 0:
      dest_root = self.directory / CORRUPT_DIR
      dest_root.mkdir(parents=True, exist_ok=True)
      for step in steps:
        src = self.directory / str(step)
        dest = dest_root / f"{step}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
          src.rename(dest)
          log.info("moved unusable checkpoint step %d to %s", step, dest)  # reported already
        except OSError as e:
          log.warning("could not move unusable checkpoint step %d aside: %s", step, _cause(e))
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils

      multihost_utils.sync_global_devices("jaxformer_checkpoint_quarantine")
    self._mngr.reload()

  def close(self) -> None:
    """Waits for pending saves and releases Orbax's threads."""
    try:
      self.wait()
    finally:
      self._mngr.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
