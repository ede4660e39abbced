"""A directory of finished sweeps, so that a long run stopped or crashed part-way resumes.

`sweep.train(config, replicas, store=DIR)` looks here first: a sweep already trained with
the same inputs is read back instead of trained again, and a sweep that finishes is written
here before `train` returns. Nothing else changes: the result read back is the one that was
written (runs, trained params, chance, timings), with the config resolved afresh.

The key of a sweep is a hash of everything its numbers depend on:
  - the resolved training config (model sized from the task) and the replicas;
  - the prepared datasets' identities (their directory names hash the task spec and, for
    text, the files' paths, sizes and mtimes: jaxformer.data.dataset);
  - the source of the jaxformer package (every .py file training can run: jaxformer/analysis/,
    probes of trained models, is left out), jax's version, the backend and the device count:
    a change to the library's training code is a new key, never a stale hit.

Each entry is a directory `<key>/` holding `sweep.json` (runs and scalars), `params.npz`
(each trained leaf stacked over replicas, saved and loaded without pickle) and, for a sweep
that a longer one can continue (a "wsd" schedule: sweep.Continuation), `continuation.npz`
(each leaf of the training state at that step, stacked over replicas) with its rows in
sweep.json,
written under a temporary name and renamed when complete, so a crash mid-write leaves no
entry. A sweep that cannot be stored (params whose leaves are not plain numeric arrays, a
full disk) is still returned, and `sweep.train` logs why it was not stored; it trains again
on resume.

A sweep part-way is not lost either: every sweep.CHECKPOINT_SECONDS of training `sweep.train`
writes `<key>.partial/` (the training state of every replica at an evaluation, with its
losses, evaluations and flags: a sweep.Continuation), replacing the one before; the same call
after a crash or a stop resumes there and ends as the uninterrupted run would, and the
checkpoint goes once the finished sweep is stored.
"""

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile

import jax
import numpy as np

from jaxformer.mixers import plug

FORMAT = 1
_PARAMS = "params.npz"
_CONTINUATION = "continuation.npz"
_META = "sweep.json"
# SweepResult's fields kept as they are in sweep.json (beside its runs and params)
_SCALARS = ("chance", "chance_rule", "compile_seconds", "train_seconds", "steps")


# Code no sweep runs: probes of trained models (nothing under jaxformer/ that training imports
# imports it; tests/train/test_sweep_store.py checks), left out so that adding a probe keeps a
# long run's finished sweeps.
NOT_TRAINING = ("analysis",)


@functools.cache
def library_fingerprint():
  """sha256 over the jaxformer package's .py files that training can run (relative path and
  bytes, sorted; NOT_TRAINING left out)."""
  return source_fingerprint(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def source_fingerprint(root):
  """sha256 over the .py files under `root` but its NOT_TRAINING folders."""
  h = hashlib.sha256()
  for dirpath, dirnames, filenames in os.walk(root):
    if dirpath == root:
      dirnames[:] = [d for d in dirnames if d not in NOT_TRAINING]
    dirnames.sort()
    for name in sorted(filenames):
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
          h.update(f.read())
        h.update(b"\0")
  return h.hexdigest()


def key(config, replicas, datasets, keep_params=True):
  """The hex key of a sweep: `config` resolved, `replicas` (sweep.Replica), `datasets` the
  prepared splits it reads, whether its params are kept; None when a dataset has no prepared
  directory (not storable)."""
  if any(not ds.path for ds in datasets):
    return None
  identity = {
    "format": FORMAT,
    "config": json.loads(config.to_json_best_effort(sort_keys=True)),
    "replicas": [dataclasses.astuple(r) for r in replicas],
    "keep_params": bool(keep_params),
    "datasets": [[os.path.basename(os.path.normpath(ds.path)), ds.split] for ds in datasets],
    "library": library_fingerprint(),
    "jax": jax.__version__,
    "backend": jax.default_backend(),
    "devices": jax.device_count(),
  }
  mixer = config.get("model", {}).get("mixer")
  if mixer:  # a user's mixer: its code is not the library's, so its file's hash keys the sweep
    identity["mixer_sha256"] = plug.source(mixer)["sha256"]
  text = json.dumps(identity, sort_keys=True, default=repr)
  return hashlib.sha256(text.encode()).hexdigest()[:32]


def _flatten(params):
  """{'a/b/c': array} of a nested dict of arrays, or None when it is not one."""
  out = {}

  def walk(node, prefix):
    if isinstance(node, dict):
      for k, v in node.items():
        if not isinstance(k, str) or "/" in k:
          return False
        if not walk(v, f"{prefix}{k}/"):
          return False
      return True
    array = np.asarray(node)
    if array.dtype.kind not in "biuf" or array.dtype.type.__module__ != "numpy":
      return False
    out[prefix[:-1]] = array
    return True

  return out if isinstance(params, dict) and walk(params, "") else None


def _unflatten(flat):
  tree = {}
  for path, value in flat.items():
    node = tree
    *parents, leaf = path.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = value
  return tree


def load(directory, key_):
  """The stored entry's fields for SweepResult but config, with each run as the dict of its
  fields (sweep.Run(**run)), or None if absent."""
  entry = os.path.join(directory, key_)
  if not os.path.isfile(os.path.join(entry, _META)):
    return None
  with open(os.path.join(entry, _META)) as f:
    meta = json.load(f)
  params = None
  if meta["has_params"]:
    with np.load(os.path.join(entry, _PARAMS), allow_pickle=False) as z:
      params = _unflatten({k: z[k] for k in z.files})
  runs = [r | {"evals": [tuple(e) for e in r["evals"]]} for r in meta["runs"]]
  continuation = meta.get("continuation")
  if continuation is not None:
    continuation = _read_continuation(entry, continuation)
  return {
    "runs": runs,
    "params": params,
    "continuation": continuation,
    "first_step": meta.get("first_step", 0),
  } | {k: meta[k] for k in _SCALARS}


def _continuation_parts(c):
  """(its JSON fields, {leaf_j: the state's leaf j stacked over replicas}) of a
  sweep.Continuation."""
  rows = list(c.rows.items())
  state = {
    f"leaf_{j}": np.stack([row["state"][j] for _, row in rows])
    for j in range(len(rows[0][1]["state"]))
  }
  meta = {
    "step": c.step,
    "basis": c.basis,
    "rows": [
      {"replica": dataclasses.astuple(r)} | {k: v for k, v in row.items() if k != "state"}
      for r, row in rows
    ],
  }
  return meta, state


def _read_continuation(entry, meta):
  """A continuation's fields with its rows [(replica tuple, row with its state leaves)], read
  from `entry`'s continuation.npz."""
  with np.load(os.path.join(entry, _CONTINUATION), allow_pickle=False) as z:
    leaves = [z[f"leaf_{j}"] for j in range(len(z.files))]
  rows = []
  for i, row in enumerate(meta["rows"]):
    replica = tuple(row.pop("replica"))
    row["evals"] = [tuple(e) for e in row["evals"]]
    rows.append((replica, row | {"state": [x[i] for x in leaves]}))
  return meta | {"rows": rows}


def save(directory, key_, result):
  """Writes `result` (a SweepResult) as entry `key_`. Returns None when written, else why not
  (params that cannot be stored without pickle, an OSError): nothing is left behind then."""
  flat = None
  if result.params is not None:
    flat = _flatten(jax.tree.map(np.asarray, result.params))
    if flat is None:
      return "its params are not plain numeric arrays"
  meta = {
    "format": FORMAT,
    "runs": [dataclasses.asdict(r) for r in result.runs],
    "has_params": flat is not None,
  } | {k: getattr(result, k) for k in (*_SCALARS, "first_step")}
  state = None
  if result.continuation is not None:
    meta["continuation"], state = _continuation_parts(result.continuation)
  final = os.path.join(directory, key_)
  if os.path.isdir(final):
    return None
  files = {_META: meta}
  if flat is not None:
    files[_PARAMS] = flat
  if state is not None:
    files[_CONTINUATION] = state
  why = _write_dir(directory, key_, files, replace=False)
  if why and os.path.isfile(os.path.join(final, _META)):  # another process stored the same sweep
    return None
  return why


def _write_dir(directory, name, files, *, replace):
  """Writes `files` ({file name: JSON-able object, or {name: array} for a .npz}) as the
  directory `name` under `directory`, whole or not at all: into a scratch directory renamed
  into place. `replace`: an existing `name` is moved aside first and put back if the rename
  fails; else the rename fails on it. Returns None when written, else why not."""
  final = os.path.join(directory, name)
  scratch = old = None
  try:
    os.makedirs(directory, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{name}.", dir=directory)
    for file, content in files.items():
      path = os.path.join(scratch, file)
      if file.endswith(".npz"):
        np.savez(path, **content)
      else:
        with open(path, "w") as f:
          json.dump(content, f)
    if replace and os.path.isdir(final):
      old = tempfile.mkdtemp(prefix=f".{name}.old.", dir=directory)
      os.rename(final, os.path.join(old, "entry"))
    os.rename(scratch, final)
  except OSError as e:
    if old is not None and not os.path.isdir(final):  # the one before, back in its place
      os.rename(os.path.join(old, "entry"), final)
    return f"{type(e).__name__}: {e}"
  finally:
    for path in (scratch, old):
      if path is not None and os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
  return None


# A sweep part-way: `<key>.partial/` holds its latest checkpoint (sweep.train writes one every
# CHECKPOINT_SECONDS of training, and removes it once the finished sweep is stored).
PARTIAL = ".partial"
_PARTIAL_META = "partial.json"


def save_partial(directory, key_, continuation, fields):
  """Writes the checkpoint of sweep `key_`: every replica at `continuation.step` (a
  sweep.Continuation) and `fields` (JSON: what the finished result needs from before it),
  replacing the one before. Returns None when written, else why not (nothing is lost then:
  the checkpoint before stays)."""
  meta, state = _continuation_parts(continuation)
  files = {
    _CONTINUATION: state,
    _PARTIAL_META: {"format": FORMAT, "continuation": meta, "fields": fields},
  }
  return _write_dir(directory, key_ + PARTIAL, files, replace=True)


def load_partial(directory, key_):
  """(the continuation's fields with its rows, as `load` gives them; the saved `fields`) of
  sweep `key_`'s checkpoint, or None if it has none."""
  entry = os.path.join(directory, key_ + PARTIAL)
  if not os.path.isfile(os.path.join(entry, _PARTIAL_META)):
    return None
  with open(os.path.join(entry, _PARTIAL_META)) as f:
    meta = json.load(f)
  return _read_continuation(entry, meta["continuation"]), meta["fields"]


def drop_partial(directory, key_):
  """Removes sweep `key_`'s checkpoint (its finished entry is stored)."""
  shutil.rmtree(os.path.join(directory, key_ + PARTIAL), ignore_errors=True)
