"""Stand-in runners for the main job's tests: what a worker process runs in place of an
experiment (a spawned worker imports them by name)."""

import json
import os

from experiments.engine import registry


def trains(task, tracker):
  """Three units with a sweep's step line each, a line of its own; a declared result of 5.3."""
  for i, unit in enumerate(("r1", "r4", "r16")):
    tracker.progress(i, 3, unit)
    tracker.log(f"{unit}: step 10/20: 3/3 replicas training, best validation accuracy 0.500")
  tracker.progress(3, 3, None)
  print("a line the experiment printed itself", flush=True)
  return result(task)


def result(task):
  """What `trains` returns: cache's committed quick record (it reads claim 5.3 SUPPORTED),
  filed as this task's."""
  with open(os.path.join(registry.RESULTS, "cache", "quick.json")) as f:
    record = json.load(f)
  return record | {"experiment": task.name, "size": task.size, "seconds": 1.0}


def measures_cores(task, tracker):
  """Says which cores its worker may run on (in its log) and returns what it ran."""
  print(f"stub measured on cores {sorted(os.sched_getaffinity(0))}", flush=True)
  return {"experiment": task.name, "size": task.size}


def raises(task, tracker):
  tracker.progress(0, 2, "r1")
  raise RuntimeError("out of memory at L=4096\nmore detail")


def dies(task, tracker):
  tracker.progress(0, 2, "r1")
  os._exit(3)  # as a process killed for its memory would, without a word


def reports_process(task, tracker):
  """Returns the id of the worker process that ran it."""
  return {"experiment": task.name, "pid": os.getpid()}
