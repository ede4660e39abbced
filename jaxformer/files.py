"""File-system checks shared by the entry points; paths may be local or `etils.epath` URLs
(gs://bucket/dir, ...)."""

import os

from etils import epath


def is_local(path):
  """A path of this machine's file system (not an object store URL such as gs://)."""
  text = os.fspath(path)
  return "://" not in text or text.startswith("file://")


def ensure_writable_dir(path):
  """Creates directory `path` if needed and proves it writable by writing and removing a
  probe file; raises (OSError locally; a cloud file system raises its own errors) when it
  cannot, before any long work starts."""
  root = epath.Path(path)
  root.mkdir(parents=True, exist_ok=True)
  probe = root / f".write-probe-{os.getpid()}"
  probe.write_text("ok")
  probe.unlink()


def describe(error):
  """One line for an error of `ensure_writable_dir`: the OS reason, else type and message."""
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  lines = str(error).strip().splitlines()
  return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
