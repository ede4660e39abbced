"""train(): summary, compile once, early stop, non-finite handling, restore onto another mesh."""

import json

import chex
import numpy as np
import pytest

from jaxformer.train import checkpoint, loop, step
from jaxformer.train import metrics as metrics_lib
from jaxformer.train import program as program_lib
from tests.train.train_helpers import tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


def _config(data_dir, **fields):
  """Tests share one rung, total_steps and the optimizer, so each program compiles once.

  The softmax rung (no MLP, no norms) compiles in about half the transformer's time."""
  return tiny_config("softmax", data_dir=data_dir, mesh_shape=(-1, 1, 1), total_steps=6, **fields)


def _exploding(data_dir, **fields):
  """lr 1e30: the first update blows the weights up, step 2's loss is not finite."""
  return _config(data_dir, learning_rate=1e30, warmup_steps=0, **fields)


def test_train_without_workdir_compiles_once_and_returns_summary(data_dir, monkeypatch):
  program_lib._PROGRAMS.clear()  # a fresh program, traced through the counting wrapper
  monkeypatch.setattr(step, "train_step", chex.assert_max_traces(step.train_step, n=1))
  config = _config(data_dir, eval_every=4)
  summary = loop.train(config, None)
  assert summary["steps"] == summary["final_step"] == 6 and summary["first_step"] == 0
  assert len(summary["losses"]) == 6 and all(np.isfinite(summary["losses"]))
  assert [e[0] for e in summary["evals"]] == [4, 6]
  assert summary["final_eval_loss"] == summary["evals"][-1][1]
  assert summary["best_eval_loss"] == min(e[1] for e in summary["evals"])
  assert summary["stop_reason"] == "completed" and summary["skipped_steps"] == 0
  assert summary["steps_per_sec"] > 0 and summary["tokens_per_sec"] > 0
  assert summary["params"]["embed"].shape == (32, 32)
  # A second call with the same shapes reuses the program (no retrace: assert_max_traces)
  # and, from the same seed, repeats the run exactly.
  again = loop.train(config, None)
  assert again["losses"] == summary["losses"]
  assert len(program_lib._PROGRAMS) == 1


def test_one_program_cache_key_recipe_and_eviction(data_dir):
  a, b = _config(data_dir), _config(data_dir)
  fields = ("learning_rate", "total_steps")
  assert program_lib.cache_key(a, fields, (8, 16)) == program_lib.cache_key(b, fields, (8, 16))
  with b.unlocked():
    b.model.d_model = 16
  assert program_lib.cache_key(a, fields, (8, 16)) != program_lib.cache_key(b, fields, (8, 16))
  b = _config(data_dir, learning_rate=0.5)
  assert program_lib.cache_key(a, fields, 1) != program_lib.cache_key(b, fields, 1)
  assert program_lib.cache_key(a, ("seed",), 1) == program_lib.cache_key(b, ("seed",), 1)
  cache = {}
  for key in "abc":
    assert program_lib.remember(cache, key, key.upper(), max_entries=2) == key.upper()
  assert cache == {"b": "B", "c": "C"}  # the oldest went first


def test_measured_peak_on_a_multi_device_mesh(data_dir, monkeypatch):
  """Without a configured peak the loop measures one device's matmul, before it enters the
  8-device mesh (inside it, jit refuses a single-device matmul)."""
  measured = []
  real = metrics_lib.measure_matmul_peak.__wrapped__

  def small_peak(*args, **kwargs):
    measured.append(real(size=128, repeats=1))
    return measured[-1]

  monkeypatch.setattr(metrics_lib, "measure_matmul_peak", small_peak)
  summary = loop.train(_config(data_dir, peak_flops_per_device=None), None)
  assert len(measured) == 1 and measured[0] > 0
  assert np.isfinite(summary["mfu"]) and summary["mfu"] > 0


def test_early_stop_at_first_eval_reaching_accuracy(data_dir):
  # A large step size so that eval accuracy moves off zero within the six steps.
  full = loop.train(_config(data_dir, eval_every=1, learning_rate=1e-2, warmup_steps=0), None)
  accs = [e[2] for e in full["evals"]]
  target = max(accs[:-1])
  assert target > 0, accs
  first = next(i for i, a in enumerate(accs) if a >= target) + 1
  early = loop.train(
    _config(data_dir, eval_every=1, learning_rate=1e-2, warmup_steps=0, early_stop_accuracy=target),
    None,
  )
  assert early["stop_reason"] == "early_stop" and early["final_step"] == first < 6
  assert early["losses"] == full["losses"][:first]


def test_nonfinite_stops_naming_the_step_and_keeps_last_good_checkpoint(data_dir, tmp_path):
  config = _exploding(data_dir, checkpoint_every=1)
  with pytest.raises(loop.NonFiniteError, match="at step 2 .*last good checkpoint is step 1"):
    loop.train(config, str(tmp_path))
  assert checkpoint.Checkpointer(tmp_path / "checkpoints").all_steps() == [1]
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in records] == [1]


class _Recorder(loop.Hooks):
  def __init__(self):
    self.seen = []

  def __getattribute__(self, name):
    method = super().__getattribute__(name)
    if name.startswith("_") or not callable(method):
      return method

    def record(step_or_batch, *args):
      step = args[0] if name == "batch" else step_or_batch
      self.seen.append(f"{name} {step}")
      return method(step_or_batch, *args)

    return record


def test_hooks_see_every_point_in_order(data_dir, tmp_path):
  hooks = _Recorder()
  loop.train(_config(data_dir, eval_every=3, checkpoint_every=4), str(tmp_path), hooks=hooks)
  steps = [[f"batch {s}", f"stepped {s}"] for s in range(1, 7)]
  assert hooks.seen == [
    "started 0",
    *steps[0],
    *steps[1],
    *steps[2],
    "evaluated 3",
    *steps[3],
    "saving 4",
    "saved 4",
    *steps[4],
    *steps[5],
    "evaluated 6",
  ]


def test_skip_nonfinite_counts_and_skips(data_dir):
  summary = loop.train(_exploding(data_dir, skip_nonfinite=True), None)
  assert summary["skipped_steps"] == 5 and summary["final_step"] == 6
  assert np.isfinite(summary["losses"][0]) and not np.isfinite(summary["losses"][1])


def test_incompatible_workdir_is_named(data_dir, tmp_path):
  loop.train(_config(data_dir), str(tmp_path))
  other = _config(data_dir, **{"model.d_model": 16})
  with pytest.raises(checkpoint.CheckpointError, match="incompatible config.*model.d_model"):
    loop.train(other, str(tmp_path))


def test_resume_check_wants_data_position_state_step_and_directory_to_agree(data_dir):
  """What the loop's check says of a verified checkpoint (None: resumable)."""
  import jax.numpy as jnp

  from jaxformer import data
  from tests.train.train_helpers import TINY_TASK

  loader = data.Loader(data.get_dataset(TINY_TASK, "train", data_dir), 16, seed=0)
  position = {**loader.get_state(), "step": 6}
  state = {"step": jnp.int32(6)}
  check = loop._resume_problem
  assert check(loader, 6, state, {"loader": position, "skipped_steps": 0}) is None
  assert "data position 1, state step 6 and directory step 6 differ" in check(
    loader, 6, state, {"loader": {**position, "step": 1}}
  )
  assert "directory step 9" in check(loader, 9, state, {"loader": position})
  assert "no data position" in check(loader, 6, state, {})
  assert "skipped_steps=7" in check(loader, 6, state, {"loader": position, "skipped_steps": 7})
  assert "loader state seed=5" in check(loader, 6, state, {"loader": {**position, "seed": 5}})
