"""One TFDS builder that writes a prepared task into array_record files.

Every task, synthetic or text, ends as int32 arrays per split; this builder writes them
with TFDS (no TensorFlow needed: `GeneratorBasedBuilder` + `file_format='array_record'`)
so that reading is TFDS's random-access `as_data_source()`. Each spec gets its own
directory, so the builder has one name and no configs; the spec, vocabulary size and
alphabet travel in the dataset's `metadata.json`.

Two processes may prepare the same spec at once (every host of a multi-host run calls
`get_dataset`): each writes into its own temporary directory and renames it into place;
the rename is atomic, the first one wins and the others discard their copy.

Every prepared directory also holds `jaxformer_files.json`, the sha256 of each file written,
so that damage at rest (a flipped byte, a truncated file, a cut-short metadata.json) is found
when the data is opened (`verify`), before a read deep inside training fails without a path.
"""

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import time
import uuid
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

FEATURES = ("inputs", "targets", "mask")
CHECKSUMS = "jaxformer_files.json"
_VERIFIED = {}  # path -> (file, size, mtime) of every file, as this process verified them
SPLITS = ("train", "test")


class JaxformerTask(tfds.core.GeneratorBasedBuilder):
  """Examples of one jaxformer task spec; built with the arrays, read with none."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "inputs, targets, mask as int32 [seq_len]"}

  def __init__(self, *, seq_len: int, arrays=None, metadata=None, **kwargs):
    self._seq_len = seq_len
    self._arrays = arrays or {}
    self._metadata = metadata or {}
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    token = lambda: tfds.features.Tensor(shape=(self._seq_len,), dtype=np.int32)  # noqa: E731
    return tfds.core.DatasetInfo(
      builder=self,
      description="A jaxformer task; see metadata['spec'].",
      features=tfds.features.FeaturesDict({k: token() for k in FEATURES}),
      # Keep generation order: example i of the generator is source[i].
      disable_shuffling=True,
      metadata=tfds.core.MetadataDict(self._metadata),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download: the arrays are given
    return {split: self._generate_examples(self._arrays[split]) for split in SPLITS}

  def _generate_examples(self, arrays: dict[str, np.ndarray]):
    for i in range(len(arrays["inputs"])):
      yield i, {k: arrays[k][i] for k in FEATURES}


def is_prepared(path: str) -> bool:
  return os.path.isdir(path)  # only ever created by the atomic rename below


def prepare(
  path: str,
  arrays: dict[str, dict[str, np.ndarray]],
  metadata: dict[str, Any],
  files: dict[str, str] | None = None,
) -> None:
  """Writes both splits under `path` (temp dir + atomic rename; the first one wins), and
  `files` (name -> text, e.g. a tokenizer) beside them in the same rename."""
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  start = time.perf_counter()
  tmp = os.path.join(parent, f".tmp-{os.path.basename(path)}-{os.getpid()}-{uuid.uuid4().hex}")
  try:
    builder = JaxformerTask(
      seq_len=metadata["seq_len"],
      arrays=arrays,
      metadata=metadata,
      data_dir=tmp,
      file_format="array_record",
    )
    was_active = getattr(tfds.core.utils.tqdm_utils, "_active", True)
    tfds.display_progress_bar(False)
    try:
      # TFDS prints two lines per preparation to stdout, naming the temporary directory;
      # experiments prepare many small specs, so `prepare` logs one line with the final one.
      with contextlib.redirect_stdout(io.StringIO()):
        builder.download_and_prepare()
    finally:
      tfds.display_progress_bar(was_active)
    shutil.rmtree(os.path.join(tmp, "downloads"), ignore_errors=True)
    for name, content in (files or {}).items():
      with open(os.path.join(tmp, name), "w") as f:
        f.write(content)
    with open(os.path.join(tmp, CHECKSUMS), "w") as f:
      json.dump(_file_sums(tmp), f, indent=1, sort_keys=True)
    try:
      os.rename(tmp, path)
    except OSError:
      if not is_prepared(path):  # not a lost race: a real failure
        raise
    took = time.perf_counter() - start
    logging.getLogger(__name__).info("prepared %s in %.1f s: %s", metadata.get("spec"), took, path)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _file_sums(root: str) -> dict[str, str]:
  sums = {}
  for directory, _, names in os.walk(root):
    for name in names:
      full = os.path.join(directory, name)
      rel = os.path.relpath(full, root)
      if rel != CHECKSUMS:
        sums[rel] = _sha256(full)
  return sums


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def verify(path: str) -> str | None:
  """None if every file of the prepared directory `path` has the sha256 recorded when it was
  written; else the first problem, in a few words (checked once per process)."""
  sums_path = os.path.join(path, CHECKSUMS)
  try:
    stamp = _stamp(path)  # any write since the last verification changes a size or mtime
    if _VERIFIED.get(path) == stamp:
      return None
    with open(sums_path) as f:
      sums = json.load(f)
  except FileNotFoundError:
    return f"no {CHECKSUMS} (prepared by an older jaxformer, or cut short)"
  except (OSError, ValueError) as e:
    return f"{CHECKSUMS} unreadable ({type(e).__name__})"
  if not isinstance(sums, dict) or not sums:
    return f"{CHECKSUMS} lists no files"
  for rel, want in sorted(sums.items()):
    full = os.path.join(path, rel)
    try:
      got = _sha256(full)
    except OSError:
      return f"{rel} is missing"
    if got != want:
      return f"{rel} does not match its checksum"
  _VERIFIED[path] = stamp
  return None


def _stamp(root: str):
  out = []
  for directory, _, names in os.walk(root):
    for name in sorted(names):
      st = os.stat(os.path.join(directory, name))
      out.append((directory, name, st.st_size, st.st_mtime_ns))
  if not out:
    raise FileNotFoundError(root)
  return tuple(sorted(out))


def discard(path: str) -> None:
  """Moves a damaged prepared directory out of the way (renamed, then removed), so that it
  can be prepared again; another process doing the same at once is no error."""
  aside = f"{path}.damaged-{os.getpid()}-{uuid.uuid4().hex[:8]}"
  try:
    os.rename(path, aside)
  except FileNotFoundError:
    return
  _VERIFIED.pop(path, None)
  shutil.rmtree(aside, ignore_errors=True)


def load(path: str, seq_len: int) -> JaxformerTask:
  return JaxformerTask(seq_len=seq_len, data_dir=path, file_format="array_record")


def read_metadata(path: str) -> dict[str, Any]:
  """The metadata of a prepared task, read before the builder (which needs seq_len)."""
  version_dir = os.path.join(path, JaxformerTask.name, str(JaxformerTask.VERSION))
  with open(os.path.join(version_dir, "metadata.json")) as f:
    return json.load(f)
