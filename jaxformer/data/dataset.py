"""`get_dataset(spec, split)`: a task spec -> a prepared, cached, random-access dataset.

The first call for a spec generates both splits and writes them with TFDS into
`<data_dir>/<task>-<hash>`, where the hash is of the canonical spec (plus, for `text`,
the files' paths, sizes and mtimes); every later call, in any process, only opens the
files. data_dir defaults to $JAXFORMER_DATA_DIR, else ~/.cache/jaxformer.
"""

import dataclasses
import hashlib
import os
import sys
from typing import Any

import numpy as np

from jaxformer import files
from jaxformer.data import bpe, catalog, tasks, text, tfds_builder
from jaxformer.data.spec import NO_TOKENIZER, DataError, check_tokens, format_spec, parse_spec

DEFAULT_DATA_DIR = os.path.join("~", ".cache", "jaxformer")
# 'validation' names the held-out split too, for the text tasks' habit; it is 'test'.
SPLIT_ALIASES = {"train": "train", "test": "test", "validation": "test"}


@dataclasses.dataclass(frozen=True)
class Dataset:
  """One split of a prepared task.

  `source[i]` is a dict of int32 [seq_len] arrays `inputs`, `targets`, `mask`;
  `source.__getitems__(indices)` reads many at once (what the Loader uses).
  """

  source: Any
  vocab_size: int
  seq_len: int
  spec: str  # canonical
  split: str  # 'train' or 'test'
  chars: str | None = None  # the alphabet of char-level text: id i is chars[i]
  path: str = ""  # the prepared directory
  tokenizer: Any = None  # a BPE-level text task's tokenizers.Tokenizer (jaxformer.data.bpe)
  # text tasks: the bytes of text per token over the split (None: not recorded)
  bytes_per_token: float | None = None

  def __len__(self) -> int:
    return len(self.source)

  @property
  def is_text(self) -> bool:
    """A text task (char or byte level): its ids encode and decode text."""
    return self.spec.startswith(("text:", "catalog:"))

  def decode(self, ids) -> str:
    """Token ids -> text, for the text tasks (char or byte level)."""
    ids = np.asarray(ids).reshape(-1)
    check_tokens(ids, self.vocab_size, field="decode")
    if self.tokenizer is not None:
      return bpe.decode(self.tokenizer, ids)
    if self.chars is not None:
      return "".join(self.chars[i] for i in ids)
    if self.is_text:
      return bytes(ids.astype(np.uint8).tolist()).decode("utf-8", errors="replace")
    raise DataError(f"decode: {self.spec} is not a text task; its ids are not characters")

  def encode(self, text: str, field: str = "encode") -> np.ndarray:
    """Text -> int32 ids [N], for the text tasks: char level maps each character to its id in
    the alphabet (one outside it is an error naming `field`), byte level takes UTF-8 bytes,
    BPE level the tokenizer's ids."""
    if self.tokenizer is not None:
      return bpe.encode(self.tokenizer, text)
    if self.chars is not None:
      index = {c: i for i, c in enumerate(self.chars)}
      unknown = [c for c in text if c not in index]
      if unknown:
        raise DataError(
          f"{field}: character {unknown[0]!r} is not in the task's alphabet of "
          f"{len(self.chars)} characters"
        )
      return np.array([index[c] for c in text], dtype=np.int32)
    if self.is_text:
      ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)
      check_tokens(ids, self.vocab_size, field=field)
      return ids
    raise DataError(f"{field}: {self.spec} is not a text task; give token ids instead of text")


def data_root(data_dir: str | None = None) -> str:
  root = data_dir or os.environ.get("JAXFORMER_DATA_DIR") or DEFAULT_DATA_DIR
  return os.path.abspath(os.path.expanduser(root))


def cache_key(name: str, params: dict[str, Any]) -> str:
  identity = format_spec(name, params)
  if name == "text":
    identity += "\n" + text.fingerprint(params["path"])
    if params["tokenizer"] != NO_TOKENIZER:
      identity += "\n" + bpe.fingerprint(params["tokenizer"])
  return f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def _build(name: str, params: dict[str, Any], root: str):
  """(arrays per split, metadata), every token id checked against the vocabulary."""
  if name in tasks.GENERATORS:
    arrays = {s: tasks.generate(name, params, s) for s in tfds_builder.SPLITS}
    meta = {"vocab_size": params["vocab_size"], "chars": None}
  elif name == "text":
    arrays, meta = text.build(params)
  else:
    arrays, meta = catalog.build(params, os.path.join(root, "tfds"))
  for split, a in arrays.items():
    for field in ("inputs", "targets"):
      check_tokens(a[field], meta["vocab_size"], field=f"{name}.{split}.{field}")
  return arrays, meta


def _check_writable(root: str, data_dir: str | None) -> None:
  """Before generating anything: the prepared files need a directory we can write."""
  try:
    files.ensure_writable_dir(root)
  except OSError as e:
    env = os.environ.get("JAXFORMER_DATA_DIR")
    given = (
      f"data_dir={data_dir}"
      if data_dir
      else (f"JAXFORMER_DATA_DIR={env}" if env else f"data_dir (default {DEFAULT_DATA_DIR})")
    )
    raise DataError(
      f"{given}: cannot write prepared data to {root} ({e.strerror or e}); "
      "choose a writable directory"
    ) from None


def get_dataset(spec: str, split: str, data_dir: str | None = None) -> Dataset:
  """Prepares `spec` once (both splits) and returns the requested split.

  split: 'train', or 'test' (alias 'validation'). Raises DataError naming the field
  for a bad spec, missing or empty text, or token ids outside the vocabulary.
  """
  name, params = parse_spec(spec)
  if split not in SPLIT_ALIASES:
    raise DataError(f"split={split!r}: expected one of {', '.join(SPLIT_ALIASES)}")
  split = SPLIT_ALIASES[split]
  canonical = format_spec(name, params)
  root = data_root(data_dir)
  path = os.path.join(root, cache_key(name, params))
  if tfds_builder.is_prepared(path):
    problem = tfds_builder.verify(path)
    if problem is not None:  # the spec is known: the data can be prepared again
      print(
        f"warning: prepared data in {path} is damaged ({problem}); preparing it again",
        file=sys.stderr,
        flush=True,
      )
      _check_writable(root, data_dir)
      tfds_builder.discard(path)
  if not tfds_builder.is_prepared(path):
    _check_writable(root, data_dir)
    arrays, meta = _build(name, params, root)
    extra = {}
    if meta.get("tokenizer") is not None:  # a BPE: kept beside the data, as one json file
      extra[bpe.FILE] = meta["tokenizer"].to_str()
      meta = {**meta, "tokenizer": bpe.FILE}
    meta = {**meta, "spec": canonical, "seq_len": params["seq_len"]}
    tfds_builder.prepare(path, arrays, meta, files=extra)
  try:
    meta = tfds_builder.read_metadata(path)
    if meta["spec"] != canonical:
      raise DataError(f"data_dir={path}: holds {meta['spec']}, not {canonical}")
    source = tfds_builder.load(path, meta["seq_len"]).as_data_source(split)
  except DataError:
    raise
  except Exception as e:  # damaged after the check above: TFDS / JSON errors name no path
    raise DataError(
      f"data_dir={path}: prepared data unreadable ({type(e).__name__}: "
      f"{str(e).strip().splitlines()[0][:120] if str(e).strip() else ''}); delete that "
      "directory to prepare it again"
    ) from e
  return Dataset(
    source=source,
    vocab_size=int(meta["vocab_size"]),
    seq_len=int(meta["seq_len"]),
    spec=canonical,
    split=split,
    chars=meta.get("chars"),
    path=path,
    tokenizer=_tokenizer(path, meta),
    bytes_per_token=_bytes_per_token(meta, split),
  )


def _tokenizer(path: str, meta: dict[str, Any]):
  if not meta.get("tokenizer"):
    return None
  with open(os.path.join(path, meta["tokenizer"])) as f:
    return bpe.from_json(f.read())


def _bytes_per_token(meta: dict[str, Any], split: str) -> float | None:
  tokens, size = meta.get("tokens") or {}, meta.get("bytes") or {}
  if not tokens.get(split):
    return None
  return size[split] / tokens[split]
