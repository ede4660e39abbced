"""jaxformer.train.sweep_store: a finished sweep is read back, not trained again, and a
crash while writing one leaves no entry."""

import ast
import os
import pathlib

import jax
import numpy as np
import pytest

from jaxformer import data
from jaxformer.train import program, sweep, sweep_store
from tests.train.test_sweep import REPLICAS, _config


def _refuse(*args, **kwargs):
  raise AssertionError("trained again: the stored sweep was not read back")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("sweeps"))
  return directory, sweep.train(_config(), REPLICAS, store=directory)


def test_a_stored_sweep_is_read_back_equal_without_training(stored, monkeypatch):
  directory, first = stored
  assert len(os.listdir(directory)) == 1
  monkeypatch.setattr(sweep, "_train", _refuse)
  lines = []
  again = sweep.train(_config(), REPLICAS, store=directory, log=lines.append)
  assert any("read back" in line for line in lines)
  assert again.runs == first.runs  # losses, evals, steps and stop reasons, exactly
  assert (again.chance, again.steps, again.compile_seconds) == (
    first.chance,
    first.steps,
    first.compile_seconds,
  )
  assert jax.tree.structure(again.params) == jax.tree.structure(first.params)
  for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(first.params), strict=True):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)
  assert again.config.model.vocab_size == first.config.model.vocab_size == 16


def _key(config, replicas=REPLICAS, keep_params=True):
  datasets = [data.get_dataset(config.task, split) for split in ("train", "test")]
  return sweep_store.key(program.resolve(config, datasets[0]), replicas, datasets, keep_params)


@pytest.mark.parametrize(
  "config, replicas, keep_params",
  [
    (_config(), REPLICAS[:2], True),  # other replicas
    (_config(learning_rate=5e-3), REPLICAS, True),  # another config field
    (_config(task=_config().task.replace("num_examples=256", "num_examples=128")), REPLICAS, True),
    (_config(), REPLICAS, False),  # params not kept
  ],
)
def test_any_other_input_is_another_key(config, replicas, keep_params):
  assert _key(config, replicas, keep_params) != _key(_config())
  assert _key(_config()) == _key(_config())


def test_the_key_changes_with_the_library_source(monkeypatch):
  before = _key(_config())
  monkeypatch.setattr(sweep_store, "library_fingerprint", lambda: "another source")
  assert _key(_config()) != before


def test_a_failed_write_leaves_no_entry_and_loses_no_result(tmp_path, monkeypatch):
  def crash(*args, **kwargs):
    raise OSError("disk full")

  monkeypatch.setattr(np, "savez", crash)
  lines = []
  result = sweep.train(_config(), REPLICAS[:1], store=str(tmp_path), log=lines.append)
  assert len(result.runs) == 1  # the trained sweep is still returned
  assert any("not stored" in line and "disk full" in line for line in lines)
  assert os.listdir(tmp_path) == []  # neither an entry nor its temporary directory


class _Died(Exception):
  """The process stopping part-way (a crash, a session's end)."""


def test_a_sweep_stopped_part_way_resumes_from_its_checkpoint_to_the_same_result(
  tmp_path, monkeypatch
):
  """A checkpoint at every evaluation (CHECKPOINT_SECONDS 0); the run stops right after the
  one at step 4 of 8; the same call then resumes there, trains the steps after it alone and
  ends exactly as an uninterrupted run, and its checkpoint goes once the sweep is stored."""
  config, store = _config(total_steps=8), str(tmp_path)
  whole = sweep.train(config, REPLICAS)  # no store: never checkpointed
  monkeypatch.setattr(sweep, "CHECKPOINT_SECONDS", 0.0)
  save, steps = sweep_store.save_partial, []

  def stops_after_step_4(directory, key_, continuation, fields):
    assert save(directory, key_, continuation, fields) is None
    steps.append(continuation.step)
    if continuation.step == 4:
      raise _Died

  monkeypatch.setattr(sweep_store, "save_partial", stops_after_step_4)
  with pytest.raises(_Died):
    sweep.train(config, REPLICAS, store=store)
  assert steps == [2, 4] and os.listdir(store) == [_key(config) + sweep_store.PARTIAL]
  lines = []
  again = sweep.train(config, REPLICAS, store=store, log=lines.append)
  assert any("resumes at step 4 from its checkpoint" in line for line in lines), lines
  assert steps == [2, 4, 6]  # the resumed run trained steps 5-8 alone
  assert again.runs == whole.runs and again.first_step == whole.first_step == 0
  for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(whole.params), strict=True):
    np.testing.assert_array_equal(a, b)
  assert os.listdir(store) == [_key(config)]  # stored, its checkpoint removed


def test_a_checkpoint_that_cannot_be_written_keeps_the_one_before(tmp_path, monkeypatch):
  def at(step):
    row = {"state": [np.full(3, step, np.float32)], "losses": [1.0] * step, "evals": [],
           "active": True, "running": True, "stop_reason": "completed"}  # fmt: skip
    return sweep.Continuation(step, {REPLICAS[0]: row}, "basis")

  assert sweep_store.save_partial(str(tmp_path), "k", at(2), {"first_step": 0}) is None
  rename, tries = os.rename, []

  def fails_into_place(src, dst):  # the new checkpoint's move into place, not the put-back
    if dst.endswith("k" + sweep_store.PARTIAL) and not tries:
      tries.append(src)
      raise OSError("disk full")
    rename(src, dst)

  monkeypatch.setattr(sweep_store.os, "rename", fails_into_place)
  assert "disk full" in sweep_store.save_partial(str(tmp_path), "k", at(4), {"first_step": 0})
  kept, fields = sweep_store.load_partial(str(tmp_path), "k")
  assert kept["step"] == 2 and fields == {"first_step": 0}
  np.testing.assert_array_equal(kept["rows"][0][1]["state"][0], np.full(3, 2, np.float32))
  assert sorted(os.listdir(tmp_path)) == ["k" + sweep_store.PARTIAL]  # no scratch left


def test_params_that_are_not_plain_arrays_are_not_stored(tmp_path):
  result = sweep.SweepResult(None, [], {"w": np.zeros(2, jax.numpy.bfloat16)}, 0.5, "", 0, 0, 0)
  assert "not plain numeric arrays" in sweep_store.save(str(tmp_path), "k", result)
  assert os.listdir(tmp_path) == []


def test_a_stored_wsd_sweep_keeps_the_state_a_longer_sweep_continues_from(tmp_path, monkeypatch):
  config = _config(total_steps=6, lr_schedule="wsd", lr_decay_fraction=0.5)
  first = sweep.train(config, REPLICAS, store=str(tmp_path))
  monkeypatch.setattr(sweep, "_train", _refuse)
  again = sweep.train(config, REPLICAS, store=str(tmp_path))
  a, b = again.continuation, first.continuation
  assert (
    (a.step, a.basis, list(a.rows)) == (b.step, b.basis, list(b.rows)) == (3, b.basis, REPLICAS)
  )
  for replica in REPLICAS:
    x, y = a.rows[replica], b.rows[replica]
    assert {k: v for k, v in x.items() if k != "state"} == {
      k: v for k, v in y.items() if k != "state"
    }
    assert len(x["state"]) == len(y["state"]) > 0
    for u, v in zip(x["state"], y["state"], strict=True):
      assert u.dtype == v.dtype
      np.testing.assert_array_equal(u, v)
  assert (
    a.covers(_config(total_steps=10, lr_schedule="wsd", lr_decay_fraction=0.5), REPLICAS) is None
  )


def test_the_fingerprint_leaves_out_probes_and_training_never_imports_them(tmp_path):
  for rel, text in (("train/step.py", "a = 1\n"), ("analysis/probe.py", "b = 1\n")):
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / rel).write_text(text)
  before = sweep_store.source_fingerprint(str(tmp_path))
  (tmp_path / "analysis" / "new_probe.py").write_text("c = 2\n")
  assert sweep_store.source_fingerprint(str(tmp_path)) == before  # a new probe keeps the key
  (tmp_path / "train" / "step.py").write_text("a = 2\n")
  assert sweep_store.source_fingerprint(str(tmp_path)) != before  # training code changes it
  root = pathlib.Path(sweep_store.__file__).resolve().parents[1]
  for path in root.rglob("*.py"):
    if path.relative_to(root).parts[0] in sweep_store.NOT_TRAINING:
      continue
    for node in ast.walk(ast.parse(path.read_text())):
      names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
        a.name for a in getattr(node, "names", [])] if isinstance(node, ast.Import) else []  # fmt: skip
      assert not any(n.startswith("jaxformer.analysis") for n in names), path
      if isinstance(node, ast.ImportFrom) and node.module == "jaxformer":
        assert not {a.name for a in node.names} & set(sweep_store.NOT_TRAINING), path


def test_a_users_mixer_file_keys_the_sweep_by_its_contents(tmp_path):
  """A custom rung names its mixer by path; an edited file is another sweep, not a stale one."""
  path = tmp_path / "mine.py"
  path.write_text("class Mine:\n  pass\n")
  config = _config()
  with config.model.unlocked():
    config.model.mixer = f"{path}:Mine"
  first = _key(config)
  path.write_text("class Mine:\n  scale = 2.0\n")
  assert _key(config) != first and _key(config) == _key(config)
