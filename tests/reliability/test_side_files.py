"""Damaged side files do not leave a workdir stuck: a cut-short last line of metrics.jsonl is
dropped with a warning, and prepared data under $JAXFORMER_DATA_DIR whose files no longer
match the sha256 recorded when they were written (a flipped byte, a truncation, a cut-short
metadata.json) is prepared again from its spec, with one warning line naming the directory.

Each used to end every rerun with a JSONDecodeError, Riegeli or JSON traceback naming no path.
"""

import json
import os

import numpy as np
import pytest

from jaxformer import data
from jaxformer.data import tfds_builder
from tests.reliability import helpers as h
from tests.train.train_helpers import TINY_TASK


def _files(path):
  return sorted((os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs), key=os.path.getsize)


def flip_byte(path):
  target = [f for f in _files(path) if ".array_record" in f][-1]
  with open(target, "r+b") as f:
    f.seek(os.path.getsize(target) // 2)
    byte = f.read(1)[0]
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte ^ 0x10]))


def truncate(path):
  target = [f for f in _files(path) if ".array_record" in f][-1]
  os.truncate(target, os.path.getsize(target) // 2)


def truncate_metadata(path):
  target = next(f for f in _files(path) if f.endswith(f"{os.sep}metadata.json"))
  os.truncate(target, os.path.getsize(target) // 2)


def _rows(dataset):
  return np.stack([dataset.source[i]["inputs"] for i in range(len(dataset))])


@pytest.mark.parametrize("damage", [flip_byte, truncate, truncate_metadata])
def test_damaged_prepared_data_is_prepared_again(damage, tmp_path, capsys):
  first = data.get_dataset(TINY_TASK, "train", str(tmp_path))
  want = _rows(first)
  damage(first.path)
  assert tfds_builder.verify(first.path) is not None
  again = data.get_dataset(TINY_TASK, "train", str(tmp_path))
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"warning: prepared data in {first.path} is damaged")
  assert err[0].endswith("; preparing it again")
  np.testing.assert_array_equal(_rows(again), want)
  assert tfds_builder.verify(again.path) is None
  assert os.listdir(tmp_path) == [os.path.basename(first.path)]  # nothing damaged left


def test_a_run_resumes_past_a_cut_short_metrics_line_and_damaged_data(tmp_path):
  data_dir, workdir, cache = tmp_path / "data", tmp_path / "run", str(tmp_path / "c")
  code, _, err = h.train(workdir, str(data_dir), cache_dir=cache, fault="saved:9")
  assert code == -9, err[-3000:]
  first = h.losses(workdir)
  killed = json.loads((workdir / "lock").read_text())["pid"]  # the kill left its lock
  with open(workdir / "metrics.jsonl", "a") as f:
    f.write('{"step": 10, "loss": 3.7')  # the write the kill cut short
  (prepared,) = os.listdir(data_dir)
  flip_byte(data_dir / prepared)

  code, out, err = h.train(workdir, str(data_dir), cache_dir=cache)
  assert code == 0 and f"completed at step {h.STEPS}" in out, err[-3000:]
  assert "Traceback" not in err, err[-3000:]
  warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
  assert len(warnings) == 2, err[-3000:]
  assert f"prepared data in {data_dir / prepared} is damaged" in warnings[0]  # read first
  assert "metrics.jsonl: its last line is not a complete record" in warnings[1]
  assert f"note: {workdir / 'lock'}: taking over the lock of pid {killed} on host" in err
  assert not (workdir / "lock").exists()  # released at the end
  assert h.losses(workdir)[:9] == first  # the rebuilt data is the same data
  assert [s for s, _ in h.losses(workdir)] == list(range(1, h.STEPS + 1))
