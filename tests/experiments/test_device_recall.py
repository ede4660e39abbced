"""experiments/device_recall.py: fixed_memory's and the scorecard's sweeps on Zoology's task
(their full designs with the hard setting replaced, every task one the data layer accepts),
its table, its command line, the backend check and the budget, and (slow) its dry run end to
end on the CPU."""

import dataclasses
import json
import os
import subprocess
import time

import pytest

from experiments import device_recall as m
from experiments import s1_fixed_memory as fixed_memory
from experiments import s9_scorecard as scorecard
from jaxformer.data import spec


@pytest.mark.parametrize("declared", [fixed_memory.EXPERIMENT, scorecard.EXPERIMENT])
def test_zoology_task_replaces_the_hard_setting_of_the_full_design(declared):
  e = m.experiment(declared.name, dry_run=False)
  full, accel = declared.sizes["full"], e.sizes[m.SIZE]
  assert accel.points == {"hard": (4, 8, 16, 32, 64)}
  assert accel.task["hard"] == {"vocab_size": 8192, "seq_len": 256}
  assert set(accel.task) == {"hard", "num_examples", "num_test_examples"}  # easy left out
  # the rest is the full design: width, batch, rates, steps, the longer arms
  kept = ("model", "batch_size", "learning_rates", "steps", "step_cap", "arm_rates", "extra")
  assert all(getattr(accel, f) == getattr(full, f) for f in kept)
  assert accel.arm_steps == {k: v for k, v in full.arm_steps.items() if "@ easy" not in k}
  assert e.arms == declared.arms and e.criteria == declared.criteria
  assert declared.sizes == {k: v for k, v in e.sizes.items() if k != m.SIZE}  # not declared
  for point in (*e.trained_points(m.SIZE), *e.points(m.SIZE)):
    name, params = spec.parse_spec(e.task(accel, point))  # 4P <= L, V >= 2P + 2
    assert (name, params["vocab_size"], params["seq_len"]) == ("mqar", 8192, 256)


def test_both_experiments_train_and_read_the_same_six_tasks():
  specs = m.task_specs(list(m.EXPERIMENTS), dry_run=False)
  assert m.task_specs(["fixed_memory"], False) == m.task_specs(["scorecard"], False) == specs
  pairs = [spec.parse_spec(s)[1]["num_kv_pairs"] for s in specs]
  assert pairs == [(4, 8, 16, 32, 64), 4, 8, 16, 32, 64]  # the mixture, then each P


def test_with_task_drops_the_other_settings_and_their_step_counts():
  size = dataclasses.replace(
    fixed_memory.SIZES["tiny"], arm_steps={"rnn_64": (8, 8), "linear_8 @ easy": (6, 6)}
  )
  e = dataclasses.replace(fixed_memory.EXPERIMENT, sizes={"tiny": size})
  accel = m.with_task(e, {"vocab_size": 64, "seq_len": 32}, (2, 8), "tiny").sizes[m.SIZE]
  assert accel.points == {"hard": (2, 8)} and accel.arm_steps == {"rnn_64": (8, 8)}
  assert accel.task == {"num_examples": 64, "num_test_examples": 32,
                        "hard": {"vocab_size": 64, "seq_len": 32}}  # fmt: skip


def _result():
  unit = {"selected": {"learning_rate": 3e-3, "weight_decay": 0.0}, "plateau": ["flat"],
          "sweep_seconds": 12.4}  # fmt: skip
  return {
    "metrics": {"adjusted": {
      "softmax": {"hard": [0.5, 0.7], "hard:4": [1.0, 0.9], "hard:64": [0.8, 0.6]},
      "linear_4": {"hard": [0.1, 0.1], "hard:4": [0.5, 0.25], "hard:64": [0.0, -0.02]},
    }},
    "units": [{"arm": "softmax", **unit}, {"arm": "linear_4", **unit, "selected": None}],
  }  # fmt: skip


def test_summary_rows_average_the_seeds_at_each_p_and_the_table_shows_them():
  rows = m.summary_rows(_result())
  assert [r["arm"] for r in rows] == ["softmax", "linear_4"]
  assert rows[0]["adjusted"] == {"4": 0.95, "64": 0.7} and rows[0]["rate"] == 3e-3
  assert rows[1]["adjusted"] == {"4": 0.375, "64": -0.01} and rows[1]["rate"] is None
  table = m.table("scorecard", rows)
  assert "| arm | rate | P=4 | P=64 | plateau | s |" in table
  assert "| softmax | 0.003 | 0.95 | 0.70 | flat | 12 |" in table
  assert "| linear_4 | - | 0.38 | -0.01 | flat | 12 |" in table


@pytest.mark.parametrize(
  "argv, says",
  [
    (["out", "--only=fixed_memory,nope"], "--only: nope not one of fixed_memory, scorecard"),
    (["a", "b"], "one OUT_DIR expected"),
    ([], "one OUT_DIR expected"),
    (["out", "--jobs=0"], "jobs"),
  ],
)
def test_bad_command_line_exits_2_naming_the_field(argv, says, capsys):
  with pytest.raises(SystemExit) as stop:
    m.main(argv)
  assert stop.value.code == 2 and says in capsys.readouterr().err


def test_wrong_backend_trains_nothing(tmp_path):
  with pytest.raises(SystemExit) as stop:
    m.main([str(tmp_path / "out"), f"--workdir={tmp_path / 'work'}"])
  assert stop.value.code == 1
  report = json.loads((tmp_path / "out" / "device_recall.json").read_text())
  assert report["experiments"] == {} and report["environment"]["backend"] == "cpu"
  assert "expected 'gpu'" in (tmp_path / "work" / "probe.log").read_text()


def test_an_experiment_the_budget_cannot_start_is_reported_and_fails_the_run(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # relative paths: from here, not from the children's directory
  probe = '{"backend": "cpu"}'
  monkeypatch.setattr(m.gpu_bench, "child", lambda *a, **k: ("ok", 0, 0.1, probe))
  monkeypatch.setattr(
    m, "prepare", lambda specs, timeout: (time.sleep(timeout), ("ok", timeout))[1]
  )
  with pytest.raises(SystemExit) as stop:  # the data take the whole budget of 1 s
    m.main(["out", "--dry-run", "--budget_s=1", "--workdir=w"])
  assert stop.value.code == 1 and (tmp_path / "w").is_dir()
  report = json.loads((tmp_path / "out" / "device_recall.json").read_text())
  assert report["dry_run"] and report["environment"] == {"backend": "cpu"}
  assert report["data"]["status"] == "ok" and len(report["data"]["specs"]) == 3
  assert {n: e["status"] for n, e in report["experiments"].items()} == {
    "fixed_memory": "not started: out of time",
    "scorecard": "not started: out of time",
  }


def test_a_timeout_kills_the_experiments_whole_process_group(tmp_path):
  pid_file = tmp_path / "worker.pid"  # a worker the experiment's process started
  cmd = ["bash", "-c", f"sleep 120 & echo $! > {pid_file}; echo started; wait"]
  status, wall = m.run_group(cmd, str(tmp_path / "x.log"), timeout=1.0)
  assert status == "timeout" and wall < 30 and (tmp_path / "x.log").read_text() == "started\n"
  status_file = f"/proc/{int(pid_file.read_text())}/status"
  for _ in range(100):  # gone, or a zombie left to whoever reaps orphans
    if not os.path.exists(status_file) or "\nState:\tZ" in open(status_file).read():
      break
    time.sleep(0.05)
  else:
    pytest.fail("the experiment's worker outlived its timeout")
  assert m.run_group(["bash", "-c", "exit 3"], str(tmp_path / "y.log"), 10)[0] == "failed (exit 3)"


def test_the_shell_script_answers_help_and_a_bad_command_line():
  script = os.path.join(os.path.dirname(m.__file__), "device_recall.sh")
  done = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, timeout=30)
  assert done.returncode == 0 and "--wheels [DIR]" in done.stdout
  done = subprocess.run(["bash", script], capture_output=True, text=True, timeout=30)
  assert done.returncode == 2 and "error: OUT_DIR or --wheels [DIR] expected" in done.stderr


@pytest.mark.slow  # both experiments' 29 units at the tiny size: ~3 minutes on 2 cores
def test_dry_run_trains_both_sweeps_and_writes_what_a_device_call_brings_back(tmp_path):
  out = tmp_path / "out"
  with pytest.raises(SystemExit) as stop:
    m.main([str(out), "--dry-run", "--jobs=2", f"--workdir={tmp_path / 'work'}"])
  assert stop.value.code == 0
  files = sorted(p.name for p in out.iterdir())
  assert len(files) <= 7 and "device_recall.json" in files
  report = json.loads((out / "device_recall.json").read_text())
  assert report["data"]["status"] == "ok" and len(report["data"]["specs"]) == 3
  for name, arms in (("fixed_memory", fixed_memory.ARMS), ("scorecard", scorecard.ARMS)):
    entry = report["experiments"][name]
    assert entry["status"] == "ok" and {f"{name}_accel.json", f"{name}.log"} <= set(files)
    assert {r["arm"] for r in entry["rows"]} == {a.name for a in arms}
    assert all(set(r["adjusted"]) == {"2", "4"} for r in entry["rows"])
    result = json.loads((out / f"{name}_accel.json").read_text())
    assert result["exploratory_only"] and result["size"] == m.SIZE
    assert set(entry["criteria"]) == {c["name"] for c in result["criteria"]}
