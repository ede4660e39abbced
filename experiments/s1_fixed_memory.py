"""Section 1: a fixed memory fails at recall; attention over the history holds.

An RNN writes every input into one state of fixed size, so as key-value pairs arrive they
compete for the same room. The article's fix keeps every past state and lets each step read
from all of them. Every arm trains on MQAR with a mixture of pair counts P (Zoology's
mixed-P training) in two settings, and is read at each P separately
(jaxformer/analysis/recall.py); chance at P pairs is 1/P (a guess among the values in
context). The axis runs from the easy setting's fewest pairs, where the LSTM can learn
recall (V = 32, L = 16), to the hard setting's most (V = 256, L = 64, P = 16), where Zoology
and Based report fixed states failing.

  rnn_64, rnn_128   the `rnn` rung: one LSTM layer of N units (a state of 2N floats)
  rnn_attention     the same LSTM (N = 128) plus an attention read over its past states
  attention         softmax attention, width D, 2 layers, one head: its state grows with L
  linear_8, _32     linear attention (elu + 1), one head of rank r: a state of r (r + 1)
                    floats per layer

  python -m experiments.engine run fixed_memory --size quick    # ~5 minutes on one CPU core
  python -m experiments.engine run fixed_memory --size full     # ~6 hours on 2 CPU cores

Quick replicates the design small: an easy mixture (V = 16, L = 16, P 2-4) and a hard one
(V = 64, L = 32, P 2-8) at D = 32, every arm at the one rate its sizing run selected, 1,500
steps, so `make run` trains both LSTMs.

A failure is labelled per setting by the rule of `label` below: capacity where recall falls
with P at a fixed state and a larger state recalls more at the most pairs, learnability
where the arm fails already at the fewest pairs or still learns at its step cap. The
recurrent arms train 5,000 steps, linear_8 on the easy mixture 6,000, the others 3,000 (the
sizing runs: results/fixed_memory/log.md).
"""

import jax
import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import recall

LSTM = {"cell": "lstm", "num_layers": 1, "num_heads": 1}
RNN_RATES, ATTENTION_RATES = (3e-3, 1e-2), (1e-3, 3e-3)
ARMS = (
  Arm("rnn_64", "rnn", LSTM | {"d_model": 64}, "one LSTM layer, N = 64", RNN_RATES),
  Arm("rnn_128", "rnn", LSTM | {"d_model": 128}, "one LSTM layer, N = 128", RNN_RATES),
  Arm("rnn_attention", "rnn_attention", LSTM | {"d_model": 128},
      "the N = 128 LSTM with an attention read over its past states", RNN_RATES),
  Arm("attention", "transformer", {"num_heads": 1}, "softmax attention", ATTENTION_RATES),
  Arm("linear_8", "transformer", {"num_heads": 1, "attention": "linear", "rank": 8},
      "linear attention, rank 8", ATTENTION_RATES),
  Arm("linear_32", "transformer", {"num_heads": 1, "attention": "linear", "rank": 32},
      "linear attention, rank 32", ATTENTION_RATES),
)  # fmt: skip
FAMILIES = {"rnn": ("rnn_64", "rnn_128"), "linear": ("linear_8", "linear_32")}
FIXED_STATE = tuple(a for family in FAMILIES.values() for a in family)

METRICS = (Metric("drop", -2.0, 2.0, note="adjusted recall at the easiest P minus at the hardest"),)


def _criteria(easy, hard):
  return (
    Criterion("rnn_learns_easy_end", "control", "the LSTM learns recall at the easiest P",
              metric="adjusted", arm="rnn_128", at=easy, threshold=0.5),
    Criterion("rnn_falls_with_pairs", "1.1", "the LSTM's recall falls along the axis",
              metric="drop", arm="rnn_128", threshold=0.3, positive=Case(arm="linear_8"),
              falsification=Case(arm="attention"), guarded_by=("rnn_learns_easy_end",)),
    Criterion("rnn_fails_hard_end", "1.1", "the LSTM fails at the hardest P",
              metric="adjusted", arm="rnn_128", at=hard, compare="<=", threshold=0.5,
              positive=Case(arm="linear_8"), falsification=Case(arm="attention"),
              guarded_by=("rnn_learns_easy_end",)),
    Criterion("attention_read_holds", "1.2", "the LSTM with an attention read recalls at the "
              "hardest P", metric="adjusted", arm="rnn_attention", at=hard, threshold=0.9,
              positive=Case(arm="attention"), falsification=Case(arm="rnn_128")),
    Criterion("attention_read_helps", "1.2", "the attention read recalls more than the same "
              "LSTM without it at the hardest P", metric="adjusted", statistic="difference",
              arm="rnn_attention", against="rnn_128", at=hard, threshold=0.3,
              positive=Case(arm="attention"), falsification=Case(at=easy)),
    Criterion("attention_holds", "1.2", "attention recalls at the hardest P",
              metric="adjusted", arm="attention", at=hard, threshold=0.9,
              positive=Case(at=easy), falsification=Case(arm="rnn_128")),
    Criterion("linear_gains_with_state", "extension", "linear attention's recall at the "
              "hardest P rises with its state", metric="adjusted", statistic="difference",
              arm="linear_32", against="linear_8", at=hard, threshold=0.1,
              positive=Case(arm="attention"), falsification=Case(at=easy)),
  )  # fmt: skip


RNN_ARMS = ("rnn_64", "rnn_128", "rnn_attention")
SIZES = {
  "tiny": Size(
    task={"easy": {"vocab_size": 16, "seq_len": 16}, "hard": {"vocab_size": 32, "seq_len": 16},
          "num_examples": 64, "num_test_examples": 32},
    model={"d_model": 8, "num_layers": 1}, steps=4, step_cap=4, learning_rates=(1e-2,),
    exploratory_seeds=(100,), confirmatory=2, batch_size=8, eval_every=2, warmup_steps=1,
    points={"easy": (2, 4), "hard": (2, 4)}, extra={"eval_examples": 16},
  ),
  "quick": Size(
    task={"easy": {"vocab_size": 16, "seq_len": 16}, "hard": {"vocab_size": 64, "seq_len": 32},
          "num_examples": 20_000, "num_test_examples": 512},
    model={"d_model": 32, "num_layers": 2}, steps=1500, step_cap=1500, learning_rates=(3e-3,),
    exploratory_seeds=(100,), confirmatory=2, confirm_only=True, batch_size=32, eval_every=100,
    points={"easy": (2, 3, 4), "hard": (2, 4, 8)}, extra={"eval_examples": 256},
    arm_rates={"rnn_64": (1e-2,), "rnn_128": (1e-2,), "rnn_attention": (3e-3,),
               "attention": (3e-3,), "linear_8": (3e-3,), "linear_32": (3e-3,)},
  ),
  "full": Size(
    task={"easy": {"vocab_size": 32, "seq_len": 16}, "hard": {"vocab_size": 256, "seq_len": 64},
          "num_examples": 100_000, "num_test_examples": 1024},
    model={"d_model": 64, "num_layers": 2}, steps=3000, step_cap=3000,
    learning_rates=(1e-3, 3e-3), exploratory_seeds=(100,), confirmatory=5, batch_size=64,
    eval_every=200, points={"easy": (2, 4), "hard": (2, 4, 8, 16)},
    arm_steps={name: (5000, 5000) for name in RNN_ARMS} | {"linear_8 @ easy": (6000, 6000)},
    extra={"eval_examples": 512},
  ),
}  # fmt: skip


def _mqar(size, setting, pairs, examples=None):
  held = {"num_test_examples": examples} if examples else {}
  shared = {k: v for k, v in size.task.items() if k not in size.points}
  return spec("mqar", {**shared, **size.task[setting], "num_kv_pairs": pairs, "seed": 0, **held})


def task(size, point):
  """The mixture of a setting ("easy"), or the reading at one of its P ("easy:2")."""
  setting, _, pairs = str(point).partition(":")
  if not pairs:
    return _mqar(size, setting, "+".join(str(p) for p in size.points[setting]))
  return _mqar(size, setting, int(pairs), size.extra["eval_examples"])


def measure(trained, size):
  """Per arm and point: accuracy and adjusted recall on that P's own held-out set; the drop
  from the first point (the easy setting's fewest pairs) to the last (the hard setting's
  most)."""
  out = {"accuracy": {}, "adjusted": {}, "drop": {}}
  for arm in dict.fromkeys(a for a, _ in trained.units):
    for setting, pairs in size.points.items():
      unit = trained.unit(arm, setting)
      stacked = jax.tree.map(lambda *x: np.stack(x), *unit.params())
      by_p = recall.by_pairs(
        unit.model(), stacked, lambda p, s=setting: task(size, f"{s}:{p}"), pairs
      )
      for p, v in by_p.items():
        out["accuracy"].setdefault(arm, {})[f"{setting}:{p}"] = list(v)
        out["adjusted"].setdefault(arm, {})[f"{setting}:{p}"] = list((v - 1 / p) / (1 - 1 / p))
    first, last = (list(out["adjusted"][arm])[i] for i in (0, -1))
    drop = np.asarray(out["adjusted"][arm][first]) - np.asarray(out["adjusted"][arm][last])
    out["drop"][arm] = {None: list(drop)}
  return out


def label(result):
  """Per fixed-state arm and setting (means over the confirmatory seeds): learnability when
  its adjusted recall at the setting's fewest pairs is below 0.5, or a replica still learns at
  the cap; holds when it recalls >= 0.9 at the setting's most pairs; capacity when it falls by
  >= 0.3 from the fewest pairs to the most and, in its family (FAMILIES), the largest state
  recalls more than the smallest at the most pairs by >= 0.1; else unclear."""
  adjusted, seeds = result["metrics"]["adjusted"], result["seeds"]
  everyone = list(dict.fromkeys([*seeds["exploratory"], *seeds["confirmatory"]]))
  keep = [i for i, s in enumerate(everyone) if s in seeds["confirmatory"]]
  mean = {a: {p: float(np.mean([v[i] for i in keep])) for p, v in by_p.items()}
          for a, by_p in adjusted.items()}  # fmt: skip
  learning = {(u["arm"], u["point"]) for u in result["units"] if "learning" in u["plateau"]}
  settings = dict.fromkeys(p.split(":")[0] for p in adjusted["attention"] if ":" in p)
  out = {}
  for setting in settings:
    points = [p for p in adjusted["attention"] if p.startswith(f"{setting}:")]
    few, most = points[0], points[-1]
    for family in FAMILIES.values():
      gain = mean[family[-1]][most] - mean[family[0]][most]
      for arm in family:
        m, still = mean[arm], (arm, setting) in learning
        where = f"P={few.split(':')[1]}: {m[few]:.2f} -> P={most.split(':')[1]}: {m[most]:.2f}"
        if m[few] < 0.5 or still:
          kind = f"learnability ({where}{', still learning at the cap' * still})"
        elif m[most] >= 0.9:
          kind = f"holds ({where})"
        elif m[few] - m[most] >= 0.3 and gain >= 0.1:
          kind = f"capacity ({where}; {family[-1]} {gain:+.2f} over {family[0]})"
        else:
          kind = f"unclear ({where}; {family[-1]} {gain:+.2f} over {family[0]})"
        out[f"{arm} @ {setting}"] = kind
  return out


def figure(result, path):
  """Adjusted recall against P per arm (mean over every seed)."""
  fig = figures.new(cols=2)
  ax, curves = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
  low = -0.1
  for i, (arm, by_p) in enumerate(result["metrics"]["adjusted"].items()):
    points = [p for p in by_p if ":" in p]
    ys = [np.mean(by_p[p]) for p in points]
    low = min(low, *ys)
    ax.plot(points, ys, "o-" if arm in FIXED_STATE else "s--", color=f"C{i}", label=arm)
  ax.tick_params(axis="x", labelrotation=45, labelsize=7)
  ax.axhline(0, color="gray", linewidth=0.8)
  ax.set(xlabel="setting:P (easy: V = 32, L = 16; hard: V = 256, L = 64)",
         ylabel="adjusted recall (0: chance 1/P)", title="recall along the axis",
         ylim=(low - 0.05, 1.05))  # fmt: skip
  ax.legend(fontsize=7)
  figures.curves(curves, result, point="hard", title="validation accuracy, hard mixture")
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="fixed_memory",
  section=1,
  claims=("1.1", "1.2"),
  summary="Fixed-state models (the LSTM at two sizes, linear attention at two ranks) against "
  "the same LSTM with an attention read over its past states and against attention, on "
  "mixed-P MQAR read at each P.",
  arms=ARMS,
  metrics=METRICS,
  criteria=_criteria("first", "last"),
  sizes=SIZES,
  task=task,
  axis=Axis("P", mixed=True, note="MQAR pairs; one model per arm trains on their mixture"),
  measure=measure,
  figure=figure,
  label=label,
)
