"""Experiments in worker processes, a few at once, each on its own cores, none able to sink another.

  tasks = [Task("cache", run_all.run_declared, "quick", "runs/ladder"), ...]
  run(tasks, jobs=2, board=board.Board(sys.stdout), on_done=lambda task, kind, payload: ...)

Each worker is a spawned process (JAX does not fork safely; each has its own runtime) that
keeps to its share of the cores (`core_sets`): unpinned, two workers' XLA thread pools each
sized for every core and contended for both, which cost about 13% more CPU time and wall time
(BENCHMARKS.md, `make run` workers pinned to cores). A worker takes the next task as it comes
free, so `jobs` processes start (each ~3 CPU s of imports) rather than one per task. Everything
a worker writes while it runs a task, XLA's own lines included, goes to that task's
<workdir>/<name>/train.log; what it sends back is its progress (the board's live line) and, at
the end, what its runner returned or the error that stopped it. A task that raises ends as an
error naming its log and its worker takes the next; a worker that dies (out of memory, a
signal) ends its task so, and a fresh worker on the same cores takes the rest.
"""

import dataclasses
import math
import multiprocessing
import os
import queue as queues
import re
import sys
import time
import traceback
from collections.abc import Callable

from jaxformer import compile_cache

LOG = "train.log"
# a sweep's progress line, "<unit>: step S/T: ..." (jaxformer/train/sweep.py, the unit's prefix
# from experiments/engine/policy.py)
STEP = re.compile(r"([^\[\]:]+): step (\d+)/(\d+)")


@dataclasses.dataclass(frozen=True)
class Task:
  """One experiment for a worker: `runner(task, tracker)` runs it there and returns its result
  (a module-level function: a spawned worker imports it by name). `module`: a stand-in module
  a Python caller names in place of the experiment's own (the tests'), else None."""

  name: str
  runner: Callable
  size: str
  workdir: str
  module: str | None = None

  @property
  def folder(self):
    return os.path.join(self.workdir, self.name)

  @property
  def log_path(self):
    return os.path.join(self.folder, LOG)


class Tracker:
  """In a worker: `log(text)` writes a detail line to train.log and reads the step of the unit
  training from it; `progress(done, total, unit)` says a unit starts or all are done
  (experiments/engine/run.py's callback). What the board needs goes to the parent, a step at
  most every `every` seconds."""

  def __init__(self, name, queue, stream, every=1.0, clock=time.monotonic):
    self.name, self.queue, self.stream, self.every, self.clock = name, queue, stream, every, clock
    self.done, self.total, self.unit, self.step, self.steps = 0, None, None, None, None
    self.sent = -math.inf

  def log(self, text):
    print(text, file=self.stream, flush=True)
    for line in text.splitlines():
      if step := STEP.search(line):
        self.unit, self.step, self.steps = step[1].strip(), int(step[2]), int(step[3])
        self._send()

  def progress(self, done, total, unit):
    self.done, self.total, self.unit, self.step, self.steps = done, total, unit, None, None
    self._send(now=True)

  def _send(self, now=False):
    if not now and self.clock() - self.sent < self.every:
      return
    self.sent = self.clock()
    state = {"done": self.done, "total": self.total, "unit": self.unit}
    self.queue.put((self.name, "progress", state | {"step": self.step, "steps": self.steps}))


def core_sets(jobs):
  """The cores this process may run on, dealt into `jobs` disjoint sets (cores 0 2 4 ... and
  1 3 5 ... for two jobs); None when there are fewer cores than jobs or the platform cannot
  pin a process to cores."""
  if not hasattr(os, "sched_setaffinity"):
    return None
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < jobs:
    return None
  return [cores[i::jobs] for i in range(jobs)]


def _first_line(error):
  return (str(error).strip().splitlines() or [""])[0]


def _worker(cores, inbox, queue):
  """A worker process on `cores`: each task from `inbox` until None, every line it writes
  into that task's train.log."""
  if cores is not None:
    os.sched_setaffinity(0, cores)  # before JAX sizes its thread pools from the cores it may use
  compile_cache.enable()
  for task in iter(inbox.get, None):
    os.makedirs(task.folder, exist_ok=True)
    with open(task.log_path, "a", buffering=1) as stream:
      os.dup2(stream.fileno(), 1)
      os.dup2(stream.fileno(), 2)
      if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
      try:
        out = ("result", task.runner(task, Tracker(task.name, queue, stream)))
      except Exception as e:  # reported to the parent; the log keeps the traceback
        traceback.print_exc()
        out = ("error", f"{type(e).__name__}: {_first_line(e)}")
      sys.stdout.flush()
      sys.stderr.flush()
    queue.put((task.name, *out))


def _receive(queue, timeout, board, ended):
  """Takes the messages waiting (the first within `timeout` seconds): progress to the board,
  a worker's last word into `ended`."""
  messages = []
  try:
    messages.append(queue.get(timeout=timeout))
    while True:
      messages.append(queue.get_nowait())
  except queues.Empty:
    pass
  for name, kind, payload in messages:
    if kind == "progress":
      board.update(name, **payload)
    else:
      ended[name] = (kind, payload)


class _Worker:
  """A worker process, its inbox and cores, and the task it runs (None: idle)."""

  def __init__(self, context, cores, queue):
    self.cores, self.inbox, self.task = cores, context.Queue(), None
    self.process = context.Process(target=_worker, args=(cores, self.inbox, queue))
    self.process.start()

  def give(self, task):
    self.task = task
    self.inbox.put(task)

  def stop(self, timeout):
    if self.process.is_alive():
      self.inbox.put(None)
      self.process.join(timeout=timeout)
    if self.process.is_alive():  # stuck in its teardown: what it sent is all that counts
      self.process.terminate()
      self.process.join(timeout=10)


def run(tasks, jobs, board, on_done, poll=0.25):
  """Runs `tasks` in order in at most `jobs` worker processes at once; calls
  on_done(task, kind, payload) as each ends: kind "result" with what its runner returned, or
  "error" with what stopped it. Workers run on the CPU unless JAX_PLATFORMS says otherwise
  when more than one runs at once: two processes cannot share one accelerator (a TPU is held by
  one process, a GPU's memory preallocated by the first)."""
  context = multiprocessing.get_context("spawn")
  queue = context.Queue()
  jobs = max(1, min(jobs, len(tasks)))
  if jobs > 1:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # spawned workers read this environment
  todo, ended = list(tasks), {}
  pool = [_Worker(context, cores, queue) for cores in core_sets(jobs) or [None] * jobs]
  try:
    while todo or any(w.task for w in pool):
      for w in pool:
        if w.task is None and todo:
          w.give(todo.pop(0))
          board.start(w.task.name)
      _receive(queue, poll, board, ended)
      for i, w in enumerate(pool):
        task = w.task
        if task is None:
          continue
        if task.name not in ended and w.process.exitcode is not None:
          _receive(queue, poll, board, ended)  # its last word may still be in the pipe
          ended.setdefault(
            task.name, ("error", f"its process died (exit code {w.process.exitcode})")
          )
          if todo:  # a fresh worker on its cores takes the rest
            pool[i] = _Worker(context, w.cores, queue)
        if task.name in ended:
          pool[i].task = None
          on_done(task, *ended.pop(task.name))
      board.tick()
  finally:
    for w in pool:  # done, or interrupted: the workers stop with this process
      if w.task is None:
        w.stop(timeout=60)
      else:
        w.process.terminate()
        w.process.join(timeout=10)
    board.close()
