"""Shared by the training tests: a tiny config on a tiny MQAR task, subprocess helpers and a
fake object store."""

import contextlib
import os
import socket
import subprocess
import sys

from experiments.configs import default
from tests import XLA_TEST_FLAGS, launcher

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_TASK = "mqar:vocab_size=32,seq_len=16,num_kv_pairs=2,num_examples=256,num_test_examples=32"


def tiny_config(rung="transformer", **fields):
  """The default config shrunk to compile and run in seconds on CPU."""
  c = default.get_config(f"rung={rung}")
  with c.unlocked():
    c.task = TINY_TASK
    c.model.vocab_size, c.model.max_len = 32, 16
    c.model.d_model, c.model.num_heads, c.model.d_ff, c.model.num_layers = 32, 2, 64, 1
    c.batch_size, c.total_steps, c.warmup_steps = 16, 4, 1
    c.eval_every = c.checkpoint_every = 100
    c.log_every = 1
    c.peak_flops_per_device = 1e11  # no matmul measurement in tests
    for key, value in fields.items():
      target = c
      *path, last = key.split(".")
      for name in path:
        target = target[name]
      target[last] = value
  return c


def main_command(workdir, *overrides, rung="transformer"):
  """argv for `python -m experiments.main` on the tiny config."""
  return [
    sys.executable,
    "-m",
    "experiments.main",
    f"--config={REPO}/experiments/configs/default.py:rung={rung}",
    f"--workdir={workdir}",
    f"--config.task={TINY_TASK}",
    "--config.model.vocab_size=32",
    "--config.model.max_len=16",
    "--config.model.d_model=32",
    "--config.model.d_ff=64",
    "--config.batch_size=16",
    "--config.warmup_steps=1",
    "--config.log_every=1",
    "--config.peak_flops_per_device=1e11",
    *overrides,
  ]


def env(data_dir, devices=1, **extra):
  """Environment of a subprocess: this tree importable, its own device count, shared data."""
  out = dict(os.environ)
  out.update(
    PYTHONPATH=REPO,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} {XLA_TEST_FLAGS}",
    JAXFORMER_DATA_DIR=str(data_dir),
    **{k: str(v) for k, v in extra.items()},
  )
  return out


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def start_two_processes(cmd, data_dir, init_timeout=60, **env_extra):
  """Processes 0 and 1 of 2 running `cmd` (jax.distributed on localhost, 2 CPU devices
  each), their stdout and stderr piped; the caller waits for them."""
  port = free_port()
  return [
    launcher.Popen(
      cmd,
      env=env(
        data_dir,
        devices=2,
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        JAX_NUM_PROCESSES=2,
        JAX_PROCESS_ID=i,
        JAX_INITIALIZATION_TIMEOUT=init_timeout,
        **env_extra,
      ),
      cwd=REPO,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]


def run(cmd, data_dir, timeout=300, cwd=REPO, **env_extra):
  return launcher.run(
    cmd, env=env(data_dir, **env_extra), capture_output=True, text=True, timeout=timeout, cwd=cwd
  )


@contextlib.contextmanager
def fake_object_store(root):
  """gs://BUCKET/PATH lives at root/BUCKET/PATH for etils.epath, which behaves as an object
  store there: a file cannot be opened for appending (GCS objects are written whole) and
  needs no directory."""
  from etils.epath import testing

  def local(path):
    text = os.fspath(path)
    return os.path.join(root, text[len("gs://") :]) if text.startswith("gs://") else text

  def mapped(original, path, *args, **kwargs):
    return original(local(path), *args, **kwargs)

  def mapped_pair(original, path, dst, *args, **kwargs):
    return original(local(path), local(dst), *args, **kwargs)

  def open_(original, path, mode="r", *args, **kwargs):
    if os.fspath(path).startswith("gs://") and "a" in mode:
      raise OSError(f"{path}: an object store cannot append (mode {mode!r})")
    if "w" in mode:  # objects need no directories
      os.makedirs(os.path.dirname(local(path)), exist_ok=True)
    return original(local(path), mode, *args, **kwargs)

  def glob_(original, pattern):
    return [p.replace(os.fspath(root) + os.sep, "gs://", 1) for p in original(local(pattern))]

  fns = ("exists", "isdir", "listdir", "makedirs", "mkdir", "remove", "rmtree", "stat", "walk")
  pairs = ("rename", "replace", "copy")
  with testing.mock_epath(
    open=open_, glob=glob_, **dict.fromkeys(fns, mapped), **dict.fromkeys(pairs, mapped_pair)
  ):
    yield
