"""Re-trains one arm of an experiment's registered design at the seeds, learning rates and
budget you choose: the diagnostic a reader asks for when a replica stalls ("does seed 43
learn at the next lower rate? with twice the steps?"). The arm, its task, model, schedule
and held-out split are the design's; only what the flags name changes. It judges nothing and
writes no result of record: a verdict comes only from the experiment's own run.

  python -m experiments.retrain --experiment fixed_memory --size full \\
    --arm "linear_attention @ head_dim=8 K=2 L=32" --seeds 33,39,43 \\
    --learning_rates 0.002154,0.004642 --steps 12000 --workdir runs/retrain

--arm names "model @ setting" as the experiment's report does; without it the command lists
the design's arms (a name the design does not hold is an error naming the nearest). A walked
capacity law (fixed_memory's) offers every point of its grid, not only those its walk visited.
--seeds defaults to the design's confirmatory seeds, --learning_rates to the arm's grid,
--steps to the arm's first budget. --set PATH=VALUE (repeatable) asks "what if the design
had ...": it sets a field of the design's config (a Python literal; PATH dotted, a new leaf
allowed under an existing field), e.g. the LSTM's forget-gate bias in fixed_memory's law:

  python -m experiments.retrain --experiment fixed_memory --size full \
    --arm "lstm @ hidden=64 K=8 L=32" --steps 6000 --learning_rates 0.004642 \
    --set 'law.mixer_fields={"lstm": {"forget_bias": 1.0}}' --workdir runs/forget_bias

A setting that, given the others, leaves the arm's model, task and training config as they
were is an error naming it (a misspelt field changes nothing); retrain.json records the
settings, and a retrained arm with any is not the design's. The replicas are laid over the
host's cores as the experiment's own command lays them, so at the design's seeds, rate and
first budget each one is the protocol's replica, evaluation for evaluation. Under "wsd" a run
of N steps has the schedule of the protocol's run grown to N, but where the protocol grew it
from a budget of at most sweep.FAST_COMPILE_STEPS (compiled with other options on a CPU) the
rounding differs, and at a rate at the edge of stability that can change where a replica
goes.

Writes WORKDIR/retrain.json (the arm, the design's version and hash, the commit, and per
replica its validation curve, stop reason, steps, and final eval accuracy raw and
chance-adjusted) and WORKDIR/retrain.png (validation accuracy against steps, one line per
replica).
"""

import ast
import copy
import difflib
import json
import os
import sys
import time

from experiments import cli, protocol, run_all


def _define(values, argv):
  define = cli.definer(values)
  define(
    "enum", "experiment", None, "The experiment whose arm is trained.", list(run_all.EXPERIMENTS)
  )
  define("enum", "size", "quick", "The design size the arm comes from.", list(protocol.SIZES))
  define("string", "arm", "", 'The arm, "model @ setting" (empty: list the design\'s arms).')
  define("list", "seeds", None, "Seeds (default: the design's confirmatory seeds).")
  define("list", "learning_rates", None, "Peak learning rates (default: the arm's grid).")
  define("integer", "steps", None, "Step budget (default: the arm's first budget).", lower_bound=1)
  define("string", "workdir", "runs/retrain", "Where retrain.json and retrain.png go.")
  define(
    "multi_string",
    "set",
    [],
    "PATH=VALUE: a field of the design's config, VALUE a Python literal (repeatable), e.g. "
    '--set \'law.mixer_fields={"lstm": {"forget_bias": 1.0}}\'.',
  )


def arms_of(module, config):
  """{"model @ setting": Arm} of every arm the design can train: module.every_arm(config)
  where the module has one (a walked law's whole grid), else module.arms(config)."""
  listed = module.every_arm(config) if hasattr(module, "every_arm") else module.arms(config)
  return {f"{a.model} @ {a.setting}": a for a in listed}


def _numbers(name, texts, kind):
  try:
    return [kind(t) for t in texts]
  except ValueError:
    cli.usage_error(f"--{name}={','.join(texts)}: expected {kind.__name__} values")


def setting(text):
  """(path, value) of one --set PATH=VALUE; VALUE a Python literal."""
  path, eq, value = text.partition("=")
  if not eq or not path.strip():
    raise cli.UsageError(f"--set={text}: expected PATH=VALUE")
  try:
    return path.strip(), ast.literal_eval(value.strip())
  except (ValueError, SyntaxError):
    raise cli.UsageError(
      f"--set={text}: VALUE must be a Python literal (a string is quoted: 'name')"
    ) from None


def overridden(config, settings):
  """A copy of `config` with each (path, value) of `settings` set; a path whose parent is not
  a field of the config is an error naming it."""
  config = copy.deepcopy(config)
  for path, value in settings:
    *parents, leaf = path.split(".")
    node = config
    for i, name in enumerate(parents):
      if not hasattr(node, "keys") or name not in node:
        raise cli.UsageError(f"--set {path}: {'.'.join(parents[: i + 1])} is not a design field")
      node = node[name]
    if not hasattr(node, "keys"):
      raise cli.UsageError(f"--set {path}: {'.'.join(parents)} has no fields")
    try:
      node[leaf] = value
    except (TypeError, ValueError) as e:
      raise cli.UsageError(f"--set {path}: {cli.first_line(e)}") from None
  return config


def _defaults(config, arm):
  """(seeds, learning rates) a retrain of `arm` trains without --seeds / --learning_rates:
  the design's confirmatory seeds and the arm's grid."""
  return tuple(protocol.seed_sets(config)[1]), tuple(arm.learning_rates or config.learning_rates)


def _what_trains(module, config, arm_name, steps):
  """What a retrain of `arm_name` under `config` trains: the arm's model, task and training
  config, and the seeds, rates and weight decays it defaults to."""
  arm = arms_of(module, config).get(arm_name)
  if arm is None:
    return None
  tc = protocol.arm_config(config, arm, steps)
  return (
    arm.rung,
    arm.task,
    arm.fields,
    tc.to_json(),
    *_defaults(config, arm),
    config.weight_decays,
  )


def retrain(
  module, size, arm_name, seeds=None, learning_rates=None, steps=None, settings=(), log=print
):
  """Trains `arm_name` of `module`'s design at `size`, with the config `settings` ((path,
  value), ...: `overridden`); returns the record retrain.json holds."""
  from jaxformer.train import sweep

  design = module.get_config(size)
  settings = list(settings)
  config = overridden(design, settings) if settings else design
  arms = arms_of(module, config)
  if arm_name not in arms:
    near = difflib.get_close_matches(arm_name, list(arms), n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise cli.UsageError(
      f"--arm={arm_name!r}: not an arm of {module.NAME} at size={size}{hint} (without --arm "
      "the command lists them)"
    )
  arm = arms[arm_name]
  with_all = _what_trains(module, config, arm_name, steps)
  for i, (path, _) in enumerate(settings):  # each must matter, given the others (a misspelt
    # field would not)
    try:
      without = _what_trains(
        module, overridden(design, settings[:i] + settings[i + 1 :]), arm_name, steps
      )
    except ValueError:  # the others alone are no valid design: this one is needed
      continue
    if without == with_all:
      raise cli.UsageError(f"--set {path}: changes nothing the arm {arm_name!r} trains")
  default_seeds, default_rates = _defaults(config, arm)
  seeds = tuple(seeds) if seeds else default_seeds
  rates = tuple(learning_rates) if learning_rates else default_rates
  tc = protocol.arm_config(config, arm, steps)
  replicas = sweep.grid(seeds, rates, tuple(config.weight_decays))
  start = time.perf_counter()
  result = sweep.train(tc, replicas, log=lambda text: log(f"  {arm_name}: {text}"))
  registered = protocol.design(module, size) if protocol.registered(module) else None
  rows = []
  for run in result.runs:
    final = run.final()
    rows.append(
      {
        "seed": run.seed,
        "learning_rate": run.learning_rate,
        "weight_decay": run.weight_decay,
        "stop_reason": run.stop_reason,
        "final_step": run.final_step,
        "val_accuracy_by_step": [[int(e[0]), float(e[2])] for e in run.evals],
        "eval_accuracy": float(final["eval_accuracy"]),
        "eval_adjusted": float(protocol.adjust(final["eval_accuracy"], result.chance)),
      }
    )
  return {
    "experiment": module.NAME,
    "size": size,
    "version": int(module.VERSION),
    "design_hash": registered.hash[:12] if registered else None,
    "settings": {path: value for path, value in settings},
    "commit": protocol.commit(),
    "arm": arm_name,
    "total_steps": int(tc.total_steps),
    "lr_schedule": tc.get("lr_schedule"),
    "chance": float(result.chance),
    "seconds": time.perf_counter() - start,
    "replicas": rows,
  }


def plot(record, workdir):
  """retrain.png: validation accuracy against steps, one line per replica (a color per seed,
  a line style per learning rate)."""
  from experiments import harness

  fig = harness.figure(width=6.5, height=4)
  ax = fig.add_subplot()
  seeds = sorted({r["seed"] for r in record["replicas"]})
  rates = sorted({r["learning_rate"] for r in record["replicas"]})
  styles = ["-", "--", ":", "-."]
  for r in record["replicas"]:
    curve = r["val_accuracy_by_step"]
    ax.plot(
      [step for step, _ in curve],
      [acc for _, acc in curve],
      color=f"C{seeds.index(r['seed']) % 10}",
      linestyle=styles[rates.index(r["learning_rate"]) % len(styles)],
      label=f"seed {r['seed']}, lr {r['learning_rate']:g}",
    )
  ax.axhline(record["chance"], color="gray", linestyle=":", linewidth=1)
  changed = ", ".join(f"{path}={value}" for path, value in record.get("settings", {}).items())
  ax.set(
    xlabel="step",
    ylabel="validation accuracy (raw)",
    title=f"{record['experiment']} v{record['version']} ({record['size']}), retrained: "
    f"{record['arm']}" + (f"\nwith {changed}" if changed else ""),
  )
  ax.title.set_fontsize(9)
  ax.legend(fontsize=7, ncol=2)
  return harness.save(fig, workdir, "retrain.png")


def main(argv=None):
  """argv: the arguments after the program name (None: sys.argv's); returns the exit code."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  if not values.experiment:
    cli.usage_error(f"--experiment: required, one of {', '.join(run_all.EXPERIMENTS)}")
  module = run_all.experiment(values.experiment)
  seeds = _numbers("seeds", values.seeds, int) if values.seeds else None
  rates = (
    _numbers("learning_rates", values.learning_rates, float) if values.learning_rates else None
  )
  if rates and not all(r > 0 for r in rates):
    cli.usage_error(f"--learning_rates={values.learning_rates}: each must be > 0")
  try:
    settings = [setting(text) for text in values.set]
    config = overridden(module.get_config(values.size), settings)
  except cli.UsageError as e:
    cli.usage_error(cli.first_line(e))
  if not values.arm:
    arms = arms_of(module, config)
    print(f"{module.NAME} at size={values.size}: {len(arms)} arm(s)")
    for name in arms:
      print(f"  {name}")
    return 0
  # the replicas laid over the host's cores as the experiment's own command lays them: on a
  # CPU the device count changes how each product is split over threads, so a replica
  # follows the protocol's trajectory only on the same layout
  run_all.lay_over_cores(0, 1)
  from jaxformer import compile_cache

  compile_cache.enable()
  try:
    record = retrain(module, values.size, values.arm, seeds, rates, values.steps, settings)
  except cli.usage_error_types() as e:
    cli.usage_error(cli.first_line(e))
  os.makedirs(values.workdir, exist_ok=True)
  with open(os.path.join(values.workdir, "retrain.json"), "w") as f:
    json.dump(record, f, indent=1)
  plot(record, values.workdir)
  for r in record["replicas"]:
    curve = r["val_accuracy_by_step"]
    print(
      f"seed {r['seed']} lr {r['learning_rate']:g}: {r['stop_reason']} at step "
      f"{r['final_step']}, eval accuracy {r['eval_accuracy']:.3f} (adjusted "
      f"{r['eval_adjusted']:.3f}); validation {curve[-1][1] if curve else float('nan'):.3f}"
    )
  print(f"wrote {values.workdir}/retrain.json and retrain.png ({record['seconds']:.0f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
