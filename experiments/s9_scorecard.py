"""The scorecard on the recall sweep: every built-in mixer on fixed_memory's hard end.

Section 1 finds a fixed state's recall falling as the pairs grow where attention holds
(claims 1.1, 1.2); the LSTM's successors (jaxformer.mixers) keep a fixed state too, and their
papers order them on MQAR. Each built-in trains in the transformer's block (the `custom`
rung) on fixed_memory's hard mixture (imported: the two stay pinned), read at each P
(jaxformer/analysis/recall.py); each fixed-state one at the least value of its STATE_SWEEPS
field and the largest at most 4x it: decode state 160 B (linear_4) to 49,664 (hybrid_16)
at full, attention's 65,536 (`state_bytes`, drawn against recall).

The published orderings (extensions of 1.1 and 1.2) read `recall`, the recall-vs-P curve's
mean: per seed, adjusted recall (0: the guess 1/P; below it counted 0, nothing recalled)
averaged over P; each a paired interval over seeds against ORDERED = 0.1:
  delta rule    deltanet_4 and gated_deltanet_4 above linear_16 and retnet_16 (no less state;
                Yang et al. 2024, MQAR)
  mamba2        mamba2_16 above mamba2_4 (Dao and Gu 2024, MQAR)
  gap shrinks   each family's large state above its small (attention cancels seed by seed;
                Zoology, Arora et al. 2023, Fig. 2; Based, Arora et al. 2024)
  gap grows     each arm's gap to attention larger at the most pairs than at the fewest
                (`gap_growth`: adjusted(softmax) - adjusted(arm), per seed; the same)
Positive cases: attention in place of the better arm; for gap growth an analytic 1.0 (an arm
recalling as attention at the fewest pairs, at chance at the most), as the 4-token window,
whose reach falls 0.29 to 0 along P at full (the test computes it), stayed flat. Falsifying:
the delta rule above its own 4x state; the 4-token window above the 16-token one (a subset
of its pairs); attention's own gap growth (0). Each is guarded by attention recalling
(adjusted >= 0.9) at every P and its better arm at the fewest pairs (>= 0.5): below that
the arm failed at the smallest K (learnability), INCONCLUSIVE.

  python -m experiments.engine run scorecard --size quick --jobs 2  # 13-14 min on 2 cores
  python -m experiments.engine run scorecard --size full --jobs 2   # ~10 hours on 2 cores
  python -m experiments.engine run scorecard --size quick --mixer path/to/mine.py:Mine \
    --mixer_fields '{"num_heads": 2}'  # yours as one more arm (it must decode), never recorded

Full: V = 256, L = 64, P 2-16, D = 64 (at D = 32 attention does not hold), batch 64, 1
exploratory seed at 2 rates, 5 confirmatory seeds, 3,000 steps (LONGER: 5,000 at one rate).
Quick: V = 64, L = 32, P 2-8, D = 32, batch 32, 1,500 steps, 2 seeds at 3e-3 (the sizing:
results/scorecard/log.md).
"""

import dataclasses
import json

import jax
import matplotlib
import numpy as np

from experiments import s1_fixed_memory as fixed_memory
from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size
from jaxformer import mixers
from jaxformer.analysis import cost, recall

REF = mixers.REFERENCE
STATES = {family: (field, (v[0], max(x for x in v if x <= 4 * v[0])))  # the least, <= 4x it
          for family, (field, v) in mixers.STATE_SWEEPS.items()}  # fmt: skip
SMALL = {family: f"{family}_{v[0]}" for family, (_, v) in STATES.items()}
LARGE = {family: f"{family}_{v[1]}" for family, (_, v) in STATES.items()}


def _arm(family, value=None):
  spec, fields = mixers.BUILTINS[family]
  name, note = family, spec.split(":")[1]
  if value is not None:
    field = STATES[family][0]
    name, fields, note = f"{family}_{value}", {**fields, field: value}, f"{note}, {field} {value}"
  model = {"mixer": spec, "mixer_fields": json.dumps(fields, sort_keys=True)}
  return Arm(name, "custom", model, note)


ARMS = (_arm(REF), *(_arm(f, v) for f, (_, values) in STATES.items() for v in values))
WINDOW = "sliding_window"  # no gap criterion reads the windows
DELTA, COMPARED = ("deltanet", "gated_deltanet"), ("linear", "retnet")

METRICS = (
  Metric("recall", 0.0, 1.0, note="per seed, the mean over P of adjusted recall, a reading "
         "below the guess among the context's values counted 0: the recall-vs-P curve's mean"),
  Metric("least_adjusted", -1.0, 1.0, note="per seed, the least adjusted recall over P"),
  Metric("gap_growth", -4.0, 4.0, note="per seed, the arm's gap to attention (adjusted(softmax)"
         " - adjusted(arm)) at the most pairs minus at the fewest: > 0 when the gap grows with P"),
  Metric("state_bytes", 0.0, np.inf, note="decode-state bytes of one sequence at the task's "
         "length (jaxformer.analysis.cost; the same for every seed)"),
)  # fmt: skip

# attention recalls; an ordering's least difference; an arm recalls at the fewest pairs
RECALLS, ORDERED, LEARNS = 0.9, 0.1, 0.5
EVERY, _learns = "reference_recalls_every_p", "{}_recalls_fewest".format


def _ordering(name, says, arm, against, falsification):
  """recall(arm) - recall(against); positive: attention in place of `arm`."""
  return Criterion(name, "extension", says, metric="recall", statistic="difference", arm=arm,
                   against=against, threshold=ORDERED, positive=Case(arm=REF),
                   falsification=falsification, guarded_by=(EVERY, _learns(arm)))  # fmt: skip


SUBSET = Case(arm=f"{WINDOW}_4", against=f"{WINDOW}_16", why="a 4-token window sees a subset "
              "of a 16-token window's pairs: less state, never more recall")  # fmt: skip
GROWS = Case(values=(1.0,), why="an arm recalling as attention (1.0) at the fewest pairs and at "
             "chance at the most; the windows, whose reach falls so, stay flat (the log)")  # fmt: skip


def _gap_grows(arm):
  """(its control that it recalls at the fewest pairs, its gap-growth criterion)."""
  says = f"{arm}'s gap to attention grows from the fewest pairs to the most (Zoology; Based)"
  return (
    Criterion(_learns(arm), "control", f"{arm} recalls at the fewest pairs", metric="adjusted",
              arm=arm, at="first", threshold=LEARNS),
    Criterion(f"{arm}_gap_grows", "extension", says, metric="gap_growth", arm=arm,
              threshold=ORDERED, positive=GROWS,
              falsification=Case(arm=REF, why="attention's own gap: 0 at every P"),
              guarded_by=(EVERY, _learns(arm))),
  )  # fmt: skip


def _criteria():
  out = [Criterion(EVERY, "control", "attention recalls at every P", metric="least_adjusted",
                   arm=REF, threshold=RECALLS)]  # fmt: skip
  for arm in (a.name for a in ARMS[1:] if not a.name.startswith(WINDOW)):
    out.extend(_gap_grows(arm))
  for delta in DELTA:
    for other in COMPARED:
      a, b = SMALL[delta], LARGE[other]
      says = f"the delta rule ({a}) recalls more than {b} (no less state) over P"
      own = Case(against=LARGE[delta], why=f"{a} above its own 4x state, {LARGE[delta]}")
      out.append(_ordering(f"{delta}_over_{other}", f"{says} (Yang et al. 2024)", a, b, own))
  for family in (f for f in STATES if f != WINDOW):
    large, small = LARGE[family], SMALL[family]
    name = f"{family}_gap_shrinks"
    says = f"{family}'s gap to attention over P shrinks from {small} to {large} (Zoology; Based)"
    if family == "mamba2":
      name = "mamba2_state_helps"
      says = f"Mamba-2's larger state ({large}) recalls more than {small} (Dao and Gu 2024)"
    out.append(_ordering(name, says, large, small, SUBSET))
  return tuple(out)


def _hard_end(of, **fields):
  """A size on fixed_memory's size `of`'s hard mixture: its task, width, batch and reading."""
  of = fixed_memory.SIZES[of]
  return Size(task={k: of.task[k] for k in ("hard", "num_examples", "num_test_examples")},
              model=dict(of.model), exploratory_seeds=(100,), batch_size=of.batch_size,
              eval_every=of.eval_every, points={"hard": of.points["hard"]},
              extra=dict(of.extra), **fields)  # fmt: skip


# Full: still learning at 3,000 steps in the sizing run, or in the chance band where a reading
# takes them as the better arm: 5,000 steps (what the 10 hours allow) at the rate they selected
LONGER = {"linear_16": 3e-3, "hybrid_4": 3e-3, "hybrid_16": 3e-3, "mamba2_16": 3e-3,
          "deltanet_4": 3e-3, "gated_deltanet_4": 3e-3, "gated_deltanet_16": 1e-3,
          "based_2": 3e-3, "h3_2": 3e-3, "h3_8": 3e-3}  # fmt: skip
SIZES = {
  "tiny": Size(
    task={"mix": {"vocab_size": 16, "seq_len": 16}, "num_examples": 64, "num_test_examples": 32},
    model={"d_model": 8, "num_layers": 1, "d_ff": 16}, steps=2, step_cap=2,
    learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2, batch_size=8,
    eval_every=2, warmup_steps=1, points={"mix": (2, 4)}, extra={"eval_examples": 16},
  ),
  "quick": _hard_end("quick", steps=1500, step_cap=1500, learning_rates=(3e-3,), confirmatory=2,
                     confirm_only=True),
  "full": _hard_end("full", steps=3000, step_cap=3000, learning_rates=(1e-3, 3e-3),
                    confirmatory=5, arm_steps={a: (5000, 5000) for a in LONGER},
                    arm_rates={a: (r,) for a, r in LONGER.items()}),
}  # fmt: skip

task = fixed_memory.task  # the mixture of a setting ("hard"), or its reading at one P


def measure(trained, size):
  """Per arm, at each P of the size's setting: accuracy and adjusted recall on that P's own
  held-out set; per seed over P, METRICS' readings; the decode state at the task's length."""
  ((setting, pairs),) = size.points.items()
  out, adj = {m: {} for m in (*(x.name for x in METRICS), "accuracy", "adjusted")}, {}
  for arm in dict.fromkeys(a for a, _ in trained.units):
    unit = trained.unit(arm, setting)
    stacked = jax.tree.map(lambda *x: np.stack(x), *unit.params())
    by_p = recall.by_pairs(unit.model(), stacked, lambda p: task(size, f"{setting}:{p}"), pairs)
    adjusted = adj[arm] = np.stack([(v - 1 / p) / (1 - 1 / p) for p, v in by_p.items()])
    for p, v, a in zip(by_p, by_p.values(), adjusted, strict=True):
      out["accuracy"].setdefault(arm, {})[f"{setting}:{p}"] = list(v)
      out["adjusted"].setdefault(arm, {})[f"{setting}:{p}"] = list(a)
    out["recall"][arm] = {None: list(np.maximum(adjusted, 0).mean(0))}
    out["least_adjusted"][arm] = {None: list(adjusted.min(0))}
    state = cost.decode_state_bytes(unit.model(), size.task[setting]["seq_len"])
    out["state_bytes"][arm] = {None: [float(state)] * len(trained.seeds)}
  for arm, x in adj.items():  # [P, seed]; the gap: adjusted(softmax) - adjusted(arm)
    out["gap_growth"][arm] = {None: list((adj[REF] - x)[-1] - (adj[REF] - x)[0])}
  return out


def _mean(result, metric, arm, point):
  return float(np.mean(result["metrics"][metric][arm][point]))


def figure(result, path):
  """Per P: adjusted recall against decode-state bytes, one curve per mixer (Based, Fig. 2);
  and adjusted recall against P per arm, small states dashed (means over every seed)."""
  adjusted = result["metrics"]["adjusted"]
  points = [p for p in adjusted[REF] if ":" in p]
  rows = -(-(len(points) + 2) // 3)  # a panel per P, recall along P, the legend
  fig = figures.new(cols=3, rows=rows)
  families = [REF, *STATES, *(a for a in adjusted if a not in {x.name for x in ARMS})]
  arms = {f: sorted((a for a in adjusted if a == f or a.rsplit("_", 1)[0] == f),
                    key=lambda a: _mean(result, "state_bytes", a, "*")) for f in families}  # fmt: skip
  color = {f: matplotlib.colormaps["tab20"](i % 20) for i, f in enumerate(families)}
  low = min(-0.1, *(_mean(result, "adjusted", a, p) for a in adjusted for p in points)) - 0.05
  for k, point in enumerate(points):
    ax = fig.add_subplot(rows, 3, k + 1)
    for f in families:
      xs = [_mean(result, "state_bytes", a, "*") for a in arms[f]]
      ax.plot(xs, [_mean(result, "adjusted", a, point) for a in arms[f]], color=color[f],
              marker="s" if f == REF else "o")  # fmt: skip
    ax.axhline(0, color="gray", linewidth=0.8)
    ax.set(xscale="log", xlabel="decode-state bytes", ylabel="adjusted recall (0: chance 1/P)",
           title=f"P = {point.split(':')[1]}", ylim=(low, 1.05))  # fmt: skip
  ax = fig.add_subplot(rows, 3, len(points) + 1)
  xs = [int(p.split(":")[1]) for p in points]
  for f in families:
    for a in arms[f]:
      small = len(arms[f]) > 1 and a == arms[f][0]
      ax.plot(xs, [_mean(result, "adjusted", a, p) for p in points], "o--" if small else "o-",
              color=color[f], linewidth=0.8, label=None if small else f)  # fmt: skip
  ax.set(xscale="log", xlabel="P (pairs)", ylabel="adjusted recall", ylim=(low, 1.05),
         title="recall along P (small states dashed)")  # fmt: skip
  ax.set_xticks(xs, [str(x) for x in xs], minor=False)
  ax.minorticks_off()
  key = fig.add_subplot(rows, 3, len(points) + 2)  # the legend of every panel, beside them
  key.axis("off")
  key.legend(*ax.get_legend_handles_labels(), loc="upper left", title="mixer (every panel)")
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="scorecard", section=9, claims=(),
  summary="Every built-in mixer of jaxformer.mixers (each fixed-state one at two state sizes) in "
  "the transformer's block, on fixed_memory's hard mixed-P MQAR read at each P: the published "
  "orderings of the Transformer's successors, extensions of claims 1.1 and 1.2.",
  arms=ARMS, metrics=METRICS, criteria=_criteria(), sizes=SIZES, task=task,
  axis=Axis("P", mixed=True, note="MQAR pairs; one model per arm trains on their mixture"),
  measure=measure, figure=figure,
)  # fmt: skip


def with_mixer(spec, fields=None, name="user"):
  """EXPERIMENT and one more arm, `name`: the mixer `spec` (one that decodes) built with
  `fields`, read by the built-ins' gap criterion. No registered design: explore, never record."""
  model = {"mixer": spec, "mixer_fields": json.dumps(fields or {}, sort_keys=True)}
  arms = (*EXPERIMENT.arms, Arm(name, "custom", model, f"{spec.rpartition(':')[2]} (yours)"))
  return dataclasses.replace(EXPERIMENT, arms=arms, criteria=(*EXPERIMENT.criteria,
                                                              *_gap_grows(name)))  # fmt: skip
