"""The fault injection (tests/reliability/faults.py): parsing, poisoning, a real SIGKILL, the
launcher that installs it as the loop's hooks; inert when unset, and none of it in the library."""

import os
import pathlib
import signal
import sys

import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.train import loop
from tests import launcher
from tests.reliability import faults
from tests.train.train_helpers import REPO


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


def test_faults_are_hooks():
  points = {n for n in vars(loop.Hooks) if not n.startswith("_")}
  missing = [n for n in points if vars(faults.Faults).get(n) is None]
  assert points and not missing, missing
  assert issubclass(faults.Faults, loop.Hooks)


def test_poison_sets_every_input_to_vocab_size():
  batch = {"inputs": np.arange(6).reshape(2, 3), "targets": np.ones((2, 3), int)}
  out = faults.Faults("nan:2").poison(batch, 2, 8)
  np.testing.assert_array_equal(out["inputs"], np.full((2, 3), 8))
  assert out["targets"] is batch["targets"] and batch["inputs"][0, 1] == 1  # input untouched
  assert faults.Faults("nan:2").poison(batch, 3, 8) is batch


def _run(cmd, cwd=REPO, **env):
  env = {**os.environ, "PYTHONPATH": REPO, **env}
  return launcher.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


def test_kill_sends_sigkill_after_before():
  code = (
    "from tests.reliability import faults; "
    "faults.Faults('saved:4').kill('saved', 4, before=lambda: print('waited', flush=True))"
  )
  result = _run([sys.executable, "-c", code])
  assert result.returncode == -signal.SIGKILL
  assert result.stdout == "waited\n" and "SIGKILL at saved:4" in result.stderr


def test_install_makes_the_faults_the_default_hooks_of_train(monkeypatch):
  monkeypatch.setattr(
    loop, "train", lambda config, workdir=None, profile_steps=0, hooks=None: hooks
  )
  f, mine = faults.Faults("save:6"), loop.Hooks()
  faults.install(f)  # replaces loop.train (monkeypatch puts the real one back)
  assert loop.train({}, None) is f and loop.train({}, None, 0, hooks=mine) is mine


def test_the_launcher_runs_the_module_as_python_m_with_train_hooked(tmp_path):
  (tmp_path / "probe.py").write_text(
    "import sys\n"
    "from jaxformer.train import loop\n"
    "print(__name__, sys.argv[1:], loop.train.__wrapped__.__module__)\n"
    "sys.exit(3)\n"
  )
  cmd = faults.command([sys.executable, "-m", "probe", "a", "--b=c"])
  assert cmd == [sys.executable, "-m", "tests.reliability.faults", "probe", "a", "--b=c"]
  result = _run(cmd, cwd=tmp_path, JAXFORMER_FAULT_AT="save:6")  # finds probe as python -m would
  assert result.returncode == 3, result.stderr[-3000:]
  assert result.stdout == "__main__ ['a', '--b=c'] jaxformer.train.loop\n"
  bad = _run(cmd, cwd=tmp_path, JAXFORMER_FAULT_AT="boom:1")
  assert bad.returncode == 1 and "JAXFORMER_FAULT_AT='boom:1': expected" in bad.stderr
  assert not bad.stdout  # refused before the module ran


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


def test_the_library_injects_no_faults():
  # the library only names the points (loop.Hooks); the faults and their variable live here
  sources = [
    p for root in ("jaxformer", "experiments") for p in pathlib.Path(REPO, root).rglob("*.py")
  ]
  assert sources
  named = [str(p.relative_to(REPO)) for p in sources if faults.ENV in p.read_text()]
  assert not named and not pathlib.Path(REPO, "jaxformer/train/faults.py").exists(), named
