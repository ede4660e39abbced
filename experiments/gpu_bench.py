"""The GPU benchmark run behind experiments/gpu_bench.sh (which makes its virtual environment).

  python -m experiments.gpu_bench OUT_DIR              # asserts jax's backend is 'gpu'
  python -m experiments.gpu_bench OUT_DIR --dry-run    # the same at tiny sizes, any backend
  python -m experiments.gpu_bench OUT_DIR --compile_only=gpu:h100.txtpb,topology=1x1x8
                                                       # the train suite compiled, not run

First a probe process records the machine (device kind and count, NVIDIA driver from
nvidia-smi or null, jax, jaxlib and CUDA plugin versions) and, unless --dry-run, exits 1 when
`jax.default_backend()` is not 'gpu': nothing is measured on the wrong device. Then each suite
of experiments/bench.py runs in its own process under a timeout (the parent never starts jax,
so it holds no GPU memory), timing windows of at least MIN_STEPS steps or repeats. Writes
OUT_DIR/NAME.json and NAME.log per suite, OUT_DIR/gpu_bench.json (the command, the machine,
each suite's status, exit code, wall time and result) and OUT_DIR/benchmarks_gpu.md; exits 1
when the probe or any suite failed.
"""

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time

from experiments import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_STEPS = 20  # train steps per timed window; repeats of each attention / decode timing
BACKEND = "gpu"
PROBE_TIMEOUT_S = 120

# (suite, arguments of experiments/bench.py, timeout seconds): under 10 minutes in all on a GPU.
# train first, in bfloat16: the MFU target reads its bf16 peak; then the sweep engine's quick
# arms (replica throughput at N = 1 .. 24), attention and decode. On one H200 (BENCHMARKS.md)
# they took 84, 197, 40 and 50 s.
PLANS = {
  "gpu": (
    (
      "train",
      ("--size", "gpt2_small", "--set", f"steps={MIN_STEPS}", "--set", "windows=5")
      + ("--set", "dtype=bfloat16"),
      150,
    ),
    ("sweep", ("--size", "quick"), 240),
    ("attention", ("--size", "medium", "--set", f"repeats={MIN_STEPS}"), 100),
    ("decode", ("--size", "gpt_small", "--set", f"repeats={MIN_STEPS}"), 100),
  ),
  "dry_run": (
    ("train", ("--size", "tiny", "--set", f"steps={MIN_STEPS}", "--set", "windows=1"), 300),
    ("sweep", ("--size", "tiny"), 300),
    ("attention", ("--size", "small", "--lengths", "256", "--set", f"repeats={MIN_STEPS}"), 300),
    ("decode", ("--size", "tiny", "--set", f"repeats={MIN_STEPS}"), 300),
  ),
}
# The jax CUDA plugins whose version the probe records (requirements-gpu.txt pins CUDA 12's;
# a machine's own image may carry CUDA 13's).
CUDA_PLUGINS = ("jax-cuda12-plugin", "jax-cuda13-plugin")


def nvidia_driver():
  """The NVIDIA driver version nvidia-smi reports, or None where there is no nvidia-smi (or it
  fails)."""
  exe = shutil.which("nvidia-smi")
  if exe is None:
    return None
  try:
    out = subprocess.run(
      [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
      capture_output=True,
      text=True,
      timeout=60,
      check=True,
    ).stdout.split()
  except (OSError, subprocess.SubprocessError):
    return None
  return out[0] if out else None


def _installed(name):
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def environment():
  """What the numbers were measured on (starts jax: run it in the probe process)."""
  import jax
  import jaxlib

  devices = jax.devices()
  return dict(
    backend=jax.default_backend(),
    device_kind=devices[0].device_kind,
    device_count=len(devices),
    driver_version=nvidia_driver(),
    jax=jax.__version__,
    jaxlib=jaxlib.__version__,
    cuda_plugin={name: _installed(name) for name in CUDA_PLUGINS if _installed(name)} or None,
    flax=_installed("flax"),
    python=platform.python_version(),
    platform=platform.platform(),
  )


def probe(expect_backend):
  """Prints the environment as JSON; exits 1 when jax's backend is not `expect_backend`."""
  env = environment()
  print(json.dumps(env))
  if expect_backend is not None and env["backend"] != expect_backend:
    print(
      f"error: jax.default_backend() is {env['backend']!r}, expected {expect_backend!r} "
      f"(devices: {env['device_count']} x {env['device_kind']}, NVIDIA driver "
      f"{env['driver_version']}, jaxlib {env['jaxlib']}, CUDA plugin {env['cuda_plugin']}); "
      "jax's warnings above say why the GPU was not used",
      file=sys.stderr,
    )
    sys.exit(1)


def child(args, timeout, stdout_path=None, log_path=None):
  """Runs `python -m experiments.<args>`; (status, returncode, wall seconds, stdout)."""
  cmd = [sys.executable, "-m", *args]
  start = time.perf_counter()
  with open(log_path or os.devnull, "w") as log:
    try:
      done = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout, cwd=REPO
      )
    except subprocess.TimeoutExpired as e:
      out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
      return "timeout", None, time.perf_counter() - start, out
  wall = time.perf_counter() - start
  if stdout_path is not None:
    with open(stdout_path, "w") as f:
      f.write(done.stdout)
  return ("ok" if done.returncode == 0 else "failed"), done.returncode, wall, done.stdout


def run(out_dir, plan, expect_backend=BACKEND, command=None):
  """Probe, then every suite of `plan`; writes the files above; returns the exit code."""
  os.makedirs(out_dir, exist_ok=True)
  summary = dict(
    command=command or " ".join(sys.argv),
    expect_backend=expect_backend,
    min_steps=MIN_STEPS,
    environment=None,
    suites={},
  )
  probe_args = ["experiments.gpu_bench", "--probe"]
  if expect_backend is not None:
    probe_args.append(f"--expect-backend={expect_backend}")
  log = os.path.join(out_dir, "probe.log")
  status, code, _, out = child(probe_args, PROBE_TIMEOUT_S, log_path=log)
  summary["environment"] = last_json(out)
  summary["probe"] = dict(status=status, returncode=code, log="probe.log")
  print(f"probe: {status}; {summary['environment']}", flush=True)
  if status != "ok":
    tail(log)
  else:
    for name, args, timeout in plan:
      summary["suites"][name] = _suite(out_dir, name, args, timeout)
  failed = [n for n, s in summary["suites"].items() if s["status"] != "ok"]
  summary["ok"] = status == "ok" and not failed
  with open(os.path.join(out_dir, "gpu_bench.json"), "w") as f:
    json.dump(summary, f, indent=1, default=str)
  table = markdown(summary)
  with open(os.path.join(out_dir, "benchmarks_gpu.md"), "w") as f:
    f.write(table)
  print(table)
  if not summary["ok"]:
    print(f"FAILED: {', '.join(failed) or 'probe'}; see {out_dir}", file=sys.stderr)
  return 0 if summary["ok"] else 1


def _suite(out_dir, name, args, timeout):
  """One suite in its own process; its JSON result, or why there is none."""
  bench_args = ["experiments.bench", name, *args, "--json"]
  log = os.path.join(out_dir, f"{name}.log")
  print(f"== {name} {' '.join(args)} (timeout {timeout}s)", flush=True)
  status, code, wall, out = child(bench_args, timeout, os.path.join(out_dir, f"{name}.json"), log)
  result = last_json(out) if status == "ok" else None
  if status == "ok" and result is None:
    status = "bad_output"
  if status != "ok":
    tail(log)
  print(f"   {status} in {wall:.0f} s", flush=True)
  return dict(
    status=status,
    returncode=code,
    wall_s=wall,
    timeout_s=timeout,
    command=["python", "-m", *bench_args],
    log=f"{name}.log",
    result=result,
  )


def last_json(text):
  """The JSON object on the last line of `text`, or None."""
  lines = text.strip().splitlines()
  try:
    return json.loads(lines[-1]) if lines else None
  except ValueError:
    return None


def tail(path, lines=8):
  with open(path) as f:
    print("".join(f.readlines()[-lines:]), file=sys.stderr, end="")


def markdown(summary):
  """The tables of every suite that produced one, and the machine."""
  from experiments.bench import SUITES
  from jaxformer.bench import format_table

  lines = ["# GPU benchmarks", "", f"command: `{summary['command']}`", ""]
  for name, suite in summary["suites"].items():
    if suite["result"] is None:
      lines += [f"## {name}: {suite['status']} (see {suite['log']})", ""]
      continue
    out = suite["result"]["suites"][name]
    lines += [f"## {name} ({out['size']}): {SUITES[name].description}", "", "```"]
    lines += [format_table(out["rows"], SUITES[name].columns), "```", ""]
  env = summary["environment"] or {}
  lines.append("machine: " + ", ".join(f"{k}={v}" for k, v in env.items()))
  return "\n".join(lines) + "\n"


def compile_only_run(out_dir, target, dry_run=False):
  """The train suite's config (gpt2_small; tiny with dry_run) compiled for `target` over all
  its devices, data parallel (jaxformer.train.compile_only); the attention and decode suites
  are not compiled. Returns the exit code: 0, or 2 with one line when it cannot compile or fit."""
  from jaxformer import data, ladder
  from jaxformer.bench import train as bench_train
  from jaxformer.train import compile_only

  (train_args,) = [a for name, a, _ in PLANS["dry_run" if dry_run else "gpu"] if name == "train"]
  model_size = train_args[train_args.index("--size") + 1]
  config, seq_len = bench_train.config(model_size)
  try:
    compile_only.report_run(config, target, out_dir, sizes=(seq_len, config.model.vocab_size))
  except (ladder.ConfigError, data.DataError) as e:
    print(f"error: {str(e).strip().splitlines()[0]}", file=sys.stderr)
    return 2
  return 0


# The command line's flags: (kind, name, default, help).
FLAGS = (
  ("bool", "dry-run", False, "Tiny sizes on any backend (no backend assertion)."),
  ("string", "command", None, "The command line to record (the shell script's)."),
  ("bool", "probe", False, "Internal: the probe process (prints the machine as JSON)."),
  ("string", "expect-backend", None, "Internal: the probe's expected jax backend."),
  (
    "string",
    "compile_only",
    None,
    "TARGET: compile the train suite's step for TARGET (v5e:2x4, gpu:FILE,topology=1x1x8) "
    "without running: OUT_DIR/compile_report.json and a table; exit 2 when it does not fit.",
  ),
)


def _define(values, argv):
  define = cli.definer(values)
  for row in FLAGS:
    define(*row)


def main(argv=None):
  """`python -m experiments.gpu_bench [OUT_DIR] [flags]`; argv: the arguments after the program
  name (None: sys.argv's). Exits with the run's code."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if len(rest) > 1:
    cli.usage_error(f"one OUT_DIR expected, got {rest}")
  out_dir = rest[0] if rest else "runs/gpu_bench"
  dry_run = values["dry-run"].value
  if values.probe:
    probe(values["expect-backend"].value)
    return
  if values.compile_only is not None:
    sys.exit(compile_only_run(out_dir, values.compile_only, dry_run=dry_run))
  plan = PLANS["dry_run" if dry_run else "gpu"]
  sys.exit(run(out_dir, plan, None if dry_run else BACKEND, values.command))


if __name__ == "__main__":
  main()
