"""get_dataset: every task through TFDS and back, the cache, splits, concurrency."""

import os
import subprocess
import sys

import numpy as np
import pytest

from jaxformer.data import DataError, get_dataset, parse_spec, tasks
from jaxformer.data import dataset as dataset_lib
from tests import launcher

SPECS = [
  "mqar:vocab_size=64,seq_len=32,num_kv_pairs=4,num_examples=40,num_test_examples=12",
  "induction:vocab_size=32,seq_len=16,num_examples=40,num_test_examples=12",
  "copy:seq_len=16,num_examples=40,num_test_examples=12",
  "selective_copy:seq_len=16,num_examples=40,num_test_examples=12",
  "needle:vocab_size=32,seq_len=16,distance=5,num_examples=40,num_test_examples=12",
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("jaxformer_data"))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.split(":")[0])
@pytest.mark.parametrize("split", ["train", "test"])
def test_round_trip_equals_the_generator(spec, split, data_dir):
  name, params = parse_spec(spec)
  ds = get_dataset(spec, split, data_dir=data_dir)
  expected = tasks.generate(name, params, split)
  assert (ds.split, ds.vocab_size, ds.seq_len) == (split, params["vocab_size"], params["seq_len"])
  assert ds.spec.startswith(name + ":") and len(ds) == len(expected["inputs"])
  records = ds.source.__getitems__(list(range(len(ds))))
  for k, v in expected.items():
    np.testing.assert_array_equal(np.stack([r[k] for r in records]), v)
  assert ds.source[3]["mask"].dtype == np.int32


def test_second_call_reuses_the_cache(data_dir, monkeypatch):
  spec = SPECS[0]
  first = get_dataset(spec, "train", data_dir=data_dir)

  def no_regeneration(*args, **kwargs):
    raise AssertionError("regenerated a cached spec")

  monkeypatch.setattr(tasks, "generate", no_regeneration)
  again = get_dataset(spec.replace("seq_len=32,", "") + ",seq_len=32", "test", data_dir=data_dir)
  assert again.path == first.path and len(again) == 12
  with pytest.raises(AssertionError, match="regenerated"):  # a new spec does generate
    get_dataset(spec.replace("num_examples=40", "num_examples=41"), "train", data_dir=data_dir)


def test_validation_is_an_alias_of_test_and_bad_splits_fail(data_dir):
  ds = get_dataset(SPECS[1], "validation", data_dir=data_dir)
  assert ds.split == "test" and len(ds) == 12
  with pytest.raises(DataError, match=r"^split='dev'"):
    get_dataset(SPECS[1], "dev", data_dir=data_dir)


def test_data_dir_defaults_to_the_environment(tmp_path, monkeypatch):
  monkeypatch.setenv("JAXFORMER_DATA_DIR", str(tmp_path))
  ds = get_dataset(SPECS[2], "train")
  assert os.path.dirname(ds.path) == str(tmp_path)
  monkeypatch.delenv("JAXFORMER_DATA_DIR")
  assert dataset_lib.data_root() == os.path.expanduser("~/.cache/jaxformer")


def test_two_processes_preparing_one_spec_at_once(tmp_path):
  code = (
    "import sys; from jaxformer.data import get_dataset; "
    "ds = get_dataset(sys.argv[1], 'train', data_dir=sys.argv[2]); "
    "print(len(ds), int(ds.source[5]['inputs'].sum()))"
  )
  spec = "mqar:vocab_size=64,seq_len=32,num_kv_pairs=4,num_examples=3000"
  env = {**os.environ, "PYTHONPATH": os.getcwd(), "JAX_PLATFORMS": "cpu"}
  procs = [
    launcher.Popen(
      [sys.executable, "-c", code, spec, str(tmp_path)], env=env, stdout=subprocess.PIPE
    )
    for _ in range(2)
  ]
  outs = [p.communicate(timeout=120)[0] for p in procs]
  assert [p.returncode for p in procs] == [0, 0]
  assert outs[0] == outs[1] and outs[0].split()[0] == b"3000"
  assert len(os.listdir(tmp_path)) == 1  # one published directory, no temporary left


def test_unwritable_data_dir_is_named(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("")
  with pytest.raises(DataError, match=f"^data_dir={blocker / 'sub'}: cannot write prepared data"):
    get_dataset(SPECS[0], "train", data_dir=str(blocker / "sub"))
