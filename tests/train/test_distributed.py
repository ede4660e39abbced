"""Two processes on localhost (jax.distributed, gloo CPU collectives, 2 devices each) train
the same losses as one process with 4 devices: with the batch split over the processes, and
with the tensor axis spanning them (both processes hold every batch shard and must read the
same rows). Replicas of a batch shard fed different rows are reported."""

import json
import re
import sys

import numpy as np
import pytest

from tests.train.train_helpers import main_command, run, start_two_processes

ARGS = ("--config.total_steps=4", "--config.eval_every=4", "--config.checkpoint_every=2")


def _losses(workdir):
  records = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  return [r["loss"] for r in records if "loss" in r], [r for r in records if "eval_loss" in r]


def _two_processes(cmd, data_dir, timeout=300):
  """Runs `cmd` as processes 0 and 1 of 2 (2 CPU devices each); [(returncode, out, err)]."""
  workers = start_two_processes(cmd, data_dir)
  outputs = []
  try:
    for w in workers:
      outputs.append((*w.communicate(timeout=timeout),))
  finally:
    for w in workers:
      if w.poll() is None:
        w.kill()
  return [(w.returncode, out, err) for w, (out, err) in zip(workers, outputs, strict=True)]


def _train_two_processes(workdir, data_dir, *overrides):
  results = _two_processes(main_command(workdir, *ARGS, *overrides, rung="softmax"), data_dir)
  for code, _, err in results:
    assert code == 0, err[-3000:]
  return [out for _, out, _ in results]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def single(data_dir, tmp_path_factory):
  """Losses and evals of one process with 4 devices, data parallel."""
  workdir = tmp_path_factory.mktemp("single")
  done = run(main_command(workdir, *ARGS, rung="softmax"), data_dir, devices=4)
  assert done.returncode == 0, done.stderr[-3000:]
  return _losses(workdir)


def test_two_processes_match_one_process(single, data_dir, tmp_path):
  workdir = tmp_path / "multi"
  outputs = _train_two_processes(workdir, data_dir)
  assert "completed at step 4" in outputs[0]  # process 0 reports, process 1 does not
  assert "completed" not in outputs[1]
  assert re.search(r", \d+ tokens/s, \d+\.\d+ steps/s", outputs[0]), outputs[0]

  multi_losses, multi_evals = _losses(workdir)
  single_losses, single_evals = single
  assert len(multi_losses) == 4
  np.testing.assert_allclose(multi_losses, single_losses, rtol=1e-6)
  np.testing.assert_allclose(multi_evals[0]["eval_loss"], single_evals[0]["eval_loss"], rtol=1e-6)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2", "4"]


@pytest.mark.slow  # two more processes on the hybrid layout: `make test-slow`
def test_tensor_axis_across_processes_matches_one_process(single, data_dir, tmp_path):
  # mesh (data=2, fsdp=1, tensor=2) with the tensor axis spanning the 2 processes (the hybrid
  # layout, each process a slice): each process's devices hold both batch shards
  workdir = tmp_path / "tensor"
  _train_two_processes(
    workdir, data_dir, "--config.mesh_shape=(2, 1, 2)", "--config.dcn_mesh_shape=(1, 1, 2)"
  )
  multi_losses, multi_evals = _losses(workdir)
  single_losses, single_evals = single
  assert len(multi_losses) == 4
  np.testing.assert_allclose(multi_losses, single_losses, rtol=1e-5)
  np.testing.assert_allclose(multi_evals[0]["eval_loss"], single_evals[0]["eval_loss"], rtol=1e-5)


# Both processes put rows 0..7 (process p adds p * argv[1] to them) onto a mesh whose tensor axis
# spans the 2 processes, so that each holds every row, then check the replicas.
REPLICA_CHECK = """
import sys, jax, numpy as np
from experiments.main import initialize_distributed
from jaxformer import data
from jaxformer.train import sharding
initialize_distributed()  # from the JAX_* variables, as main does
mesh = sharding.make_mesh((2, 1, 2), dcn_shape=(1, 1, 2))
assert sharding.process_batch_shard(mesh) == (0, 1)
rows = np.arange(8 * 3, dtype=np.int32).reshape(8, 3) + int(sys.argv[1]) * jax.process_index()
data.check_replicas(data.to_global({"inputs": rows}, sharding.batch_sharding(mesh), 8))
print("replicas agree")
"""


def test_replicas_fed_different_rows_are_reported(data_dir):
  results = _two_processes([sys.executable, "-c", REPLICA_CHECK, "1"], data_dir, timeout=120)
  for code, _, err in results:  # both processes stop, naming the rows
    assert code != 0 and "processes 0 and 1 hold the batch rows from 0" in err, err[-3000:]
