"""`--compile_only=TARGET` of run_all and the scorecard: every sweep program an experiment's
size would train, compiled for an accelerator this machine does not have; nothing runs.

  python -m experiments.run_all --size accel --compile_only=v5e:2x4 --workdir runs/accel_v5e
  python -m experiments.run_all --size full --only cache \\
    --compile_only=gpu:experiments/configs/h100_sxm.txtpb,topology=1x1x8
  python -m experiments.scorecard --size accel --compile_only=v5e:2x4 --compile_limit=1 \\
    --workdir runs/scorecard_v5e                # each mixer's largest sweep, a row each

An experiment trains as sweeps (jaxformer.train.sweep): N replicas (seeds x learning rates x
weight decays) in one program, the replica axis laid along the devices of one host when N
divides their number, else every replica on the first device. A sweep here is (label, training
config, N): `declared_sweeps` lists a declared experiment's (experiments/engine/policy.py: each
unit's exploratory stage and its confirmatory stage), `protocol_sweeps` the scorecard's arms
(experiments/protocol.py: one sweep per arm). `compile_arms` compiles their
programs (init, train step, eval sums) for TARGET with that placement
(jaxformer.train.compile_only.compile_sweep), once per distinct shape (sweeps with the same
shapes share the program, as they do in a run), and writes WORKDIR/<experiment>/
compile_report.json after each; `main` prints one summary row per experiment: the largest
per-device peak, the device memory, whether every program fits. Sweeps compile largest first
(`work`); `main(..., limit=K)` (`--compile_limit=K`) stops after K distinct sweeps of each
experiment, or of each scorecard mixer (BENCHMARKS.md's tables: K = 1, each one's largest),
and the report counts the sweeps it did not reach.

What is compiled is each sweep at its first budget: budget growth recompiles the same shapes
(total_steps is static) and a learning-rate extension compiles a sweep of fewer replicas, so
neither needs more memory. Not compiled: the programs an experiment's measurements run beside
its sweeps (timing and cost probes).
"""

import json
import os
import time

from experiments import protocol
from experiments.engine import declare, policy
from jaxformer import ladder
from jaxformer.train import compile_only, sweep

GiB = compile_only.GiB
REPORT_FILE = compile_only.REPORT_FILE


def program_key(config, n, sizes):
  """The key under which jaxformer.train.sweep caches an arm's programs: arms that share it
  run one compiled program."""
  return (
    config.rung,
    config.model.to_json(sort_keys=True),
    tuple(config[f] for f in sweep._STATIC_FIELDS),
    n,
    (config.batch_size, sizes[0]),
    sizes[1],
  )


def work(config, n, sizes):
  """A rough size of an arm's sweep's activations, replicas x batch x length x (width x depth
  + vocabulary): arms compile largest first, so a compile cut short (or given a `limit`) has
  reported the likeliest largest peaks."""
  model = config.model
  depth = model.get("num_layers") or 1
  return n * config.batch_size * sizes[0] * ((model.get("d_model") or 1) * depth + sizes[1])


def declared_sweeps(experiment, size_name):
  """[(label, training config, replicas)] of every sweep a declared experiment trains at the
  size, at its first budget: each unit's exploratory stage (the size's exploratory seeds x
  learning rates x weight decays) and its confirmatory stage (the size's confirmatory seeds at
  the selected point; a one-point grid trains every seed in one stage). DesignError when the
  size is not declared."""
  if size_name not in experiment.sizes:
    declared = ", ".join(experiment.sizes)
    raise declare.DesignError(f"{experiment.name}: no {size_name} size (declared: {declared})")
  size, out = experiment.sizes[size_name], []
  seeds = (*size.exploratory_seeds, *(-1 - i for i in range(size.confirmatory)))  # counts only
  for arm in experiment.arms:
    for point in experiment.trained_points(size_name):
      budget, _ = policy.budgets(size, arm, point)
      config = policy.unit_config(arm, experiment.task(size, point), size, budget)
      label = arm.name if point is None else f"{arm.name} @ {point}"
      for i, (stage_seeds, rates, decays) in enumerate(policy.stages(size, arm, seeds)):
        replicas = len(stage_seeds) * len(rates or (0,)) * len(decays or (0,))
        out.append((f"{label} (confirmatory)" if i else label, config, replicas))
  return out


def protocol_sweeps(config, arms):
  """[(label, training config, replicas)] of the scorecard's arms under its config `config`
  (experiments/protocol.py: every seed, rate and weight decay in one sweep)."""
  return [
    (f"{arm.model} @ {arm.setting}", protocol.arm_config(config, arm),
     len(protocol.replicas(config, arm)))
    for arm in arms
  ]  # fmt: skip


def compile_arms(name, sweeps, tgt, out_dir, size=None, echo=print, limit=None):
  """Compiles the programs of `sweeps` ([(label, training config, replicas)]) for the target,
  largest first (`work`), at most `limit` distinct ones (None: all); writes
  OUT_DIR/compile_report.json after each; returns the report: the target, and per sweep its
  replicas, placement, batch and programs (a sweep that shares an earlier one's programs
  names it under `same_as`; `arms_total` counts every sweep, compiled or not)."""
  os.makedirs(out_dir, exist_ok=True)
  report = {
    "experiment": name,
    "size": size,
    "target": tgt.spec,
    "platform": tgt.platform,
    "device_kind": tgt.device_kind,
    "devices": len(tgt.devices),
    "device_memory_bytes": tgt.memory_bytes,
    "arms_total": len(sweeps),
    "arms": [],
    "compiled": 0,
  }
  todo = [(label, tc, n, compile_only.task_sizes(tc)) for label, tc, n in sweeps]
  todo.sort(key=lambda t: -work(*t[1:]))
  seen = {}
  for i, (label, tc, n, sizes) in enumerate(todo, 1):
    if limit is not None and report["compiled"] >= limit:
      break
    key = program_key(tc, n, sizes)
    if key in seen:
      report["arms"].append({"arm": label, "replicas": n, "same_as": seen[key]})
      continue
    seen[key] = label
    start = time.perf_counter()
    r = compile_only.compile_sweep(tc, n, tgt, sizes=sizes)
    peak = max(p["peak_bytes"] for p in r["programs"].values())
    echo(
      f"  [{i}/{len(todo)}] {label}: {n} replicas on {r['placement_devices']} of "
      f"{r['host_devices']} devices, peak {peak / GiB:.3f} GiB per device "
      f"({time.perf_counter() - start:.0f} s)"
    )
    report["arms"].append({"arm": label, **r})
    report["compiled"] += 1
    compile_only.write_report(report, os.path.join(out_dir, REPORT_FILE))
  compile_only.write_report(report, os.path.join(out_dir, REPORT_FILE))
  return report


def summary(report):
  """One summary row of an experiment's report: the arm with the largest per-device peak."""
  compiled = [a for a in report["arms"] if "programs" in a]
  row = {
    "experiment": report["experiment"],
    "arms": report["arms_total"],
    "done": len(report["arms"]),  # compiled or sharing a compiled arm's programs
    "compiled": len(compiled),
    "peak_bytes": None,
    "peak_arm": None,
    "fits": True,
    "compile_seconds": sum(p["compile_seconds"] for a in compiled for p in a["programs"].values()),
  }
  for a in compiled:
    for program, p in a["programs"].items():
      row["fits"] &= p["fits"]
      if row["peak_bytes"] is None or p["peak_bytes"] > row["peak_bytes"]:
        row["peak_bytes"] = p["peak_bytes"]
        row["peak_arm"] = f"{a['arm']} ({program}, {a['replicas']} replicas on "
        row["peak_arm"] += f"{a['placement_devices']} device{'s' * (a['placement_devices'] > 1)})"
  return row


def table(rows, tgt):
  w = max([16] + [len(r["experiment"]) for r in rows])  # the name column: the longest name
  lines = [
    f"{tgt.spec}: {len(tgt.devices)} x {tgt.device_kind} ({tgt.memory_bytes / GiB:.2f} GiB each)",
    f"{'experiment':<{w}} {'arms':>4} {'compiled':>8} {'peak GiB':>9} {'fits':>4} "
    f"{'compile s':>9}  largest",
  ]
  for r in rows:
    if r.get("error"):
      lines.append(f"{r['experiment']:<{w}} error: {r['error']}")
      continue
    peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / GiB:9.3f}"
    fits = "-" if r["peak_bytes"] is None else ("yes" if r["fits"] else "NO")
    lines.append(
      f"{r['experiment']:<{w}} {r['arms']:>4} {r['compiled']:>8} {peak:>9} {fits:>4} "
      f"{r['compile_seconds']:9.1f}  {r['peak_arm'] or '(no trained arms)'}"
    )
  return "\n".join(lines)


def main(experiments, size, target_spec, workdir, echo=print, limit=None):
  """run_all's --compile_only: `experiments` ([(name, sweeps)] as `declared_sweeps` and
  `protocol_sweeps` list them) compiled for the target at `size` (at most `limit` distinct
  sweeps of each, largest first; None: all); one report per experiment under WORKDIR/<name>,
  WORKDIR/compile_summary.json and the summary table. Returns the exit code: 0, 1 when an
  experiment could not be compiled (its error is in the table), 2 when a program does not fit
  or the target is bad (one line)."""
  try:
    tgt = compile_only.target(target_spec)
  except ladder.ConfigError as e:
    echo(f"error: {e}")
    return 2
  rows = []
  for i, (name, sweeps) in enumerate(experiments, 1):
    echo(f"[{i}/{len(experiments)}] {name} (size={size}) compiled for {tgt.spec} ...")
    try:
      report = compile_arms(name, sweeps, tgt, os.path.join(workdir, name), size, echo, limit)
    except Exception as e:  # one experiment's failure is reported, the others still compile
      refused = isinstance(e, compile_only.DoesNotFit)  # the target's compiler refused it
      why = _first_line(e) if refused else f"{type(e).__name__}: {_first_line(e)}"
      rows.append({"experiment": name, "error": why, "fits": not refused})
      echo(f"[{i}/{len(experiments)}] {name}: {why}")
      continue
    rows.append(summary(report))
  with open(os.path.join(workdir, "compile_summary.json"), "w") as f:
    json.dump({"target": tgt.spec, "size": size, "experiments": rows}, f, indent=2)
  echo(table(rows, tgt))
  misfits = [r for r in rows if not r["fits"]]
  if misfits:
    r = misfits[0]
    echo(
      f"error: {r['error']}"
      if r.get("error")
      else f"error: compile_only {tgt.spec}: {r['experiment']} {r['peak_arm']} needs "
      f"{r['peak_bytes'] / GiB:.2f} GiB per device > {tgt.memory_bytes / GiB:.2f} GiB"
    )
    return 2
  return 1 if any(r.get("error") for r in rows) else 0


def scorecard(config, mixer, fields, size, target_spec, workdir, echo=print, limit=None):
  """The scorecard's --compile_only: its trained arms (every mixer on every task, the reference
  and built-ins included) compiled as `main` compiles an experiment's, one group per mixer
  (`scorecard/<mixer>`, every width and state size of it: a report and a summary row each;
  `limit` counts per mixer, so `limit=1` is each mixer's largest sweep); its cost probes
  (depth, time and memory vs L) are not. A mixer that cannot be loaded: one line, exit 2."""
  from experiments import scorecard as card
  from jaxformer import mixers

  try:
    arms = card.arms(config, card.candidates(config, mixer, fields))
  except (mixers.MixerError, ladder.ConfigError) as e:
    echo(f"error: {_first_line(e)}")
    return 2
  by_mixer = {}
  for arm in arms:
    by_mixer.setdefault(card.mixer_of(arm.model), []).append(arm)
  groups = [
    (scorecard_group(name), protocol_sweeps(config, group)) for name, group in by_mixer.items()
  ]
  return main(groups, size, target_spec, workdir, echo, limit=limit)


def scorecard_group(mixer):
  """The name (and directory under the workdir) of one mixer's compile report."""
  from experiments import scorecard as card

  return f"{card.NAME}/{mixer.replace(' ', '_')}"


def _first_line(e):
  return (str(e).strip().splitlines() or [type(e).__name__])[0]
