"""Section 6: without normalization over the sources, recall degrades as L grows.

s_L = sum_{i<=L} a_iL V x_i has L terms. With raw coefficients (`none`) nothing bounds the
weight of the wrong sources, so a sum calibrated on short sequences grows on long ones; the
softmax makes it a weighted average at every L. Each arm trains once on MQAR at a short L
and is read at that L, at 4x and at 8x it, on MQAR with the same P pairs (the other slots
hold random ids, so a longer sequence holds more wrong sources): the axis is the evaluation
length. Four arms of the `softmax` rung (summed heads, one head, no layer norm anywhere, so
the raw sum reaches the next layer as it is), everything else equal:

  none      raw coefficients a = s / tau: step 5's sum
  softmax   a softmax over the sources i <= L
  window    the softmax over the last 16 tokens: the whole trained sequence, so at the trained
            L it is the softmax; beyond it the pairs fall out of view (falls by construction)
  self      the softmax over its own position only: recalls nothing at any L (holds by
            construction)

Positions: a learned table of 8x the trained L rows. The rows past the trained L get no
gradient and stay at their initial scale (0.02, against 1.0 for a token's row), so past the
trained L every arm reads its tokens with almost no position, the same for all; the rows the
recall circuit needs (the pairs', the first 2P positions) are trained. A sinusoidal table
would hand every arm full-size vectors it never saw; no table would make the raw sum fail by
construction (a value cannot tell its own key from the earlier ones without positions).

  python -m experiments.engine run normalization --size quick    # ~20 seconds on one CPU core
  python -m experiments.engine run normalization --size full     # ~20 minutes on 2 CPU cores

Expected: the softmax holds and the window falls by about half; whether the raw sum loses
>= 0.2 adjusted recall from the trained L to 8x it is what the run decides (6.2). The raw sum
sits at chance for hundreds of steps before it escapes, so it starts at a longer budget (the
sizing run: results/normalization/log.md). quick reads V = 16 ids in D = 64, where it learned
in a few hundred steps at L = 16; full reads the claim where it binds, V = 64 ids filling D =
64 (with few ids, each its own direction, a raw sum trained at each L recalled at every L:
docs/experiments.md). Verdicts and numbers: results/normalization/.
"""

import math

import jax
import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import recall

WINDOW = 16  # the window arm's span: every size trains at L <= 16


def _arm(name, note, **fields):
  return Arm(name, "softmax", {"num_heads": 1, "normalizer": "softmax"} | fields, note)


ARMS = (
  _arm("none", "raw coefficients s / tau: the sum grows with L", normalizer="none"),
  _arm("softmax", "a softmax over the sources i <= L"),
  _arm("window", f"the softmax over the last {WINDOW} tokens: out of view past them",
       window=WINDOW),
  _arm("self", "the softmax over its own position only: no recall at any L", mask="self"),
)  # fmt: skip

METRICS = (
  Metric("drop", -2.0, 2.0,
         note="adjusted recall at the trained L minus at 8x it (MQAR, the same P pairs)"),
)  # fmt: skip

CRITERIA = (
  Criterion("none_learns_short", "control", "the raw sum learns recall at the trained L",
            metric="adjusted", arm="none", at="first", threshold=0.5),
  Criterion("softmax_learns_short", "control", "the softmax learns recall at the trained L",
            metric="adjusted", arm="softmax", at="first", threshold=0.5),
  Criterion("none_degrades", "6.2", "without normalization recall falls from the trained L "
            "to 8x it", metric="drop", arm="none", threshold=0.2,
            positive=Case(arm="window"), falsification=Case(arm="softmax"),
            guarded_by=("none_learns_short",)),
  Criterion("softmax_holds", "6.2", "the softmax's recall holds from the trained L to 8x it",
            metric="drop", arm="softmax", compare="<=", threshold=0.1,
            positive=Case(arm="self"), falsification=Case(arm="window"),
            guarded_by=("softmax_learns_short",)),
)  # fmt: skip


def _size(vocab, length, d_model, num_layers=2, examples=20_000, held_out=512, **fields):
  setting = {"vocab_size": vocab, "seq_len": length}  # the trained setting, read at 1x-8x L
  task = {"short": setting, "num_kv_pairs": 4 if length >= 16 else 2, "num_examples": examples,
          "num_test_examples": held_out}  # fmt: skip
  model = {"d_model": d_model, "num_layers": num_layers, "max_len": 8 * length,
           "norm": "none", "final_norm": False}  # fmt: skip
  points = {"short": (length, 4 * length, 8 * length)}
  return Size(task=task, model=model, points=points, extra={"eval_examples": held_out}, **fields)


SIZES = {
  "tiny": _size(16, 8, 8, 1, 64, 16, steps=4, step_cap=4, learning_rates=(1e-2,),
                exploratory_seeds=(100,), confirmatory=2, batch_size=8, eval_every=2,
                warmup_steps=1),
  "quick": _size(16, 16, 64, steps=500, step_cap=2000, learning_rates=(3e-3,),
                 exploratory_seeds=(100,), confirmatory=2, confirm_only=True,
                 arm_steps={"none": (1000, 4000)}),
  "full": _size(64, 16, 64, examples=40_000, held_out=2048, steps=1000, step_cap=8000,
                learning_rates=(2e-3, 5e-3), exploratory_seeds=(100,), confirmatory=5,
                eval_every=100, warmup_steps=100, arm_steps={"none": (2000, 8000)}),
}  # fmt: skip


def _mqar(size, **fields):
  shared = {k: v for k, v in size.task.items() if k not in size.points}
  return spec("mqar", {**size.task["short"], **shared, "seed": 0, **fields})


def task(size, point):
  """The trained setting ("short": MQAR at the trained L), or its reading at one L
  ("short:128": the same pairs and vocabulary, the held-out split alone)."""
  _, _, length = str(point).partition(":")
  if not length:
    return _mqar(size)
  held = size.extra["eval_examples"]
  return _mqar(size, seq_len=int(length), num_examples=held, num_test_examples=held)


def measure(trained, size):
  """Per arm and evaluation L: accuracy and adjusted recall (chance 1/P) of the model
  trained at the short L (jaxformer/analysis/recall.py); the drop from the trained L to the
  longest. An arm whose every learning rate diverged reads NaN."""
  chance = 1 / size.task["num_kv_pairs"]
  ((setting, lengths),) = size.points.items()
  out = {"accuracy": {}, "adjusted": {}, "drop": {}}
  for arm in ARMS:
    unit = trained.unit(arm.name, setting)
    if unit.selected is None:
      by_length = {n: np.full(len(trained.seeds), math.nan) for n in lengths}
    else:
      stacked = jax.tree.map(lambda *x: np.stack(x), *unit.params())
      model = unit.model()
      by_length = {n: recall.accuracy(model, stacked, task(size, f"{setting}:{n}"))
                   for n in lengths}  # fmt: skip
    adjusted = {n: (v - chance) / (1 - chance) for n, v in by_length.items()}
    for n in lengths:
      out["accuracy"].setdefault(arm.name, {})[f"{setting}:{n}"] = list(by_length[n])
      out["adjusted"].setdefault(arm.name, {})[f"{setting}:{n}"] = list(adjusted[n])
    out["drop"][arm.name] = {None: list(adjusted[lengths[0]] - adjusted[lengths[-1]])}
  return out


def figure(result, path):
  """Adjusted recall against the evaluation L per arm (line: mean, dots: seeds); the
  validation accuracy by step at the trained L."""
  fig = figures.new(cols=2)
  ax, curves = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
  for i, (arm, by_point) in enumerate(result["metrics"]["adjusted"].items()):
    points = [p for p in by_point if ":" in p]
    lengths = [int(p.split(":")[1]) for p in points]
    ax.plot(lengths, [np.nanmean(by_point[p]) for p in points], "o-", color=f"C{i}", label=arm)
    for n, p in zip(lengths, points, strict=True):
      ax.plot([n] * len(by_point[p]), by_point[p], ".", color=f"C{i}", markersize=3)
  ax.set_xscale("log", base=2)
  ax.set_xticks(lengths, [str(n) for n in lengths])
  ax.minorticks_off()
  ax.axhline(0, color="gray", linewidth=0.8)
  ax.set(
    xlabel="evaluation length L (trained at the first)",
    ylim=(-0.4, 1.05),
    ylabel="adjusted recall (0: chance 1/P)",
    title="recall past the trained length",
  )
  ax.legend(fontsize=7)
  figures.curves(curves, result, point="short", title="validation accuracy at the trained L")
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="normalization",
  section=6,
  claims=("6.2",),
  summary="The raw sum against the softmax over the sources on MQAR, each trained at a short "
  "L and read at that L, at 4x and at 8x it, beside a window that falls out of view by "
  "construction and a receiver that sees only itself.",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  axis=Axis("L", mixed=True, note="evaluation length; one model per arm trains at the first"),
  measure=measure,
  figure=figure,
)
