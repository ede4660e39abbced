"""fixed_memory's and the scorecard's recall sweeps at Zoology's task on one GPU: the sizing
(exploratory) run that a lent accelerator gets first, in one command that stops at its budget.

  python -m experiments.device_recall OUT_DIR             # asserts jax's backend is 'gpu'
  python -m experiments.device_recall OUT_DIR --dry-run   # tiny task and sizes, any backend

The task is Zoology's MQAR (Arora et al. 2023): vocabulary V = 8,192, length L = 256, one
model per arm trained on the mixture of P = 4, 8, 16, 32, 64 pairs (4P <= L) and read at each
P. Each experiment keeps its full size's design (width 64, two layers, batch 64, its rates,
3,000 steps and its longer arms' 5,000) with its hard setting replaced by this task
(fixed_memory's easy setting is left out): 6 fixed_memory arms, then the scorecard's 23, on
the exploratory seed alone (`run --explore`): a sizing reading, never a verdict of record.

First every task's data is prepared, all at once (`prepare`). Then each experiment runs in
its own process under the time left of --budget_s, its units in
--jobs worker processes that share the GPU (memory allocated on demand), so one worker's
compile runs beside another's training. Writes into OUT_DIR (at most 7 files: what a device
call brings back): NAME_accel.json (the engine's result), NAME_accel.png (its figure) and
NAME.log per experiment, and device_recall.json (the command, the machine, each
experiment's status and wall time, and per arm its selected rate and mean adjusted recall at
each P), also printed as a table. The sweeps stay in --workdir: the same command there
resumes where a timeout stopped it. Exit status: 0 when every experiment finished, 1 when the
backend check or one failed or ran out of time, 2 for a bad command line.

Not yet run on a GPU. Its cost is estimated, not measured: about 176,000 replica-steps (29
units, one or two rates each, 3,000-5,000 steps) at 1-3 ms each by the task's arithmetic
(about 4 MFLOP per token trained, mostly the 8,192-way output), 3-9 minutes of GPU time,
beside 29 compiles of 20-26 s each (the H200's quick sweep, BENCHMARKS.md) spread over the
workers. Where the budget stops it, a second call on the same machine resumes.
"""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from experiments import cli, gpu_bench

TASK = {"vocab_size": 8192, "seq_len": 256}  # Zoology's MQAR
PAIRS = (4, 8, 16, 32, 64)
DRY_TASK, DRY_PAIRS = {"vocab_size": 32, "seq_len": 16}, (2, 4)  # the dry run: tiny sizes
EXPERIMENTS = ("fixed_memory", "scorecard")  # in order: fixed_memory's 6 units first
SIZE = "accel"
PROBE_TIMEOUT_S = 120


def with_task(experiment, task, pairs, base):
  """`experiment` with the size SIZE: its size `base` with the last setting (fixed_memory's
  "hard", the scorecard's) now `task` read at `pairs`, the other settings left out (with the
  per-point step counts that named them)."""
  size = experiment.sizes[base]
  setting = list(size.points)[-1]
  shared = {k: v for k, v in size.task.items() if k not in size.points}
  steps = {k: v for k, v in size.arm_steps.items() if k.partition(" @ ")[2] in ("", setting)}
  accel = dataclasses.replace(
    size, task={**shared, setting: dict(task)}, points={setting: tuple(pairs)}, arm_steps=steps
  )
  return dataclasses.replace(experiment, sizes={**experiment.sizes, SIZE: accel})


def experiment(name, dry_run):
  """The declared experiment `name` with its SIZE on Zoology's task (the dry run: on a tiny
  task over its tiny size)."""
  from experiments.engine import catalog, declare

  declared = catalog.load(name)
  task, pairs, base = (DRY_TASK, DRY_PAIRS, "tiny") if dry_run else (TASK, PAIRS, "full")
  return declare.validate(with_task(declared, task, pairs, base))


def task_specs(names, dry_run):
  """Every task spec the experiments `names` train on or read at SIZE, each once."""
  specs = {}
  for name in names:
    e = experiment(name, dry_run)
    for point in (*e.trained_points(SIZE), *e.points(SIZE)):
      specs.setdefault(e.task(e.sizes[SIZE], point))
  return list(specs)


PREPARE = "import sys; from jaxformer import data; data.get_dataset(sys.argv[1], 'test')"


def prepare(specs, timeout):
  """Prepares every spec's data at once, each in its own process, before any unit trains:
  the workers would each prepare the training mixture at their start, and the read-out each
  P's set one after another (100,000 examples each, half a minute apiece on one core).
  (status, seconds); the error of the first that failed goes to stderr."""
  start = time.perf_counter()
  procs = [subprocess.Popen([sys.executable, "-c", PREPARE, spec], cwd=gpu_bench.REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
           for spec in specs]  # fmt: skip
  failed = None
  for proc in procs:
    try:
      _, err = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - start)))
    except subprocess.TimeoutExpired:
      proc.kill()
      failed = failed or "timeout"
      continue
    if proc.returncode != 0 and failed is None:
      failed = f"failed (exit {proc.returncode})"
      print(err.strip()[-2000:], file=sys.stderr)
  return failed or "ok", time.perf_counter() - start


def summary_rows(result):
  """Per arm: the rate it selected, its mean adjusted recall at each P (over the seeds), its
  plateau and its training seconds."""
  adjusted = result["metrics"]["adjusted"]
  units = {u["arm"]: u for u in result["units"]}
  rows = []
  for arm, by_point in adjusted.items():
    unit = units[arm]
    rows.append({
      "arm": arm,
      "rate": (unit["selected"] or {}).get("learning_rate"),
      "adjusted": {p.split(":")[1]: round(sum(v) / len(v), 3) for p, v in by_point.items()
                   if ":" in p},  # fmt: skip
      "plateau": unit["plateau"],
      "seconds": unit["sweep_seconds"],
    })  # fmt: skip
  return rows


def table(name, rows):
  """The rows as a markdown table."""
  pairs = list(rows[0]["adjusted"]) if rows else []
  lines = [f"## {name}: adjusted recall by P (0: chance 1/P), exploratory seed", "",
           "| arm | rate | " + " | ".join(f"P={p}" for p in pairs) + " | plateau | s |",
           "|---" * (len(pairs) + 4) + "|"]  # fmt: skip
  for r in rows:
    cells = " | ".join(f"{r['adjusted'][p]:.2f}" for p in pairs)
    rate = "-" if r["rate"] is None else f"{r['rate']:g}"
    lines.append(
      f"| {r['arm']} | {rate} | {cells} | {', '.join(r['plateau'])} | {r['seconds']:.0f} |"
    )
  return "\n".join(lines) + "\n"


def run_one(name, out_dir, workdir, jobs, dry_run):
  """In the child process: `name`'s exploratory run at SIZE into workdir/name, its result and
  figure copied into out_dir."""
  from experiments.engine import page, run

  exp, folder = experiment(name, dry_run), os.path.join(workdir, name)
  result = run.run(exp, SIZE, folder, explore=True, jobs=jobs)
  for path in (f"{name}_{SIZE}.json", page.figure_name(result)):
    if os.path.exists(os.path.join(folder, path)):
      shutil.copy(os.path.join(folder, path), os.path.join(out_dir, path))


def run_group(cmd, log_path, timeout):
  """`cmd` in its own process group, its output into log_path; a timeout kills the whole
  group (an experiment's unit workers would otherwise hold the device while the next one
  trains). (status, wall seconds)."""
  start = time.perf_counter()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=gpu_bench.REPO,
                            start_new_session=True)  # fmt: skip
    try:
      code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      return "timeout", time.perf_counter() - start
  return ("ok" if code == 0 else f"failed (exit {code})"), time.perf_counter() - start


def _child(name, values, out_dir, timeout):
  """`name` in its own process, its output into out_dir/name.log; (status, wall seconds)."""
  cmd = [sys.executable, "-m", "experiments.device_recall", out_dir, f"--child={name}",
         f"--jobs={values.jobs}", f"--workdir={values.workdir}"]  # fmt: skip
  if values["dry-run"].value:
    cmd.append("--dry-run")
  return run_group(cmd, os.path.join(out_dir, f"{name}.log"), timeout)


def main_run(values, out_dir, command):
  """The probe, then each experiment in the time left; returns the exit code."""
  dry_run = values["dry-run"].value
  deadline = time.perf_counter() + values.budget_s
  out_dir, values.workdir = os.path.abspath(out_dir), os.path.abspath(values.workdir)
  os.makedirs(out_dir, exist_ok=True)
  os.makedirs(values.workdir, exist_ok=True)
  os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # the workers share one device
  report = {"command": command, "dry_run": dry_run, "environment": None, "experiments": {}}
  probe = ["experiments.gpu_bench", "--probe"] + ([] if dry_run else ["--expect-backend=gpu"])
  log = os.path.join(values.workdir, "probe.log")
  status, _, _, out = gpu_bench.child(probe, PROBE_TIMEOUT_S, log_path=log)
  report["environment"] = gpu_bench.last_json(out)
  print(f"probe: {status}; {report['environment']}", flush=True)
  if status != "ok":
    gpu_bench.tail(log)
  names = values.only or list(EXPERIMENTS)
  if status == "ok":
    specs = task_specs(names, dry_run)
    state, wall = prepare(specs, max(1.0, deadline - time.perf_counter()))
    report["data"] = {"status": state, "wall_s": round(wall, 1), "specs": specs}
    print(f"data: {len(specs)} task specs prepared: {state} in {wall:.0f} s", flush=True)
  for name in names if status == "ok" else ():
    left = deadline - time.perf_counter()
    if left < 1:
      report["experiments"][name] = {"status": "not started: out of time", "wall_s": 0.0}
      continue
    print(f"== {name} at {SIZE} ({left:.0f} s left)", flush=True)
    state, wall = _child(name, values, out_dir, left)
    entry = {"status": state, "wall_s": round(wall, 1), "log": f"{name}.log"}
    path = os.path.join(out_dir, f"{name}_{SIZE}.json")
    if state == "ok" and os.path.exists(path):
      with open(path) as f:
        result = json.load(f)
      entry["rows"] = summary_rows(result)
      entry["criteria"] = {c["name"]: c["verdict"] for c in result["criteria"]}
      print(table(name, entry["rows"]), flush=True)
    else:
      gpu_bench.tail(os.path.join(out_dir, f"{name}.log"))
    print(f"   {state} in {wall:.0f} s", flush=True)
    report["experiments"][name] = entry
  with open(os.path.join(out_dir, "device_recall.json"), "w") as f:
    json.dump(report, f, indent=1)
  ok = status == "ok" and all(e["status"] == "ok" for e in report["experiments"].values())
  return 0 if ok else 1


# The command line's flags: (kind, name, default, help, keyword arguments).
FLAGS = (
  ("bool", "dry-run", False, "The tiny task and sizes on any backend (no backend assertion).", {}),
  ("integer", "jobs", 4, "Worker processes that train each experiment's units.",
   {"lower_bound": 1}),
  ("float", "budget_s", 540.0, "Seconds for the probe and the experiments together.",
   {"lower_bound": 1.0}),
  ("string", "workdir", "/tmp/device_recall", "Where the sweeps are stored (resumable).", {}),
  ("list", "only", None, f"Only these experiments, of {', '.join(EXPERIMENTS)}.", {}),
  ("string", "child", None, "Internal: run this experiment in this process.", {}),
)  # fmt: skip


def _define(values, argv):
  define = cli.definer(values)
  for kind, name, default, help_string, kwargs in FLAGS:
    define(kind, name, default, help_string, **kwargs)


def main(argv=None):
  values, rest = cli.command_line(__doc__, _define, argv)
  if len(rest) != 1:
    cli.usage_error(f"one OUT_DIR expected, got {rest}")
  unknown = [n for n in (values.only or ()) if n not in EXPERIMENTS]
  if unknown:
    cli.usage_error(f"--only: {', '.join(unknown)} not one of {', '.join(EXPERIMENTS)}")
  if values.child is not None:
    run_one(values.child, rest[0], values.workdir, values.jobs, values["dry-run"].value)
    return
  command = " ".join(
    ["python -m experiments.device_recall", *(sys.argv[1:] if argv is None else argv)]
  )
  sys.exit(main_run(values, rest[0], command))


if __name__ == "__main__":
  main()
