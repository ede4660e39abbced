"""The protocol: how every trained comparison of the experiments is registered, run and judged.

An experiment module declares what it compares and what would prove the claim wrong:

  NAME, CLAIM
  get_config(size)                 sizes: tiny (tests), quick (`make run`), full, accel; it
                                   holds `exploratory_seeds` and `confirmatory_seeds`
                                   (disjoint), `learning_rates`, `weight_decays`, the
                                   schedule (batch_size, total_steps, eval_every, ...), and
                                   the budget rule's `step_cap`, `lr_cap`
  arms(config)                     [Arm(model, setting, rung, task, fields)]: what to train
  measure(config, trained, workdir) -> Section   (optional) probes of the trained models,
                                   measurements that need no training, tables, plots
  controls(metrics, config)        [Criterion] (optional): the comparison is fair; if one
                                   fails the verdict is INCONCLUSIVE
  criteria(metrics, config)        [Criterion]: the claim
  falsification(metrics, config)   [Criterion] (optional): the claim's criteria computed on
                                   the falsification arm; it must be REFUTED

and registers its design (pre-registration, docs/experiments.md "Design log"):

  VERSION = 1                      bumped with every change of the design's content
  SPECS = (Spec("recalls", "residual deep stack adjusted >= 0.9", threshold=RECALLS,
                reads=("residual",)), ...)        every criterion and control, by name
  CHECKS = (Spec("fold", "...", tag="architectural", test="tests/...::test_x"), ...)
  FALSIFICATION = (Falsification("no_skip", "recalls", "a deep plain stack"),)

`design(module, size)` freezes all of it into a `Design` (the config, the arms, the specs,
the falsification arms, the plateau rule) with a content hash, recorded beside the verdict.
(The registry of those hashes, results/designs.json, retired after b74c13a with the
experiment modules it registered: they are declarations now, experiments/engine/. The
scorecard, the one caller left, trains through `train` and is not registered.)

`run(module, config, workdir)` does the rest, the same way for every experiment:

1. each arm trains as one sweep, (exploratory + confirmatory seeds) x learning rates x weight
   decays, in one compiled program (jaxformer.train.sweep); arms with the same shapes reuse
   the compiled program;
2. per arm, the point with the best mean validation accuracy over the EXPLORATORY seeds is
   selected (the confirmatory seeds never inform a decision); a point where any seed
   diverged is not eligible. When the selected rate is at an edge of a grid of >= 2 rates,
   the grid extends by one log step past it (each extension recorded), until the selected
   rate is interior or the next rate would pass `lr_cap` (a step that passes it by less than
   the grid's 3-figure rounding lands on the cap itself). A design's `confirm_below` = n
   reads each seed at the better (final validation accuracy) of the selected rate and the n
   rates below it in the grid, and a two-stage design trains its confirmatory seeds at
   those n + 1 rates: one seed stalled at a rate next to the unstable ones is then read where
   it learns, and the criteria read every seed the same way;
3. plateau: a replica has finished learning when it reached its early-stop target, diverged,
   or its best validation accuracy over the last `plateau_window` of its budget improved on
   its best before by less than `plateau_tolerance`. While a replica at the selected point
   has not, the arm's whole grid retrains at `plateau_growth` x the budget, up to
   `step_cap`: from step 0 under the default cosine schedule (its every step depends on the
   budget), and under a "wsd" one (a design's `lr_schedule`) each replica continues from
   the first step of the shorter budget's decay (sweep.Continuation: the same numbers as
   training the longer budget from step 0, for the steps after that one only). A criterion
   that reads an arm that never plateaus is UNRESOLVED ("still learning at N steps").
   A design's `plateau_reading` names how "finished" is read at a budget the arm grew to:
   "window" (the default, above) or "doubling": the replica's best validation accuracy
   minus its best at the budget before (the same seed, rate and weight decay), so the
   reading asks whether doubling the budget moved it (evidence item 13). Both runs end in
   their schedule's decay, which the window does not compare like with like: under "wsd"
   the last window holds the whole decay and the half before none of it, so a replica whose
   decay alone adds `plateau_tolerance` reads as learning at every budget. A replica with
   no run at the budget before (the first budget, a rate or a seed new at this one) is read
   by the window, unless the design reads "doubling_every_replica": then such a replica of a
   grown budget also trains the budget before (under "wsd" the longer run continues from it,
   so this costs that run's decay), and every replica of a grown budget is read by the
   doubling. In a two-stage design the confirmatory seeds are new wherever the selection
   moves as the budget grows, so under "doubling" the window, and with it the decay, reads
   them;
4. the criteria are computed twice, from the confirmatory seeds (the verdict of record) and
   from the exploratory seeds; a criterion on which they disagree is UNRESOLVED. Each
   criterion has a rule over seeds (experiments/report.py: `every_seed` (the seeds split:
   UNRESOLVED), `mean_above` / `mean_below` / `paired_above` (bootstrap 95% interval of the
   mean, paired by seed; straddling: UNRESOLVED), `equivalent` (both one-sided bounds inside
   the margin), `trained_minus_untrained` (a criterion that may hold at init, read as the
   change from init on the same networks and seeds; its Spec says `at_init=True`));
5. the falsification readings: a falsification criterion that is SUPPORTED (the arm the
   criterion must reject is accepted) makes the verdict INCONCLUSIVE ("the criterion cannot
   tell"); a falsification arm only proposed (`Falsification(trained=False)`) is listed;
6. the verdict at each learning rate of the grid (every arm read at that rate, confirmatory
   seeds) goes into results.json, beside the design's hash, version and the commit;
7. `results.json` records every replica (with its plateau status), so every number in the
   report can be recomputed.

The metrics handed to controls() and criteria() (and written to results.json):
  chance[setting], accuracy[model][setting] (per seed, eval half, selected point),
  adjusted[model][setting], val_accuracy[model][setting], eval_loss[model][setting],
  steps[model][setting], selected[model][setting] = {learning_rate, weight_decay},
  diverged[model][setting] (replicas that went non-finite, all points),
  plateau[model][setting] (per seed: target / flat / diverged / learning),
  budget[model][setting] (the arm's final step budget)
plus whatever measure() adds. A module without VERSION runs the same protocol unregistered
(no design hash; `seeds` are its confirmatory seeds, none exploratory).
"""

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import tempfile
import time

import numpy as np

from experiments import harness, report
from jaxformer import bench, ladder
from jaxformer.train import sweep

SIZES = ("tiny", "quick", "full", "accel")
# The learning-rate grid of the full size on 2 CPU cores: four points on a log scale (the
# protocol's minimum), logspace(1e-3, 1e-2, 4). Where the rates were selected before: the full
# run of 2026-12-01 swept (1e-3, 3e-3, 1e-2) or (1e-3, 3e-3) in 34 arms, 1e-3 selected in 2 of
# them and 3e-3, the edge, in all 18 (1e-3, 3e-3) arms; the protocol's full runs of (3e-3,
# 1e-2) selected both, and positions' arms extended down to 9e-4. An edge still extends past
# itself within lr_cap. (2026-12-02; the grid was (3e-3, 1e-2).) The accel size sweeps
# Zoology's four, logspace(1e-4, 1e-2).
FULL_LEARNING_RATES = tuple(float(x) for x in np.logspace(-3, -2, 4).round(6))
TAGS = ("empirical", "architectural", "identity")
# Seeds of record the issue asks for: at least this many confirmatory seeds per size.
MIN_CONFIRMATORY = {"tiny": 1, "quick": 3, "full": 5, "accel": 5}
# The plateau and budget rule's defaults (a config may state its own; the design hashes the
# values in force).
PLATEAU_TOLERANCE = 0.02  # best validation accuracy gained over the window, below: flat
PLATEAU_WINDOW = 0.5  # the last half of the budget
PLATEAU_GROWTH = 2.0  # a budget that did not plateau retrains at 2x, up to step_cap
# a design's plateau_reading (see 3. above); the last two read by the doubling
PLATEAU_READINGS = ("window", "doubling", "doubling_every_replica")
DOUBLING_READINGS = PLATEAU_READINGS[1:]
# Under a run's workdir: its finished sweeps (jaxformer/train/sweep_store.py); the same command
# run again after a stop or crash reads them back and trains only what is missing.
SWEEPS = "sweeps"
# A grid extends past its edge up to the config's `lr_cap` (low, high); a config without one
# does not extend (a test's tiny grid, an unregistered module).


# The seeds of every registered design, by size: (exploratory, confirmatory), disjoint. The
# exploratory seeds select the learning rate and size the design; the confirmatory seeds give
# the verdict of record (>= 3 at quick, >= 5 at full and accel).
SEEDS = {
  "tiny": ((100,), (0,)),
  "quick": ((100,), (0, 1, 2)),
  "full": ((100, 101), (0, 1, 2, 3, 4)),
  "accel": ((100, 101), (0, 1, 2, 3, 4)),
}


# The confirmatory seeds of a full design changed after its run on SEEDS["full"]'s: a change
# decided from those seeds is confirmed on seeds no decision saw (evidence item 12)
FRESH_FULL_SEEDS = (5, 6, 7, 8, 9)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS
FRESH_FULL_SEEDS_2 = (10, 11, 12, 13, 14)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_2
FRESH_FULL_SEEDS_3 = (15, 16, 17, 18, 19)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_3
FRESH_FULL_SEEDS_4 = (20, 21, 22, 23, 24)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_4
FRESH_FULL_SEEDS_5 = (25, 26, 27, 28, 29)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_5
FRESH_FULL_SEEDS_6 = (30, 31, 32, 33, 34)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_6
FRESH_FULL_SEEDS_7 = (35, 36, 37, 38, 39)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_7
FRESH_FULL_SEEDS_8 = (40, 41, 42, 43, 44)
# ... and of a design changed again after a run on FRESH_FULL_SEEDS_8
FRESH_FULL_SEEDS_9 = (45, 46, 47, 48, 49)


def set_seeds(c, size):
  """Sets `exploratory_seeds` and `confirmatory_seeds` of ConfigDict `c` for `size`."""
  c.exploratory_seeds, c.confirmatory_seeds = SEEDS[size]
  return c


def set_sweep_defaults(c, total_steps):
  """Sets the sweep and data fields most quick configs share on ConfigDict `c`: 3
  confirmatory seeds and 1 exploratory seed at one learning rate, batch 32, MQAR-sized data,
  early stop at 0.99, `total_steps` the first budget (the cap: `step_cap`)."""
  c.num_examples = 20_000
  c.num_test_examples = 512  # halves: validation (selection, early stop) and eval
  c.seed = 0  # generates the task's examples (the sweep's seeds vary init and order)
  set_seeds(c, "quick")
  c.learning_rates = (3e-3,)
  c.weight_decays = (0.1,)
  c.batch_size = 32
  c.total_steps = total_steps  # the first budget; every replica stops at early_stop_accuracy
  c.step_cap = total_steps
  c.warmup_steps = 50
  c.eval_every = 100
  c.early_stop_accuracy = 0.99
  return c


# A design's schedule when its budget grows by continuing (the design log says which do):
# warmup, the peak, a linear decay over the last 20% (jaxformer/train/optimizer.py); each
# sweep of a grown budget continues from the start of the shorter one's decay
WSD = {"lr_schedule": "wsd", "lr_decay_fraction": 0.2}
# A design that reads a grown budget's plateau by the doubling (see 3. above); the second
# also trains the budget before for a replica new at a grown one, so the doubling reads it
DOUBLING = {"plateau_reading": "doubling"}
DOUBLING_EVERY_REPLICA = {"plateau_reading": "doubling_every_replica"}

# A two-stage design whose first stage (the exploratory seeds at every rate of the grid) costs
# most of its run may select on one exploratory seed (the design log says which do); the
# confirmatory seeds are as many as before
ONE_EXPLORATORY = {"exploratory_seeds": SEEDS["full"][0][:1]}

# Training fields an experiment config may set for every arm (the rest keep the defaults of
# jaxformer/train/config.py); seed and learning rate come from the sweep.
SCHEDULE = (
  "batch_size",
  "total_steps",
  "eval_every",
  "early_stop_accuracy",
  "warmup_steps",
  "lr_schedule",
  "lr_decay_fraction",
)


# --- the registered design ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
  """One registered criterion, control or check of an experiment.

  name: how the computed report.Criterion names it (Criterion.name); statement: the claim
  with its threshold; tag: empirical (measured on trained models: the verdict reads only
  these), architectural (true by construction) or identity (algebra): the last two are
  property tests (`test`: where), listed in the report as checks. reads: the models whose
  arms it reads (their plateau gates it; a criterion's own `reads` names arms exactly).
  at_init: it may already hold at initialisation, so it is read as trained minus untrained.
  control: a fairness condition (failing: INCONCLUSIVE) rather than the claim.
  learning_keeps: the verdict (SUPPORTED or REFUTED) that more training of the arms it reads
  cannot reverse, for a bound on how well they do: "learns: adjusted >= T" keeps SUPPORTED
  (a model still learning only rises), "does not learn: adjusted <= T" keeps REFUTED. Read
  with that verdict, the gate does not wait on its arms' plateau (`gate`); empty: it waits.
  learning_bounds: the criterion is also read at every corner of what more training can do to
  the replicas it reads that are still learning (each one's adjusted accuracy left where it is,
  since a model still learning only rises, or raised to 1, perfect recall; the criterion's
  module computes the corners and sets `report.Criterion.bounded` when every corner gives its
  verdict): the gate then does not wait on their plateau. False: it waits."""

  name: str
  statement: str
  tag: str = "empirical"
  threshold: float | None = None
  margin: float | None = None
  reads: tuple = ()
  at_init: bool = False
  control: bool = False
  test: str = ""
  learning_keeps: str = ""
  learning_bounds: bool = False

  def __post_init__(self):
    if self.learning_keeps not in ("", report.SUPPORTED, report.REFUTED):
      raise ladder.ConfigError(
        f"Spec {self.name!r}: learning_keeps={self.learning_keeps!r}: expected '', "
        f"{report.SUPPORTED} or {report.REFUTED}"
      )
    if self.tag not in TAGS:
      raise ladder.ConfigError(f"Spec {self.name!r}: tag={self.tag!r}: expected one of {TAGS}")
    if self.tag != "empirical" and not self.test:
      raise ladder.ConfigError(f"Spec {self.name!r}: a {self.tag} check names its test")


@dataclasses.dataclass(frozen=True)
class Falsification:
  """A real trained arm, declared beside the claim, that criterion `criterion` (a Spec name)
  must reject; module.falsification(metrics, config) computes that criterion on it, exactly
  as for the claim's arms. trained=False: proposed in the design, not yet trained (listed)."""

  arm: str
  criterion: str
  note: str = ""
  trained: bool = True


@dataclasses.dataclass(frozen=True)
class Design:
  """An experiment's frozen design at one size: everything that decides its verdict. `hash`
  covers all of it but the version."""

  experiment: str
  version: int
  size: str
  exploratory_seeds: tuple
  confirmatory_seeds: tuple
  specs: tuple
  checks: tuple
  falsification: tuple
  rule: tuple  # the plateau and budget rule, (name, value) pairs
  config: str  # canonical JSON of get_config(size): grids, budgets, learning rates, ...
  arms: str  # canonical JSON of arms(config)

  def content(self):
    return {
      "experiment": self.experiment,
      "size": self.size,
      "exploratory_seeds": list(self.exploratory_seeds),
      "confirmatory_seeds": list(self.confirmatory_seeds),
      "specs": [_spec_content(s) for s in self.specs],
      "checks": [_spec_content(s) for s in self.checks],
      "falsification": [_canonical(dataclasses.asdict(f)) for f in self.falsification],
      "rule": _canonical(dict(self.rule)),
      "config": json.loads(self.config),
      "arms": json.loads(self.arms),
    }

  @property
  def hash(self):
    text = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()

  def spec(self, name):
    for s in self.specs:
      if s.name == name:
        return s
    raise ladder.ConfigError(
      f"{self.experiment}: criterion name={name!r} is not registered in its design (SPECS)"
    )

  def record(self):
    return {
      "experiment": self.experiment,
      "version": self.version,
      "hash": self.hash,
      "size": self.size,
    }


# Spec fields added after designs were registered, at the value that leaves a spec as it was:
# left out of the hash there, so the designs registered before them keep their hashes
_SPEC_FIELDS_ADDED = {"learning_keeps": "", "learning_bounds": False}


def _spec_content(spec):
  fields = dataclasses.asdict(spec)
  for name, unset in _SPEC_FIELDS_ADDED.items():
    if fields[name] == unset:
      del fields[name]
  return _canonical(fields)


def _canonical(value):
  """JSON-ready, with every tuple a list and every number a Python int or float, and the
  checkout's own path written as `<repo>` (a task spec naming a file of the repository must
  hash the same wherever the repository lives)."""
  if isinstance(value, str):
    return value.replace(harness.REPO_ROOT + os.sep, "<repo>/").replace(harness.REPO_ROOT, "<repo>")
  if isinstance(value, dict):
    return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
  if isinstance(value, list | tuple):
    return [_canonical(v) for v in value]
  if hasattr(value, "to_dict"):
    return _canonical(value.to_dict())
  if isinstance(value, np.generic):
    value = value.item()
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def registered(module):
  return hasattr(module, "VERSION")


def seed_sets(config):
  """(exploratory seeds, confirmatory seeds) of `config`; an unregistered config's `seeds`
  are confirmatory, with none exploratory. Raises ConfigError naming the field."""
  if "confirmatory_seeds" not in config:
    return (), tuple(int(s) for s in config.get("seeds", ()))
  explore = tuple(int(s) for s in config.get("exploratory_seeds", ()))
  confirm = tuple(int(s) for s in config["confirmatory_seeds"])
  if not confirm and explore:
    raise ladder.ConfigError("confirmatory_seeds: at least one seed is needed")
  if set(explore) & set(confirm):
    raise ladder.ConfigError(
      f"exploratory_seeds={list(explore)}, confirmatory_seeds={list(confirm)}: must be "
      f"disjoint (shared: {sorted(set(explore) & set(confirm))})"
    )
  if len(set(explore)) != len(explore) or len(set(confirm)) != len(confirm):
    raise ladder.ConfigError("exploratory_seeds / confirmatory_seeds: a seed is repeated")
  return explore, confirm


def budget_rule(config):
  """The plateau and budget rule in force for `config`, as a dict."""
  rates = [float(lr) for lr in config.get("learning_rates", ())] or [math.nan]
  lo, hi = config.get("lr_cap", None) or (min(rates), max(rates))
  return (
    {
      "plateau_tolerance": float(config.get("plateau_tolerance", PLATEAU_TOLERANCE)),
      "plateau_window": float(config.get("plateau_window", PLATEAU_WINDOW)),
      "plateau_growth": float(config.get("plateau_growth", PLATEAU_GROWTH)),
      "step_cap": int(config.get("step_cap", config.get("total_steps", 0))),
      "lr_cap": [float(lo), float(hi)],
    }
    | ({"confirm_at_selected": True} if confirms_at_selected(config) else {})
    | ({"confirm_below": below} if (below := confirm_below(config)) else {})
    | ({"plateau_reading": reading} if (reading := plateau_reading(config)) != "window" else {})
  )


def plateau_reading(config):
  """The design's `plateau_reading` (one of PLATEAU_READINGS; "window" when unset)."""
  reading = config.get("plateau_reading", "window")
  if reading not in PLATEAU_READINGS:
    raise ladder.ConfigError(
      f"plateau_reading={reading!r}: expected one of {', '.join(PLATEAU_READINGS)}"
    )
  return reading


def confirm_below(config):
  """The design's `confirm_below` (0 when unset): how many grid rates below the selected one
  each seed is also read at (read_rates)."""
  below = config.get("confirm_below", 0)
  if isinstance(below, bool) or not isinstance(below, int) or below < 0:
    raise ladder.ConfigError(f"confirm_below={below!r}: expected an integer >= 0")
  return below


def read_rates(learning_rates, selected_lr, below):
  """The selected rate and the `below` next lower rates of the grid, the selected first."""
  lower = sorted((lr for lr in learning_rates if lr < selected_lr), reverse=True)[:below]
  return (selected_lr, *lower)


def confirms_at_selected(config):
  """The two-stage rule (a design's `confirm_at_selected`): the exploratory seeds train at
  every point of the grid, and the confirmatory seeds only at the point they select (the
  issue's "run once at the selected hyperparameters"; 13 replicas instead of 28 at full).
  Without exploratory seeds there is nothing to select on first: one stage."""
  return bool(config.get("confirm_at_selected", False)) and bool(seed_sets(config)[0])


def design(module, size):
  """The frozen Design of a registered experiment module at `size`. Raises ConfigError
  naming what is wrong: seeds not disjoint, too few confirmatory seeds for the size, a
  duplicate or unknown name, a check tagged empirical, an untagged criterion."""
  config = module.get_config(size)
  explore, confirm = seed_sets(config)
  arms = module.arms(config) if hasattr(module, "arms") else []
  least = MIN_CONFIRMATORY.get(size, 1) if arms else 0  # nothing trained: no seeds
  if len(confirm) < least:
    raise ladder.ConfigError(
      f"{module.NAME} size={size}: confirmatory_seeds={list(confirm)}: at least {least}"
    )
  specs = tuple(getattr(module, "SPECS", ()))
  checks = tuple(getattr(module, "CHECKS", ()))
  falsification = tuple(getattr(module, "FALSIFICATION", ()))
  names = [s.name for s in specs + checks]
  if len(set(names)) != len(names):
    raise ladder.ConfigError(f"{module.NAME}: SPECS / CHECKS: a name is repeated in {names}")
  for s in specs:
    if s.tag != "empirical":
      raise ladder.ConfigError(
        f"{module.NAME}: SPECS {s.name!r} is tagged {s.tag}: it belongs in CHECKS (a test)"
      )
  for s in checks:
    if s.tag == "empirical":
      raise ladder.ConfigError(f"{module.NAME}: CHECKS {s.name!r} must be architectural/identity")
  for f in falsification:
    if f.criterion not in names:
      raise ladder.ConfigError(
        f"{module.NAME}: FALSIFICATION arm {f.arm!r}: criterion={f.criterion!r} is not in SPECS"
      )
  text = lambda v: json.dumps(_canonical(v), sort_keys=True, separators=(",", ":"))  # noqa: E731
  return Design(
    experiment=module.NAME,
    version=int(module.VERSION),
    size=size,
    exploratory_seeds=explore,
    confirmatory_seeds=confirm,
    specs=specs,
    checks=checks,
    falsification=falsification,
    rule=tuple(
      sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in budget_rule(config).items())
    ),
    config=text(config.to_dict()),
    arms=text([dataclasses.asdict(a) for a in arms]),
  )


def _git(*args):
  return subprocess.run(
    ["git", *args], cwd=harness.REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
  ).stdout.strip()


def commit():
  """The repository's commit (with '-dirty' when tracked files changed), or 'unknown'."""
  try:
    head = _git("rev-parse", "--short=12", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
  except (OSError, subprocess.SubprocessError):
    return "unknown"
  return head + ("-dirty" if dirty else "")


# --- training: sweeps, selection, plateau, budgets -------------------------------------------


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
  step_cap: int | None = None  # None: the config's step_cap (at least the arm's budget)


@dataclasses.dataclass
class Section:
  """What measure() adds to the report."""

  metrics: dict = dataclasses.field(default_factory=dict)
  table: list = dataclasses.field(default_factory=list)  # rows, shown below the arms' table
  plots: list = dataclasses.field(default_factory=list)
  setup: str = ""
  more_tables: list = dataclasses.field(default_factory=list)  # (title, rows) each, after it


def plateau_status(run, budget, tolerance=PLATEAU_TOLERANCE, window=PLATEAU_WINDOW):
  """'target' (early stop), 'diverged', 'flat' (its best validation accuracy over the last
  `window` of `budget` steps gained less than `tolerance` on its best before) or 'learning'
  (it gained more, or too few evaluations to tell)."""
  return _status(run, plateau_gain(run, budget, window), tolerance)


def _status(run, gain, tolerance):
  if run.stop_reason == "early_stop":
    return "target"
  if run.stop_reason == "diverged":
    return "diverged"
  return "flat" if gain is not None and gain < tolerance else "learning"


def plateau_gain(run, budget, window=PLATEAU_WINDOW):
  """What the plateau rule compares with its tolerance: the best validation accuracy over the
  last `window` of `budget` steps minus the best before (None: no evaluation on one side)."""
  return window_gain([(step, va) for step, _, va, _, _ in run.evals], budget, window)


def window_gain(curve, budget, window=PLATEAU_WINDOW):
  """plateau_gain of a validation curve, (step, validation accuracy) pairs (a record's
  `val_accuracy_by_step`)."""
  cut = budget * (1 - window)
  before = [va for step, va in curve if step <= cut]
  after = [va for step, va in curve if step > cut]
  if not before or not after:
    return None
  return float(max(after) - max(before))


def best_accuracy(run):
  """A run's best validation accuracy over its evaluations (None: no finite one)."""
  values = [va for _, _, va, _, _ in run.evals if va is not None and math.isfinite(va)]
  return max(values) if values else None


def replica_key(run):
  """(seed, learning_rate, weight_decay): a replica, the same at every budget."""
  return run.seed, run.learning_rate, run.weight_decay


def best_accuracies(runs):
  """replica_key -> best_accuracy, for the runs that have one."""
  return {replica_key(x): best for x in runs if (best := best_accuracy(x)) is not None}


FINISHED = ("target", "flat", "diverged")


@dataclasses.dataclass
class ArmResult:
  arm: Arm
  config: object  # the training config it ran with
  sweep: sweep.SweepResult  # the first sweep at the final budget
  selected: tuple | None  # (learning_rate, weight_decay); None: every point diverged
  seconds: float
  more: list = dataclasses.field(default_factory=list)  # more sweeps at the final budget
  seeds: tuple | None = None  # a view: only these seeds' replicas (None: all)
  budget: int | None = None  # the final step budget (None: the config's)
  history: list = dataclasses.field(default_factory=list)  # grid extensions, budget growth
  exploratory: tuple = ()  # the seeds the selection read
  rule: dict = dataclasses.field(default_factory=dict)  # budget_rule(config)
  # (seed, learning_rate, weight_decay) -> best validation accuracy at the budget before
  # (the "doubling" plateau reading); {} at the first budget
  previous: dict = dataclasses.field(default_factory=dict)

  @property
  def chance(self):
    return self.sweep.chance

  def _indexed(self):
    """[(run, sweep, index in that sweep)] of the replicas in view."""
    out = []
    for result in [self.sweep, *self.more]:
      for i, r in enumerate(result.runs):
        if self.seeds is None or r.seed in self.seeds:
          out.append((r, result, i))
    return out

  @property
  def runs(self):
    return [r for r, _, _ in self._indexed()]

  @property
  def learning_rates(self):
    return sorted({r.learning_rate for r in self.runs})

  def view(self, seeds):
    return dataclasses.replace(self, seeds=tuple(seeds))

  def at_rate(self, learning_rate):
    """This arm read at `learning_rate` (its selected weight decay) alone, if its grid holds
    it."""
    if self.selected is None or learning_rate not in self.learning_rates:
      return self
    rule = {k: v for k, v in self.rule.items() if k != "confirm_below"}
    return dataclasses.replace(self, selected=(learning_rate, self.selected[1]), rule=rule)

  def read_rates(self):
    """The rates each seed is read at the better of: the selected one, and under the design's
    `confirm_below` the rates below it in the grid ((): every point diverged)."""
    if self.selected is None:
      return ()
    return read_rates(self.learning_rates, self.selected[0], self.rule.get("confirm_below", 0))

  def selected_runs(self):
    """The run each seed is read at, in seed order ([] if every point diverged): the one at
    the selected point, or under `confirm_below` the finite one with the best final
    validation accuracy (then the lower validation loss; the selected rate on a tie) among
    the read rates."""
    if self.selected is None:
      return []
    rates, wd = self.read_rates(), self.selected[1]
    by_seed = {}
    for r in self.runs:
      if r.weight_decay == wd and r.learning_rate in rates:
        by_seed.setdefault(r.seed, []).append(r)
    return [_better(by_seed[seed], self.selected[0]) for seed in sorted(by_seed)]

  def per_seed(self, key):
    """`key` of Run.final() of each seed's read run (selected_runs; NaN per seed if none)."""
    runs = self.selected_runs()
    if not runs:
      seeds = self.seeds if self.seeds is not None else {r.seed for r in self.runs}
      return [math.nan] * len(seeds)
    return [float(r.final()[key]) for r in runs]

  def adjusted(self):
    return [adjust(a, self.chance) for a in self.per_seed("eval_accuracy")]

  def _budget(self):
    if self.budget is not None:
      return self.budget
    config = self.sweep.config
    return int(config.total_steps) if config is not None else int(self.sweep.steps)

  def plateau_rule(self):
    """(tolerance, window) of the plateau rule this arm is read under."""
    rule = self.rule or {}
    return (
      rule.get("plateau_tolerance", PLATEAU_TOLERANCE),
      rule.get("plateau_window", PLATEAU_WINDOW),
    )

  def doubled(self, run):
    """Whether `run` is read by the "doubling" plateau reading (else by the window)."""
    reading = (self.rule or {}).get("plateau_reading")
    return reading in DOUBLING_READINGS and replica_key(run) in self.previous

  def gain(self, run):
    """What the plateau rule compares with its tolerance for `run` (None: too few
    evaluations): its best minus its best at the budget before when doubled(run), else
    plateau_gain over the window."""
    if self.doubled(run):
      best = best_accuracy(run)
      previous = self.previous[replica_key(run)]
      return None if best is None else float(best - previous)
    return plateau_gain(run, self._budget(), self.plateau_rule()[1])

  def status(self, run):
    """target / flat / diverged / learning, for one of this arm's runs."""
    return _status(run, self.gain(run), self.plateau_rule()[0])

  def plateau(self):
    """Per seed, its read run: target / flat / diverged / learning."""
    return [self.status(r) for r in self.selected_runs()]

  def plateau_gains(self):
    """Per seed, its read run: the gain the rule reads (None: too few evaluations)."""
    return [self.gain(r) for r in self.selected_runs()]

  def plateaued(self):
    """Every seed's read run finished learning (all seeds, whatever the view)."""
    return all(s in FINISHED for s in dataclasses.replace(self, seeds=None).plateau())

  def fastest_steps_to(self, accuracy):
    """Per seed: the fewest evaluated steps to validation accuracy `accuracy` over every
    learning rate and weight decay of the grid (runs that diverged excluded; NaN if no run of
    the seed reached it). A speed read at each model's best rate for speed, apart from the
    selection by final accuracy, which a near tie can swing from one rate to another."""
    hits = {r.seed: [] for r in self.runs}
    for r in self.runs:
      if r.finite:
        hits[r.seed] += [step for step, _, va, _, _ in r.evals if va >= accuracy]
    return [float(min(hits[seed], default=math.nan)) for seed in sorted(hits)]

  def model(self):
    return ladder.build(self.config.rung, self.config.model)

  def params(self):
    """The trained params of each seed's read run (selected_runs; host arrays), in seed
    order."""
    read = {id(r) for r in self.selected_runs()}
    chosen = sorted(
      ((r.seed, result, i) for r, result, i in self._indexed() if id(r) in read),
      key=lambda t: t[0],
    )
    return [result.replica_params(i) for _, result, i in chosen if result.params is not None]


def adjust(accuracy, chance):
  """Chance-adjusted accuracy: 0 at the task's chance level, 1 at perfect."""
  return (accuracy - chance) / (1.0 - chance) if chance < 1 else math.nan


def _better(runs, selected_lr):
  """Of one seed's runs at the read rates: the finite one with the best final validation
  accuracy, then the lower validation loss, then the selected rate (every run diverged: the
  selected rate's)."""
  finite = [r for r in runs if r.finite]
  if not finite:
    return next((r for r in runs if r.learning_rate == selected_lr), runs[0])

  def key(r):
    final = r.final()
    return (final["val_accuracy"], -final["val_loss"], r.learning_rate == selected_lr)

  return max(finite, key=key)


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
  """Every arm's sweep, by (model, setting); `seeds`: the seeds in view (None: all)."""

  def __init__(self, results, seeds=None):
    self.results = results
    self.seeds = None if seeds is None else list(seeds)
    self._by = {(r.arm.model, r.arm.setting): r for r in results}

  def get(self, model, setting):
    return self._by[(model, setting)]

  def has(self, model, setting):
    return (model, setting) in self._by

  def models(self):
    return list(dict.fromkeys(r.arm.model for r in self.results))

  def settings(self):
    return list(dict.fromkeys(r.arm.setting for r in self.results))

  def seeds_in_view(self):
    """The seeds whose replicas this view holds, sorted (the order of every per-seed list)."""
    if self.seeds is not None:
      return sorted(self.seeds)
    return sorted({x.seed for r in self.results for x in r.runs})

  def view(self, seeds):
    """Only `seeds`' replicas (the selection stays the one made on the exploratory seeds)."""
    return Trained([r.view(seeds) for r in self.results], seeds)

  def at_rate(self, learning_rate):
    """Every arm whose grid holds `learning_rate` read there instead of at its selection."""
    return Trained([r.at_rate(learning_rate) for r in self.results], self.seeds)

  def learning_rates(self):
    return sorted({lr for r in self.results for lr in r.learning_rates})

  def metrics(self):
    m = {k: {} for k in ("accuracy", "adjusted", "val_accuracy", "eval_loss", "steps")}
    m |= {"selected": {}, "diverged": {}, "chance": {}, "plateau": {}, "budget": {}}
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
      m["diverged"].setdefault(model, {})[setting] = sum(not x.finite for x in r.runs)
      m["plateau"].setdefault(model, {})[setting] = r.plateau()
      m["budget"].setdefault(model, {})[setting] = r._budget()
      if r.rule.get("confirm_below"):  # the rate each seed was read at
        rates = [x.learning_rate for x in r.selected_runs()]
        m.setdefault("read_rate", {}).setdefault(model, {})[setting] = rates
    return m

  def records(self):
    """One record per trained replica (results.json `runs`)."""
    out = []
    for r in self.results:
      read = {id(x) for x in r.selected_runs()} if r.rule.get("confirm_below") else None
      for x in r.runs:
        doubled = r.doubled(x)
        out.append(
          {
            "model": r.arm.model,
            "setting": r.arm.setting,
            "seed": x.seed,
            "seeds": "exploratory" if x.seed in r.exploratory else "confirmatory",
            "learning_rate": x.learning_rate,
            "weight_decay": x.weight_decay,
            "metrics": {
              **x.final(),
              "chance": r.chance,
              "final_step": x.final_step,
              "budget": r._budget(),
              "stop_reason": x.stop_reason,
              "plateau": r.status(x),
              "plateau_gain": r.gain(x),
              # "doubling": the gain is over the best at the budget before, filed beside it
              **(
                {
                  "plateau_reading": "doubling",
                  "best_before": r.previous[replica_key(x)],
                }
                if doubled
                else {}
              ),
              "selected": r.selected == (x.learning_rate, x.weight_decay),
              # under confirm_below: whether this run is the one its seed is read at
              **({"read": id(x) in read} if read is not None else {}),
              # the validation curve: readings such as fastest_steps_to recompute from it
              "val_accuracy_by_step": [[step, va] for step, _, va, _, _ in x.evals],
            },
          }
        )
    return out

  def table(self):
    """Per arm: the selected point, the eval accuracy over seeds, the plateau."""
    rows = []
    for r in self.results:
      acc = r.per_seed("eval_accuracy")
      lr, wd = r.selected or (math.nan, math.nan)
      status = r.plateau()
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
          "diverged": sum(not x.finite for x in r.runs),
          "plateau": f"{sum(s in FINISHED for s in status)}/{len(status)} at {r._budget()}",
        }
      )
    return rows

  def plateau_table(self):
    """Per arm: budget, each replica's plateau status at the selected point and its gain over
    the window (what the rule compares with the tolerance), the grid's changes."""
    rows = []
    for r in self.results:
      all_seeds = dataclasses.replace(r, seeds=None)
      seeds = [x.seed for x in all_seeds.selected_runs()]
      status = dict(zip(seeds, all_seeds.plateau(), strict=True))
      gains = dict(zip(seeds, all_seeds.plateau_gains(), strict=True))
      doubled = {x.seed: all_seeds.doubled(x) for x in all_seeds.selected_runs()}
      rows.append(
        {
          "model": r.arm.model,
          "setting": r.arm.setting,
          "budget": r._budget(),
          "lr*": r.selected[0] if r.selected else math.nan,
          "exploratory": " ".join(f"{s}:{status[s]}" for s in sorted(status) if s in r.exploratory),
          "confirmatory": " ".join(
            f"{s}:{status[s]}" for s in sorted(status) if s not in r.exploratory
          ),
          # a gain read by the doubling (over the budget before) is marked "(2x)"
          "gain over the window": " ".join(
            f"{s}:{'-' if gains[s] is None else format(gains[s], '+.3f')}"
            + ("(2x)" if doubled[s] else "")
            for s in sorted(gains)
          ),
          "validation s.e.": validation_noise(
            r.config, r.rule.get("plateau_tolerance", PLATEAU_TOLERANCE)
          ),
          "grid / budget changes": "; ".join(h["what"] for h in r.history) or "none",
        }
      )
    return rows


def validation_noise(config, tolerance):
  """The standard error of a validation accuracy of 0.5 on the training config's validation
  half, its target count, and a warning where it exceeds half the plateau tolerance: there the
  best of a flat replica's evaluations can rise by the tolerance by chance (a doubling read as
  "learning"), and the selection's differences are noise of that size."""
  targets = sweep.validation_targets(config.task, config.get("data_dir"))
  se = 0.5 / math.sqrt(targets) if targets else math.inf
  noisy = f"; above {tolerance / 2:g}, half the plateau tolerance" if se > tolerance / 2 else ""
  return f"{se:.4f} ({targets} targets{noisy})"


def replicas(config, arm):
  explore, confirm = seed_sets(config)
  lrs = arm.learning_rates or tuple(config.learning_rates)
  return sweep.grid(explore + confirm, lrs, tuple(config.weight_decays))


# A rate past the cap by less than this (relative) is the cap itself: the grid's rates are
# rounded to 3 significant figures, so logspace(1e-3, 1e-2, 4) extended down three times lands
# on 9.96e-5, not on the cap 1e-4 it spaces out to (issue 25 item 8; skips v7 stopped there).
_CAP_ROUNDING = 0.01


def _extension(lrs, selected_lr, cap):
  """The next rate past the grid's edge where `selected_lr` sits, or None (interior, a grid
  of one rate, or past the cap; a rate within the grid's rounding of the cap is the cap)."""
  lrs = sorted(lrs)
  if len(lrs) < 2:
    return None
  if selected_lr == lrs[-1]:
    new = float(f"{lrs[-1] * lrs[-1] / lrs[-2]:.3g}")
    if new <= cap[1] * (1 + _CAP_ROUNDING) and lrs[-1] < cap[1]:
      return min(new, float(cap[1]))
    return None
  if selected_lr == lrs[0]:
    new = float(f"{lrs[0] * lrs[0] / lrs[1]:.3g}")
    if new >= cap[0] * (1 - _CAP_ROUNDING) and lrs[0] > cap[0]:
      return max(new, float(cap[0]))
    return None
  return None


def arm_schedule(config, arm):
  """The training fields `arm` trains with under `config`: the design's SCHEDULE fields, then
  the arm's own overrides (its first budget is "total_steps")."""
  return {f: config[f] for f in SCHEDULE if f in config} | arm.train


def arm_config(config, arm, total_steps=None):
  """The training config train_arm trains `arm` with, at `total_steps` (None: its first
  budget)."""
  schedule = arm_schedule(config, arm)
  if total_steps is not None:
    schedule["total_steps"] = int(total_steps)
  return harness.train_config(arm.rung, arm.task, arm.fields, **schedule)


def train_arm(arm, config, log=print, store=None, min_budget=None):
  """Trains one arm under the protocol's rule: select on the exploratory seeds, extend the
  learning-rate grid past an edge up to lr_cap, grow the budget up to step_cap until every
  replica at the selected point has finished learning. Returns an ArmResult.

  `store`: a directory of finished sweeps (jaxformer/train/sweep_store.py), so that a run
  stopped part-way resumes at its first unfinished sweep. `min_budget`: the budget keeps
  growing, within step_cap, until it reaches at least this (`common_budgets`)."""
  explore, confirm = seed_sets(config)
  two_stage = confirms_at_selected(config)
  seeds = explore if two_stage else explore + confirm  # the seeds of every grid point
  rule = budget_rule(config)
  budget = int(arm_schedule(config, arm)["total_steps"])
  cap = max(budget, int(arm.step_cap if arm.step_cap is not None else rule["step_cap"]))
  lrs = list(arm.learning_rates or tuple(config.learning_rates))
  wds = tuple(config.weight_decays)
  done = {}  # (learning_rate, budget) -> SweepResult
  history = []
  start = time.perf_counter()

  shorter = []  # the keys of `done` at the budget before this one (a "wsd" grows from them)
  previous = {}  # each replica's best validation accuracy at the budget before (ArmResult)
  budget_before = None  # that budget (None: this is the first)
  trained_before = set()  # the (seed, lr, wd) of every replica trained at it
  every_replica = rule.get("plateau_reading") == "doubling_every_replica"

  def run(seed_list, rates, weight_decays, steps=None, grows_from=None):
    steps = budget if steps is None else steps
    tc = arm_config(config, arm, steps)
    replicas = sweep.grid(seed_list, tuple(rates), tuple(weight_decays))
    grows_from = shorter if grows_from is None else grows_from
    resume = sweep.Continuation.merge([done[k].continuation for k in grows_from if k in done])
    if resume is not None:  # None when a rate or seed is new at this budget: from step 0
      resume = resume.only(replicas)
    result = sweep.train(
      tc,
      replicas,
      log=lambda text, a=arm: log(f"      {a.model} @ {a.setting}: {text}"),
      store=store,
      resume=resume,
    )
    if result.read_back:
      history.append(
        {"what": f"{steps} steps at {list(rates)}: read back from the workdir's sweeps/"}
      )
    elif resume is not None:
      history.append({"what": f"{steps} steps at {list(rates)}: continued from step {resume.step}"})
    return result

  def train_new(key, seed_list, rates, weight_decays):
    """run(...) at this budget, for done[key]; under "doubling_every_replica" the replicas
    with no run at the budget before train it first (the longer run grows from it), so the
    doubling reads them."""
    grows_from = shorter
    grid = sweep.grid(seed_list, tuple(rates), tuple(weight_decays))
    new = [key for r in grid if (key := replica_key(r)) not in trained_before]
    if every_replica and budget_before is not None and new:
      seeds_new, rates_new = sorted({x[0] for x in new}), sorted({x[1] for x in new})
      wds_new = sorted({x[2] for x in new})
      back = run(seeds_new, rates_new, wds_new, steps=budget_before, grows_from=[])
      done[("before", key)] = back
      history.append(
        {
          "what": f"{budget_before} steps at {rates_new} for seeds {seeds_new}: the budget "
          "before, for the doubling reading"
        }
      )
      trained_before.update(new)
      previous.update(best_accuracies(back.runs))
      grows_from = shorter + [("before", key)]
    return run(seed_list, rates, weight_decays, grows_from=grows_from)

  while True:
    todo = [lr for lr in lrs if (lr, budget) not in done]
    if todo:
      result = train_new((todo[0], budget), seeds, todo, wds)
      for lr in todo:
        done[(lr, budget)] = result
    results = list({id(done[(lr, budget)]): done[(lr, budget)] for lr in lrs}.values())
    runs = [r for res in results for r in res.runs]
    selected = select([r for r in runs if not explore or r.seed in explore])
    if selected is not None:
      new = _extension(lrs, selected[0], rule["lr_cap"])
      edge = len(lrs) >= 2 and selected[0] in (min(lrs), max(lrs))
      capped = f"selected {selected[0]:g}, an edge of the grid: the next rate passes lr_cap"
      if edge and new is None and not any(h["what"] == capped for h in history):
        history.append({"what": capped})
      if new is not None:
        history.append(
          {
            "what": f"lr grid extended to {new:g} (selected {selected[0]:g}, an "
            f"edge of {sorted(lrs)})",
            "learning_rate": new,
          }
        )
        lrs.append(new)
        continue
    if two_stage and selected is not None:  # the second stage: the confirmatory seeds
      key = ("confirmatory", selected, budget)
      rates = read_rates(lrs, selected[0], rule.get("confirm_below", 0))
      if key not in done:
        done[key] = train_new(key, confirm, rates, (selected[1],))
        if len(rates) > 1:
          history.append(
            {
              "what": f"{budget} steps: confirmatory seeds at {list(rates)}, each read at its "
              "better validation accuracy"
            }
          )
      results.append(done[key])
    arm_result = ArmResult(
      arm,
      results[0].config,
      results[0],
      selected,
      0.0,
      more=results[1:],
      budget=budget,
      history=history,
      exploratory=explore,
      rule=rule,
      previous=previous,
    )
    learning = not arm_result.plateaued()
    short = min_budget is not None and budget < min_budget
    if selected is not None and (learning or short) and budget < cap:
      grown = min(cap, int(round(budget * rule["plateau_growth"])))
      why = "still learning" if learning else "its budget group's budget"
      history.append({"what": f"budget {budget} -> {grown} steps ({why})", "budget": grown})
      shorter = [k for k in done if k[-1] == budget]
      runs_before = [
        x for res in {id(done[k]): done[k] for k in shorter}.values() for x in res.runs
      ]
      previous = best_accuracies(runs_before)
      trained_before = {replica_key(x) for x in runs_before}
      budget_before, budget = budget, grown
      continue
    arm_result.seconds = time.perf_counter() - start
    return arm_result


def common_budgets(trained, config, log=print, store=None):
  """`trained` with the arms of each of `config.budget_groups` (optional, absent in the
  designs registered before it: none) at one budget: each group's largest, every arm below
  it grown to at least it, within its step_cap (train_arm's `min_budget`; with `store`, its
  sweeps so far are read back and the growth continues them). A criterion that subtracts one
  arm's loss from another's then compares models trained as long; each arm alone stops at its
  own plateau, read on accuracy, which can leave loss still falling (mlp_memory v12)."""
  results = list(trained.results)
  for group in config.get("budget_groups") or ():
    members = [i for i, r in enumerate(results) if r.arm.model in group]
    missing = set(group) - {results[i].arm.model for i in members}
    if missing:
      raise ladder.ConfigError(f"budget_groups: {sorted(missing)} name no trained arm")
    top = max(results[i]._budget() for i in members)
    for i in members:
      if results[i]._budget() < top:
        arm = results[i].arm
        log(f"    {arm.model} @ {arm.setting}: {results[i]._budget()} -> {top} steps, its group's")
        results[i] = train_arm(arm, config, log, store, min_budget=top)
        _log_arm(results[i], "group", log)
  return Trained(results)


def train(arms, config, log=print, store=None):
  """Trains every arm (train_arm, with `store`); returns Trained."""
  results = []
  for i, arm in enumerate(arms, 1):
    results.append(train_arm(arm, config, log, store))
    _log_arm(results[-1], f"{i}/{len(arms)}", log)
  return Trained(results)


def _log_arm(r, tag, log):
  """The progress line of a trained ArmResult `r`: replicas, seconds, budget, accuracy,
  plateau and the grid and budget changes."""
  acc = r.per_seed("eval_accuracy")
  diverged = sum(not x.finite for x in r.runs)
  status = r.plateau()
  log(
    f"    [{tag}] {r.arm.model} @ {r.arm.setting}: {len(r.runs)} replicas, "
    f"compile {r.sweep.compile_seconds:.1f} s, {r.seconds:.1f} s in all "
    f"(budget {r._budget()} steps); eval accuracy {np.mean(acc):.3f} [{np.min(acc):.3f}, "
    f"{np.max(acc):.3f}] over seeds at lr={_point(r.selected)}; plateau "
    f"{sum(s in FINISHED for s in status)}/{len(status)}"
    + (f"; {diverged} diverged" if diverged else "")
    + "".join(f"; {h['what']}" for h in r.history)
  )


def _point(selected):
  if selected is None:
    return "none (every point diverged)"
  lr, wd = selected
  return f"{lr:g}, wd={wd:g}"


def setup_text(config, trained):
  """The protocol's line of the report's setup."""
  if not trained.results:
    return ""
  explore, confirm = seed_sets(config)
  lrs = trained.learning_rates()
  chance = "; ".join(
    sorted({f"{r.arm.setting}: {r.chance:.3g} ({r.sweep.chance_rule})" for r in trained.results})
  )
  rule = budget_rule(config)
  return (
    f"Protocol: confirmatory seeds {list(confirm)} (the verdict), exploratory seeds "
    f"{list(explore)} (selection); learning rates {lrs} x weight decays "
    f"{list(config.weight_decays)}, selected per arm by mean validation accuracy of the "
    f"exploratory seeds (first half of the held-out split), reported on the eval half"
    + (
      " (two stages: the confirmatory seeds trained at the selected point only)"
      if confirms_at_selected(config)
      else ""
    )
    + f"; batch "
    f"{config.batch_size}, a budget of {config.total_steps} steps growing x"
    f"{rule['plateau_growth']:g} to at most {rule['step_cap']} until every replica plateaus "
    f"(early stop at validation accuracy {config.get('early_stop_accuracy')}, or a gain "
    f"< {rule['plateau_tolerance']:g} over the last {rule['plateau_window']:.0%} of the "
    f"budget"
    + (
      "; at a budget the arm grew to, a gain of its best over its best at the budget "
      "before, the doubling reading"
      if rule.get("plateau_reading") in DOUBLING_READINGS
      else ""
    )
    + (
      " (a replica new at a grown budget trains the budget before too)"
      if rule.get("plateau_reading") == "doubling_every_replica"
      else ""
    )
    + ")"
    + "".join(
      f"; {', '.join(group)} grown to one budget, the largest any of them reached"
      for group in config.get("budget_groups") or ()
    )
    + f". Chance: {chance}."
  )


# --- judging -----------------------------------------------------------------------------


def _judge(module, config, trained, workdir):
  """(section, metrics, controls, criteria, falsification) of the module on `trained`."""
  section = module.measure(config, trained, workdir) if hasattr(module, "measure") else Section()
  metrics = trained.metrics() | section.metrics
  controls = module.controls(metrics, config) if hasattr(module, "controls") else []
  criteria = module.criteria(metrics, config)
  falsif = module.falsification(metrics, config) if hasattr(module, "falsification") else []
  return section, metrics, list(controls), list(criteria), list(falsif)


def gate(criteria, trained, design=None):
  """Checks each criterion against the design (a registered name; `at_init` read as trained
  minus untrained) and makes it UNRESOLVED when an arm it reads never plateaued, unless one
  arm of its `decided_by` plateaued (that finished reading decides it alone), its spec's
  `learning_keeps` is the verdict it reads (more training cannot reverse it), or its spec
  registers `learning_bounds` and the criterion is `bounded` (the same verdict at every
  corner of what its replicas still learning can reach)."""
  for c in criteria:
    spec = design.spec(c.name) if design is not None else None
    if spec is not None and spec.at_init and "untrained" not in c.values:
      raise ladder.ConfigError(
        f"{design.experiment}: criterion {c.name!r} is registered at_init=True: it must be read "
        "as trained minus untrained (report.trained_minus_untrained)"
      )
    reads = list(c.reads)
    if not reads and spec is not None:
      reads = [(r.arm.model, r.arm.setting) for r in trained.results if r.arm.model in spec.reads]
    learning = [(m, s, arm) for m, s in reads if not (arm := trained.get(m, s)).plateaued()]
    finished = [f"{m} @ {s}" for m, s in c.decided_by if trained.get(m, s).plateaued()]
    decided = ""
    if finished:
      decided = f"decided by {finished[0]}, which plateaued"
    elif spec is not None and spec.learning_keeps and c.verdict == spec.learning_keeps:
      decided = f"{c.verdict} already, which more training cannot reverse"
    elif spec is not None and spec.learning_bounds and c.bounded:
      decided = c.bounded
    if decided:
      if learning:
        c.note = f"{decided}; still learning: {', '.join(f'{m} @ {s}' for m, s, _ in learning)}"
    elif learning:
      model, setting, arm = learning[0]
      c.unresolved(f"still learning at {arm._budget()} steps: {model} @ {setting}")
  return criteria


def agree(confirmatory, exploratory):
  """Each confirmatory criterion whose exploratory reading disagrees becomes UNRESOLVED."""
  if len(confirmatory) != len(exploratory):
    raise ValueError("the exploratory and confirmatory readings list different criteria")
  for c, e in zip(confirmatory, exploratory, strict=True):
    if c.verdict != e.verdict:
      c.unresolved(f"exploratory seeds {e.verdict}, confirmatory {c.verdict}")
  return confirmatory


def _record(reg, config):
  """The design's record for results.json; `config_as_registered` is False when the config
  run is not the registered one (a test's or a caller's variation)."""
  if reg is None:
    return {}
  text = json.dumps(_canonical(config.to_dict()), sort_keys=True, separators=(",", ":"))
  return reg.record() | {"config_as_registered": text == reg.config}


def run(module, config, workdir, size="", log=print):
  """Trains the module's arms, measures, judges under the protocol; returns report.Result."""
  started = commit(), time.strftime("%Y-%m-%d %H:%M", time.gmtime())  # the code that runs
  reg = design(module, size) if registered(module) and size else None
  explore, confirm = seed_sets(config)
  arms = list(module.arms(config)) if hasattr(module, "arms") else []
  store = os.path.join(workdir, SWEEPS)
  trained = train(arms, config, log, store=store)
  # a module whose next arms depend on what the trained ones show (a walk over a grid, as
  # the retired fixed_memory's capacity law did) names them until it needs none; each seed
  # set decides for itself
  while hasattr(module, "next_arms"):
    views = [trained.view(seeds) for seeds in (confirm, explore) if seeds]
    named = {(a.model, a.setting): a for a in module.next_arms(config, views)}
    more = [a for key, a in named.items() if not trained.has(*key)]
    if not more:
      break
    log(f"    next: {', '.join(f'{a.model} @ {a.setting}' for a in more)}")
    arms += more
    trained = Trained(trained.results + train(more, config, log, store=store).results)
  trained = common_budgets(trained, config, log, store=store)
  view = trained.view(confirm)
  section, metrics, controls, criteria, falsif = _judge(module, config, view, workdir)
  for group in (controls, criteria, falsif):
    gate(group, trained, reg)
  exploratory = []
  if explore and arms:
    with tempfile.TemporaryDirectory() as scratch:
      _, _, e_controls, e_criteria, e_falsif = _judge(
        module, config, trained.view(explore), scratch
      )
    for c_group, e_group in ((controls, e_controls), (criteria, e_criteria), (falsif, e_falsif)):
      gate(e_group, trained, reg)
      agree(c_group, e_group)
    exploratory = e_controls + e_criteria
  if reg is not None:
    declared = {f.criterion for f in reg.falsification if f.trained}
    got = {c.name for c in falsif}
    if declared != got:
      raise ladder.ConfigError(
        f"{module.NAME}: FALSIFICATION declares trained readings of {sorted(declared)}, "
        f"falsification() computed {sorted(got)}"
      )
  per_rate = []
  rates = trained.learning_rates()
  # two stages: only the exploratory seeds trained at every rate, so they are what each
  # rate's verdict can read
  rate_seeds, rate_view = (
    ("exploratory", trained.view(explore))
    if confirms_at_selected(config)
    else ("confirmatory", view)
  )
  if len(rates) > 1:
    for lr in rates:
      with tempfile.TemporaryDirectory() as scratch:
        at = rate_view.at_rate(lr)
        _, _, r_controls, r_criteria, r_falsif = _judge(module, config, at, scratch)
      for group in (r_controls, r_criteria, r_falsif):
        gate(group, trained.at_rate(lr), reg)
      r = report.Result(
        module.NAME, "", "", r_criteria, {}, controls=r_controls, falsification=r_falsif
      )
      per_rate.append(
        {
          "learning_rate": lr,
          "seeds": rate_seeds,
          "verdict": r.verdict,
          "criteria": {c.name or c.description: c.verdict for c in r_controls + r_criteria},
        }
      )
  setup = " ".join(t for t in (section.setup, setup_text(config, trained)) if t)
  return report.Result(
    experiment=module.NAME,
    claim=module.CLAIM,
    setup=setup,
    criteria=criteria,
    controls=controls,
    metrics=metrics,
    table=view.table(),
    tables=([("", section.table)] if section.table else []) + list(section.more_tables),
    plots=section.plots,
    size=size,
    seeds=list(confirm) if arms else [],
    runs=trained.records(),
    design=_record(reg, config),
    commit=started[0],
    date=started[1],
    exploratory_seeds=list(explore) if arms else [],
    exploratory=exploratory,
    falsification=falsif,
    proposed=[dataclasses.asdict(f) for f in getattr(module, "FALSIFICATION", ()) if not f.trained],
    checks=[
      {"name": s.name, "tag": s.tag, "statement": s.statement, "test": s.test}
      for s in getattr(module, "CHECKS", ())
    ],
    per_rate=per_rate,
    plateau=trained.plateau_table(),
    machine=bench.machine(),
  )


def spread(ax, xs, per_seed, label, **kwargs):
  """Mean line with every seed's value as a point (the spread a reader should see)."""
  per_seed = [np.asarray(v, float) for v in per_seed]
  means = [float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for v in per_seed]
  (line,) = ax.plot(xs, means, label=label, **({"marker": "o"} | kwargs))
  for x, values in zip(xs, per_seed, strict=True):
    ax.scatter([x] * len(values), values, s=12, color=line.get_color(), alpha=0.5, zorder=3)
  return line


def mean(values):
  values = [v for v in values if math.isfinite(v)]
  return float(np.mean(values)) if values else math.nan
