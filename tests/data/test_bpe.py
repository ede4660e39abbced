"""level=bpe: a byte-level BPE learned on the train split (or GPT-2's files), kept beside the
prepared data and in the workdir, encoding and decoding text."""

import json

import numpy as np
import pytest

from jaxformer.data import DataError, bpe, get_dataset

LINES = [
  "the cat sat on the mat, and the cat saw the hat.",
  "a dog sat on a log; the dog ate the cat's food.",
  "Ünïcödé and émigré café: the naïve façade.",
]
CORPUS = "\n".join(LINES * 12) + "\n"


@pytest.fixture
def corpus(tmp_path):
  path = tmp_path / "corpus.txt"
  path.write_text(CORPUS, encoding="utf-8")
  return path


def test_bpe_level_learns_on_train_and_round_trips(corpus, tmp_path):
  spec = f"text:path={corpus},level=bpe,vocab_size=320,seq_len=16"
  train = get_dataset(spec, "train", data_dir=str(tmp_path / "cache"))
  test = get_dataset(spec, "test", data_dir=str(tmp_path / "cache"))
  assert train.vocab_size == 320 and bpe.vocab_size(train.tokenizer) <= 320
  assert (tmp_path / "cache" / train.path.split("/")[-1] / bpe.FILE).is_file()
  ids = np.concatenate([train.source[i]["inputs"] for i in range(len(train))])
  assert CORPUS.startswith(train.decode(ids))  # disjoint windows: the train text, in order
  assert train.bytes_per_token > 2  # merges learned: fewer tokens than bytes
  text = "the cat sat on the naïve dog"
  assert train.decode(train.encode(text)) == text
  np.testing.assert_array_equal(train.encode(text), test.encode(text))  # one tokenizer
  # the test split is the corpus's last 10% of characters, as at char level
  n_test = round(len(CORPUS) * 0.1)
  test_ids = np.concatenate([test.source[i]["inputs"] for i in range(len(test))])
  assert CORPUS[-n_test:].startswith(test.decode(test_ids))
  char = get_dataset(spec.replace("bpe,vocab_size=320", "char"), "test", str(tmp_path / "cache"))
  assert char.bytes_per_token * n_test == pytest.approx(len(CORPUS[-n_test:].encode()))


def test_a_tokenizer_from_gpt2_files_encodes_as_gpt2_tokenizer_does(corpus, tmp_path):
  transformers = pytest.importorskip("transformers")
  files = tmp_path / "gpt2_tok"
  files.mkdir()
  bpe.train([CORPUS], 300).model.save(str(files))  # vocab.json + merges.txt, GPT-2's layout
  reference = transformers.GPT2Tokenizer(str(files / "vocab.json"), str(files / "merges.txt"))
  ours = bpe.load(str(files))
  for text in ("the cat sat on the mat.", " leading space,  two spaces\nand a newline", "émigré"):
    assert list(bpe.encode(ours, text)) == reference.encode(text)
    assert bpe.decode(ours, bpe.encode(ours, text)) == text
  spec = f"text:path={corpus},level=bpe,tokenizer={files},seq_len=16"
  ds = get_dataset(spec, "train", data_dir=str(tmp_path / "cache"))
  assert ds.vocab_size == len(json.loads((files / "vocab.json").read_text()))


@pytest.mark.parametrize(
  "params, starts",
  [
    ("level=bpe", "text.vocab_size=0: level=bpe learns a BPE"),
    ("level=bpe,vocab_size=100", "text.vocab_size=100: level=bpe learns"),
    ("level=char,tokenizer=x", "text.tokenizer=x: a tokenizer needs level=bpe"),
    ("level=bpe,tokenizer={d}", "text.tokenizer={d}: no tokenizer there"),
  ],
)
def test_bad_bpe_input_names_the_field(corpus, tmp_path, params, starts):
  with pytest.raises(DataError) as info:
    get_dataset(f"text:path={corpus}," + params.format(d=tmp_path), "train", str(tmp_path / "c"))
  assert str(info.value).startswith(starts.format(d=tmp_path))


def test_the_workdir_keeps_the_tokenizer(corpus, tmp_path):
  from jaxformer.train import config as config_lib
  from jaxformer.train import workdir

  spec = f"text:path={corpus},level=bpe,vocab_size=300,seq_len=16"
  ds = get_dataset(spec, "train", data_dir=str(tmp_path / "cache"))
  workdir.write_run(tmp_path / "run", config_lib.get_config("transformer"), ds)
  corpus.unlink()  # decoding needs neither the corpus nor the prepared data
  task = workdir.read_task(tmp_path / "run")
  assert (tmp_path / "run" / bpe.FILE).is_file()
  assert task.decode(task.encode("the dog ate")) == "the dog ate"
  np.testing.assert_array_equal(task.encode("the dog ate"), ds.encode("the dog ate"))
