"""experiments.gpu_bench --compile_only: the train suite's config compiled for a target, not run."""

import json

import pytest

from experiments import gpu_bench


@pytest.mark.slow  # three programs of the bench's tiny model: ~2 minutes on a loaded 2-core CPU
def test_gpu_bench_compile_only_writes_a_report_that_fits(tmp_path, capsys):
  with pytest.raises(SystemExit) as done:
    gpu_bench.main([str(tmp_path), "--dry-run", "--compile_only=v5e:2x2"])
  assert done.value.code == 0, capsys.readouterr().err
  report = json.load(open(tmp_path / "compile_report.json"))
  assert report["devices"] == 4 and report["mesh"]["data"] == 4
  assert set(report["programs"]) == {"init", "train_step", "eval_step"}
  assert all(p["fits"] and p["peak_bytes"] > 0 for p in report["programs"].values())
  assert "train_step" in capsys.readouterr().out


def test_gpu_bench_compile_only_bad_target_is_one_line_exit_2(tmp_path, capsys):
  with pytest.raises(SystemExit) as done:
    gpu_bench.main([str(tmp_path), "--compile_only=v5e"])
  assert done.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == ["error: --compile_only=v5e: 'v5e': expected a TPU topology name such as v5e:2x4"]
