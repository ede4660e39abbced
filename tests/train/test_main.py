"""experiments/main.py end to end (2 steps into a temp workdir) and its usage errors."""

import json
import os

import pytest

from jaxformer import ladder
from jaxformer.train import loop
from tests.train.train_helpers import main_command, run, tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("data")


def test_main_trains_two_steps_and_writes_metrics_a_checkpoint_and_a_trace(data_dir, tmp_path):
  workdir = tmp_path / "run"
  result = run(
    main_command(workdir, "--config.total_steps=2", "--profile", "--profile_steps=1"), data_dir
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "completed at step 2, eval_loss=" in result.stdout
  records = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  train = [r for r in records if "loss" in r]
  evals = [r for r in records if "eval_loss" in r]
  assert [r["step"] for r in train] == [1, 2]
  assert all(r["loss"] > 0 and 0 <= r["accuracy"] <= 1 for r in train)
  assert {"learning_rate", "grad_norm", "skipped_steps"} <= set(train[0])
  assert {"tokens_per_sec", "mfu"} <= set(train[1])  # throughput from the 2nd step on
  assert evals == [{"step": 2, **{k: evals[0][k] for k in ("eval_loss", "eval_accuracy")}}]
  assert os.listdir(workdir / "checkpoints") == ["2"]
  assert os.listdir(workdir / "tensorboard")[0].startswith("events.out.tfevents")
  # --profile: a trace of step 2 (step 1 compiles) for TensorBoard and for Perfetto
  traced = [f for _, _, names in os.walk(workdir / "profile") for f in names]
  assert any(f.endswith(".xplane.pb") for f in traced), traced
  assert any(f.endswith(".trace.json.gz") for f in traced), traced
  assert "profile: a trace of steps 2.." in result.stdout


def _one_error_line(result):
  lines = result.stderr.strip().splitlines()
  assert result.returncode == 2, result.stderr[-2000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  return lines[0]


@pytest.mark.parametrize(
  "args,expected",
  [
    (["--config.nope=1"], "--config.nope: unknown config field 'nope'"),
    (["--config.total_steps=many"], "--config.total_steps=many"),
    (["--config.mesh_shape=(3,1,1)"], "mesh_shape=(3, 1, 1) has 3 devices but 1 are available"),
    (["--profile", "--profile_steps=0"], "--profile_steps=0: must be positive"),
  ],
)
def test_usage_errors_print_one_line_and_exit_2(data_dir, tmp_path, args, expected):
  line = _one_error_line(run(main_command(tmp_path, *args), data_dir))
  assert expected in line


def test_missing_config_file_and_unwritable_workdir(data_dir, tmp_path):
  cmd = main_command(tmp_path)
  cmd[3] = "--config=experiments/configs/nope.py"
  assert "no such config file" in _one_error_line(run(cmd, data_dir))
  blocker = tmp_path / "file"
  blocker.write_text("")
  line = _one_error_line(run(main_command(blocker / "sub"), data_dir))
  assert f"--workdir={blocker / 'sub'}: not a writable directory" in line


def test_debug_shows_the_traceback(data_dir, tmp_path):
  result = run(main_command(tmp_path, "--config.learning_rate=nan", "--debug"), data_dir)
  assert result.returncode != 0 and "Traceback" in result.stderr
  assert "learning_rate=nan" in result.stderr


@pytest.mark.parametrize(
  "fields,expected",
  [
    ({"mesh_shape": (3, 1, 1)}, "mesh_shape=(3, 1, 1) has 3 devices but 8"),
    ({"batch_size": 12}, "batch_size=12 is not divisible by the data-parallel size"),
    ({"learning_rate": float("nan")}, "learning_rate=nan"),
    ({"learning_rate": float("inf")}, "learning_rate=inf"),
    ({"model.max_len": 8}, "task seq_len=16 > model.max_len=8"),
    ({"model.vocab_size": 16}, "task vocab_size=32 > model.vocab_size=16"),
    ({"task": "mqar:vocab_size=32,seq_len=16,num_kv_pairs=99"}, "mqar.num_kv_pairs"),
    ({"eval_every": 0}, "eval_every=0"),
    ({"early_stop_accuracy": 1.5}, "early_stop_accuracy=1.5"),
    ({"model.d_model": 0}, "model.d_model=0"),
  ],
)
def test_train_rejects_bad_fields_before_compiling(data_dir, fields, expected):
  config = tiny_config(data_dir=str(data_dir), **fields)
  with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")) as info:
    loop.train(config, None)
  assert isinstance(info.value, ladder.ConfigError) or type(info.value).__name__ == "DataError"
