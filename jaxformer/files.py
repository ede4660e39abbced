"""File-system checks shared by the entry points."""

import os


def ensure_writable_dir(path):
  """Creates directory `path` if needed and proves it writable by writing and removing a
  probe file; raises OSError when it cannot (before any long work starts)."""
  os.makedirs(path, exist_ok=True)
  probe = os.path.join(path, f".write-probe-{os.getpid()}")
  with open(probe, "w") as f:
    f.write("ok")
  os.remove(probe)
