"""Byte-level BPE for the `text` task (`level=bpe`), with Hugging Face `tokenizers`.

  tok = bpe.train(["the text of the train split"], vocab_size=1024)   # offline, deterministic
  tok = bpe.load("gpt2_dir")     # vocab.json + merges.txt, or tokenizer.json (GPT-2's files)
  ids = bpe.encode(tok, "ROMEO:");  bpe.decode(tok, ids)

Byte level (GPT-2's scheme, Radford et al. 2019): text is split by GPT-2's pre-tokenizer regex,
each piece's UTF-8 bytes are mapped to 256 printable symbols, and merges are learned over
those, so every string encodes (no unknown token) and decoding gives the bytes back. A trained
tokenizer has the 256 byte symbols plus up to vocab_size - 256 merges (fewer when the corpus
has no more pairs to merge), no special tokens.

A tokenizer travels as one `tokenizer.json` (FILE): beside the prepared data and in the
workdir, so decoding a run needs neither the corpus nor the tokenizer's source directory.
"""

import hashlib
import os

from jaxformer.data.spec import DataError

FILE = "tokenizer.json"
VOCAB_FILES = ("vocab.json", "merges.txt")  # GPT-2's slow-tokenizer pair
BYTES = 256  # the byte alphabet: the smallest byte-level BPE vocabulary


def train(texts, vocab_size: int):
  """A byte-level BPE of at most `vocab_size` ids learned from `texts` (an iterable of str)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

  if vocab_size < BYTES:
    raise DataError(f"text.vocab_size={vocab_size}: a byte-level BPE needs >= {BYTES}")
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    special_tokens=[],
    show_progress=False,
  )
  tok.train_from_iterator(texts, trainer=trainer)
  return tok


def source_files(path: str) -> list[str] | None:
  """The tokenizer files of `path` (a tokenizer.json, or a directory holding tokenizer.json or
  vocab.json + merges.txt), or None when it holds none."""
  path = os.path.expanduser(path)
  if os.path.isfile(path) and path.endswith(".json"):
    return [path]
  if not os.path.isdir(path):
    return None
  if os.path.isfile(os.path.join(path, FILE)):
    return [os.path.join(path, FILE)]
  pair = [os.path.join(path, name) for name in VOCAB_FILES]
  return pair if all(os.path.isfile(p) for p in pair) else None


def load(path: str, field: str = "text.tokenizer"):
  """The tokenizer at `path` (see source_files); DataError naming `field` if there is none."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers

  found = source_files(path)
  if found is None:
    raise DataError(
      f"{field}={path}: no tokenizer there (expected {FILE}, or {' + '.join(VOCAB_FILES)})"
    )
  try:
    if len(found) == 1:
      return Tokenizer.from_file(found[0])
    tok = Tokenizer(models.BPE.from_file(*found))
  except Exception as e:  # tokenizers raises its own Exception type for a malformed file
    raise DataError(f"{field}={path}: not a readable tokenizer ({e})") from None
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's settings
  tok.decoder = decoders.ByteLevel()
  return tok


def from_json(text: str):
  from tokenizers import Tokenizer

  return Tokenizer.from_str(text)


def fingerprint(path: str) -> str:
  """The tokenizer files' contents, for the prepared data's cache key."""
  h = hashlib.sha256()
  for p in source_files(path) or ():
    with open(p, "rb") as f:
      h.update(f.read())
  return h.hexdigest()


def vocab_size(tok) -> int:
  """Ids the tokenizer can produce: one more than its largest id (special tokens included)."""
  return max(tok.get_vocab(with_added_tokens=True).values()) + 1


def encode(tok, text: str):
  import numpy as np

  return np.asarray(tok.encode(text).ids, dtype=np.int32)


def decode(tok, ids) -> str:
  return tok.decode([int(i) for i in ids], skip_special_tokens=False)
