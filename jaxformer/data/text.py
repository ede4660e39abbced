"""Byte- or char-level language modelling over local text files.

The files a path or glob names are read in sorted order and concatenated into one token
stream; its last `val_fraction` is held out as the test split (nanoGPT's split). Each
example is one window of seq_len + 1 tokens (inputs = window[:-1], targets =
window[1:]), windows start every `stride` tokens, and every position is scored.

Byte level has a fixed vocabulary of 256 ids; char level numbers the distinct
characters of the whole corpus in sorted order (both splits, so ids agree), and the
dataset keeps that alphabet to decode samples.
"""

import glob
import hashlib
import os
from typing import Any

import numpy as np

from jaxformer.data.spec import DataError, check_tokens


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
    """The text task: (examples per split, metadata with vocab_size and alphabet)."""
    path, level = params["path"], params["level"]
    parts = []
    for p in resolve_paths(path):
        with open(p, "rb") as f:
            parts.append(f.read())
    data = b"".join(parts)
    if not data:
        raise DataError(f"text.path={path}: the matched files are empty")
    ids, alphabet = encode(data, level, field=f"text.path={path}")
    vocab_size = vocab_for(ids, level, alphabet, params, "text")
    n_test = max(1, int(round(len(ids) * params["val_fraction"])))
    streams = {"train": ids[: len(ids) - n_test], "test": ids[len(ids) - n_test :]}
    return split_examples(streams, params, "text"), {"vocab_size": vocab_size, "chars": alphabet}
