"""Section 9: what a window gives up, and what dense attention costs.

9.1, trained: a needle task (one fact `k v` at `distance` tokens before its query `k`; the
answer v sits distance - 1 tokens back) at each distance of an axis, one model per (arm,
distance). Three arms of the softmax rung, one layer, one head, everything else equal:

  full    causal attention over every earlier token
  window  the last WINDOW = 8 tokens only: the answer is in view at distance <= 8
  self    its own position only: blind at every distance by construction

9.2, check: the compiled memory of one causal attention fwd+bwd pass against L (XLA's buffer
assignment, jaxformer/analysis/attention_memory.py). It is deterministic: the same for every
seed and untouched by training, so a bootstrap over seeds would read one number five times.
CHECKS states it and tests/experiments/test_s9_beyond.py decides it on the real kernels, each
with a kernel it must accept and one it must reject; the figure plots it.

  python -m experiments.engine run beyond --size quick    # ~20 seconds on one CPU core
  python -m experiments.engine run beyond --size full     # estimated 15-30 minutes on 2 CPU cores

Expected: the window recalls at every distance up to 8 and is at chance beyond it, where full
attention still recalls; the self arm is at chance everywhere. Dense attention's temp memory
grows as L^2, blockwise, the sliding window and linear attention's recurrence as L.
"""

import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import attention_memory

WINDOW = 8
ONE = {"num_heads": 1, "num_layers": 1}
ARMS = (
  Arm("full", "softmax", ONE, "causal attention over every earlier token"),
  Arm("window", "softmax", ONE | {"window": WINDOW}, f"the last {WINDOW} tokens only"),
  Arm("self", "softmax", ONE | {"mask": "self"}, "its own position only"),
)

METRICS = (
  Metric("within", -1.0, 1.0, note=f"per seed, the lowest adjusted accuracy over the distances "
         f"<= {WINDOW} (inside the window)"),
  Metric("beyond", -1.0, 1.0, note=f"per seed, the highest adjusted accuracy over the distances "
         f"> {WINDOW} (outside the window)"),
  Metric("lowest", -1.0, 1.0, note="per seed, the lowest adjusted accuracy over every distance "
         "(at one distance: its own)"),
)  # fmt: skip

RECALLS, AT_CHANCE = 0.9, 0.1  # adjusted accuracy: pin-point recall; chance
CRITERIA = (
  Criterion("window_recalls_within", "9.1", "the window recalls at every distance inside it",
            metric="within", arm="window", threshold=RECALLS,
            positive=Case(arm="full"), falsification=Case(arm="self")),
  Criterion("window_at_chance_beyond", "9.1", "the window is at chance at every distance "
            "beyond it", metric="beyond", arm="window", compare="<=", threshold=AT_CHANCE,
            positive=Case(arm="self"), falsification=Case(arm="full")),
  Criterion("attention_holds", "9.1", "full attention recalls at every distance",
            metric="lowest", arm="full", threshold=RECALLS,
            positive=Case(at="first"), falsification=Case(arm="window")),
)  # fmt: skip

# Claim 9.2 is a check (the docstring): dense attention's temp memory grows as L^2, the
# others' as L. Per kernel: its slope's comparison and threshold, a kernel it must accept
# and one it must reject. Decided by tests/experiments/test_s9_beyond.py.
QUADRATIC, LINEAR = 1.8, 1.2  # log-log slope of compiled temp bytes, two largest L
CHECKS = (
  ("dense", ">=", QUADRATIC, "dot_product", "blockwise"),
  ("blockwise", "<=", LINEAR, "sliding_window", "dense"),
  ("sliding_window", "<=", LINEAR, "blockwise", "dense"),
  ("linear_recurrent", "<=", LINEAR, "linear", "dense"),
)
KERNELS = ("dense", "blockwise", "sliding_window", "linear_recurrent")


def _size(task, model, **fields):
  return Size(task=task, model=model, **fields)


SIZES = {
  "tiny": _size({"vocab_size": 16, "seq_len": 16, "num_examples": 64, "num_test_examples": 32},
                {"d_model": 8}, steps=4, step_cap=4, learning_rates=(1e-2,),
                exploratory_seeds=(100,), confirmatory=2, batch_size=8, eval_every=2,
                warmup_steps=1, points=(4, 12),
                extra={"lengths": (64, 128), "window": 16, "block_size": 16, "head_dim": 8}),
  "quick": _size({"vocab_size": 64, "seq_len": 32, "num_examples": 4000,
                  "num_test_examples": 512}, {"d_model": 32}, steps=250, step_cap=500,
                 learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2,
                 confirm_only=True, batch_size=64, warmup_steps=30, points=(8, 12, 28),
                 extra={"lengths": (512, 1024, 2048), "window": 64, "block_size": 64,
                        "head_dim": 64}),
  "full": _size({"vocab_size": 64, "seq_len": 64, "num_examples": 20_000,
                 "num_test_examples": 2048}, {"d_model": 32}, steps=500, step_cap=2000,
                learning_rates=(3e-3, 1e-2), exploratory_seeds=(100,), confirmatory=5,
                batch_size=64, warmup_steps=50, points=(4, 8, 9, 16, 60),
                extra={"lengths": (1024, 2048, 4096), "window": 256, "block_size": 128,
                       "head_dim": 64}),
}  # fmt: skip


def task(size, point):
  return spec("needle", {**size.task, "distance": point, "seed": 0})


def measure(trained, size):
  """Per arm: the lowest adjusted accuracy inside the window, the highest beyond it, and the
  lowest over every distance (and, at each distance, its own)."""
  out = {"within": {}, "beyond": {}, "lowest": {}}
  for arm in ARMS:
    adjusted = {}
    for d in size.points:
      unit = trained.unit(arm.name, d)
      chance = unit.result.chance
      adjusted[d] = np.array([(a - chance) / (1 - chance) for a in unit.final("eval_accuracy")])
    inside = [adjusted[d] for d in size.points if d <= WINDOW]
    outside = [adjusted[d] for d in size.points if d > WINDOW]
    out["within"][arm.name] = {None: np.min(inside, axis=0).tolist()}
    out["beyond"][arm.name] = {None: np.max(outside, axis=0).tolist()}
    out["lowest"][arm.name] = {None: np.min(list(adjusted.values()), axis=0).tolist(),
                               **{d: v.tolist() for d, v in adjusted.items()}}  # fmt: skip
  return out


def figure(result, path):
  """Adjusted needle recall against distance per arm (the window's edge dotted), and the
  compiled temp memory of one fwd+bwd pass per kernel against L (9.2)."""
  fig = figures.new(cols=2)
  recall, memory = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
  for i, (arm, by_point) in enumerate(result["metrics"]["adjusted"].items()):
    points = sorted(int(p) for p in by_point)
    means = [np.mean(by_point[str(p)]) for p in points]
    recall.plot(points, means, "o-", color=f"C{i}", label=arm)
  recall.axvline(WINDOW, color="gray", linestyle=":")
  recall.axhline(0, color="gray", linewidth=0.8)
  recall.set(xlabel=f"distance (dotted: the window, {WINDOW})", ylabel="adjusted recall",
             title="needle recall", ylim=(-0.1, 1.05))  # fmt: skip
  recall.legend(fontsize=7)
  extra = SIZES[result["size"]].extra
  kw = {k: extra[k] for k in ("window", "block_size", "head_dim")}
  for i, impl in enumerate(KERNELS):
    b, temp = attention_memory.growth(impl, extra["lengths"], **kw)
    memory.plot(list(temp), [t / 2**20 for t in temp.values()], "o-", color=f"C{i}",
                label=f"{impl}: L^{b:.2f}")  # fmt: skip
  memory.set(xscale="log", yscale="log", xlabel="L", ylabel="compiled temp MiB",
             title="one causal attention fwd+bwd")  # fmt: skip
  memory.legend(fontsize=7)
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="beyond",
  section=9,
  claims=("9.1",),
  summary="Full attention, a sliding window of 8 and a self-only arm, one layer each, trained on "
  "a needle at each distance: where the window loses pin-point recall. The compiled memory "
  "of the attention kernels against L is plotted (claim 9.2 is a check).",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  axis=Axis("distance", note="query position minus the key's; one model per distance"),
  measure=measure,
  figure=figure,
)
