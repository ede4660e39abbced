"""Two processes (jax.distributed on localhost, gloo, 2 CPU devices each), as a user runs
them: SIGTERM to one of them stops both at one agreed step with a checkpoint, and the
two-process resume trains the single-process losses; an error that process 0 meets while
preparing the data stops both processes with the same one line (the other used to die 30 s
later with a gloo DEADLINE_EXCEEDED traceback).
"""

import os
import signal
import time

import numpy as np
import pytest

from tests.reliability import helpers as h
from tests.train.train_helpers import main_command, start_two_processes

STEPS = 60  # SIGTERM lands at step 1's record; the processes agree on a stop a few steps on
ARGS = (
  f"--config.total_steps={STEPS}",
  "--config.eval_every=1000",
  "--config.checkpoint_every=1000",
)


def _start_two(cmd, data_dir, cache_dir=None):
  """Processes 0 and 1 of `cmd`; a shared compilation cache makes the second pair compile
  nothing (the two processes compile the same programs)."""
  cache = (
    {}
    if cache_dir is None
    else {
      "JAX_COMPILATION_CACHE_DIR": cache_dir,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": 0,
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": 0,
    }
  )
  return start_two_processes(cmd, data_dir, init_timeout=120, **cache)


def _finish_all(workers):
  try:
    return [(*w.communicate(timeout=h.TIMEOUT), w.returncode) for w in workers]
  finally:
    for w in workers:
      if w.poll() is None:
        w.kill()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("data")


@pytest.mark.slow  # five training processes (tests/train/test_distributed.py and
# tests/train/test_preemption.py cover two processes and SIGTERM in make test): `make test-slow`
def test_sigterm_to_one_process_then_a_two_process_resume_gives_the_single_run(data_dir, tmp_path):
  # The uninterrupted single-process reference (4 devices) runs beside the two processes.
  single = tmp_path / "single"
  reference = h.start(main_command(single, *ARGS, rung="softmax"), str(data_dir), devices=4)

  workdir = tmp_path / "multi"
  cmd = main_command(workdir, *ARGS, rung="softmax")
  cache = str(tmp_path / "cache")
  workers = _start_two(cmd, data_dir, cache)
  metrics_file = workdir / "metrics.jsonl"
  deadline = time.monotonic() + h.TIMEOUT
  while not (metrics_file.exists() and metrics_file.stat().st_size > 0):
    assert all(w.poll() is None for w in workers) and time.monotonic() < deadline
    time.sleep(0.005)
  os.kill(workers[1].pid, signal.SIGTERM)  # the process that does not write the metrics
  (out0, err0, code0), (_, err1, code1) = _finish_all(workers)
  assert code0 == 0 and code1 == 0, (err0[-3000:], err1[-3000:])
  stopped = int(out0.split("preempted at step ")[1].split(":")[0])
  assert 1 <= stopped < STEPS, out0
  assert sorted(os.listdir(workdir / "checkpoints")) == [str(stopped)]

  (out0, err0, code0), (_, err1, code1) = _finish_all(_start_two(cmd, data_dir, cache))
  assert code0 == 0 and code1 == 0, (err0[-3000:], err1[-3000:])
  ref_code, _, ref_err = h.finish(reference)
  assert ref_code == 0, ref_err[-3000:]
  assert f"completed at step {STEPS}" in out0 and f"resumed at step {stopped}" in out0
  got, want = h.losses(workdir), h.losses(single)
  assert [s for s, _ in got] == list(range(1, STEPS + 1))
  np.testing.assert_allclose([x for _, x in got], [x for _, x in want], rtol=1e-5)


def test_an_error_of_process_0_stops_both_with_the_same_line(data_dir, tmp_path):
  (tmp_path / "file").write_text("")
  bad = f"--config.data_dir={tmp_path}/file/d"  # process 0 prepares the data: it fails there
  start = time.monotonic()
  results = _finish_all(_start_two(main_command(tmp_path / "run", bad, rung="softmax"), data_dir))
  lines = [err.strip().splitlines() for _, err, _ in results]
  assert [code for _, _, code in results] == [2, 2], lines
  assert len(lines[0]) == 1 and lines[0] == lines[1], lines
  assert lines[0][0].startswith(f"error: data_dir={tmp_path}/file/d"), lines
  assert time.monotonic() - start < h.TIMEOUT
