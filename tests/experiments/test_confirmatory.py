"""The confirmatory protocol on synthetic curves and metrics: design hashes, plateau and
budget growth, learning-rate grid extension, exploratory and confirmatory seeds, equivalence,
trained minus untrained, the falsification arm (experiments/protocol.py, report.py)."""

import dataclasses
import json
import math
import os
import types

import jax
import ml_collections
import pytest

from experiments import protocol, report, sizes
from jaxformer import ladder
from jaxformer.train import optimizer, sweep

THRESHOLD = 0.9
FULL_SEEDS = {"confirmatory_seeds": (0, 1, 2, 3, 4)}


def _config(**fields):
  c = ml_collections.ConfigDict()
  c.exploratory_seeds = (100,)
  c.confirmatory_seeds = (0, 1, 2)
  c.learning_rates = (1e-3, 3e-3)
  c.weight_decays = (0.1,)
  c.batch_size = 8
  c.total_steps = 400
  c.step_cap = 400
  c.eval_every = 100
  c.warmup_steps = 1
  c.early_stop_accuracy = 0.99
  c.update(fields)
  return c


def _module(threshold=THRESHOLD, version=1, **config_fields):
  """A registered experiment: one arm 'model', one criterion 'learns' (adjusted >= threshold)."""

  def criteria(metrics, config):
    return [
      report.every_seed(
        f"learns: adjusted >= {threshold}",
        metrics["adjusted"]["model"]["s"],
        lambda a: a >= threshold,
        name="learns",
      )
    ]

  def falsification(metrics, config):
    return [
      report.every_seed(
        "the weak arm learns",
        metrics["adjusted"]["weak"]["s"],
        lambda a: a >= threshold,
        name="learns",
        reads=[("weak", "s")],
      )
    ]

  return types.SimpleNamespace(
    NAME="demo",
    CLAIM="the model learns, the weak one does not",
    VERSION=version,
    SPECS=(
      protocol.Spec("learns", f"adjusted >= {threshold}", threshold=threshold, reads=("model",)),
    ),
    CHECKS=(protocol.Spec("fold", "an identity", tag="identity", test="tests/x.py::test_y"),),
    FALSIFICATION=(protocol.Falsification("weak", "learns", "a model that cannot"),),
    get_config=lambda size: _config(
      **(FULL_SEEDS if size in ("full", "accel") else {}) | config_fields
    ),
    arms=lambda config: [
      protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2"),
      protocol.Arm(
        "weak", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2", {"d_model": 8}
      ),
    ],
    criteria=criteria,
    falsification=falsification,
  )


# --- design hashes -----------------------------------------------------------------------


def test_the_hash_covers_seeds_specs_falsification_and_rule_but_not_the_version():
  base = protocol.design(_module(), "quick")
  assert protocol.design(_module(version=7), "quick").hash == base.hash
  for changed in (
    _module(confirmatory_seeds=(0, 1, 3)),
    _module(step_cap=800),
    _module(plateau_tolerance=0.01),
    _module(plateau_reading="doubling"),
  ):
    assert protocol.design(changed, "quick").hash != base.hash
  m = _module()
  m.FALSIFICATION = (protocol.Falsification("weak", "learns", "other", trained=False),)
  assert protocol.design(m, "quick").hash != base.hash
  # a spec field added later hashes only where it is set, so older designs keep their hashes
  assert "learning_keeps" not in protocol.design(m, "quick").content()["specs"][0]
  m.SPECS = (dataclasses.replace(m.SPECS[0], learning_keeps=report.SUPPORTED),)
  assert protocol.design(m, "quick").content()["specs"][0]["learning_keeps"] == report.SUPPORTED
  assert "learning_bounds" not in protocol.design(m, "quick").content()["specs"][0]
  m.SPECS = (dataclasses.replace(m.SPECS[0], learning_bounds=True),)
  assert protocol.design(m, "quick").content()["specs"][0]["learning_bounds"] is True
  with pytest.raises(ladder.ConfigError, match="learning_keeps='PASS'"):
    protocol.Spec("x", "y", learning_keeps="PASS")


@pytest.mark.parametrize(
  "fields, match",
  [
    ({"exploratory_seeds": (0,)}, "disjoint"),
    ({"confirmatory_seeds": (0, 1)}, "at least 3"),
    ({"confirmatory_seeds": ()}, "at least one"),
    ({"exploratory_seeds": (), "confirmatory_seeds": ()}, "at least 3"),
    ({"plateau_reading": "twice"}, "plateau_reading='twice'"),
  ],
)
def test_a_bad_seed_declaration_is_refused_naming_the_field(fields, match):
  with pytest.raises(ladder.ConfigError, match=match):
    protocol.design(_module(**fields), "quick")


def test_a_spec_is_tagged_and_a_check_names_its_test():
  with pytest.raises(ladder.ConfigError, match="tag"):
    protocol.Spec("x", "y", tag="obvious")
  with pytest.raises(ladder.ConfigError, match="names its test"):
    protocol.Spec("x", "y", tag="architectural")
  m = _module()
  m.SPECS = m.SPECS + (protocol.Spec("w", "a window's reach", tag="architectural", test="t"),)
  with pytest.raises(ladder.ConfigError, match="belongs in CHECKS"):
    protocol.design(m, "quick")


# --- verdicts: intervals, equivalence, seeds ---------------------------------------------------


def test_an_interval_that_straddles_its_threshold_is_unresolved():
  assert report.mean_above("gain > 0", [0.05, 0.06, 0.055], 0.0).verdict == report.SUPPORTED
  assert report.mean_above("gain > 0", [-0.05, -0.06, -0.055], 0.0).verdict == report.REFUTED
  straddles = report.mean_above("gain > 0", [-0.2, 0.3, -0.1, 0.25], 0.0)
  assert straddles.verdict == report.UNRESOLVED and "straddles" in straddles.note
  assert report.mean_below("loss < 0", [0.1, math.nan], 0.0).verdict == report.UNRESOLVED


def test_seeds_that_split_are_unresolved():
  holds = lambda a: a >= 0.9  # noqa: E731
  assert report.every_seed("d", [0.95, 0.91], holds).verdict == report.SUPPORTED
  assert report.every_seed("d", [0.5, 0.4], holds).verdict == report.REFUTED
  split = report.every_seed("d", [0.95, 0.5, 0.99], holds)
  assert split.verdict == report.UNRESOLVED and "1 of 3" not in split.note
  assert "2 of 3 hold" in split.note


@pytest.mark.parametrize(
  "differences, verdict",
  [
    ([0.01, -0.01, 0.02, 0.0, 0.01], report.SUPPORTED),  # both bounds inside +-0.05
    ([0.03, 0.04, 0.06, 0.05, 0.045], report.UNRESOLVED),  # the upper bound crosses 0.05
    ([0.08, 0.09, 0.1, 0.12, 0.085], report.REFUTED),  # wholly outside: a loss
    ([-0.08, -0.09, -0.1, -0.12, -0.085], report.REFUTED),  # wholly outside: a gain
  ],
)
def test_an_equivalence_test_on_each_side_of_its_margin(differences, verdict):
  c = report.equivalent("bilinear - r within 0.05", differences, 0.05)
  assert c.verdict == verdict
  low, high = c.values["ci90"]
  assert (-0.05 < low and high < 0.05) is (verdict == report.SUPPORTED)


def test_a_criterion_that_holds_at_init_fails_read_as_trained_minus_untrained():
  trained, untrained = [0.40, 0.38, 0.41], [0.37, 0.39, 0.40]
  alone = report.every_seed("receiver dependence >= 0.1", trained, lambda d: d >= 0.1)
  assert alone.verdict == report.SUPPORTED  # it already holds on the untrained networks
  change = report.trained_minus_untrained("receiver dependence >= 0.1", trained, untrained, 0.1)
  assert change.verdict == report.REFUTED
  assert change.values["trained"] == trained and change.values["untrained"] == untrained
  learned = report.trained_minus_untrained("d", [0.6, 0.55, 0.7], untrained, 0.1)
  assert learned.verdict == report.SUPPORTED


def _result(criteria, falsification=(), controls=()):
  return report.Result(
    "demo", "", "", list(criteria), {}, controls=list(controls), falsification=list(falsification)
  )


def test_a_falsification_arm_the_criterion_accepts_makes_it_inconclusive():
  claim = report.Criterion("learns", True)
  rejected = report.Criterion("the weak arm learns", False)
  assert _result([claim], [rejected]).verdict == report.SUPPORTED
  accepted = report.Criterion("the weak arm learns", True)
  result = _result([claim], [accepted])
  assert result.verdict == report.INCONCLUSIVE and "cannot tell" in result.why()
  undecided = report.Criterion("the weak arm learns", verdict=report.UNRESOLVED)
  assert _result([claim], [undecided]).verdict == report.UNRESOLVED


def test_the_experiment_verdict_orders_the_four():
  ok, no = report.Criterion("a", True), report.Criterion("b", False)
  maybe = report.Criterion("c", verdict=report.UNRESOLVED)
  assert _result([ok, maybe]).verdict == report.UNRESOLVED
  assert _result([ok, maybe, no]).verdict == report.REFUTED
  assert _result([ok], controls=[no]).verdict == report.INCONCLUSIVE
  assert _result([ok], controls=[maybe]).verdict == report.UNRESOLVED
  assert _result([]).verdict == report.UNRESOLVED


def test_exploratory_and_confirmatory_seeds_that_disagree_are_unresolved():
  confirm = [report.Criterion("a", True), report.Criterion("b", False)]
  explore = [report.Criterion("a", False), report.Criterion("b", False)]
  protocol.agree(confirm, explore)
  assert [c.verdict for c in confirm] == [report.UNRESOLVED, report.REFUTED]
  assert "exploratory seeds REFUTED, confirmatory SUPPORTED" in confirm[0].note


# --- plateau, budgets and the grid, on synthetic training curves ---------------------------------


def _curve(steps, learns_by):
  """Validation accuracy at each evaluated step: a ramp that reaches 0.95 at `learns_by`."""
  return [min(0.95, 0.25 + 0.7 * s / learns_by) for s in steps]


def _run(seed, lr, budget, learns_by, every=100, target=0.99):
  steps = list(range(every, budget + 1, every))
  evals = [
    (s, 1.0 - va, va, 1.0 - va, va) for s, va in zip(steps, _curve(steps, learns_by), strict=True)
  ]
  stop = "early_stop" if evals and evals[-1][2] >= target else "completed"
  return sweep.Run(seed, lr, 0.1, [0.0] * budget, evals, budget, stop)


def test_plateau_status_reads_the_last_half_of_the_budget():
  assert protocol.plateau_status(_run(0, 1e-3, 800, 300), 800) == "flat"
  assert protocol.plateau_status(_run(0, 1e-3, 400, 1000), 400) == "learning"
  assert protocol.plateau_status(_run(0, 1e-3, 400, 300, target=0.9), 400) == "target"
  diverged = sweep.Run(
    0, 1e-3, 0.1, [], [(100, math.nan, math.nan, math.nan, math.nan)], 100, "diverged"
  )
  assert protocol.plateau_status(diverged, 400) == "diverged"


def test_plateau_gain_is_what_the_status_compares_with_the_tolerance():
  flat, climbing = _run(0, 1e-3, 800, 300), _run(0, 1e-3, 400, 1000)
  assert 0 <= protocol.plateau_gain(flat, 800) < protocol.PLATEAU_TOLERANCE
  assert protocol.plateau_gain(climbing, 400) >= protocol.PLATEAU_TOLERANCE
  # the same run is flat under a tolerance just above its gain and learning just below it
  gain = protocol.plateau_gain(climbing, 400)
  assert protocol.plateau_status(climbing, 400, tolerance=gain + 1e-6) == "flat"
  assert protocol.plateau_status(climbing, 400, tolerance=gain - 1e-6) == "learning"
  one_eval = sweep.Run(0, 1e-3, 0.1, [0.0] * 100, [(100, 0.5, 0.5, 0.5, 0.5)], 100, "completed")
  assert protocol.plateau_gain(one_eval, 100) is None
  assert protocol.plateau_status(one_eval, 100) == "learning"


@pytest.fixture
def fake_sweep(monkeypatch):
  """sweep.train replaced by curves: `learns_by[model d_model][lr]` steps to 0.95 (a
  model whose width is 8 never finishes within 1,000 steps at any rate); every call logged
  (width, budget, rates), and its seeds in `.seeds`."""

  class Calls(list):
    pass

  calls = Calls()

  def train(config, replicas, log=None, store=None, resume=None):
    budget, width = int(config.total_steps), int(config.model.d_model)
    calls.append((width, budget, sorted({r.learning_rate for r in replicas})))
    seeds_of.append(sorted({r.seed for r in replicas}))
    resumed.append(None if resume is None else (resume.step, set(resume.rows)))
    learns_by = lambda lr: 2000 if width == 8 else 300 * 3e-3 / lr  # noqa: E731
    runs = [_run(r.seed, r.learning_rate, budget, learns_by(r.learning_rate)) for r in replicas]
    # a "wsd" sweep hands on its replicas at the start of its decay (each a stand-in row)
    until = optimizer.continues_until(config)
    rows = {r: {"budget": budget} for r in replicas}
    continuation = sweep.Continuation(until, rows, "") if until else None
    return sweep.SweepResult(
      config, runs, None, 0.25, "1/K", 0.0, 0.0, budget, continuation=continuation
    )

  seeds_of, resumed = [], []
  monkeypatch.setattr(protocol.sweep, "train", train)
  calls.seeds, calls.resumed = seeds_of, resumed
  return calls


def test_a_budget_grows_to_its_cap_and_a_still_learning_arm_gives_unresolved(fake_sweep):
  config = _config(learning_rates=(3e-3,), total_steps=200, step_cap=800)
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  r = protocol.train_arm(arm, config, log=lambda t: None)
  # 200 and 400 steps: still climbing over the last half (0.95 at 300); 800: flat.
  assert [b for _, b, _ in fake_sweep] == [200, 400, 800] and r.budget == 800
  assert r.plateaued() and set(r.plateau()) == {"flat"}
  weak = protocol.Arm("weak", "s", "transformer", arm.task, {"d_model": 8})
  w = protocol.train_arm(weak, config, log=lambda t: None)
  assert w.budget == 800 and not w.plateaued()  # the cap, still learning
  trained = protocol.Trained([r, w])
  weak_row = [row for row in trained.plateau_table() if row["model"] == "weak"][0]
  gains = [float(part.split(":")[1]) for part in weak_row["gain over the window"].split()]
  assert len(gains) == 4 and min(gains) >= protocol.PLATEAU_TOLERANCE
  m = trained.metrics()
  holds = report.every_seed(
    "weak learns", m["accuracy"]["weak"]["s"], lambda a: a >= 0.0, reads=[("weak", "s")]
  )
  assert holds.verdict == report.SUPPORTED
  protocol.gate([holds], trained)
  assert holds.verdict == report.UNRESOLVED
  assert holds.note == "still learning at 800 steps: weak @ s"
  assert m["plateau"]["weak"]["s"] == ["learning"] * 4
  # "every arm reaches 1.0" fails on every seed at the plateaued arm: the weak arm's further
  # training cannot undo that, so the reading decided by it stands; decided by the arm still
  # learning, it waits
  decided = "decided by model @ s, which plateaued; still learning: weak @ s"
  waits = "still learning at 800 steps: weak @ s"
  for decided_by, verdict, note in [
    ((("model", "s"),), report.REFUTED, decided),
    ((), report.UNRESOLVED, waits),
  ]:
    pairs = zip(m["accuracy"]["model"]["s"], m["accuracy"]["weak"]["s"], strict=True)
    lowest = [min(pair) for pair in pairs]
    every = report.every_seed(
      "both reach 1.0", lowest, lambda a: a >= 1.0, reads=[("model", "s"), ("weak", "s")]
    )
    every.decided_by = decided_by
    assert every.verdict == report.REFUTED
    protocol.gate([every], trained)
    assert (every.verdict, every.note) == (verdict, note)
  every = report.Criterion(
    "x", False, reads=[("model", "s"), ("weak", "s")], decided_by=[("weak", "s")]
  )
  protocol.gate([every], trained)
  assert every.verdict == report.UNRESOLVED


def test_the_arms_of_a_budget_group_end_at_one_budget(fake_sweep):
  """Alone, an arm that finishes early stops at its first budget while a weak one grows to
  the cap; in one `budget_groups` group the early one grows to the weak one's budget (its
  history and the progress log say why, and the report's setup names the group), an arm
  outside the group keeps its own, and a group naming no trained arm is refused."""
  config = _config(learning_rates=(1e-2,), total_steps=200, step_cap=800)
  task = "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2"
  fast = protocol.Arm("fast", "s", "transformer", task)
  other = protocol.Arm("other", "s", "transformer", task)
  weak = protocol.Arm("weak", "s", "transformer", task, {"d_model": 8})
  quiet = lambda t: None  # noqa: E731
  alone = protocol.train([fast, other, weak], config, log=quiet)
  assert [r.budget for r in alone.results] == [200, 200, 800]
  config.budget_groups = (("fast", "weak"),)
  lines = []
  grouped = protocol.common_budgets(alone, config, log=lines.append)
  assert [r.budget for r in grouped.results] == [800, 200, 800]
  assert any(line.startswith("    [group] fast @ s:") and "800 steps" in line for line in lines)
  assert any("budget group" in h["what"] for h in grouped.get("fast", "s").history)
  assert grouped.get("fast", "s").plateaued()
  assert "; fast, weak grown to one budget" in protocol.setup_text(config, grouped)
  config.budget_groups = (("fast", "nobody"),)
  with pytest.raises(ladder.ConfigError, match=r"budget_groups: \['nobody'\]"):
    protocol.common_budgets(alone, config, log=quiet)


def test_a_bound_that_more_training_cannot_reverse_does_not_wait_on_the_plateau(fake_sweep):
  """`learning_keeps`: a model still learning only rises, so "weak learns: >= 0" read as
  SUPPORTED stands while it learns (a lower bound it already passed), and "weak stays at or
  below 0" read as REFUTED stands (an upper bound it already crossed); read the other way, each
  waits on the plateau, as without the field."""
  config = _config(learning_rates=(3e-3,), total_steps=200, step_cap=800)
  task = "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2"
  weak = protocol.Arm("weak", "s", "transformer", task, {"d_model": 8})
  trained = protocol.Trained([protocol.train_arm(weak, config, log=lambda t: None)])
  assert not trained.get("weak", "s").plateaued()
  per_seed = trained.metrics()["accuracy"]["weak"]["s"]
  kept = "{} already, which more training cannot reverse; still learning: weak @ s"
  waits = "still learning at 800 steps: weak @ s"
  for keeps, test, verdict, note in [
    (report.SUPPORTED, lambda a: a >= 0.0, report.SUPPORTED, kept.format(report.SUPPORTED)),
    (report.SUPPORTED, lambda a: a >= 2.0, report.UNRESOLVED, waits),
    (report.REFUTED, lambda a: a <= 0.0, report.REFUTED, kept.format(report.REFUTED)),
    (report.REFUTED, lambda a: a <= 2.0, report.UNRESOLVED, waits),
    ("", lambda a: a >= 0.0, report.UNRESOLVED, waits),
  ]:
    spec = protocol.Spec("bound", "a bound", reads=("weak",), learning_keeps=keeps)
    design = types.SimpleNamespace(experiment="demo", spec=lambda name, spec=spec: spec)
    c = report.every_seed("a bound", per_seed, test, name="bound")
    protocol.gate([c], trained, design)
    assert (c.verdict, c.note) == (verdict, note)


def test_a_reading_bounded_at_its_corners_does_not_wait_when_its_spec_registers_it(
  fake_sweep,
):
  """`learning_bounds`: a criterion its module read at every corner of what the replicas
  still learning can reach, with one verdict (`Criterion.bounded`), stands while they learn,
  but only where the spec registers it; unbounded, or unregistered, it waits."""
  config = _config(learning_rates=(3e-3,), total_steps=200, step_cap=800)
  task = "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2"
  weak = protocol.Arm("weak", "s", "transformer", task, {"d_model": 8})
  trained = protocol.Trained([protocol.train_arm(weak, config, log=lambda t: None)])
  assert not trained.get("weak", "s").plateaued()
  waits = "still learning at 800 steps: weak @ s"
  for registered, bounded, verdict, note in [
    (True, "the same at every corner", report.SUPPORTED,
     "the same at every corner; still learning: weak @ s"),
    (True, "", report.UNRESOLVED, waits),
    (False, "the same at every corner", report.UNRESOLVED, waits),
  ]:  # fmt: skip
    spec = protocol.Spec("bound", "a bound", reads=("weak",), learning_bounds=registered)
    design = types.SimpleNamespace(experiment="demo", spec=lambda name, spec=spec: spec)
    c = report.Criterion("a bound", True, name="bound", bounded=bounded)
    protocol.gate([c], trained, design)
    assert (c.verdict, c.note) == (verdict, note)


def test_the_doubling_reading_sees_a_plateau_the_window_reads_as_the_decay(monkeypatch):
  """A replica flat at 0.6 whose schedule's decay (the last 20% of any budget) lifts it to
  0.65: the window compares the decay with the steps before it and reads "learning" at every
  budget, up to the cap; the doubling reading compares the budget with the one before (both
  decayed: +0) and stops growing at the first budget it can read."""
  budgets = []

  def train(config, replicas, log=None, store=None, resume=None):
    budget = int(config.total_steps)
    budgets.append(budget)
    steps = list(range(100, budget + 1, 100))
    runs = []
    for r in replicas:
      curve = [0.65 if s > 0.8 * budget else 0.6 for s in steps]
      evals = [(s, 0.4, va, 0.4, va) for s, va in zip(steps, curve, strict=True)]
      runs.append(
        sweep.Run(
          r.seed, r.learning_rate, r.weight_decay, [0.4] * budget, evals, budget, "completed"
        )
      )
    return sweep.SweepResult(config, runs, None, 0.25, "1/K", 0.0, 0.0, budget)

  monkeypatch.setattr(protocol.sweep, "train", train)
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  fields = dict(learning_rates=(3e-3,), total_steps=500, step_cap=2000)
  window = protocol.train_arm(arm, _config(**fields), log=lambda t: None)
  assert budgets == [500, 1000, 2000] and not window.plateaued()
  assert window.plateau_gains() == pytest.approx([0.05] * 4)
  budgets.clear()
  config = _config(plateau_reading="doubling", **fields)
  doubling = protocol.train_arm(arm, config, log=lambda t: None)
  assert budgets == [500, 1000] and doubling.plateaued()
  assert doubling.plateau() == ["flat"] * 4 and doubling.plateau_gains() == pytest.approx([0] * 4)
  # each replica's best at 500 steps, where the window read it (the first budget: "learning")
  assert doubling.previous == {(seed, 3e-3, 0.1): 0.65 for seed in (100, 0, 1, 2)}
  trained = protocol.Trained([doubling])
  records = trained.records()
  assert {x["metrics"]["plateau_reading"] for x in records} == {"doubling"}
  assert [x["metrics"]["best_before"] for x in records] == pytest.approx([0.65] * 4)
  assert trained.plateau_table()[0]["gain over the window"].split()[0] == "0:+0.000(2x)"
  assert "the doubling reading" in protocol.setup_text(config, trained)


def test_every_replica_reading_trains_the_budget_before_where_the_selection_moved(monkeypatch):
  """Two stages, 200 -> 400 steps under "wsd": 3e-3 leads at 200 steps (0.55 against 0.45) and
  1e-3 at 400 (0.9 against 0.6), so the confirmatory seeds first train at 1e-3 at 400 steps.
  Under "doubling" nothing of theirs ran at 200 and the window reads them; under
  "doubling_every_replica" they train 200 steps at 1e-3 first, the 400-step run continues from
  it, and the doubling reads every replica."""
  calls = []

  def curve(lr, step):
    return 0.5 + 0.1 * min(1.0, step / 400) if lr == 3e-3 else 0.9 * min(1.0, step / 400)

  def train(config, replicas, log=None, store=None, resume=None):
    budget = int(config.total_steps)
    calls.append(
      (budget, sorted({r.learning_rate for r in replicas}), sorted({r.seed for r in replicas}))
    )
    resumed.append(None if resume is None else (resume.step, set(resume.rows)))
    steps = list(range(100, budget + 1, 100))
    runs = []
    for r in replicas:
      evals = [(s, 0.5, curve(r.learning_rate, s), 0.5, curve(r.learning_rate, s)) for s in steps]
      runs.append(
        sweep.Run(
          r.seed, r.learning_rate, r.weight_decay, [0.5] * budget, evals, budget, "completed"
        )
      )
    until = optimizer.continues_until(config)
    continuation = sweep.Continuation(until, {r: {} for r in replicas}, "") if until else None
    return sweep.SweepResult(
      config, runs, None, 0.25, "1/K", 0.0, 0.0, budget, continuation=continuation
    )

  resumed = []
  monkeypatch.setattr(protocol.sweep, "train", train)
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  fields = dict(total_steps=200, step_cap=400, confirm_at_selected=True, **protocol.WSD)
  first_stages = [(200, [1e-3, 3e-3], [100]), (200, [3e-3], [0, 1, 2])]
  doubling = protocol.train_arm(arm, _config(**fields, **protocol.DOUBLING), log=lambda t: None)
  assert calls == first_stages + [(400, [1e-3, 3e-3], [100]), (400, [1e-3], [0, 1, 2])]
  assert doubling.selected == (1e-3, 0.1) and doubling.budget == 400
  assert {x.seed: doubling.doubled(x) for x in doubling.selected_runs()} == {
    100: True,
    0: False,
    1: False,
    2: False,
  }
  calls.clear()
  resumed.clear()
  config = _config(**fields, **protocol.DOUBLING_EVERY_REPLICA)
  every = protocol.train_arm(arm, config, log=lambda t: None)
  assert calls == first_stages + [
    (400, [1e-3, 3e-3], [100]),
    (200, [1e-3], [0, 1, 2]),  # the budget before, for the doubling reading
    (400, [1e-3], [0, 1, 2]),
  ]
  confirm = {r for r in sweep.grid((0, 1, 2), (1e-3,), (0.1,))}
  assert resumed[-2:] == [None, (160, confirm)]  # from step 0, then from the first's decay
  assert every.selected == (1e-3, 0.1) and all(every.doubled(x) for x in every.selected_runs())
  assert every.plateau_gains() == pytest.approx([0.45] * 4)  # 0.9 at 400 over 0.45 at 200
  assert "200 steps at [0.001] for seeds [0, 1, 2]: the budget before" in " ".join(
    h["what"] for h in every.history
  )
  assert protocol.budget_rule(config)["plateau_reading"] == "doubling_every_replica"
  assert "trains the budget before too" in protocol.setup_text(config, protocol.Trained([every]))


def test_a_rate_selected_at_an_edge_extends_the_grid_up_to_its_cap(fake_sweep):
  # Faster is better up to 9e-3 (0.95 by step 100); 0.027 ties it, so 9e-3 is interior.
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  config = _config(learning_rates=(1e-3, 3e-3), lr_cap=(1e-4, 3e-2), total_steps=200)
  r = protocol.train_arm(arm, config, log=lambda t: None)
  assert r.learning_rates == [1e-3, 3e-3, 9e-3, 0.027] and r.selected == (9e-3, 0.1)
  assert [h.get("learning_rate") for h in r.history] == [9e-3, 0.027]
  capped = _config(learning_rates=(1e-3, 3e-3), lr_cap=(1e-4, 1e-2), total_steps=200)
  r = protocol.train_arm(arm, capped, log=lambda t: None)
  assert r.learning_rates == [1e-3, 3e-3, 9e-3] and r.selected == (9e-3, 0.1)
  assert "passes lr_cap" in r.history[-1]["what"]  # still at the edge: recorded
  no_cap = protocol.train_arm(
    arm, _config(learning_rates=(1e-3, 3e-3), total_steps=200), log=lambda t: None
  )
  assert no_cap.learning_rates == [1e-3, 3e-3]
  assert [h["what"] for h in no_cap.history if "learning_rate" in h] == []


def test_under_a_wsd_schedule_a_growing_budget_continues_each_sweep_it_can(fake_sweep):
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  config = _config(total_steps=200, step_cap=800, confirm_at_selected=True, lr_schedule="wsd")
  r = protocol.train_arm(arm, config, log=lambda t: None)
  assert [b for _, b, _ in fake_sweep] == [200, 200, 400, 400, 800, 800]
  grid = sweep.grid([100], (1e-3, 3e-3), (0.1,))
  confirm = sweep.grid([0, 1, 2], (3e-3,), (0.1,))
  # each budget's grid and confirmatory sweep continue from the start of the last one's decay
  assert fake_sweep.resumed == [
    None,
    None,
    (160, set(grid)),
    (160, set(confirm)),
    (320, set(grid)),
    (320, set(confirm)),
  ]
  assert [h["what"] for h in r.history if "continued" in h["what"]] == [
    "400 steps at [0.001, 0.003]: continued from step 160",
    "400 steps at [0.003]: continued from step 160",
    "800 steps at [0.001, 0.003]: continued from step 320",
    "800 steps at [0.003]: continued from step 320",
  ]
  config.lr_schedule = "cosine"
  cosine = protocol.train_arm(arm, config, log=lambda t: None)
  assert cosine.budget == 800 and fake_sweep.resumed[6:] == [None] * 6  # from step 0


def test_an_arm_trained_again_with_its_store_reads_every_sweep_back(tmp_path, monkeypatch):
  # a budget that grows (10 -> 20 steps) and a grid of two rates: three sweeps, all stored
  arm = protocol.Arm(
    "model",
    "s",
    "transformer",
    "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2,num_examples=64,num_test_examples=16",
    {"d_model": 16, "num_heads": 1, "d_ff": 32},
  )
  config = _config(
    confirmatory_seeds=(0,), total_steps=10, step_cap=20, eval_every=5, early_stop_accuracy=None
  )
  first = protocol.train_arm(arm, config, log=lambda t: None, store=str(tmp_path))
  entries = len(os.listdir(tmp_path))
  assert entries >= 1

  def refuse(*args, **kwargs):
    raise AssertionError("trained again")

  monkeypatch.setattr(sweep, "_train", refuse)
  again = protocol.train_arm(arm, config, log=lambda t: None, store=str(tmp_path))
  assert (again.selected, again.budget) == (first.selected, first.budget)
  read = [h for h in again.history if "read back" in h["what"]]
  assert [h for h in again.history if h not in read] == first.history
  assert len(read) == entries  # every sweep, and the report says so
  assert again.runs == first.runs
  assert len(os.listdir(tmp_path)) == entries


def test_two_stages_train_the_confirmatory_seeds_at_the_selected_point_only(fake_sweep):
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  config = _config(total_steps=200, step_cap=800, confirm_at_selected=True)
  r = protocol.train_arm(arm, config, log=lambda t: None)
  # 200 and 400 steps still climbing (0.95 at 300 at 3e-3), flat at 800: each budget trains
  # the exploratory seed at both rates, then the confirmatory ones at the one it selected
  assert list(fake_sweep) == [
    (64, 200, [1e-3, 3e-3]),
    (64, 200, [3e-3]),
    (64, 400, [1e-3, 3e-3]),
    (64, 400, [3e-3]),
    (64, 800, [1e-3, 3e-3]),
    (64, 800, [3e-3]),
  ]
  assert fake_sweep.seeds == [[100], [0, 1, 2]] * 3
  assert r.selected == (3e-3, 0.1) and r.budget == 800 and r.plateaued()
  assert sorted(x.seed for x in r.selected_runs()) == [0, 1, 2, 100]
  confirm = r.view((0, 1, 2))
  assert len(confirm.per_seed("eval_accuracy")) == 3
  assert {x.learning_rate for x in confirm.runs} == {3e-3}
  assert [x.learning_rate for x in r.view((100,)).at_rate(1e-3).selected_runs()] == [1e-3]
  assert protocol.budget_rule(config)["confirm_at_selected"] is True
  assert "confirm_at_selected" not in protocol.budget_rule(_config())  # old designs' hashes


def test_confirm_below_trains_the_confirmatory_seeds_at_the_rate_below_the_selected_too(
  fake_sweep,
):
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  config = _config(total_steps=200, step_cap=800, confirm_at_selected=True, confirm_below=1)
  r = protocol.train_arm(arm, config, log=lambda t: None)
  assert list(fake_sweep)[:2] == [(64, 200, [1e-3, 3e-3]), (64, 200, [1e-3, 3e-3])]
  assert fake_sweep.seeds[:2] == [[100], [0, 1, 2]]
  assert r.selected == (3e-3, 0.1) and r.read_rates() == (3e-3, 1e-3)
  # 3e-3 learns faster here: every seed is read there, and the history says what ran
  assert [x.learning_rate for x in r.selected_runs()] == [3e-3] * 4
  assert any("confirmatory seeds at [0.003, 0.001]" in h["what"] for h in r.history)
  assert protocol.budget_rule(config)["confirm_below"] == 1
  assert "confirm_below" not in protocol.budget_rule(_config())  # old designs' hashes


def test_selection_reads_only_the_exploratory_seeds(fake_sweep):
  arm = protocol.Arm("model", "s", "transformer", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2")
  r = protocol.train_arm(arm, _config(total_steps=200), log=lambda t: None)
  runs = r.runs
  for x in runs:  # the confirmatory seeds favour the other rate: the selection ignores them
    if x.seed != 100 and x.learning_rate == 3e-3:
      x.evals = [(s, 1.0, 0.0, 1.0, 0.0) for s, *_ in x.evals]
  assert protocol.select([x for x in runs if x.seed == 100]) == r.selected == (3e-3, 0.1)
  assert protocol.select(runs) == (1e-3, 0.1)


def test_run_records_design_commit_plateau_per_rate_and_falsification(fake_sweep, tmp_path):
  module = _module(total_steps=400, step_cap=800)
  result = protocol.run(
    module, module.get_config("quick"), str(tmp_path), "quick", log=lambda t: None
  )
  data = result.to_json()
  design = protocol.design(module, "quick")
  assert data["design"] == design.record() | {"config_as_registered": True}
  assert data["commit"] and data["seeds"] == [0, 1, 2] and data["exploratory_seeds"] == [100]
  # the machine it ran on: XLA compiles for the host's CPU, so numbers can differ on another
  assert data["machine"]["backend"] == "cpu" and data["machine"]["cpu"]
  assert data["machine"]["jax"] == jax.__version__
  # model: learns at 3e-3 by 300 steps (plateau at 400); weak: never, so its reading is
  # unresolved and with it the verdict: the falsification arm cannot be shown rejected.
  assert [c["verdict"] for c in data["criteria"]] == [report.SUPPORTED]
  assert [c["verdict"] for c in data["falsification"]] == [report.UNRESOLVED]
  assert "still learning at 800 steps: weak @ s" in data["falsification"][0]["note"]
  assert data["verdict"] == report.UNRESOLVED
  assert [r["learning_rate"] for r in data["per_rate"]] == [1e-3, 3e-3]
  assert {r["criteria"]["learns"] for r in data["per_rate"]} <= set(report.VERDICTS)
  assert {r["metrics"]["plateau"] for r in data["runs"] if r["model"] == "weak"} == {"learning"}
  assert {r["seeds"] for r in data["runs"]} == {"exploratory", "confirmatory"}
  assert data["checks"][0]["tag"] == "identity"
  json.dumps(data)  # serialisable as is
  text = open(report.write([result], str(tmp_path))).read()
  assert "**Plateau**" in text and "**Falsification**" in text and "**Checks**" in text
  assert f"**Machine.** {data['machine']['cpu']}" in text


def test_two_stages_judge_each_rate_on_the_exploratory_seeds(fake_sweep, tmp_path):
  module = _module(total_steps=400, step_cap=800, confirm_at_selected=True)
  result = protocol.run(
    module, module.get_config("quick"), str(tmp_path), "quick", log=lambda t: None
  )
  data = result.to_json()
  assert [c["verdict"] for c in data["criteria"]] == [report.SUPPORTED]  # seeds 0, 1, 2
  assert [(r["learning_rate"], r["seeds"]) for r in data["per_rate"]] == [
    (1e-3, "exploratory"),
    (3e-3, "exploratory"),
  ]
  confirmatory = {(r["learning_rate"], r["seed"]) for r in data["runs"] if r["model"] == "model"}
  assert {lr for lr, seed in confirmatory if seed != 100} == {3e-3}  # the selected rate only
  assert "two stages" in result.setup
  text = open(report.write([result], str(tmp_path))).read()
  assert "(exploratory seeds)" in text


def test_run_refuses_a_criterion_its_design_does_not_register(fake_sweep, tmp_path):
  module = _module()
  module.criteria = lambda metrics, config: [report.Criterion("unregistered", True)]
  with pytest.raises(ladder.ConfigError, match="not registered"):
    protocol.run(module, module.get_config("quick"), str(tmp_path), "quick", log=lambda t: None)


def test_an_at_init_criterion_must_be_read_as_trained_minus_untrained(fake_sweep, tmp_path):
  module = _module()
  module.SPECS = (protocol.Spec("learns", "d", threshold=0.9, reads=("model",), at_init=True),)
  with pytest.raises(ladder.ConfigError, match="trained minus untrained"):
    protocol.run(module, module.get_config("quick"), str(tmp_path), "quick", log=lambda t: None)


def test_a_module_names_its_next_arms_from_what_each_seed_set_shows(fake_sweep, tmp_path):
  module = _module(total_steps=400, step_cap=800)
  task = "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2"
  seen, before = [], []  # before: the sweeps of model @ s when next_arms was asked

  def next_arms(config, views):
    seen.append([v.seeds_in_view() for v in views])
    before.append(len([w for w, _, _ in fake_sweep if w != 8]))
    if all(v.has("model", "s2") for v in views):
      return []
    return [protocol.Arm("model", "s2", "transformer", task)] * 2  # a duplicate trains once

  module.next_arms = next_arms
  result = protocol.run(
    module, module.get_config("quick"), str(tmp_path), "quick", log=lambda t: None
  )
  assert seen == [[[0, 1, 2], [100]]] * 2  # the confirmatory, then the exploratory seeds
  assert {(r["model"], r["setting"]) for r in result.to_json()["runs"]} == {
    ("model", "s"),
    ("weak", "s"),
    ("model", "s2"),
  }
  # the duplicate trained once: model @ s2 took as many sweeps as model @ s
  assert len([w for w, _, _ in fake_sweep if w != 8]) == 2 * before[0] > 0


def test_the_full_grid_extends_down_to_its_cap_and_no_further():
  # The 3-significant-figure grid extended down three times lands on 9.96e-5: within its
  # rounding of the cap 1e-4, so the cap itself is the next rate (issue 25 item 8), once.
  lrs, cap = list(protocol.FULL_LEARNING_RATES), sizes.FULL_LR_CAP
  added = []
  while (new := protocol._extension(lrs, min(lrs), cap)) is not None:
    added.append(new)
    lrs.append(new)
  assert added == [4.64e-4, 2.15e-4, 1e-4]
  lrs = list(protocol.FULL_LEARNING_RATES)
  assert protocol._extension(lrs, max(lrs), cap) == 0.0215
  assert protocol._extension(lrs + [0.0215], 0.0215, cap) is None  # 0.0464: past 3e-2
  assert protocol._extension([1e-3, 3e-3], 1e-3, (3.35e-4, 1)) == 3.35e-4  # 3.33e-4: 0.6% past
  assert protocol._extension([1e-3, 3e-3], 1e-3, (3.5e-4, 1)) is None  # 3.33e-4: 5% past
