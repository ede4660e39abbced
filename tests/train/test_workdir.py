"""A model sized from its task, the workdir a run leaves, and reading the trained run back."""

import json
import os

import chex
import jax
import pytest

from jaxformer import data, files, ladder
from jaxformer.train import checkpoint, loop, sharding, workdir
from jaxformer.train import program as program_lib
from tests.train.train_helpers import TINY_TASK, fake_object_store, tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
  """A 4-step run of a model whose vocab_size and max_len were left to the task."""
  root = tmp_path_factory.mktemp("run") / "run"
  config = tiny_config("softmax", data_dir=data_dir, checkpoint_every=2, **{"model.num_layers": 1})
  with config.unlocked():
    config.model.vocab_size = config.model.max_len = None
  return root, config, loop.train(config, str(root))


def test_unset_sizes_come_from_the_task_and_are_written(trained):
  root, given, summary = trained
  run_config = summary["config"]
  assert (run_config.model.vocab_size, run_config.model.max_len) == (32, 16)  # TINY_TASK's
  assert given.model.vocab_size is None  # the caller's config is not changed
  assert summary["params"]["embed"].shape == (32, 32)
  assert summary["params"]["pos_embed"].shape == (16, 32)
  written = json.loads((root / workdir.CONFIG_FILE).read_text())
  assert written == json.loads(run_config.to_json())
  assert workdir.read_config(root).to_dict() == run_config.to_dict()
  task = json.loads((root / workdir.TASK_FILE).read_text())
  assert task == {"spec": data.format_spec(*data.parse_spec(TINY_TASK)), "vocab_size": 32,
                  "seq_len": 16, "chars": None}  # fmt: skip


def test_load_restores_the_last_params_only(trained, monkeypatch):
  root, _, summary = trained
  read = []
  real = checkpoint.Checkpointer._restore_state
  monkeypatch.setattr(
    checkpoint.Checkpointer,
    "_restore_state",
    lambda self, step, target: read.append(target) or real(self, step, target),
  )
  run = workdir.load(root)
  assert run.step == 4 and run.text.vocab_size == 32 and run.text.seq_len == 16
  assert [set(t) for t in read] == [{"params"}]  # no optimizer state asked for
  chex.assert_trees_all_equal(run.params, jax.device_get(summary["params"]))
  tokens = jax.numpy.zeros((1, 16), jax.numpy.int32)
  assert run.model.apply({"params": run.params}, tokens).shape == (1, 16, 32)


def test_explicit_sizes_win_and_are_checked_against_the_task(data_dir):
  dataset = data.get_dataset(TINY_TASK, "train", data_dir)
  config = tiny_config(**{"model.vocab_size": 40, "model.max_len": None})
  resolved = program_lib.resolve(config, dataset)
  assert (resolved.model.vocab_size, resolved.model.max_len) == (40, 16)
  assert resolved.is_locked and config.model.max_len is None
  for field, value, message in [
    ("max_len", 8, "task seq_len=16 > model.max_len=8"),
    ("vocab_size", 31, "task vocab_size=32 > model.vocab_size=31"),
  ]:
    with pytest.raises(ladder.ConfigError, match=message):
      program_lib.resolve(tiny_config(**{f"model.{field}": value}), dataset)


def test_a_workdir_without_a_run_is_named(tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match=f"--workdir={tmp_path}: no config.json"):
    workdir.load(tmp_path)


def test_run_files_and_the_workdir_check_go_through_epath(trained, tmp_path):
  """config.json and task.json written to and read back from a (fake) gs:// workdir."""
  _, _, summary = trained
  dataset = data.Dataset(source=(), vocab_size=32, seq_len=16, spec=TINY_TASK, split="test")
  with fake_object_store(tmp_path):
    files.ensure_writable_dir("gs://bucket/run")
    workdir.write_run("gs://bucket/run", summary["config"], dataset)
    config = workdir.read_config("gs://bucket/run")
    task = workdir.read_task("gs://bucket/run")
  assert config.to_dict() == summary["config"].to_dict()
  assert (task.vocab_size, task.seq_len, task.spec) == (32, 16, TINY_TASK)
  assert sorted(os.listdir(tmp_path / "bucket" / "run")) == ["config.json", "task.json"]


def test_building_an_unsized_model_says_how_to_size_it():
  config = tiny_config(**{"model.vocab_size": None, "model.max_len": None})
  mesh = sharding.make_mesh((-1, 1, 1))
  with pytest.raises(ladder.ConfigError, match=r"model.max_len=None: .*program.resolve"):
    program_lib.build(config, mesh, (16, 16))
