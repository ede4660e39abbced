"""Byte- or char-level language modelling over local text files.

The files a path or glob names are read in sorted order and concatenated into one token
stream (a file whose name ends in .gz is read decompressed: a pinned corpus can ship small);
its last `val_fraction` is held out as the test split (nanoGPT's split). Each example is one
window of seq_len + 1 tokens (inputs = window[:-1], targets = window[1:]), windows start
every `stride` tokens, and every position is scored.

Byte level has a fixed vocabulary of 256 ids; char level numbers the distinct
characters of the whole corpus in sorted order (both splits, so ids agree), and the
dataset keeps that alphabet to decode samples. BPE level (jaxformer.data.bpe) splits the
text on characters, learns a byte-level BPE of `vocab_size` ids on the train split (or reads
the one `tokenizer` names, e.g. GPT-2's files) and keeps it beside the prepared data.
"""

import glob
import gzip
import hashlib
import os
import zlib
from typing import Any

import numpy as np

from jaxformer.data import bpe
from jaxformer.data.spec import NO_TOKENIZER, DataError, check_tokens


def resolve_paths(path: str) -> list[str]:
  """A file, a directory (its files, recursively) or a glob -> sorted file paths."""
  expanded = os.path.expanduser(path)
  if os.path.isdir(expanded):
    expanded = os.path.join(expanded, "**", "*")
  files = sorted(p for p in glob.glob(expanded, recursive=True) if os.path.isfile(p))
  if not files:
    raise DataError(f"text.path={path}: no file matches")
  return [os.path.abspath(p) for p in files]


def fingerprint(path: str) -> str:
  """Names the corpus contents for the cache key (paths, sizes, mtimes): an edited or
  added file gives a new key and is prepared again."""
  h = hashlib.sha256()
  for p in resolve_paths(path):
    st = os.stat(p)
    h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
  return h.hexdigest()


def read(path: str) -> bytes:
  """The bytes of the corpus `path` names: its files in sorted order, each .gz decompressed."""
  parts = []
  for p in resolve_paths(path):
    with open(p, "rb") as f:
      data = f.read()
    if p.endswith(".gz"):
      try:
        data = gzip.decompress(data)
      except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"text.path={path}: {p} is not a readable gzip file ({e})") from None
    parts.append(data)
  return b"".join(parts)


def encode(text: bytes | str, level: str, field: str) -> tuple[np.ndarray, str | None]:
  """Text -> (int32 ids, alphabet or None). Char level needs valid UTF-8."""
  if level == "byte":
    data = text.encode() if isinstance(text, str) else text
    return np.frombuffer(data, dtype=np.uint8).astype(np.int32), None
  if isinstance(text, bytes):
    try:
      text = text.decode("utf-8")
    except UnicodeDecodeError as e:
      raise DataError(f"{field}: not valid UTF-8 ({e}); use level=byte") from None
  points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
  alphabet = np.unique(points)
  ids = np.searchsorted(alphabet, points).astype(np.int32)
  return ids, "".join(map(chr, alphabet))


def windows(ids: np.ndarray, seq_len: int, stride: int) -> dict[str, np.ndarray]:
  """Windows of seq_len + 1 tokens every `stride` tokens -> [N, L] examples."""
  starts = np.arange(0, len(ids) - seq_len, stride)  # the window needs seq_len + 1 ids
  window = ids[starts[:, None] + np.arange(seq_len + 1)]  # [N, L + 1]
  return {
    "inputs": np.ascontiguousarray(window[:, :-1]),
    "targets": np.ascontiguousarray(window[:, 1:]),
    "mask": np.ones((len(starts), seq_len), dtype=np.int32),
  }


def vocab_for(ids: np.ndarray, level: str, alphabet: str | None, params, name: str) -> int:
  """The vocabulary size: what the level needs, or the user's, checked against the ids."""
  needed = 256 if level == "byte" else len(alphabet)
  vocab_size = params["vocab_size"] or needed
  check_tokens(ids, vocab_size, field=f"{name}.vocab_size={vocab_size}")
  return vocab_size


def split_examples(
  streams: dict[str, np.ndarray], params: dict[str, Any], name: str
) -> dict[str, dict[str, np.ndarray]]:
  """Per-split token streams -> per-split window arrays, each split non-empty."""
  out = {}
  for split, ids in streams.items():
    if len(ids) < params["seq_len"] + 1:
      raise DataError(
        f"{name}.seq_len={params['seq_len']}: the {split} split has only {len(ids)} "
        f"tokens, fewer than one example of seq_len + 1"
      )
    out[split] = windows(ids, params["seq_len"], params["stride"])
  return out


def build(params: dict[str, Any]) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
  """The text task: (examples per split, metadata with vocab_size, alphabet and, for level=bpe,
  the tokenizer object under 'tokenizer')."""
  path, level = params["path"], params["level"]
  data = read(path)
  if not data:
    raise DataError(f"text.path={path}: the matched files are empty")
  if level == "bpe":
    return _build_bpe(data, params)
  ids, alphabet = encode(data, level, field=f"text.path={path}")
  vocab_size = vocab_for(ids, level, alphabet, params, "text")
  n_test = max(1, int(round(len(ids) * params["val_fraction"])))
  streams = {"train": ids[: len(ids) - n_test], "test": ids[len(ids) - n_test :]}
  meta = {"vocab_size": vocab_size, "chars": alphabet, "tokens": {}, "bytes": {}}
  for split, split_ids in streams.items():
    meta["tokens"][split] = len(split_ids)
    meta["bytes"][split] = (
      len(split_ids) if alphabet is None else len("".join(alphabet[i] for i in split_ids).encode())
    )
  return split_examples(streams, params, "text"), meta


def _build_bpe(data: bytes, params: dict[str, Any]):
  """level=bpe: the split is made on characters (the test split holds the same text as at char
  level), the BPE is learned on the train split only (or read from `tokenizer`)."""
  path = params["path"]
  try:
    corpus = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(f"text.path={path}: not valid UTF-8 ({e}); use level=byte") from None
  n_test = max(1, int(round(len(corpus) * params["val_fraction"])))
  split_text = {"train": corpus[: len(corpus) - n_test], "test": corpus[len(corpus) - n_test :]}
  if params["tokenizer"] == NO_TOKENIZER:
    tok = bpe.train([split_text["train"]], params["vocab_size"])
    needed = params["vocab_size"]
  else:
    tok = bpe.load(params["tokenizer"])
    needed = bpe.vocab_size(tok)
  vocab_size = params["vocab_size"] or needed
  streams = {split: bpe.encode(tok, t) for split, t in split_text.items()}
  for split, ids in streams.items():
    check_tokens(ids, vocab_size, field=f"text.vocab_size={vocab_size} ({split} split)")
  meta = {
    "vocab_size": vocab_size,
    "chars": None,
    "tokenizer": tok,
    "bytes": {split: len(t.encode("utf-8")) for split, t in split_text.items()},
    "tokens": {split: len(ids) for split, ids in streams.items()},
  }
  return split_examples(streams, params, "text"), meta
