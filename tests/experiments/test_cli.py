"""Every entry point's command line: `--help` exits 0 with its usage, and a bad flag, an unknown
config field or a stray argument is one `error:` line and exit 2, before anything runs.

The entry points that also serve as libraries (run_all, scorecard, bench, gpu_bench,
bench_loader) are called in process; main, sample and evaluate define their flags on absl's
global FLAGS, so they run as subprocesses (in parallel, `--help` only).
"""

import os
import subprocess
import sys

import pytest

from experiments import bench, bench_loader, cli, gpu_bench, run_all, scorecard
from tests.train.train_helpers import REPO

ENTRY_POINTS = {
  "run_all": (run_all.main, "The main job: every experiment, a few at once, then the claims"),
  "scorecard": (scorecard.main, "The scorecard: any sequence mixer through every design"),
  "bench": (bench.main, "Run a benchmark suite and print a table"),
  "gpu_bench": (gpu_bench.main, "The GPU benchmark run behind experiments/gpu_bench.sh"),
  "bench_loader": (bench_loader.main, "Loader throughput: one batched read per step"),
}
BAD = {  # (arguments, what the one line names)
  "unknown flag": (["--nope=1"], "'nope'"),
  "stray argument": (["stray", "two"], "['stray', 'two']"),
}


def _exit_code(main, argv):
  with pytest.raises(SystemExit) as done:
    main(argv)
  return done.value.code


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_prints_the_usage_and_every_flag_and_exits_0(name, capsys):
  main, first = ENTRY_POINTS[name]
  assert _exit_code(main, ["--help"]) == 0
  out = capsys.readouterr().out
  assert out.startswith(first), out[:200]
  assert "\nflags:\n" in out and "--flagfile" not in out  # its own flags, not absl's


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_a_bad_command_line_is_one_line_and_exit_2(name, case, capsys):
  argv, named = BAD[case]
  if name == "gpu_bench" and case == "stray argument":
    named = "one OUT_DIR expected"  # its one positional argument is OUT_DIR
  if name == "bench" and case == "stray argument":
    named = "suites ['stray', 'two']"
  assert _exit_code(ENTRY_POINTS[name][0], argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and named in err[0], err


def test_a_config_flag_names_an_unknown_field_with_the_nearest_one(capsys):
  assert _exit_code(ENTRY_POINTS["scorecard"][0], ["--config.sedds=1"]) == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line == "error: --config.sedds: unknown field 'sedds' of config; did you mean 'seeds'?"


def test_ml_collections_still_reports_a_missing_field_of_a_config_file_as_cli_reads_it(tmp_path):
  """cli.missing_config_field reads ml_collections' error text: this fails when it changes."""
  from absl import flags
  from ml_collections import config_flags

  path = tmp_path / "c.py"
  path.write_text(
    "import ml_collections\ndef get_config():\n  return ml_collections.ConfigDict({'seed': 0})\n"
  )
  for given, hint in (("seeds", 'did you mean "seed"'), ("zzz", "")):
    argv = ["prog", f"--config={path}", f"--config.{given}=1"]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
    with pytest.raises((AttributeError, KeyError)) as info:
      values(argv)
    assert cli.missing_config_field(info.value) == (given, hint)


def test_main_sample_and_evaluate_print_their_usage_with_help():
  env = dict(os.environ, PYTHONPATH=REPO)
  procs = {
    name: subprocess.Popen(
      [sys.executable, "-m", f"experiments.{name}", "--help"],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      cwd=REPO,
      env=env,
    )
    for name in ("main", "sample", "evaluate")
  }
  for name, proc in procs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "\nflags:\n" in out and "--workdir" in out and "--flagfile" not in out, out[-500:]
    assert out.startswith({"main": "Train", "sample": "Sample", "evaluate": "Evaluate"}[name])
