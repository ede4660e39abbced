"""Section 1: a fixed memory fails at recall; attention over the history holds.

An RNN writes every input into one state of fixed size, so as key-value pairs arrive they
compete for the same room. The article's fix keeps every past state and lets each step read
from all of them. Every arm trains once on MQAR with a mixture of pair counts P (Zoology's
mixed-P training) and is read at each P separately (jaxformer/analysis/recall.py); chance at
P pairs is 1/P (a guess among the values in context).

  rnn_16, _64, _128  the `rnn` rung: one LSTM layer of N units (a state of 2N floats)
  rnn_attention     the same LSTM (N = 64) plus an attention read over its past states
  attention         softmax attention, width D, 2 layers, one head: its state grows with L
  linear_8, _32     linear attention (elu + 1), one head of rank r: a state of r (r + 1)
                    floats per layer

  python -m experiments.engine run fixed_memory --size quick
  python -m experiments.engine run fixed_memory --size full     # ~6 hours on 2 CPU cores

A failure is labelled by the rule of `label` below: capacity where recall falls with P at a
fixed state and a larger state recalls more at the hard end, learnability where the arm
fails already at the easiest P or still learns at its step cap.
"""

import jax
import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import recall

LSTM = {"cell": "lstm", "num_layers": 1, "num_heads": 1}
RNN_RATES, ATTENTION_RATES = (3e-3, 1e-2), (1e-3, 3e-3)
ARMS = (
  Arm("rnn_16", "rnn", LSTM | {"d_model": 16}, "one LSTM layer, N = 16", RNN_RATES),
  Arm("rnn_64", "rnn", LSTM | {"d_model": 64}, "one LSTM layer, N = 64", RNN_RATES),
  Arm("rnn_128", "rnn", LSTM | {"d_model": 128}, "one LSTM layer, N = 128", RNN_RATES),
  Arm("rnn_attention", "rnn_attention", LSTM | {"d_model": 64},
      "the N = 64 LSTM with an attention read over its past states", RNN_RATES),
  Arm("attention", "transformer", {"num_heads": 1}, "softmax attention", ATTENTION_RATES),
  Arm("linear_8", "transformer", {"num_heads": 1, "attention": "linear", "rank": 8},
      "linear attention, rank 8", ATTENTION_RATES),
  Arm("linear_32", "transformer", {"num_heads": 1, "attention": "linear", "rank": 32},
      "linear attention, rank 32", ATTENTION_RATES),
)  # fmt: skip
FAMILIES = {"rnn": ("rnn_16", "rnn_64", "rnn_128"), "linear": ("linear_8", "linear_32")}
FIXED_STATE = tuple(a for family in FAMILIES.values() for a in family)

METRICS = (Metric("drop", -2.0, 2.0, note="adjusted recall at the easiest P minus at the hardest"),)


def _criteria(easy, hard):
  return (
    Criterion("rnn_learns_easy_end", "control", "the small LSTM learns recall at the easiest P",
              metric="adjusted", arm="rnn_64", at=easy, threshold=0.5),
    Criterion("rnn_falls_with_pairs", "1.1", "the small LSTM's recall falls as P grows",
              metric="drop", arm="rnn_64", threshold=0.3, positive=Case(arm="linear_8"),
              falsification=Case(arm="attention"), guarded_by=("rnn_learns_easy_end",)),
    Criterion("rnn_fails_hard_end", "1.1", "the small LSTM fails at the hardest P",
              metric="adjusted", arm="rnn_64", at=hard, compare="<=", threshold=0.5,
              positive=Case(arm="linear_8"), falsification=Case(arm="attention"),
              guarded_by=("rnn_learns_easy_end",)),
    Criterion("attention_read_holds", "1.2", "the LSTM with an attention read recalls at the "
              "hardest P", metric="adjusted", arm="rnn_attention", at=hard, threshold=0.9,
              positive=Case(arm="attention"), falsification=Case(arm="rnn_64")),
    Criterion("attention_read_helps", "1.2", "the attention read recalls more than the same "
              "LSTM without it at the hardest P", metric="adjusted", statistic="difference",
              arm="rnn_attention", against="rnn_64", at=hard, threshold=0.3,
              positive=Case(arm="attention"), falsification=Case(at=easy)),
    Criterion("attention_holds", "1.2", "attention recalls at the hardest P",
              metric="adjusted", arm="attention", at=hard, threshold=0.9,
              positive=Case(at=easy), falsification=Case(arm="rnn_64")),
    Criterion("linear_gains_with_state", "extension", "linear attention's recall at the "
              "hardest P rises with its state", metric="adjusted", statistic="difference",
              arm="linear_32", against="linear_8", at=hard, threshold=0.1,
              positive=Case(arm="attention"), falsification=Case(at=easy)),
  )  # fmt: skip


MODEL = {"d_model": 64, "num_layers": 2}
SIZES = {
  "tiny": Size(
    task={"vocab_size": 32, "seq_len": 16, "num_examples": 64, "num_test_examples": 32},
    model={"d_model": 8, "num_layers": 1}, steps=4, step_cap=4, learning_rates=(1e-2,),
    exploratory_seeds=(100,), confirmatory=2, batch_size=8, eval_every=2, warmup_steps=1,
    points=(2, 4), extra={"eval_examples": 16},
  ),
  "quick": Size(
    task={"vocab_size": 64, "seq_len": 32, "num_examples": 40_000, "num_test_examples": 512},
    model={"d_model": 32, "num_layers": 2}, steps=2000, step_cap=2000, learning_rates=(3e-3,),
    exploratory_seeds=(100,), confirmatory=3, batch_size=64, eval_every=100,
    points=(2, 4, 8), extra={"eval_examples": 256},
  ),
  "full": Size(
    task={"vocab_size": 256, "seq_len": 64, "num_examples": 100_000, "num_test_examples": 1024},
    model=MODEL, steps=4000, step_cap=4000, learning_rates=(1e-3, 3e-3),
    exploratory_seeds=(100,), confirmatory=5, batch_size=64, eval_every=200,
    points=(2, 4, 8, 16), extra={"eval_examples": 512},
  ),
}  # fmt: skip


def _mqar(size, pairs, examples=None):
  held = {"num_test_examples": examples} if examples else {}
  return spec("mqar", {**size.task, "num_kv_pairs": pairs, "seed": 0, **held})


def task(size, point):
  """The mixture every arm trains on (point None), or the reading at P = point."""
  if point is None:
    return _mqar(size, "+".join(str(p) for p in size.points))
  return _mqar(size, point, size.extra["eval_examples"])


def measure(trained, size):
  """Per arm and P: accuracy and adjusted recall on P's own held-out set; the drop from the
  easiest P to the hardest."""
  out = {"accuracy": {}, "adjusted": {}, "drop": {}}
  easy, hard = min(size.points), max(size.points)
  for arm in dict.fromkeys(a for a, _ in trained.units):
    unit = trained.unit(arm)
    stacked = jax.tree.map(lambda *x: np.stack(x), *unit.params())
    by_p = recall.by_pairs(unit.model(), stacked, lambda p: task(size, p), size.points)
    out["accuracy"][arm] = {p: list(v) for p, v in by_p.items()}
    out["adjusted"][arm] = {p: list((v - 1 / p) / (1 - 1 / p)) for p, v in by_p.items()}
    drop = np.asarray(out["adjusted"][arm][easy]) - np.asarray(out["adjusted"][arm][hard])
    out["drop"][arm] = {None: list(drop)}
  return out


def label(result):
  """capacity | learnability | holds | unclear, for each fixed-state arm (means over the
  confirmatory seeds): learnability when its adjusted recall at the easiest P is below 0.5 or
  a replica still learns at the cap; holds when it recalls >= 0.9 at the hardest P; capacity
  when it falls by >= 0.3 from the easiest P to the hardest and, in its family (FAMILIES),
  the largest state recalls more than the smallest at the hardest P by >= 0.1."""
  adjusted, seeds = result["metrics"]["adjusted"], result["seeds"]
  everyone = list(dict.fromkeys([*seeds["exploratory"], *seeds["confirmatory"]]))
  keep = [i for i, s in enumerate(everyone) if s in seeds["confirmatory"]]
  points = sorted(int(p) for p in adjusted["attention"] if p != "*")
  easy, hard = str(points[0]), str(points[-1])
  mean = {a: {p: float(np.mean([v[i] for i in keep])) for p, v in by_p.items()}
          for a, by_p in adjusted.items()}  # fmt: skip
  learning = {u["arm"] for u in result["units"] if "learning" in u["plateau"]}
  out = {}
  for family in FAMILIES.values():
    gain = mean[family[-1]][hard] - mean[family[0]][hard]
    for arm in family:
      m, where = mean[arm], f"P={easy}: {mean[arm][easy]:.2f} -> P={hard}: {mean[arm][hard]:.2f}"
      if m[easy] < 0.5 or arm in learning:
        out[arm] = f"learnability ({where}{', still learning at the cap' * (arm in learning)})"
      elif m[hard] >= 0.9:
        out[arm] = f"holds ({where})"
      elif m[easy] - m[hard] >= 0.3 and gain >= 0.1:
        out[arm] = f"capacity ({where}; {family[-1]} recalls {gain:+.2f} over {family[0]})"
      else:
        out[arm] = f"unclear ({where}; {family[-1]} recalls {gain:+.2f} over {family[0]})"
  return out


def figure(result, path):
  """Adjusted recall against P per arm (mean over every seed)."""
  fig = figures.new(cols=2)
  ax, curves = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
  low = -0.1
  for i, (arm, by_p) in enumerate(result["metrics"]["adjusted"].items()):
    points = sorted(int(p) for p in by_p if p != "*")
    ys = [np.mean(by_p[str(p)]) for p in points]
    low = min(low, *ys)
    ax.plot(points, ys, "o-" if arm in FIXED_STATE else "s--", color=f"C{i}", label=arm)
  ax.axhline(0, color="gray", linewidth=0.8)
  ax.set(xscale="log", xlabel="P (pairs)", ylabel="adjusted recall (0: chance 1/P)",
         title="recall against P", ylim=(low - 0.05, 1.05))  # fmt: skip
  ax.set_xticks(points, [str(p) for p in points])
  ax.minorticks_off()
  ax.legend(fontsize=7)
  figures.curves(curves, result, title="validation accuracy on the mixture")
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="fixed_memory",
  section=1,
  claims=("1.1", "1.2"),
  summary="Fixed-state models (the LSTM at three sizes, linear attention at two ranks) against "
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
