"""Section 8: residual connections let a deep stack train where the plain stack does not.

Claim 8.3, from He et al. 2016 (deep residual learning), attributed by the article's
split-skip step (O_L = x_L + sigma(s_L)): a deep stack trains only when each block adds its
input back. Without the skip every block must carry, through its own mixer and MLP, all that
later blocks need of its input (a token's identity, its position), and the gradient reaches
the first blocks only through every later one; He et al. conjecture that deep plain nets have
"exponentially low convergence rates". With x + mixer(x), then + MLP, the input reaches every
block unchanged and each block learns a correction.

The axis is depth: the `transformer` rung (pre-norm + final norm, one head, MLP 4D) at 2, 4
and 8 blocks, each depth trained, with `skip='split'` (residual) and `skip='none'` (plain: the
same layers, norms and parameters, nothing added back); everything else equal (width, data,
budget, each at its selected learning rate). One more arm fails by construction: the 2-block
residual stack that sees only its own position (`blind`), the case the slowdown criterion
must accept. The engine's axes vary the task, not the model, so each depth is its own arm.

  python -m experiments.engine run skips --size quick    # ~3.5 minutes on one CPU core
  python -m experiments.engine run skips --size full     # ~30 minutes on 2 CPU cores

The claim is read on recall at the plateau: at 8 blocks the residual stack recalls and the
plain one does not, where at 2 blocks the plain one recalls too. Steps to 0.9 validation
accuracy (never reached: the final budget, a lower bound) are an extension: whether the
plain stack at 8 blocks needs 10x the residual's steps where at 2 blocks it does not (the
sizing run, seed 100 at lr 3e-3: 1,650 against 150 steps at 2 blocks already). Every arm
starts at a budget 10x the steps the residual stack needs, so a plain stack that goes flat
reads a ratio the threshold can judge. Expected (the sizing run, seed 100): the
residual stack at its target in 150 steps at every depth; the plain one learns at 2 blocks,
is still learning at 4 and flat below chance at 8. Verdicts and numbers: results/skips/.
"""

import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Case, Criterion, Experiment, Size, spec

DEPTHS = (2, 4, 8)
SKIPS = {"residual": "split", "plain": "none"}
SHARED = {"num_heads": 1}
SHALLOW, DEEP = DEPTHS[0], DEPTHS[-1]


def name(family, depth):
  return f"{family}_{depth}"


ARMS = (
  *(
    Arm(name(family, depth), "transformer", SHARED | {"skip": skip, "num_layers": depth},
        f"{depth} blocks, " + ("x + mixer, then + MLP" if skip == "split" else "no skip"))
    for depth in DEPTHS
    for family, skip in SKIPS.items()
  ),
  Arm("blind", "transformer", SHARED | {"skip": "split", "num_layers": SHALLOW, "mask": "self"},
      f"{SHALLOW} residual blocks that see only their own position: no recall"),
)  # fmt: skip

RESIDUAL_DEEP, PLAIN_DEEP = name("residual", DEEP), name("plain", DEEP)
RESIDUAL_SHALLOW, PLAIN_SHALLOW = name("residual", SHALLOW), name("plain", SHALLOW)

CRITERIA = (
  Criterion("plain_trains_shallow", "control", "without skips the shallowest stack learns recall",
            metric="adjusted", arm=PLAIN_SHALLOW, threshold=0.5),
  Criterion("residual_trains_deep", "8.3", "with skips the deepest stack learns recall",
            metric="adjusted", arm=RESIDUAL_DEEP, threshold=0.9,
            positive=Case(arm=RESIDUAL_SHALLOW), falsification=Case(arm=PLAIN_DEEP)),
  Criterion("plain_fails_deep", "8.3", "without skips the deepest stack does not learn recall",
            metric="adjusted", arm=PLAIN_DEEP, compare="<=", threshold=0.3,
            positive=Case(arm="blind"), falsification=Case(arm=PLAIN_SHALLOW),
            guarded_by=("plain_trains_shallow",)),
  Criterion("plain_slower_deep", "extension", "without skips the deepest stack needs an order "
            "of magnitude more steps to recall than with them", metric="steps_to",
            statistic="ratio", arm=PLAIN_DEEP, against=RESIDUAL_DEEP, threshold=10.0,
            positive=Case(arm="blind"),
            falsification=Case(arm=PLAIN_SHALLOW, against=RESIDUAL_SHALLOW),
            guarded_by=("plain_trains_shallow",)),
)  # fmt: skip


def _size(task, d_model, **fields):
  model = {"d_model": d_model, "d_ff": 4 * d_model}
  return Size(task={"vocab_size": 16, "seq_len": 16, "num_kv_pairs": 4, **task}, model=model,
              **fields)  # fmt: skip


SIZES = {
  "tiny": _size(
    {"seq_len": 8, "num_kv_pairs": 2, "num_examples": 64, "num_test_examples": 32}, 8, steps=4,
    step_cap=4, learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2, batch_size=8,
    eval_every=2, warmup_steps=1,
  ),
  # v2: one budget for every arm, never grown: 2,500 steps, 12.5x the 200 steps the residual
  # stacks took in v1 (v1 grew plain_4, read by no criterion, to 6,000)
  "quick": _size(
    {"num_examples": 20_000, "num_test_examples": 512}, 32, steps=2500, step_cap=2500,
    learning_rates=(3e-3,), exploratory_seeds=(100,), confirmatory=2, confirm_only=True,
  ),
  "full": _size(
    {"num_examples": 20_000, "num_test_examples": 2048}, 32, steps=4000, step_cap=16_000,
    learning_rates=(1e-3, 3e-3), exploratory_seeds=(100,), confirmatory=5, eval_every=100,
    warmup_steps=100,
  ),
}  # fmt: skip


def task(size, point):
  return spec("mqar", {**size.task, "seed": 0})


def figure(result, path):
  """Adjusted recall and steps to 0.9 against depth, with and without skips (line: mean over
  every seed, dots: seeds); the validation accuracy by step of every arm."""
  fig = figures.new(cols=3)
  recall, speed, curves = (fig.add_subplot(1, 3, i) for i in (1, 2, 3))
  for i, family in enumerate(SKIPS):
    for ax, metric in ((recall, "adjusted"), (speed, "steps_to")):
      per_depth = [np.asarray(result["metrics"][metric][name(family, d)]["*"], float)
                   for d in DEPTHS]  # fmt: skip
      ax.plot(DEPTHS, [np.nanmean(v) for v in per_depth], "o-" if i == 0 else "s--",
              color=f"C{i}", label=family)  # fmt: skip
      for d, v in zip(DEPTHS, per_depth, strict=True):
        ax.plot(np.full(v.shape, d), v, ".", color=f"C{i}", markersize=4)
  recall.axhline(0, color="gray", linewidth=0.8)
  recall.set(xlabel="blocks", ylabel="adjusted recall (0: chance 1/P)", ylim=(-0.3, 1.05),
             title="recall at the plateau", xticks=DEPTHS)  # fmt: skip
  speed.set(xlabel="blocks", ylabel="steps to 0.9 (never: the final budget)", yscale="log",
            title="steps to validation accuracy 0.9", xticks=DEPTHS)  # fmt: skip
  recall.legend(fontsize=7)
  figures.curves(curves, result, title="MQAR validation accuracy (lines: seeds)")
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="skips",
  section=8,
  claims=("8.3",),
  summary="The transformer rung at 2, 4 and 8 blocks with the residual stream (skip split) "
  "and without it (skip none) on MQAR: where along depth the plain stack stops training, and "
  "how much slower it is than the residual one.",
  arms=ARMS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  figure=figure,
)
