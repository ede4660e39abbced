"""Fault injection for the reliability tests: the training loop's hooks (jaxformer.train.loop.Hooks)
acting at the points JAXFORMER_FAULT_AT lists, and the launcher that installs them.

  JAXFORMER_FAULT_AT=save:6 python -m tests.reliability.faults experiments.main ARGS...
      SIGKILL the process right after step 6's save was dispatched
  JAXFORMER_FAULT_AT=nan:3,eval:4 python -m tests.reliability.faults experiments.main ARGS...
      poison step 3's batch; SIGKILL after the eval at step 4

`python -m tests.reliability.faults MODULE ARGS...` runs MODULE as `python -m MODULE ARGS...`
would, with Faults() as the hooks of every `loop.train` call that passes none (helpers.start
launches a run this way when given a fault). The library itself only names the points
(loop.Hooks, which do nothing) and never reads the variable.

A crash test must hit precise moments (during an async write, during eval, ...) that a timer
outside the process cannot find reliably, so the loop names them and Faults acts on the ones
the variable lists. Points (phase:step), in the order the loop reaches them:

  init:s   state created (s = 0) or restored (s = its step), before the first step compiles
  term:s   the same moment: SIGTERM to this process (a preemption before the first step)
  nan:s    step s's batch gets token ids = vocab_size, which embed as NaN: a non-finite loss
  step:s   step s dispatched, before its metrics are read (between checkpoints)
  eval:s   the eval at step s computed, its record not yet written
  nospace:s  just before the save of step s, files stop growing past NOSPACE_BYTES
           (RLIMIT_FSIZE: writes fail with EFBIG, as on a full disk), for the rest of the run;
           the loop then waits for that save to fail, so the next step is the one to see it
  save:s   the save of step s dispatched and its `<s>.orbax-checkpoint-tmp...` directory made:
           Orbax's async write is in flight (Orbax makes that directory on its writer thread,
           so the point waits for it; a kill right at dispatch could land before any write)
  saved:s  the save of step s durable on disk (the point waits for it, then kills)

A kill is SIGKILL: no signal handler, no `finally`, no flush, as from the OOM killer or a
lost host. Nothing here acts when the variable is unset.
"""

import functools
import os
import runpy
import signal
import sys
import time

import numpy as np

from jaxformer import ladder
from jaxformer.train import loop
from jaxformer.train.checkpoint import ORBAX_TMP

ENV = "JAXFORMER_FAULT_AT"
LAUNCHER = "tests.reliability.faults"  # python -m LAUNCHER MODULE ARGS...
PHASES = ("init", "term", "nan", "step", "eval", "nospace", "save", "saved")
NOSPACE_BYTES = 16 * 1024  # above metrics.jsonl of a test run, below its checkpoint arrays


def parse(raw):
  """'save:6,nan:3' -> {('save', 6), ('nan', 3)}; ConfigError naming the variable otherwise."""
  points = set()
  for item in filter(None, (raw or "").split(",")):
    phase, _, step = item.strip().partition(":")
    if phase not in PHASES or not step.isdigit():
      raise ladder.ConfigError(
        f"{ENV}={raw!r}: expected phase:step[,phase:step...] with phase in {', '.join(PHASES)}"
      )
    points.add((phase, int(step)))
  return frozenset(points)


class Faults(loop.Hooks):
  """The points of one training run (`raw`, by default read from the environment): the
  training loop's hooks, each acting on the points listed."""

  def __init__(self, raw=None):
    self.points = parse(os.environ.get(ENV) if raw is None else raw)

  # --- loop.Hooks ---------------------------------------------------------------------------

  def started(self, step):
    self.kill("init", step)
    self.terminate("term", step)

  def batch(self, batch, step, vocab_size):
    return self.poison(batch, step, vocab_size)

  def stepped(self, step):
    self.kill("step", step)

  def evaluated(self, step):
    self.kill("eval", step)

  def saving(self, step, ckpt):
    self.fill_disk(step, before=ckpt.wait)

  def saved(self, step, ckpt):
    self.after_save(step, ckpt.settle)
    self.kill("save", step, before=lambda: write_begun(ckpt.directory, step))
    self.kill("saved", step, before=ckpt.wait)

  # --- the faults -----------------------------------------------------------------------------

  def kill(self, phase, step, before=None):
    """SIGKILL this process at (phase, step) if listed, after calling `before`."""
    if (phase, step) not in self.points:
      return
    if before is not None:
      before()
    print(f"fault injected: SIGKILL at {phase}:{step}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

  def terminate(self, phase, step):
    """SIGTERM this process at (phase, step) if listed (its handler decides what happens)."""
    if (phase, step) in self.points:
      print(f"fault injected: SIGTERM at {phase}:{step}", file=sys.stderr, flush=True)
      os.kill(os.getpid(), signal.SIGTERM)

  def fill_disk(self, step, before=None):
    """From ('nospace', step) on, no file this process writes grows past NOSPACE_BYTES
    (after calling `before`: the loop lets earlier saves finish, so step's save is the one
    that fails)."""
    if ("nospace", step) not in self.points:
      return
    import resource

    if before is not None:
      before()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (NOSPACE_BYTES, hard))
    print(
      f"fault injected: files limited to {NOSPACE_BYTES} bytes at nospace:{step}",
      file=sys.stderr,
      flush=True,
    )

  def after_save(self, step, settle):
    """At ('nospace', step): calls `settle` (waits for the failing save to end)."""
    if ("nospace", step) in self.points:
      settle()

  def poison(self, batch, step, vocab_size):
    """`batch` with every input id set to vocab_size if ('nan', step) is listed."""
    if ("nan", step) not in self.points:
      return batch
    return {**batch, "inputs": np.full_like(batch["inputs"], vocab_size)}


def write_begun(directory, step, timeout=30.0, poll=2e-4):
  """Returns once `directory` holds step's in-flight directory (`<step>.orbax-checkpoint-tmp...`)
  or its finished one, or after `timeout` seconds; True if the write was seen in flight."""
  tmp, done = f"{step}{ORBAX_TMP}", str(step)
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    names = os.listdir(directory) if os.path.isdir(directory) else []
    if any(n.startswith(tmp) for n in names):
      return True
    if done in names:
      return False
    time.sleep(poll)
  return False


# --- the launcher ------------------------------------------------------------------------------


def command(cmd):
  """`python -m MODULE ARGS...` (an argv) run through this launcher: the same run, with the
  faults of JAXFORMER_FAULT_AT."""
  if len(cmd) < 3 or cmd[1] != "-m":
    raise ValueError(f"expected `python -m MODULE ARGS...`, got {cmd!r}")
  return [cmd[0], "-m", LAUNCHER, *cmd[2:]]


def install(faults):
  """Makes `faults` the hooks of every loop.train call in this process that passes none."""
  train = loop.train

  @functools.wraps(train)
  def hooked(config, workdir=None, profile_steps=0, hooks=None):
    return train(config, workdir, profile_steps, hooks=faults if hooks is None else hooks)

  loop.train = hooked


def main(argv):
  """`python -m tests.reliability.faults MODULE ARGS...`: runs MODULE as `python -m MODULE
  ARGS...` would, its training loops hooked to Faults() (read from JAXFORMER_FAULT_AT now)."""
  if not argv:
    raise SystemExit(f"usage: {ENV}=phase:step python -m {LAUNCHER} MODULE [ARGS...]")
  install(Faults())
  sys.argv = list(argv)
  runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main(sys.argv[1:])
