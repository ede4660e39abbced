"""One writer per workdir: process 0 holds WORKDIR/lock (pid, host, start). A second run on
the workdir exits 2 naming the holder before doing any work; a lock left by a process of
this host that is gone (SIGKILL) is taken over with a note, and the run resumes (end to end
in test_side_files.py, whose killed run leaves its lock behind).

Two runs used to both exit 0, with every step twice in metrics.jsonl.
"""

import io
import json
import os
import socket
import subprocess
import sys

import pytest

from jaxformer import ladder
from jaxformer.train import workdir as workdir_lib
from tests.reliability import helpers as h


def _dead_pid():
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def test_a_second_run_exits_2_naming_the_holder(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  with workdir_lib.lock(workdir):
    held = json.loads((workdir / "lock").read_text())
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
    code, out, err = h.train(workdir, str(tmp_path / "data"))
    assert code == 2, err[-3000:]
    assert err.strip() == (
      f"error: --workdir={workdir}: in use by pid {os.getpid()} on host "
      f"{socket.gethostname()!r} since {held['since']} ({workdir / 'lock'}); wait for that run "
      "to end or use another workdir"
    )
    assert not (workdir / "metrics.jsonl").exists()  # refused before any work
    with pytest.raises(ladder.ConfigError, match=f"in use by pid {os.getpid()}"):
      with workdir_lib.lock(workdir):
        pass
  assert not (workdir / "lock").exists()  # released


def test_a_lock_of_another_host_is_refused_with_the_way_out(tmp_path):
  (tmp_path / "lock").write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "then"}))
  with pytest.raises(ladder.ConfigError) as e:
    with workdir_lib.lock(tmp_path):
      pass
  assert "in use by pid 1 on host 'elsewhere' since then" in str(e.value)
  assert f"delete {tmp_path / 'lock'} if that run is gone" in str(e.value)


def test_a_dead_holder_on_this_host_is_taken_over_with_a_note(tmp_path):
  pid = _dead_pid()
  lock = {"pid": pid, "host": socket.gethostname(), "since": "then"}
  (tmp_path / "lock").write_text(json.dumps(lock))
  note = io.StringIO()
  with workdir_lib.lock(tmp_path, stream=note):
    assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
  assert note.getvalue() == (
    f"note: {tmp_path / 'lock'}: taking over the lock of pid {pid} on host "
    f"{socket.gethostname()!r}, which is no longer running\n"
  )
  # A live pid whose start time differs is a new process reusing the number: stale too.
  lock = {"pid": os.getpid(), "host": socket.gethostname(), "start": -1}
  (tmp_path / "lock").write_text(json.dumps(lock))
  with workdir_lib.lock(tmp_path, stream=io.StringIO()):
    pass
