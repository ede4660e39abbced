"""The text task: files -> byte/char windows, split, alphabet, and its errors."""

import gzip
import os

import numpy as np
import pytest

from jaxformer.data import DataError, get_dataset, parse_spec
from jaxformer.data import text as text_lib

CORPUS_A = "hello world\nthe quick brown fox\n" * 5
CORPUS_B = "jumps over the lazy dog, ünïcödé\n" * 5


@pytest.fixture
def corpus(tmp_path):
  d = tmp_path / "corpus"
  d.mkdir()
  (d / "b.txt").write_text(CORPUS_B, encoding="utf-8")
  (d / "a.txt").write_text(CORPUS_A, encoding="utf-8")
  return d


def build(spec):
  return text_lib.build(parse_spec(spec)[1])


def test_byte_level_windows_split_and_order(corpus):
  arrays, meta = build(f"text:path={corpus}/*.txt,seq_len=8,val_fraction=0.2")
  ids = np.frombuffer((CORPUS_A + CORPUS_B).encode(), np.uint8)  # sorted: a.txt, b.txt
  n_test = round(len(ids) * 0.2)
  train, test = ids[:-n_test], ids[-n_test:]
  assert meta["vocab_size"] == 256 and meta["chars"] is None
  assert meta["tokens"] == meta["bytes"] == {"train": len(train), "test": len(test)}
  for split, stream in (("train", train), ("test", test)):
    a = arrays[split]
    assert a["inputs"].shape == ((len(stream) - 9) // 8 + 1, 8)
    np.testing.assert_array_equal(a["inputs"][3], stream[24:32])
    np.testing.assert_array_equal(a["targets"][3], stream[25:33])
    assert np.all(a["mask"] == 1)


def test_char_level_alphabet_and_decode(corpus, tmp_path):
  spec = f"text:path={corpus},level=char,seq_len=16,stride=4"
  arrays, meta = build(spec)
  assert meta["chars"] == "".join(sorted(set(CORPUS_A + CORPUS_B)))
  assert meta["vocab_size"] == len(meta["chars"])
  ds = get_dataset(spec, "validation", data_dir=str(tmp_path / "cache"))
  assert ds.split == "test" and ds.vocab_size == len(meta["chars"])
  first = ds.decode(ds.source[0]["inputs"]) + ds.decode(ds.source[0]["targets"][-1:])
  assert first in CORPUS_A + CORPUS_B and len(first) == 17
  train = get_dataset(spec, "train", data_dir=str(tmp_path / "cache"))
  assert train.decode(train.source[1]["inputs"]) == (CORPUS_A + CORPUS_B)[4:20]


def test_a_gzip_file_reads_as_its_text(corpus, tmp_path):
  (corpus / "b.txt").unlink()
  (corpus / "b.txt.gz").write_bytes(gzip.compress(CORPUS_B.encode(), mtime=0))
  arrays, meta = build(f"text:path={corpus},level=char,seq_len=16,stride=4,val_fraction=0.2")
  plain = tmp_path / "plain"
  plain.mkdir()
  (plain / "a.txt").write_text(CORPUS_A, encoding="utf-8")
  (plain / "b.txt").write_text(CORPUS_B, encoding="utf-8")
  expected, expected_meta = build(
    f"text:path={plain},level=char,seq_len=16,stride=4,val_fraction=0.2"
  )
  assert meta == expected_meta
  for split in ("train", "test"):
    for field in ("inputs", "targets", "mask"):
      np.testing.assert_array_equal(arrays[split][field], expected[split][field])


def test_an_edited_file_is_prepared_again(corpus, tmp_path):
  spec = f"text:path={corpus}/a.txt,seq_len=8"
  first = get_dataset(spec, "train", data_dir=str(tmp_path / "cache"))
  (corpus / "a.txt").write_text(CORPUS_A + "more text, another line\n", encoding="utf-8")
  os.utime(corpus / "a.txt", ns=(1, 1))
  second = get_dataset(spec, "train", data_dir=str(tmp_path / "cache"))
  assert second.path != first.path and len(second) > len(first)


@pytest.mark.parametrize(
  "make, params, starts",
  [
    (None, "path={d}/none*.txt", "text.path={d}/none*.txt: no file matches"),
    ("empty", "path={d}/empty.txt", "text.path={d}/empty.txt: the matched files are empty"),
    ("short", "path={d}/short.txt,seq_len=64", "text.seq_len=64: the train split has only"),
    ("latin1", "path={d}/latin1.txt,level=char", "text.path={d}/latin1.txt: not valid UTF-8"),
    ("utf8", "path={d}/utf8.txt,vocab_size=128", "text.vocab_size=128: token id 195"),
    (
      "bad.txt",
      "path={d}/bad.txt.gz",
      "text.path={d}/bad.txt.gz: {d}/bad.txt.gz is not a readable gzip",
    ),
  ],
)
def test_bad_text_input_names_the_field(tmp_path, make, params, starts):
  contents = {"empty": b"", "short": b"x" * 40, "latin1": b"caf\xe9 " * 20}
  contents["utf8"] = "café ".encode() * 20
  contents["bad.txt"] = gzip.compress(b"x" * 200)[:20]  # cut short
  if make:
    name = f"{make}.gz" if make == "bad.txt" else f"{make}.txt"
    (tmp_path / name).write_bytes(contents[make])
  with pytest.raises(DataError) as info:
    get_dataset("text:" + params.format(d=tmp_path), "train", data_dir=str(tmp_path / "c"))
  assert str(info.value).startswith(starts.format(d=tmp_path)), str(info.value)
