"""SIGTERM mid-run: the step finishes, a checkpoint is saved, the process exits 0, and the
resumed run's per-step losses equal an uninterrupted run's bit for bit (CPU)."""

import json
import os
import signal
import subprocess
import time

import pytest

from tests import launcher
from tests.train.train_helpers import REPO, env, main_command, run

STEPS = 200  # long enough that SIGTERM lands mid-run, a second or so of training
ARGS = (
  f"--config.total_steps={STEPS}",
  "--config.eval_every=100",
  "--config.checkpoint_every=1000",
)


def _losses(workdir):
  records = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  return [(r["step"], r["loss"]) for r in records if "loss" in r]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("data")


def test_sigterm_saves_exits_0_and_resume_is_bitwise_identical(data_dir, tmp_path):
  reference = run(main_command(tmp_path / "ref", *ARGS, rung="softmax"), data_dir)
  assert reference.returncode == 0, reference.stderr[-3000:]

  workdir = tmp_path / "run"
  cmd = main_command(workdir, *ARGS, rung="softmax")
  proc = launcher.Popen(
    cmd, env=env(data_dir), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
  )
  metrics_file = workdir / "metrics.jsonl"
  deadline = time.monotonic() + 300
  while not (metrics_file.exists() and metrics_file.stat().st_size > 0):
    assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
    time.sleep(0.005)
  os.kill(proc.pid, signal.SIGTERM)
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 0, err[-3000:]
  stopped = int(out.split("preempted at step ")[1].split(":")[0])
  assert 1 <= stopped < STEPS, out
  assert os.listdir(workdir / "checkpoints") == [str(stopped)]
  assert [s for s, _ in _losses(workdir)] == list(range(1, stopped + 1))

  resumed = run(cmd, data_dir)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"completed at step {STEPS}" in resumed.stdout
  assert _losses(workdir) == _losses(tmp_path / "ref")  # every step once, bitwise equal
