"""The training policy: how every arm of every experiment is trained, selected and grown.

Three rules, the same for every experiment, fixed before any confirmatory run (changing one
re-judges every verdict of record):

  selection  Each trained unit (an arm at a point of its axis, or the arm alone) trains in
             two stages, each one compiled program (jaxformer.train.sweep): the exploratory
             seeds at every learning rate x weight decay of the size's grid, then the
             confirmatory seeds at the selected point alone. The selected point has the best
             mean final validation accuracy over the exploratory seeds (ties: the lower
             validation loss); a point where a seed diverged is not eligible. The
             confirmatory seeds never inform a decision. Where the grid is one point there is
             nothing to select, and every seed trains in the one program; a size with
             `confirm_only` trains its confirmatory seeds alone there (its exploratory seeds
             train in the sizing run).
  plateau    A replica has finished learning when it reached the size's early-stop
             accuracy, diverged, or its best validation accuracy over the last half of its
             budget beat its best over the first half by less than PLATEAU_TOLERANCE. One
             still learning whose best validation accuracy never rose CHANCE_BAND above the
             task's chance is marked `chance`: learning for the budget rule, and for the
             judge finished only where the design expects that arm to fail
             (experiments/engine/judge.py).
  budget     While a replica at the selected point has not finished and the budget is below
             the size's step_cap, the unit's whole sweep trains again from step 0 at twice
             the budget (at most step_cap), and selection reads the new sweep. At the cap,
             a replica still learning is recorded as such; the judge reads it.

Every sweep goes through a store under the workdir (jaxformer/train/sweep_store.py), so a
run stopped part-way resumes at its first unfinished sweep.
"""

import dataclasses
import math
import time

import numpy as np

from experiments import harness
from jaxformer import ladder
from jaxformer.train import sweep

PLATEAU_TOLERANCE = 0.02
PLATEAU_WINDOW = 0.5
GROWTH = 2
FINISHED = ("target", "flat", "diverged")
GROWING = ("learning", "chance")  # the budget rule grows a unit while a replica is either
CHANCE_BAND = 0.05


def status(run, budget, chance=None):
  """target / diverged / flat / learning / chance: the plateau rule on one replica's run;
  `chance` marks a replica the rule reads as learning whose best validation accuracy never
  rose CHANCE_BAND above the task's chance accuracy (still learning for the budget rule)."""
  return curve_status(run.stop_reason, [(step, va) for step, _, va, _, _ in run.evals], budget,
                      chance)  # fmt: skip


def curve_status(stop_reason, curve, budget, chance=None):
  """`status` from a replica's stop reason and `curve`, its [(step, validation accuracy)] (a
  record's replicas carry both)."""
  if stop_reason == "early_stop":
    return "target"
  if stop_reason == "diverged":
    return "diverged"
  cut = budget * (1 - PLATEAU_WINDOW)
  before = [va for step, va in curve if step <= cut]
  after = [va for step, va in curve if step > cut]
  if before and after and max(after) - max(before) < PLATEAU_TOLERANCE:
    return "flat"
  if chance is not None and curve and max(va for _, va in curve) <= chance + CHANCE_BAND:
    return "chance"
  return "learning"


def select(runs, seeds):
  """(learning_rate, weight_decay) best on `seeds` (mean final validation accuracy, then
  lower loss) among points where every replica stayed finite; None if none did."""
  best, best_key = None, None
  for point in sorted({(r.learning_rate, r.weight_decay) for r in runs}):
    group = [r for r in runs if (r.learning_rate, r.weight_decay) == point and r.seed in seeds]
    if not group or not all(r.finite for r in group):
      continue
    finals = [r.final() for r in group]
    key = (np.mean([f["val_accuracy"] for f in finals]), -np.mean([f["val_loss"] for f in finals]))
    if best_key is None or key > best_key:
      best, best_key = point, key
  return best


@dataclasses.dataclass
class Unit:
  """One trained unit: an arm at one point (None: the arm alone or a mixed axis)."""

  arm: str
  point: object
  rung: str
  results: list  # the sweeps (sweep.SweepResult) at the final budget: the two stages
  seeds: tuple  # exploratory + confirmatory, the order of every per-seed list
  selected: tuple | None  # (learning_rate, weight_decay); None: every point diverged
  budget: int
  history: list
  seconds: float  # wall, of the call that returned it (a sweep read back takes ~0)
  # compiling and training of every sweep at every budget, as each sweep measured it when it
  # trained (kept in the sweep store): the unit's cost wherever and whenever it trained
  sweep_seconds: float = 0.0

  @property
  def result(self):
    """The first stage's sweep (its config and chance are the unit's)."""
    return self.results[0]

  def all_runs(self):
    """[(run, sweep, index in it)] of every replica of both stages."""
    return [(r, res, i) for res in self.results for i, r in enumerate(res.runs)]

  def runs(self):
    """The selected point's run of each seed, in `seeds` order (None where absent)."""
    if self.selected is None:
      return [None] * len(self.seeds)
    by_seed = {r.seed: r for r, _, _ in self.all_runs()
               if (r.learning_rate, r.weight_decay) == self.selected}  # fmt: skip
    return [by_seed.get(s) for s in self.seeds]

  def final(self, key):
    return [math.nan if r is None else float(r.final()[key]) for r in self.runs()]

  def plateau(self):
    chance = self.result.chance
    return ["missing" if r is None else status(r, self.budget, chance) for r in self.runs()]

  def steps_to(self, accuracy):
    """Per seed: the first evaluated step with validation accuracy >= `accuracy`; never (or
    diverged): the budget, a censored reading."""
    out = []
    for r in self.runs():
      hits = [s for s, _, va, _, _ in (r.evals if r and r.finite else []) if va >= accuracy]
      out.append(float(min(hits)) if hits else float(self.budget))
    return out

  def model(self):
    return ladder.build(self.rung, self.result.config.model)

  def params(self):
    """Each seed's trained params at the selected point (host arrays), in `seeds` order."""
    index = {(r.seed, r.learning_rate, r.weight_decay): (res, i) for r, res, i in self.all_runs()}
    return [res.replica_params(i) for res, i in (index[(s, *self.selected)] for s in self.seeds)]

  def curves(self):
    """Per seed: [(step, validation accuracy)] of the selected run."""
    return [[(s, va) for s, _, va, _, _ in r.evals] if r else [] for r in self.runs()]


def model_fields(size, arm):
  """The arm's model fields: sized by its task (vocabulary, length), then the size's shared
  fields, then the arm's own."""
  return harness.SIZED_BY_CORPUS | dict(size.model) | dict(arm.fields)


def budgets(size, arm, point):
  """(first budget, step cap) of the arm at a trained point: the size's, else its arm_steps
  entry ("arm @ point" wins over "arm")."""
  steps = size.arm_steps
  return steps.get(f"{arm.name} @ {point}", steps.get(arm.name, (size.steps, size.step_cap)))


def unit_config(arm, task, size, budget, fast_compile=None):
  """The training config of a unit's sweeps at `budget` steps (`fast_compile`: the config's,
  jaxformer/train/config.py)."""
  schedule = size.schedule() | {"total_steps": budget, "fast_compile": fast_compile}
  return harness.train_config(arm.rung, task, model_fields(size, arm), **schedule)


def rates(size, arm):
  """The arm's learning-rate grid at the size (declare.Size.rates)."""
  return size.rates(arm)


def stages(size, arm, seeds):
  """The replica grids of a unit's two stages, [(seeds, rates, weight decays)]: the
  exploratory seeds at every grid point, then the confirmatory seeds (at the selected point,
  left None). A one-point grid has nothing to select: every seed trains in the first stage."""
  explore = tuple(s for s in seeds if s in size.exploratory_seeds)
  confirm = tuple(s for s in seeds if s not in explore)
  grid = (rates(size, arm), tuple(size.weight_decays))
  if len(grid[0]) * len(grid[1]) == 1:
    return [(explore + confirm, *grid)]
  return [(explore, *grid)] + ([(confirm, None, None)] if confirm else [])


def replica_steps(size, arm, point, seeds):
  """A unit's cost before any extension: its first budget times the replicas of its stages
  (`stages`). `--jobs` workers take the costliest units first (engine/run.py)."""
  first, _ = budgets(size, arm, point)
  return first * sum(
    len(seeds_) * (len(lrs) * len(wds) if lrs else 1)
    for seeds_, lrs, wds in stages(size, arm, seeds)
  )


def train_unit(arm, point, task, size, seeds, *, store=None, log=print, fast_compile=None):
  """Trains one unit under the three rules; returns a Unit. `seeds`: exploratory first;
  `fast_compile`: its sweeps' (unit_config)."""
  (first_seeds, *grid), *later = stages(size, arm, seeds)
  # the seeds that select: the exploratory ones; where none trains (a confirmatory run of a
  # one-point grid under `confirm_only`) there is one point to take, read on every seed
  explore = tuple(s for s in seeds if s in size.exploratory_seeds) or first_seeds
  first, cap = budgets(size, arm, point)
  stage_one = sweep.grid(first_seeds, *grid)
  budget, history, start = first, [], time.perf_counter()
  where = arm.name if point is None else f"{arm.name} @ {point}"

  spent = []

  def train(config, replicas):
    result = sweep.train(config, replicas, log=lambda text: log(f"{where}: {text}"), store=store)
    spent.append(result.compile_seconds + result.train_seconds)
    return result

  while True:
    config = unit_config(arm, task, size, budget, fast_compile)
    results = [train(config, stage_one)]
    selected = select(results[0].runs, explore)
    if selected is not None and later:
      results.append(train(config, sweep.grid(later[0][0], (selected[0],), (selected[1],))))
    unit = Unit(arm.name, point, arm.rung, results, tuple(seeds), selected, budget, history, 0.0)
    learning = selected is not None and any(s in GROWING for s in unit.plateau())
    if not learning or budget >= cap:
      unit.seconds, unit.sweep_seconds = time.perf_counter() - start, sum(spent)
      return unit
    grown = min(cap, budget * GROWTH)
    history.append(f"budget {budget} -> {grown} steps: a selected replica still learning")
    budget = grown
