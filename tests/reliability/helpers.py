"""Shared by the reliability tests: a tiny training run as a subprocess, and what it leaves.

The runs use the softmax rung with one layer (the cheapest to compile) on the training
tests' tiny MQAR task: 12 steps, a checkpoint every 3 (all kept), an eval every 4, a
metrics record every step. Runs of one test share a JAX compilation cache directory, so
only the first one compiles; runs that may execute at the same time get separate caches.
A new cache directory starts as a copy of one that holds the programs of a plain run
(TRAIN_ARGS), compiled once per test process, so a run compiles only what its own
overrides change.
"""

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading

from tests import launcher
from tests.train.train_helpers import REPO, env, main_command

STEPS, SAVE_EVERY, EVAL_EVERY = 12, 3, 4
TRAIN_ARGS = (
  f"--config.total_steps={STEPS}",
  f"--config.checkpoint_every={SAVE_EVERY}",
  f"--config.eval_every={EVAL_EVERY}",
  "--config.keep_checkpoints=10",
  "--config.model.num_layers=1",
)
TIMEOUT = 600  # seconds per run; a loaded shared machine is ~3-10x slower than an idle one


def train_command(workdir, *overrides):
  return main_command(workdir, *TRAIN_ARGS, *overrides, rung="softmax")


_compiled = {}
_compiled_lock = threading.Lock()


def compiled_cache():
  """A compilation cache directory holding the programs of a plain 1-device run (built on
  first use by running one; read-only afterwards: runs get copies)."""
  with _compiled_lock:
    if "dir" not in _compiled:
      root = tempfile.mkdtemp(prefix="jaxformer-compiled-")
      atexit.register(shutil.rmtree, root, True)
      cache = os.path.join(root, "cache")
      run, data_dir = os.path.join(root, "run"), os.path.join(root, "data")
      proc = start(train_command(run), data_dir, cache_dir=cache, warm=False)
      code, _, err = finish(proc)
      assert code == 0, err[-3000:]
      _compiled["dir"] = cache
    return _compiled["dir"]


def run_env(data_dir, cache_dir=None, fault=None, devices=1, warm=True):
  """The environment of a run; a cache_dir that does not exist yet starts as a copy of
  compiled_cache() (unless warm=False)."""
  extra = {}
  if cache_dir is not None:
    if warm and not os.path.exists(cache_dir):
      shutil.copytree(compiled_cache(), cache_dir)
    extra |= {
      "JAX_COMPILATION_CACHE_DIR": cache_dir,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": 0,
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": 0,
    }
  if fault is not None:
    extra["JAXFORMER_FAULT_AT"] = fault
  out = env(data_dir, devices=devices, **extra)
  if fault is None:
    out.pop("JAXFORMER_FAULT_AT", None)
  return out


def start(cmd, data_dir, **env_args):
  """Popen of `cmd` in the repository with run_env(data_dir, **env_args)."""
  return launcher.Popen(
    cmd,
    env=run_env(data_dir, **env_args),
    cwd=REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def finish(proc):
  """(returncode, stdout, stderr) once `proc` has exited."""
  out, err = proc.communicate(timeout=TIMEOUT)
  return proc.returncode, out, err


def train(workdir, data_dir, *overrides, **env_args):
  return finish(start(train_command(workdir, *overrides), data_dir, **env_args))


def records(workdir):
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def losses(workdir):
  """[(step, loss)] of the train records, in file order."""
  return [(r["step"], r["loss"]) for r in records(workdir) if "loss" in r]


def evals(workdir):
  return [
    (r["step"], r["eval_loss"], r["eval_accuracy"]) for r in records(workdir) if "eval_loss" in r
  ]


def complete_steps(workdir):
  """Checkpoint steps Orbax finished: a save in flight is `<step>.orbax-checkpoint-tmp...`."""
  root = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(root):
    return []
  return sorted(int(n) for n in os.listdir(root) if n.isdigit())


def resumed_from(stdout):
  """The step the run's first log line says it resumed at (0: from scratch)."""
  if "from scratch" in stdout:
    return 0
  return int(stdout.split("resumed at step ")[1].split()[0])
