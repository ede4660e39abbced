"""Section 5: the coefficient must be a pure interaction.

Split a(x_i, x_L) = g(x_i) + v(x_i, x_L) + h(x_L). Under a softmax over the sources i, h(x_L)
cancels and g(x_i) is the same for every receiver: the one-argument terms cannot pick the one
source a receiver needs; only the interaction v can. Five arms of the `matrix_sum` rung, one
head of rank K = D where a rank exists, everything else equal (width, depth, pre-norm + final
norm, the softmax over the sources, data, budget; each at its selected learning rate):

  additive   g(x_i) + h(x_L)                  no interaction at all
  tanh       w . tanh(U x_i + W x_L)          Bahdanau, K = D hidden units
  bilinear   x_L^T A x_i                      A: D x D, a pure interaction
  lowrank    (Wq x_L) . (Wk x_i)              A = Wq^T Wk, rank K = D
  stateless  lowrank with W_iL = 0, i != L    no other position: recall is impossible

  python -m experiments.engine run interaction --size quick    # ~1 minute on one CPU core
  python -m experiments.engine run interaction --size full     # ~35 minutes on one CPU core

Expected: the pure forms recall and the additive form stays near chance (5.1); whether tanh
needs 1.5x the product's steps (5.2) is what the run decides. How much of each trained
scorer is interaction (jaxformer/analysis/interaction.py) is measured and plotted beside the
contours of the spec, and judged by no criterion. Verdicts and numbers: results/interaction/.
"""

import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import inputs
from jaxformer.analysis import interaction as interaction_lib

SCORERS = ("additive", "tanh", "bilinear", "lowrank")
SURFACES = {
  "tanh(x1 + x3)": lambda a, b: np.tanh(a + b),
  "x1 + x3": lambda a, b: a + b,
  "x1 * x3": lambda a, b: a * b,
}


def _arm(name, note, **fields):
  return Arm(name, "matrix_sum", {"num_heads": 1, "normalizer": "softmax"} | fields, note)


ARMS = (
  _arm(
    "additive", "g(x_i) + h(x_L): source-only weights under the softmax", interaction="additive"
  ),
  _arm("tanh", "w . tanh(U x_i + W x_L), Bahdanau", interaction="tanh"),
  _arm("bilinear", "x_L^T A x_i", interaction="bilinear"),
  _arm("lowrank", "(Wq x_L) . (Wk x_i): the query and the key", interaction="lowrank"),
  _arm(
    "stateless",
    "lowrank with W_iL = 0 for i != L: sees no other position",
    interaction="lowrank",
    mask="self",
  ),  # fmt: skip
)

# Measured and plotted, judged by no criterion (the sizing run, results/interaction/log.md)
METRICS = (
  Metric(
    "share",
    0.0,
    1.0,
    untrained="share_untrained",
    note="the scores' variance beyond their best additive fit, mean over layers",
  ),  # fmt: skip
  Metric("share_untrained", 0.0, 1.0, note="share of the same networks at initialisation"),
)

CRITERIA = (
  Criterion(
    "additive_trains", "control", "the additive arm learns where answers come from",
    metric="over_chance", arm="additive", compare=">=", threshold=0.8,
  ),
  Criterion(
    "pure_recalls", "5.1", "a pure interaction learns recall",
    metric="adjusted", arm="lowrank", compare=">=", threshold=0.9,
    positive=Case(arm="bilinear"), falsification=Case(arm="additive"),
  ),
  Criterion(
    "additive_fails", "5.1", "the additive coefficient fails at recall",
    metric="adjusted", arm="additive", compare="<=", threshold=0.3,
    positive=Case(arm="stateless"), falsification=Case(arm="lowrank"),
    guarded_by=("additive_trains",),
  ),
  Criterion(
    "tanh_slower", "5.2", "tanh needs more steps to reach recall than the product",
    metric="steps_to", statistic="ratio", arm="tanh", against="lowrank", threshold=1.5,
    positive=Case(arm="additive"), falsification=Case(arm="bilinear"),
  ),
)  # fmt: skip


def _size(task, d_model, **fields):
  return Size(task=task, model={"d_model": d_model, "num_layers": 2, "norm": "pre",
                                "final_norm": True}, **fields)  # fmt: skip


SIZES = {
  "tiny": _size(
    {"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 2, "num_examples": 64,
     "num_test_examples": 32}, 8, steps=4, step_cap=8, learning_rates=(1e-2,),
    exploratory_seeds=(100,), confirmatory=2, batch_size=8, eval_every=2, warmup_steps=1,
    extra={"probe_batch": 8},
  ),
  "quick": _size(
    {"vocab_size": 64, "seq_len": 16, "num_kv_pairs": 4, "num_examples": 20_000,
     "num_test_examples": 512}, 64, steps=600, step_cap=1200, learning_rates=(3e-3,),
    exploratory_seeds=(100,), confirmatory=2, confirm_only=True, extra={"probe_batch": 64},
    # v2: additive (still learning at v1's 1,200-step cap) trains 4,800 steps; tanh (one
    # seed still learning at 1,200) may double to 2,400
    arm_steps={"additive": (4800, 4800), "tanh": (1200, 2400)},
  ),
  "full": _size(
    {"vocab_size": 128, "seq_len": 32, "num_kv_pairs": 8, "num_examples": 40_000,
     "num_test_examples": 2048}, 64, steps=1500, step_cap=6000,
    learning_rates=(1e-3, 3e-3, 1e-2), exploratory_seeds=(100, 101), confirmatory=5,
    extra={"probe_batch": 128},
  ),
}  # fmt: skip


def task(size, point):
  return spec("mqar", {**size.task, "seed": 0})


def measure(trained, size):
  """The interaction share of every scorer's trained and untrained networks, per seed."""
  tokens = inputs.eval_inputs(task(size, None), size.extra["probe_batch"])
  out = {"share": {}, "share_untrained": {}}
  for name in SCORERS:
    unit = trained.unit(name)
    model = unit.model()
    untrained = inputs.initial_params(model, trained.seeds, tokens.shape)
    out["share"][name] = {"*": [interaction_lib.share(model, p, tokens) for p in unit.params()]}
    out["share_untrained"][name] = {"*": [interaction_lib.share(model, p, tokens)
                                          for p in untrained]}  # fmt: skip
  return out


def figure(result, path):
  """Validation accuracy by step per arm; the trained and untrained shares; the contours."""
  fig = figures.new(cols=3, rows=2)
  curves, shares, steps = (
    fig.add_subplot(2, 3, 1),
    fig.add_subplot(2, 3, 2),
    fig.add_subplot(2, 3, 3),
  )
  figures.curves(curves, result, title="MQAR validation accuracy (lines: seeds)")
  figures.bars(shares, result, ("share_untrained", "share"), SCORERS,
               title="share of scores beyond a sum")  # fmt: skip
  figures.bars(
    steps, result, ("steps_to",), SCORERS, title="steps to validation accuracy 0.9 (capped: never)"
  )
  for i, (name, f) in enumerate(SURFACES.items()):
    ax = fig.add_subplot(2, 3, 4 + i)
    x1, x3, z = interaction_lib.surface(f, 61, 3.0)
    ax.contourf(x1, x3, z, levels=15, cmap="RdBu_r")
    ax.set(xlabel="x1", ylabel="x3",
           title=f"{name}: share {interaction_lib.surface_share(f):.2f}")  # fmt: skip
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="interaction",
  section=5,
  claims=("5.1", "5.2"),
  summary="Four scorers a(x_i, x_L) of the matrix_sum rung on MQAR, and a stateless arm that "
  "sees no other position: which coefficient learns recall, how fast, and how much of what "
  "it learns is an interaction.",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  measure=measure,
  figure=figure,
)
