"""Two processes on localhost (jax.distributed, gloo CPU collectives, 2 devices each) train
the same losses as one process with 4 devices."""

import json
import re
import socket
import subprocess

import numpy as np
import pytest

from tests.train.train_helpers import REPO, env, main_command, run

ARGS = ("--config.total_steps=4", "--config.eval_every=4", "--config.checkpoint_every=2")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _losses(workdir):
  records = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  return [r["loss"] for r in records if "loss" in r], [r for r in records if "eval_loss" in r]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("data")


def test_two_processes_match_one_process(data_dir, tmp_path):
  single = run(main_command(tmp_path / "single", *ARGS, rung="softmax"), data_dir, devices=4)
  assert single.returncode == 0, single.stderr[-3000:]

  workdir = tmp_path / "multi"
  port = _free_port()
  workers = [
    subprocess.Popen(
      main_command(workdir, *ARGS, rung="softmax"),
      env=env(
        data_dir,
        devices=2,
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        JAX_NUM_PROCESSES=2,
        JAX_PROCESS_ID=i,
        JAX_INITIALIZATION_TIMEOUT=60,
      ),
      cwd=REPO,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  outputs = []
  try:
    for w in workers:
      outputs.append(w.communicate(timeout=300))
  finally:
    for w in workers:
      if w.poll() is None:
        w.kill()
  for w, (_, err) in zip(workers, outputs, strict=True):
    assert w.returncode == 0, err[-3000:]
  assert "completed at step 4" in outputs[0][0]  # process 0 reports, process 1 does not
  assert "completed" not in outputs[1][0]
  assert re.search(r", \d+ tokens/s, \d+\.\d+ steps/s", outputs[0][0]), outputs[0][0]

  multi_losses, multi_evals = _losses(workdir)
  single_losses, single_evals = _losses(tmp_path / "single")
  assert len(multi_losses) == 4
  np.testing.assert_allclose(multi_losses, single_losses, rtol=1e-6)
  np.testing.assert_allclose(multi_evals[0]["eval_loss"], single_evals[0]["eval_loss"], rtol=1e-6)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2", "4"]
