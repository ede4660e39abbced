"""The sweep protocol: how every trained comparison of the experiments is made and judged.

An experiment module declares what it compares and what would prove the claim wrong:

  NAME, CLAIM
  get_config(size)                 sizes: tiny (tests), quick (`make run`), full, accel; it
                                   holds `seeds`, `learning_rates`, `weight_decays`, the
                                   schedule (batch_size, total_steps, eval_every, ...)
  arms(config)                     [Arm(model, setting, rung, task, fields)]: what to train
  measure(config, trained, workdir) -> Section   (optional) probes of the trained models,
                                   measurements that need no training, tables, plots
  controls(metrics, config)        [Criterion] (optional): the comparison is fair; if one
                                   fails the verdict is INCONCLUSIVE
  criteria(metrics, config)        [Criterion]: the claim

and `run(module, config, workdir)` does the rest, the same way for every experiment:

1. each arm trains as one sweep, seeds x learning rates x weight decays, in one compiled
   program (jaxformer.train.sweep): every replica has its own init, data order and
   hyperparameters; arms with the same shapes reuse the compiled program;
2. per arm, the learning rate (and weight decay) with the best mean accuracy over seeds on the
   validation half of the held-out split is selected; a hyperparameter point where any seed
   diverged is not eligible (diverged replicas are reported, never averaged in);
3. at the selected point, each seed's accuracy on the eval half (never used for selection) is
   reported raw and chance-adjusted, (acc - chance) / (1 - chance), with the task's chance
   level stated;
4. the criteria are computed from those per-seed numbers, each with its rule over seeds
   (experiments/report.py: `every_seed`, `mean_above`, `mean_below`);
5. `results.json` records every replica, so every number in the report can be recomputed.

The metrics handed to controls() and criteria() (and written to results.json):
  chance[setting], accuracy[model][setting] (per seed, eval half, selected point),
  adjusted[model][setting], val_accuracy[model][setting], eval_loss[model][setting],
  steps[model][setting], selected[model][setting] = {learning_rate, weight_decay},
  diverged[model][setting] (replicas that went non-finite, all points)
plus whatever measure() adds.
"""

import dataclasses
import math
import time

import numpy as np

from experiments import harness, report
from jaxformer import ladder
from jaxformer.train import sweep

SIZES = ("tiny", "quick", "full", "accel")
# The learning-rate grid of the full size on 2 CPU cores. The full run of 2026-12-01 swept
# (1e-3, 3e-3, 1e-2) or (1e-3, 3e-3) in 34 arms: 1e-3 was selected in 2 of them (in one,
# 3e-3 reached the same 0.99), and all 18 (1e-3, 3e-3) arms selected 3e-3, the grid's edge.
# The accel size sweeps Zoology's four, logspace(1e-4, 1e-2).
FULL_LEARNING_RATES = (3e-3, 1e-2)


def set_sweep_defaults(c, total_steps):
  """Sets the sweep and data fields most quick configs share on ConfigDict `c`: 3 seeds at
  one learning rate, batch 32, MQAR-sized data, early stop at 0.99, `total_steps` a ceiling."""
  c.num_examples = 20_000
  c.num_test_examples = 512  # halves: validation (selection, early stop) and eval
  c.seed = 0  # generates the task's examples (the sweep's seeds vary init and order)
  c.seeds = (0, 1, 2)
  c.learning_rates = (3e-3,)
  c.weight_decays = (0.1,)
  c.batch_size = 32
  c.total_steps = total_steps  # upper bound per arm; every replica stops at early_stop_accuracy
  c.warmup_steps = 50
  c.eval_every = 100
  c.early_stop_accuracy = 0.99
  return c


# Training fields an experiment config may set for every arm (the rest keep the defaults of
# jaxformer/train/config.py); seed and learning rate come from the sweep.
SCHEDULE = ("batch_size", "total_steps", "eval_every", "early_stop_accuracy", "warmup_steps")


@dataclasses.dataclass(frozen=True)
class Arm:
  """One trained comparison point: a model (rung + model fields) on one setting's task."""

  model: str  # the name the report uses
  setting: str  # the grid point's name, e.g. "K=4 L=32"
  rung: str
  task: str
  fields: dict = dataclasses.field(default_factory=dict)  # model config overrides
  train: dict = dataclasses.field(default_factory=dict)  # training-field overrides
  learning_rates: tuple | None = None  # None: the experiment's grid


@dataclasses.dataclass
class Section:
  """What measure() adds to the report."""

  metrics: dict = dataclasses.field(default_factory=dict)
  table: list = dataclasses.field(default_factory=list)  # rows, shown below the arms' table
  plots: list = dataclasses.field(default_factory=list)
  setup: str = ""


@dataclasses.dataclass
class ArmResult:
  arm: Arm
  config: object  # the training config it ran with
  sweep: sweep.SweepResult
  selected: tuple | None  # (learning_rate, weight_decay); None: every point diverged
  seconds: float

  @property
  def chance(self):
    return self.sweep.chance

  def selected_runs(self):
    """The runs at the selected point, in seed order ([] if every point diverged)."""
    if self.selected is None:
      return []
    runs = [r for r in self.sweep.runs if (r.learning_rate, r.weight_decay) == self.selected]
    return sorted(runs, key=lambda r: r.seed)

  def per_seed(self, key):
    """`key` of Run.final() per seed at the selected point (NaN per seed if none)."""
    runs = self.selected_runs()
    if not runs:
      return [math.nan] * len({r.seed for r in self.sweep.runs})
    return [float(r.final()[key]) for r in runs]

  def adjusted(self):
    return [adjust(a, self.chance) for a in self.per_seed("eval_accuracy")]

  def fastest_steps_to(self, accuracy):
    """Per seed: the fewest evaluated steps to validation accuracy `accuracy` over every
    learning rate and weight decay of the grid (runs that diverged excluded; NaN if no run of
    the seed reached it). A speed read at each model's best rate for speed, apart from the
    selection by final accuracy, which a near tie can swing from one rate to another."""
    hits = {r.seed: [] for r in self.sweep.runs}
    for r in self.sweep.runs:
      if r.finite:
        hits[r.seed] += [step for step, _, va, _, _ in r.evals if va >= accuracy]
    return [float(min(hits[seed], default=math.nan)) for seed in sorted(hits)]

  def model(self):
    return ladder.build(self.config.rung, self.config.model)

  def params(self):
    """The trained params of each seed at the selected point (host arrays), in seed order."""
    if self.selected is None or self.sweep.params is None:
      return []
    order = sorted(
      (r.seed, i)
      for i, r in enumerate(self.sweep.runs)
      if (r.learning_rate, r.weight_decay) == self.selected
    )
    return [self.sweep.replica_params(i) for _, i in order]


def adjust(accuracy, chance):
  """Chance-adjusted accuracy: 0 at the task's chance level, 1 at perfect."""
  return (accuracy - chance) / (1.0 - chance) if chance < 1 else math.nan


def select(runs):
  """(learning_rate, weight_decay) with the best mean validation accuracy over seeds (ties:
  lower mean validation loss) among points where every seed stayed finite; None if none."""
  best, best_key = None, None
  points = sorted({(r.learning_rate, r.weight_decay) for r in runs})
  for point in points:
    group = [r for r in runs if (r.learning_rate, r.weight_decay) == point]
    if not all(r.finite for r in group):
      continue
    finals = [r.final() for r in group]
    key = (
      np.mean([f["val_accuracy"] for f in finals]),
      -np.mean([f["val_loss"] for f in finals]),
    )
    if best_key is None or key > best_key:
      best, best_key = point, key
  return best


class Trained:
  """Every arm's sweep, by (model, setting)."""

  def __init__(self, results):
    self.results = results
    self._by = {(r.arm.model, r.arm.setting): r for r in results}

  def get(self, model, setting):
    return self._by[(model, setting)]

  def models(self):
    return list(dict.fromkeys(r.arm.model for r in self.results))

  def settings(self):
    return list(dict.fromkeys(r.arm.setting for r in self.results))

  def metrics(self):
    m = {k: {} for k in ("accuracy", "adjusted", "val_accuracy", "eval_loss", "steps")}
    m |= {"selected": {}, "diverged": {}, "chance": {}}
    for r in self.results:
      model, setting = r.arm.model, r.arm.setting
      m["chance"][setting] = r.chance
      m["accuracy"].setdefault(model, {})[setting] = r.per_seed("eval_accuracy")
      m["adjusted"].setdefault(model, {})[setting] = r.adjusted()
      m["val_accuracy"].setdefault(model, {})[setting] = r.per_seed("val_accuracy")
      m["eval_loss"].setdefault(model, {})[setting] = r.per_seed("eval_loss")
      m["steps"].setdefault(model, {})[setting] = [float(x.final_step) for x in r.selected_runs()]
      point = dict(zip(("learning_rate", "weight_decay"), r.selected or (None, None), strict=True))
      m["selected"].setdefault(model, {})[setting] = point
      m["diverged"].setdefault(model, {})[setting] = sum(not x.finite for x in r.sweep.runs)
    return m

  def records(self):
    """One record per trained replica (results.json `runs`)."""
    out = []
    for r in self.results:
      for x in r.sweep.runs:
        out.append(
          {
            "model": r.arm.model,
            "setting": r.arm.setting,
            "seed": x.seed,
            "learning_rate": x.learning_rate,
            "weight_decay": x.weight_decay,
            "metrics": {
              **x.final(),
              "chance": r.chance,
              "final_step": x.final_step,
              "stop_reason": x.stop_reason,
              "selected": r.selected == (x.learning_rate, x.weight_decay),
              # the validation curve: readings such as fastest_steps_to recompute from it
              "val_accuracy_by_step": [[step, va] for step, _, va, _, _ in x.evals],
            },
          }
        )
    return out

  def table(self):
    """Per arm: the selected point and the eval accuracy over seeds."""
    rows = []
    for r in self.results:
      acc = r.per_seed("eval_accuracy")
      lr, wd = r.selected or (math.nan, math.nan)
      rows.append(
        {
          "model": r.arm.model,
          "setting": r.arm.setting,
          "lr*": lr,
          "wd*": wd,
          "accuracy mean": float(np.mean(acc)),
          "min": float(np.min(acc)),
          "max": float(np.max(acc)),
          "adjusted mean": float(np.mean(r.adjusted())),
          "per seed": [round(a, 3) for a in acc],
          "chance": r.chance,
          "diverged": sum(not x.finite for x in r.sweep.runs),
        }
      )
    return rows


def replicas(config, arm):
  lrs = arm.learning_rates or tuple(config.learning_rates)
  return sweep.grid(tuple(config.seeds), lrs, tuple(config.weight_decays))


def train(arms, config, log=print):
  """Trains every arm as one sweep; returns Trained."""
  schedule = {f: config[f] for f in SCHEDULE if f in config}
  results = []
  for i, arm in enumerate(arms, 1):
    tc = harness.train_config(arm.rung, arm.task, arm.fields, **(schedule | arm.train))
    reps = replicas(config, arm)
    start = time.perf_counter()
    result = sweep.train(
      tc, reps, log=lambda text, a=arm: log(f"      {a.model} @ {a.setting}: {text}")
    )
    seconds = time.perf_counter() - start
    arm_result = ArmResult(arm, result.config, result, select(result.runs), seconds)
    results.append(arm_result)
    acc = arm_result.per_seed("eval_accuracy")
    diverged = sum(not x.finite for x in result.runs)
    log(
      f"    [{i}/{len(arms)}] {arm.model} @ {arm.setting}: {len(reps)} replicas, "
      f"compile {result.compile_seconds:.1f} s, train {result.train_seconds:.1f} s "
      f"({result.steps} steps); eval accuracy {np.mean(acc):.3f} [{np.min(acc):.3f}, "
      f"{np.max(acc):.3f}] over seeds at lr={_point(arm_result.selected)}"
      + (f"; {diverged} diverged" if diverged else "")
    )
  return Trained(results)


def _point(selected):
  if selected is None:
    return "none (every point diverged)"
  lr, wd = selected
  return f"{lr:g}, wd={wd:g}"


def setup_text(config, trained):
  """The protocol's line of the report's setup."""
  if not trained.results:
    return ""
  lrs = sorted({lr for r in trained.results for lr in (r.arm.learning_rates or ())})
  lrs = lrs or list(config.learning_rates)
  chance = "; ".join(
    sorted({f"{r.arm.setting}: {r.chance:.3g} ({r.sweep.chance_rule})" for r in trained.results})
  )
  return (
    f"Protocol: seeds {list(config.seeds)}; learning rates {list(lrs)} x weight decays "
    f"{list(config.weight_decays)}, selected per arm by mean validation accuracy (first half of "
    f"the held-out split), reported on the eval half; batch {config.batch_size}, up to "
    f"{config.total_steps} steps (early stop at validation accuracy "
    f"{config.get('early_stop_accuracy')}). Chance: {chance}."
  )


def run(module, config, workdir, size="", log=print):
  """Trains the module's arms, measures, judges; returns its report.Result."""
  arms = module.arms(config) if hasattr(module, "arms") else []
  trained = train(arms, config, log)
  section = module.measure(config, trained, workdir) if hasattr(module, "measure") else Section()
  metrics = trained.metrics() | section.metrics
  controls = module.controls(metrics, config) if hasattr(module, "controls") else []
  setup = " ".join(t for t in (section.setup, setup_text(config, trained)) if t)
  return report.Result(
    experiment=module.NAME,
    claim=module.CLAIM,
    setup=setup,
    criteria=module.criteria(metrics, config),
    controls=controls,
    metrics=metrics,
    table=trained.table(),
    tables=[("", section.table)] if section.table else [],
    plots=section.plots,
    size=size,
    seeds=list(config.seeds) if arms else [],
    runs=trained.records(),
  )


def spread(ax, xs, per_seed, label, **kwargs):
  """Mean line with every seed's value as a point (the spread a reader should see)."""
  per_seed = [np.asarray(v, float) for v in per_seed]
  means = [float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for v in per_seed]
  (line,) = ax.plot(xs, means, marker="o", label=label, **kwargs)
  for x, values in zip(xs, per_seed, strict=True):
    ax.scatter([x] * len(values), values, s=12, color=line.get_color(), alpha=0.5, zorder=3)
  return line


def mean(values):
  values = [v for v in values if math.isfinite(v)]
  return float(np.mean(values)) if values else math.nan
