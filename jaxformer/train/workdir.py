"""A run's workdir: what training writes into it, and reading a trained run back.

  WORKDIR/config.json      the config as run: model.vocab_size / max_len sized for the task
  WORKDIR/task.json        the task's spec, vocab_size, seq_len and (char level) alphabet
  WORKDIR/tokenizer.json   a BPE-level text task's tokenizer (jaxformer.data.bpe)
  WORKDIR/mixer.json       (custom rung) the mixer's spec, file and the file's sha256
  WORKDIR/lock             while a run trains: the pid and host of its process 0
  WORKDIR/checkpoints/N/   verified Orbax checkpoints (jaxformer.train.checkpoint)
  WORKDIR/metrics.jsonl    and tensorboard/ (jaxformer.train.metrics)

  run = workdir.load("/tmp/jaxformer/text")     # params only: no optimizer state is read
  run.model.apply({"params": run.params}, tokens_BL)
  run.text.encode("ROMEO:") / run.text.decode(ids)   # for text tasks

A workdir may be a local path or any `etils.epath` URL (`gs://bucket/run`): every file here
goes through epath, checkpoints through Orbax. Reading a run needs only the workdir: the
alphabet of a char-level task is kept in task.json, so the text files need not be present.

Reading a run never runs code the reader did not name: a custom rung's config.json names a
mixer file, and importing it runs it, so `load` / `read_config` refuse such a run unless
called with trust_code=True (the `--trust_mixer` flag of sample and evaluate), and then only
if the file's sha256 is still the one mixer.json recorded when the run trained.
"""

import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from etils import epath

from jaxformer import data, files, ladder
from jaxformer.data import bpe
from jaxformer.mixers import plug
from jaxformer.train import config as config_lib
from jaxformer.train import program as program_lib
from jaxformer.train.checkpoint import Checkpointer, CheckpointError

CONFIG_FILE = "config.json"
TASK_FILE = "task.json"
MIXER_FILE = "mixer.json"
LOCK_FILE = "lock"
CHECKPOINT_DIR = "checkpoints"


def checkpoint_dir(workdir):
  return epath.Path(workdir) / CHECKPOINT_DIR


# ----------------------------------------------------------------------------------------------
# One writer per workdir.


def _start_time(pid):
  """The process's start time in clock ticks since boot (/proc), or None where unknown: with
  the pid it tells a live holder from a new process that reuses a dead holder's pid."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return int(f.read().rsplit(")", 1)[1].split()[19])
  except (OSError, ValueError, IndexError):
    return None


def _alive(holder):
  pid = holder.get("pid")
  if not isinstance(pid, int) or pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass  # someone else's live process
  start = _start_time(pid)
  return holder.get("start") is None or start is None or start == holder["start"]


@contextlib.contextmanager
def lock(workdir, enabled=True, stream=None):
  """Holds WORKDIR/lock (this process's pid, host and start) while the body runs.

  A lock held by a live process, or by any process on another host (whose liveness cannot be
  told from here), raises ConfigError naming the holder. A lock of a process on this host
  that is gone (killed, crashed) is taken over with a note on `stream` (stderr). The lock is
  created atomically (O_EXCL) on a local file system; an object store (gs://) has no atomic
  create, so there two runs started at the same moment can both pass.
  """
  if not enabled or workdir is None:
    yield
    return
  stream = stream or sys.stderr
  path = epath.Path(workdir) / LOCK_FILE
  host = socket.gethostname()
  me = {"pid": os.getpid(), "host": host, "start": _start_time(os.getpid())}
  me["since"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
  text = json.dumps(me) + "\n"
  for _ in range(5):
    try:
      created = _create(path, text)
    except OSError as e:
      raise ladder.ConfigError(
        f"--workdir={workdir}: not a writable directory ({files.describe(e)})"
      ) from None
    if created:
      break
    holder = _holder(path)
    if holder is None:  # removed meanwhile, or still being written: look again
      time.sleep(0.2)
      continue
    who = f"pid {holder.get('pid')} on host {holder.get('host')!r}"
    if holder.get("host") != host or _alive(holder):
      raise ladder.ConfigError(
        f"--workdir={workdir}: in use by {who} since {holder.get('since', '?')} ({path}); "
        "wait for that run to end or use another workdir"
        + ("" if holder.get("host") == host else f"; delete {path} if that run is gone")
      )
    try:  # a rename succeeds for one of several runs taking the same stale lock over
      stale = path.parent / f"{LOCK_FILE}.stale-{os.getpid()}"
      path.rename(stale)
      stale.unlink()
    except OSError:
      continue
    print(
      f"note: {path}: taking over the lock of {who}, which is no longer running",
      file=stream,
      flush=True,
    )
  else:
    raise ladder.ConfigError(f"--workdir={workdir}: cannot take the lock {path}")
  try:
    yield
  finally:
    if (_holder(path) or {}).get("pid") == me["pid"]:
      with contextlib.suppress(OSError):
        path.unlink()


def _create(path, text):
  """Writes `text` to `path` if no file is there; False if one is."""
  path.parent.mkdir(parents=True, exist_ok=True)
  if files.is_local(path):
    try:
      fd = os.open(os.fspath(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(fd, "w") as f:
      f.write(text)
    return True
  if path.exists():
    return False
  path.write_text(text)
  return True


def _holder(path):
  """The lock's record, {} for an unreadable one older than a few seconds (a writer killed
  mid-write), None if there is no lock or it is still being written."""
  try:
    raw = path.read_text()
  except (FileNotFoundError, OSError):
    return None
  try:
    holder = json.loads(raw)
    return holder if isinstance(holder, dict) else {}
  except json.JSONDecodeError:
    try:
      mtime = os.path.getmtime(path) if files.is_local(path) else path.stat().mtime
    except OSError:
      mtime = 0
    age = time.time() - mtime
    return {"host": socket.gethostname(), "pid": None} if age > 5 else None


# ----------------------------------------------------------------------------------------------


def write_run(workdir, config, dataset):
  """Writes config.json (the resolved config) and task.json (what decoding needs)."""
  root = epath.Path(workdir)
  root.mkdir(parents=True, exist_ok=True)
  (root / CONFIG_FILE).write_text(config.to_json(indent=2, sort_keys=True) + "\n")
  task = {
    "spec": dataset.spec,
    "vocab_size": dataset.vocab_size,
    "seq_len": dataset.seq_len,
    "chars": dataset.chars,
  }
  if dataset.tokenizer is not None:  # a BPE: decoding the run needs only the workdir
    (root / bpe.FILE).write_text(dataset.tokenizer.to_str())
    task["tokenizer"] = bpe.FILE
  (root / TASK_FILE).write_text(json.dumps(task, indent=2, ensure_ascii=False) + "\n")
  if config.rung == ladder.CUSTOM:
    code = {"spec": config.model.mixer, **plug.source(config.model.mixer)}
    (root / MIXER_FILE).write_text(json.dumps(code, indent=2) + "\n")


def recorded_mixer(workdir):
  """mixer.json ({'spec', 'file', 'sha256'}), or None where the workdir has none."""
  if not (epath.Path(workdir) / MIXER_FILE).exists():
    return None
  code = _read_json(workdir, MIXER_FILE)
  if not isinstance(code, dict) or not {"spec", "file", "sha256"} <= set(code):
    raise CheckpointError(f"{epath.Path(workdir) / MIXER_FILE}: not a mixer record")
  return code


def check_mixer_unchanged(workdir, config):
  """ConfigError if a custom run's mixer file differs from the one the workdir trained with."""
  code = recorded_mixer(workdir) if config.rung == ladder.CUSTOM else None
  if code is None:
    return
  now = plug.source(config.model.mixer)
  if now["sha256"] != code["sha256"]:
    raise ladder.ConfigError(
      f"model.mixer={config.model.mixer!r}: {now['file']} (sha256 {_short(now['sha256'])}) is "
      f"not the file this workdir trained with ({code['file']}, sha256 "
      f"{_short(code['sha256'])}); use another workdir or the same file"
    )


def _short(sha):
  return sha[:12] if sha else "none"


def _trusted_mixer(workdir, config, trust_code):
  """Lets a custom run's mixer be imported: only if trusted and unchanged since training."""
  spec = config.model.mixer
  where = epath.Path(workdir) / CONFIG_FILE
  if not trust_code:
    raise CheckpointError(
      f"{where}: the model is the custom mixer {spec!r}; reading this run would import and "
      "run that code. Pass --trust_mixer (trust_code=True) if you trust it"
    )
  code = recorded_mixer(workdir)
  if code is None or code["spec"] != spec:
    raise CheckpointError(
      f"{where}: the custom mixer {spec!r} has no sha256 in {MIXER_FILE}; refusing to run it"
    )
  _, _, name = spec.rpartition(":")
  if code["file"] is not None and code["file"].endswith(".py") and code["sha256"] is not None:
    spec = f"{code['file']}:{name}"  # the file trained, wherever this reader runs from
  try:
    now = plug.source(spec)
  except plug.MixerError as e:
    raise CheckpointError(f"{where}: {e}") from None
  if now["sha256"] != code["sha256"]:
    raise CheckpointError(
      f"{where}: the mixer file {now['file']} has sha256 {_short(now['sha256'])}, not the "
      f"{_short(code['sha256'])} the run recorded; refusing to run it"
    )
  config.model.mixer = spec


def read_config(workdir, trust_code=False):
  """config.json as a locked ConfigDict with the training config's field types.

  A custom rung's mixer is code: CheckpointError unless `trust_code` and its file is the one
  mixer.json recorded (see the module docstring)."""
  raw = _read_json(workdir, CONFIG_FILE)
  try:
    config = config_lib.get_config(raw["rung"])
    with config.unlocked():
      _merge(config, raw, "")
  except (KeyError, TypeError, ValueError) as e:
    if isinstance(e, ladder.ConfigError):
      raise
    raise CheckpointError(
      f"{epath.Path(workdir) / CONFIG_FILE}: not a training config ({type(e).__name__}: {e})"
    ) from None
  if config.rung == ladder.CUSTOM:
    with config.unlocked():
      _trusted_mixer(workdir, config, trust_code)
  return config


def _merge(target, raw, prefix):
  for key, value in raw.items():
    if key not in target:
      raise KeyError(f"{prefix}{key}")
    if isinstance(target[key], ml_collections.ConfigDict):
      _merge(target[key], value, f"{prefix}{key}.")
    else:
      target[key] = tuple(value) if isinstance(value, list) else value


def read_task(workdir):
  """task.json as a Dataset with no examples: its encode / decode and sizes."""
  raw = _read_json(workdir, TASK_FILE)
  return data.Dataset(
    source=(),
    vocab_size=int(raw["vocab_size"]),
    seq_len=int(raw["seq_len"]),
    spec=raw["spec"],
    split="test",
    chars=raw.get("chars"),
    tokenizer=bpe.from_json((epath.Path(workdir) / raw["tokenizer"]).read_text())
    if raw.get("tokenizer")
    else None,
  )


def _read_json(workdir, name):
  path = epath.Path(workdir) / name
  if not path.exists():
    raise CheckpointError(
      f"--workdir={workdir}: no {name}; not a training run's workdir (or one from before "
      f"runs wrote {name}: train it again)"
    )
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{path}: not valid JSON ({e})") from None


@dataclasses.dataclass(frozen=True)
class Run:
  """A trained run read back from its workdir."""

  config: ml_collections.ConfigDict  # as trained (sizes resolved)
  text: data.Dataset  # the task's sizes, encode and decode (no examples)
  model: nn.Module
  params: Any
  step: int  # the checkpoint's step


def abstract_params(model, seq_len):
  """ShapeDtypeStructs of `model`'s unboxed params (nothing is computed)."""
  tokens = jax.ShapeDtypeStruct((1, seq_len), jnp.int32)
  shapes = jax.eval_shape(lambda t: model.init(jax.random.key(0), t)["params"], tokens)
  return nn.meta.unbox(shapes)


def restore_params(workdir, config, target):
  """(step, params) of the newest checkpoint that verifies, reading only the params.

  `target`: the params' ShapeDtypeStructs (with shardings, or none for the first device).
  The checkpoint must have been written for `config` (its fingerprint).
  """
  directory = checkpoint_dir(workdir)
  reader = Checkpointer(
    directory, read_only=True, fingerprint=program_lib.fingerprint(config), max_to_keep=None
  )
  try:
    restored = reader.restore_latest({"params": target})
  finally:
    reader.close()
  if restored is None:
    raise CheckpointError(f"--workdir={workdir}: no checkpoint in {directory}; train first")
  step, state, _ = restored
  return step, state["params"]


def load(workdir, trust_code=False):
  """The trained run in `workdir`: config, task, model and the newest verified params.

  trust_code: needed for a custom rung, whose mixer file is imported (see read_config)."""
  config = read_config(workdir, trust_code)
  text = read_task(workdir)
  model = ladder.build(config.rung, config.model)
  step, params = restore_params(workdir, config, abstract_params(model, text.seq_len))
  return Run(config=config, text=text, model=model, params=params, step=step)
