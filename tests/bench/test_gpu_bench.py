"""experiments/gpu_bench.sh: its dry run on the CPU (the same Python as on a GPU, without the
backend assertion), the assertion itself, a failing suite's exit status, and the pins."""

import json
import os
import re
import subprocess
import sys

import jax
import jaxlib
import pytest

from experiments import gpu_bench

SCRIPT = os.path.join(gpu_bench.REPO, "experiments", "gpu_bench.sh")


def _script(*args, timeout=600):
  env = dict(os.environ, GPU_BENCH_PYTHON=sys.executable, JAX_PLATFORMS="cpu")
  return subprocess.run(
    ["bash", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout
  )


@pytest.mark.slow  # every suite of the GPU script at its dry-run size: `make test-slow`
def test_dry_run_measures_every_suite_and_records_the_machine(tmp_path):
  done = _script("--dry-run", str(tmp_path / "out"))
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
  summary = json.loads((tmp_path / "out" / "gpu_bench.json").read_text())
  assert summary["ok"] and summary["expect_backend"] is None
  assert summary["command"].endswith(f"gpu_bench.sh --dry-run {tmp_path / 'out'}")
  env = summary["environment"]
  assert env["backend"] == "cpu" and env["device_kind"] == jax.devices()[0].device_kind
  assert (env["jax"], env["jaxlib"]) == (jax.__version__, jaxlib.__version__)
  assert "driver_version" in env  # null here: no nvidia-smi on the CPU machine
  assert set(summary["suites"]) == {"attention", "decode", "sweep", "train"}
  for name, suite in summary["suites"].items():
    assert suite["status"] == "ok" and suite["returncode"] == 0, name
    assert suite["result"]["suites"][name]["rows"], name
  configs = {name: s["result"]["suites"][name]["config"] for name, s in summary["suites"].items()}
  assert configs["train"]["steps"] >= 20  # each timed window
  assert configs["attention"]["repeats"] >= 20 and configs["decode"]["repeats"] >= 20
  table = (tmp_path / "out" / "benchmarks_gpu.md").read_text()
  assert "## train (tiny)" in table and "backend=cpu" in table


def test_wrong_backend_measures_nothing(tmp_path):
  code = gpu_bench.run(str(tmp_path), gpu_bench.PLANS["dry_run"], expect_backend="gpu")
  assert code == 1
  summary = json.loads((tmp_path / "gpu_bench.json").read_text())
  assert summary["suites"] == {} and not summary["ok"]
  assert summary["environment"]["backend"] == "cpu"
  assert "jax.default_backend() is 'cpu', expected 'gpu'" in (tmp_path / "probe.log").read_text()


def test_a_failing_suite_fails_the_run(tmp_path):
  plan = (("train", ("--size", "no_such_size"), 120),)
  assert gpu_bench.run(str(tmp_path), plan, expect_backend=None) == 1
  suite = json.loads((tmp_path / "gpu_bench.json").read_text())["suites"]["train"]
  assert (suite["status"], suite["returncode"], suite["result"]) == ("failed", 2, None)
  assert "size='no_such_size'" in (tmp_path / "train.log").read_text()


def test_bad_command_line_exits_2():
  assert _script("--fast", timeout=60).returncode == 2
  assert _script("a", "b", timeout=60).returncode == 2


def test_cuda_wheels_are_pinned_to_the_jax_of_the_requirements():
  def pins(name):
    path = os.path.join(gpu_bench.REPO, name)
    lines = [line.split("#")[0].strip() for line in open(path)]
    return dict(re.fullmatch(r"([\w\-.\[\]]+)==(\S+)", line).groups() for line in lines if line)

  base, gpu = pins("requirements.txt"), pins("requirements-gpu.txt")
  assert base["jax"] == base["jaxlib"] == gpu["jax[cuda12]"] == gpu["jax-cuda12-pjrt"]
  assert gpu["jax-cuda12-plugin[with-cuda]"] == base["jax"]
