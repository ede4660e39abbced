"""Resume state, end to end: everything a resume reads besides the arrays is verified too.

A one-bit change in a checkpoint's metadata (the data position of step 9 read as step 1)
used to resume silently onto the wrong batches. Now the step is reported in one warning
line, the run falls back to the previous checkpoint, and the steps it trains again equal
the first run's bit for bit (so they saw the same batches).
"""

import os

from tests.reliability import helpers as h


def flip_loader_step(step_dir, old, new):
  """Flips the bits that turn the loader's `"step": old` into `new` in extra/metadata."""
  path = step_dir / "extra" / "metadata"
  text = path.read_bytes()
  needle = f'"loader": {{"step": {old},'.encode()
  assert text.count(needle) == 1, text[:400]
  at = text.index(needle) + len(needle) - 2  # the last digit of old
  changed = text[:at] + str(new).encode() + text[at + 1 :]
  assert sum(bin(a ^ b).count("1") for a, b in zip(text, changed, strict=True)) == 1
  path.write_bytes(changed)


def test_changed_data_position_is_caught_and_the_run_falls_back(tmp_path):
  data_dir, workdir, cache = str(tmp_path / "data"), tmp_path / "run", str(tmp_path / "c")
  code, _, err = h.train(workdir, data_dir, cache_dir=cache, fault="saved:9")
  assert code == -9, err[-3000:]
  first = h.losses(workdir)
  assert [s for s, _ in first] == list(range(1, 10))
  flip_loader_step(workdir / "checkpoints" / "9", 9, 1)

  code, out, err = h.train(workdir, data_dir, cache_dir=cache)
  assert code == 0 and f"completed at step {h.STEPS}" in out, err[-3000:]
  reports = [line for line in err.splitlines() if "unusable" in line]
  assert len(reports) == 1 and "checkpoint step 9 in " in reports[0], err[-3000:]
  assert "digest mismatch" in reports[0], reports
  assert h.resumed_from(out) == 6
  assert os.listdir(workdir / "checkpoints" / "corrupt")
  # Steps 7-9 were trained again on batches 7-9: the same losses as the first time.
  assert h.losses(workdir)[:9] == first
  assert [s for s, _ in h.losses(workdir)] == list(range(1, h.STEPS + 1))
