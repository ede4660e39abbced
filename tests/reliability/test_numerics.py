"""Numerics, end to end: a non-finite loss stops `python -m experiments.main` with one line
naming the step and the last good checkpoint, which then resumes to a finite finish; with
skip_nonfinite=True the run goes on and metrics.jsonl counts the skipped batches.

The bad batch comes from the loop's `nan:5` fault point: step 5's token ids are set to
vocab_size, which the model embeds as NaN (jaxformer/nn/lm.py). In-process checks of the
same logic (an exploding learning rate) are in tests/train/test_loop.py.
"""

import math

import pytest

from tests.reliability import helpers as h

BAD = 5  # between the checkpoints of steps 3 and 6


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The stopping and the skipping run, started together (separate compile caches)."""
  root = tmp_path_factory.mktemp("numerics")
  data_dir = str(root / "data")
  procs = {
    name: h.start(
      h.train_command(root / name, *args),
      data_dir,
      cache_dir=str(root / f"c-{name}"),
      fault=f"nan:{BAD}",
    )
    for name, args in (("stop", ()), ("skip", ("--config.skip_nonfinite=True",)))
  }
  return root, data_dir, {name: h.finish(proc) for name, proc in procs.items()}


def test_nonfinite_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(runs):
  root, data_dir, results = runs
  code, out, err = results["stop"]
  lines = err.strip().splitlines()
  assert code == 1 and "Traceback" not in err, err[-3000:]
  assert lines[-1].startswith(f"error: non-finite loss or gradient at step {BAD} (loss=nan"), err
  assert "the last good checkpoint is step 3" in lines[-1]
  workdir = root / "stop"
  assert h.complete_steps(workdir) == [3]  # nothing saved from the bad step on
  assert [s for s, _ in h.losses(workdir)] == [1, 2, 3, 4]  # the bad step is not recorded

  # The kept checkpoint is good: the same command without the bad batch resumes from it.
  code, out, err = h.train(workdir, data_dir, cache_dir=str(root / "c-stop"))
  assert code == 0 and h.resumed_from(out) == 3, err[-3000:]
  steps, values = zip(*h.losses(workdir), strict=True)
  assert steps == tuple(range(1, h.STEPS + 1)) and all(math.isfinite(v) for v in values)


def test_skip_nonfinite_continues_and_counts_skipped_steps(runs):
  root, _, results = runs
  code, out, err = results["skip"]
  assert code == 0 and f"completed at step {h.STEPS}" in out, err[-3000:]
  assert "skipped 1 non-finite steps" in out
  assert f"step {BAD}: non-finite loss or gradient, batch skipped" in out
  train = [r for r in h.records(root / "skip") if "loss" in r]
  assert [r["step"] for r in train] == list(range(1, h.STEPS + 1))
  assert train[BAD - 1]["loss"] == "nan"  # JSON has no NaN: recorded as a string
  assert [r["skipped_steps"] for r in train] == [0] * (BAD - 1) + [1] * (h.STEPS - BAD + 1)
  assert all(math.isfinite(r["loss"]) for r in train if r["step"] != BAD)
