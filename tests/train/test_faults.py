"""The fault-injection hook: parsing, poisoning, and a real SIGKILL; inert when unset."""

import os
import signal
import sys

import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.train import faults
from tests import launcher


def test_parse_points_and_reject_bad_values():
  assert faults.parse("save:6, nan:3") == {("save", 6), ("nan", 3)}
  assert faults.parse("") == faults.parse(None) == frozenset()
  for raw in ("save", "boom:3", "step:-1", "step:x"):
    with pytest.raises(ladder.ConfigError, match=f"JAXFORMER_FAULT_AT={raw!r}: expected phase"):
      faults.parse(raw)


def test_unset_is_inert(monkeypatch):
  monkeypatch.delenv(faults.ENV, raising=False)
  f = faults.Faults()
  batch = {"inputs": np.arange(6).reshape(2, 3)}
  assert f.points == frozenset() and f.poison(batch, 1, 8) is batch
  f.kill("save", 1, before=lambda: pytest.fail("an unlisted point must do nothing"))


def test_poison_sets_every_input_to_vocab_size():
  batch = {"inputs": np.arange(6).reshape(2, 3), "targets": np.ones((2, 3), int)}
  out = faults.Faults("nan:2").poison(batch, 2, 8)
  np.testing.assert_array_equal(out["inputs"], np.full((2, 3), 8))
  assert out["targets"] is batch["targets"] and batch["inputs"][0, 1] == 1  # input untouched
  assert faults.Faults("nan:2").poison(batch, 3, 8) is batch


def test_kill_sends_sigkill_after_before():
  code = (
    "from jaxformer.train import faults; "
    "faults.Faults('saved:4').kill('saved', 4, before=lambda: print('waited', flush=True))"
  )
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = {**os.environ, "PYTHONPATH": repo}
  result = launcher.run(
    [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=repo
  )
  assert result.returncode == -signal.SIGKILL
  assert result.stdout == "waited\n" and "SIGKILL at saved:4" in result.stderr


def test_the_save_point_waits_until_the_write_is_in_flight(tmp_path):
  # Orbax makes `<step>.orbax-checkpoint-tmp...` on its writer thread: the save point waits
  # for it (a kill right at dispatch once landed before it existed), or for the finished step
  assert faults.write_begun(tmp_path / "none", 6, timeout=0.01) is False  # no directory yet
  (tmp_path / "5.orbax-checkpoint-tmp-123").mkdir()
  assert faults.write_begun(tmp_path, 6, timeout=0.01) is False  # another step's write
  (tmp_path / "6.orbax-checkpoint-tmp-456").mkdir()
  assert faults.write_begun(tmp_path, 6) is True
  (tmp_path / "7").mkdir()
  assert faults.write_begun(tmp_path, 7) is False  # finished before the point looked
