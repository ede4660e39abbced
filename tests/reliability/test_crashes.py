"""Crashes: SIGKILL a training run at five points, rerun the same command after each, and
the finished run's per-step losses and evals equal an uninterrupted run's bit for bit
(CPU); after every kill all steps up to the last complete checkpoint are still recorded.

The kills come from JAXFORMER_FAULT_AT at the loop's points (tests/reliability/faults.py), so
each lands at a known moment: a timer outside the process could not hit "during the
async write" reliably. SIGTERM (save and exit 0) is tested in tests/train/test_preemption.py.
"""

import pytest

from tests.reliability import helpers as h

# (fault point, what it interrupts); the run before each kill resumed from the last
# complete checkpoint the previous kill left.
KILLS = [
  ("init:0", "before the first step compiles: nothing saved yet"),
  ("step:5", "mid-loop, two steps after the checkpoint of step 3"),
  ("save:6", "right after step 6's save was dispatched: Orbax's async write in flight"),
  ("eval:8", "during the eval at step 8, its record not yet written"),
  ("saved:9", "right after step 9's checkpoint became durable"),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


def test_sigkill_at_five_points_then_resume_gives_the_uninterrupted_losses(data_dir, tmp_path):
  # The uninterrupted reference runs beside the interrupted chain (compiling for itself).
  reference = h.start(h.train_command(tmp_path / "ref"), data_dir)
  workdir, cache = tmp_path / "run", str(tmp_path / "c1")

  last_complete = 0
  for point, what in KILLS:
    code, out, err = h.train(workdir, data_dir, cache_dir=cache, fault=point)
    assert code == -9 and f"fault injected: SIGKILL at {point}" in err, (what, err[-3000:])
    assert h.resumed_from(out) == last_complete, (what, out)
    done = h.complete_steps(workdir)
    if point == "save:6":  # the kill landed during the write: step 6 is not a checkpoint
      in_flight = list((workdir / "checkpoints").glob("6.orbax-checkpoint-tmp*"))
      assert 6 not in done and in_flight, (what, done)
    if point == "saved:9":
      assert 9 in done, (what, done)
    last_complete = max(done, default=0)
    # No step up to the last complete checkpoint is lost, and none is recorded twice.
    steps = [s for s, _ in h.losses(workdir)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= last_complete, (what, steps)
  assert last_complete == 9

  code, out, err = h.train(workdir, data_dir, cache_dir=cache)
  assert code == 0 and f"completed at step {h.STEPS}" in out, err[-3000:]
  assert h.resumed_from(out) == 9
  ref_code, _, ref_err = h.finish(reference)
  assert ref_code == 0, ref_err[-3000:]
  assert [s for s, _ in h.losses(workdir)] == list(range(1, h.STEPS + 1))
  assert h.losses(workdir) == h.losses(tmp_path / "ref")  # bitwise: floats compared with ==
  assert h.evals(workdir) == h.evals(tmp_path / "ref") and len(h.evals(workdir)) == 3
