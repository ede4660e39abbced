"""Shared by the reliability tests: a tiny training run as a subprocess, and what it leaves.

The runs use the softmax rung with one layer (the cheapest to compile) on the training
tests' tiny MQAR task: 12 steps, a checkpoint every 3 (all kept), an eval every 4, a
metrics record every step. Runs of one test share a JAX compilation cache directory, so
only the first one compiles; runs that may execute at the same time get separate caches.
"""

import json
import os
import subprocess

from tests import launcher
from tests.reliability import faults
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


def run_env(data_dir, cache_dir=None, fault=None, devices=1):
  extra = {}
  if cache_dir is not None:
    extra |= {
      "JAX_COMPILATION_CACHE_DIR": cache_dir,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": 0,
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": 0,
    }
  out = env(data_dir, devices=devices, **extra)
  out.pop(faults.ENV, None)
  if fault is not None:
    out[faults.ENV] = fault
  return out


def start(cmd, data_dir, **env_args):
  """Popen of `cmd` in the repository with run_env(data_dir, **env_args); with a `fault`
  (JAXFORMER_FAULT_AT's phase:step[,...]), through the faults launcher (faults.command)."""
  if env_args.get("fault") is not None:
    cmd = faults.command(cmd)
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
