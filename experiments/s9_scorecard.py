"""The scorecard on the recall sweep: every built-in mixer on fixed_memory's hard end.

Section 1 finds a fixed state's recall falling as the pairs grow where attention holds
(claims 1.1, 1.2). The LSTM's successors (jaxformer.mixers) keep a fixed state too, and
their papers order them on MQAR. Every built-in mixer trains in the transformer's block (the
`custom` rung: only the mixer differs) on fixed_memory's hard mixture (imported, so the two
stay pinned) and is read at each P (jaxformer/analysis/recall.py); each fixed-state one at
the smallest value of its STATE_SWEEPS field and the largest at most 4x that. Decode-state
bytes at full (L = 64, D = 64) run from 160 (linear_4) to 49,664 (hybrid_16) against
attention's 65,536; each arm's is in the result (`state_bytes`), drawn against recall.

The published orderings, extensions of 1.1 and 1.2, read as paired intervals over seeds of
adjusted recall (0: the guess 1/P) against ORDERED = 0.1:
  delta rule    deltanet_4 and gated_deltanet_4 above linear_16 and retnet_16 (no less state)
                at the most pairs (Yang et al. 2024, MQAR)
  mamba2        mamba2_16 above mamba2_4 at the most pairs (Dao and Gu 2024, MQAR)
  gap grows     each fixed-state arm's gap to attention, adjusted(softmax) - adjusted(arm),
                larger at the most pairs than at the fewest (`gap_growth`, per seed; Zoology,
                Arora et al. 2023, Fig. 2; Based, Arora et al. 2024)
  gap shrinks   at the most pairs, each family's large state minus its small (the same)
Positive cases: attention in place of the better arm; for gap growth an analytic case (1.0:
an arm recalling as attention at the fewest pairs and at chance at the most), as no trained
arm does so for a known reason here: the 4-token window, whose reach falls with P (the share
of queries with their pair within 4 tokens: 0.29 to 0 at full, 0.33 to 0.003 at quick; the
test computes it), stayed flat in sizing. Falsification cases: the same difference at the
fewest pairs; for gap growth, attention's own gap (0). A gap criterion (windows left out) is
guarded by its arm recalling (adjusted >= 0.5) at the fewest pairs: below it the arm failed
at the smallest K (learnability), INCONCLUSIVE; every ordering, by attention recalling (>=
0.9) at each P it reads.

  python -m experiments.engine run scorecard --size quick --jobs 2  # ~13 min on 2 cores
  python -m experiments.engine run scorecard --size full --jobs 2   # ~7 hours on 2 cores
  python -m experiments.engine run scorecard --size quick --mixer path/to/mine.py:Mine \
    --mixer_fields '{"num_heads": 2}'  # yours as one more arm (it must decode), never recorded

Full: V = 256, L = 64, P 2-16, D = 64 (at D = 32 attention does not hold: the log), batch
64, 1 exploratory seed at 2 rates, 5 confirmatory seeds, up to 3,000 steps. Quick: V = 64,
L = 32, P 2-8, D = 32, batch 32, 1,500 steps, 2 seeds at 3e-3 (the log: results/scorecard/).
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
  Metric("gap_growth", -4.0, 4.0, note="per seed, the arm's gap to attention (adjusted(softmax)"
         " - adjusted(arm)) at the most pairs minus at the fewest: > 0 when the gap grows with P"),
  Metric("state_bytes", 0.0, np.inf, note="decode-state bytes of one sequence at the task's "
         "length (jaxformer.analysis.cost; the same for every seed)"),
)  # fmt: skip

# attention recalls; an ordering's least difference; a gap criterion's arm recalls at P first
RECALLS, ORDERED, LEARNS = 0.9, 0.1, 0.5
FIRST, LAST = "reference_recalls_first", "reference_recalls_last"


def _ordering(name, says, arm, against):
  """arm - against at the most pairs; positive: attention in place of `arm`."""
  return Criterion(name, "extension", says, metric="adjusted", statistic="difference", arm=arm,
                   against=against, at="last", threshold=ORDERED, positive=Case(arm=REF),
                   falsification=Case(at="first", why="the fewest pairs: both recall"),
                   guarded_by=(LAST,))  # fmt: skip


GROWS = Case(values=(1.0,), why="an arm recalling as attention (1.0) at the fewest pairs and "
             "at chance at the most grows its gap by 1.0; the windows, whose reach predicts such "
             "a fall, stay flat at these mixtures (sizing runs, results/scorecard/log.md)")  # fmt: skip


def _gap_grows(arm):
  """(the arm's control that it recalls at the fewest pairs, its gap-growth criterion): a gap
  that grows is a capacity reading only where the arm learned the fewest pairs; below that
  it failed at the smallest K (learnability) and the criterion reads INCONCLUSIVE."""
  learns = f"{arm}_recalls_fewest"
  says = f"{arm}'s gap to attention grows from the fewest pairs to the most (Zoology; Based)"
  return (
    Criterion(learns, "control", f"{arm} recalls at the fewest pairs", metric="adjusted",
              arm=arm, at="first", threshold=LEARNS),
    Criterion(f"{arm}_gap_grows", "extension", says, metric="gap_growth", arm=arm,
              threshold=ORDERED, positive=GROWS,
              falsification=Case(arm=REF, why="attention's own gap: 0 at every P"),
              guarded_by=(FIRST, LAST, learns)),
  )  # fmt: skip


def _criteria():
  out = [Criterion(name, "control", f"attention recalls at the {n} pairs", metric="adjusted",
                   arm=REF, at=at, threshold=RECALLS)
         for name, at, n in ((FIRST, "first", "fewest"), (LAST, "last", "most"))]  # fmt: skip
  for delta in DELTA:
    for other in COMPARED:
      a, b = SMALL[delta], LARGE[other]
      says = f"the delta rule ({a}) recalls more than {b} (no less state) at the most pairs"
      out.append(_ordering(f"{delta}_over_{other}", f"{says} (Yang et al. 2024)", a, b))
  large, small = LARGE["mamba2"], SMALL["mamba2"]
  says = f"Mamba-2's larger state ({large}) recalls more than its smaller ({small})"
  out.append(_ordering("mamba2_state_helps", f"{says} at the most pairs (Dao and Gu 2024)",
                       large, small))  # fmt: skip
  for arm in (a.name for a in ARMS[1:] if not a.name.startswith(WINDOW)):
    out.extend(_gap_grows(arm))
  for family in STATES:
    if family not in (WINDOW, "mamba2"):  # mamba2's reading is mamba2_state_helps
      large, small = LARGE[family], SMALL[family]
      says = f"{family}'s gap to attention at the most pairs shrinks from {small} to {large}"
      out.append(_ordering(f"{family}_gap_shrinks", f"{says} (Zoology; Based)", large, small))
  return tuple(out)


def _hard_end(of, **fields):
  """A size on fixed_memory's size `of`'s hard mixture: its task, width, batch and reading."""
  of = fixed_memory.SIZES[of]
  return Size(task={k: of.task[k] for k in ("hard", "num_examples", "num_test_examples")},
              model=dict(of.model), exploratory_seeds=(100,), batch_size=of.batch_size,
              eval_every=of.eval_every, points={"hard": of.points["hard"]},
              extra=dict(of.extra), **fields)  # fmt: skip


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
                    confirmatory=5),
}  # fmt: skip

task = fixed_memory.task  # the mixture of a setting ("hard"), or its reading at one P


def measure(trained, size):
  """Per arm, at each P of the size's one setting: accuracy and adjusted recall on that P's
  own held-out set; the gap growth (its gap to attention at the most pairs minus at the
  fewest, per seed); the decode-state bytes at the task's length."""
  ((setting, pairs),) = size.points.items()
  out = {"accuracy": {}, "adjusted": {}, "gap_growth": {}, "state_bytes": {}}
  for arm in dict.fromkeys(a for a, _ in trained.units):
    unit = trained.unit(arm, setting)
    stacked = jax.tree.map(lambda *x: np.stack(x), *unit.params())
    by_p = recall.by_pairs(unit.model(), stacked, lambda p: task(size, f"{setting}:{p}"), pairs)
    for p, v in by_p.items():
      out["accuracy"].setdefault(arm, {})[f"{setting}:{p}"] = list(v)
      out["adjusted"].setdefault(arm, {})[f"{setting}:{p}"] = list((v - 1 / p) / (1 - 1 / p))
    state = cost.decode_state_bytes(unit.model(), size.task[setting]["seq_len"])
    out["state_bytes"][arm] = {None: [float(state)] * len(trained.seeds)}
  first, last = f"{setting}:{pairs[0]}", f"{setting}:{pairs[-1]}"
  ref = {p: np.asarray(out["adjusted"][REF][p]) for p in (first, last)}
  for arm, by_p in out["adjusted"].items():  # gap = adjusted(softmax) - adjusted(arm)
    gap = {p: ref[p] - np.asarray(by_p[p]) for p in (first, last)}
    out["gap_growth"][arm] = {None: list(gap[last] - gap[first])}
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
