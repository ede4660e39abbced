"""Experiment 5 (docs/reconstruction.md section 5): the coefficient must be a pure interaction.

Split a(x_i, x_L) = g(x_i) + v(x_i, x_L) + h(x_L). Under a softmax over the sources i, h(x_L)
cancels and g(x_i) is the same for every receiver: the one-argument terms cannot pick the one
source a receiver needs. Only the interaction v can. Four scorers of the `matrix_sum` rung,
everything else equal (softmax over i, pre-layer-norm, one head):
  additive  g(x_i) + h(x_L)                   no interaction at all
  tanh      w . tanh(U x_i + W x_L)            Bahdanau: contours like a sum's
  bilinear  x_L^T A x_i                        a pure interaction (cache A x_i: D per head)
  lowrank   (Wq x_L) . (Wk x_i)                A = Wq^T Wk (cache Wk x_i: r per head)
each trained on multi-query associative recall (MQAR). Beside them, the two-argument
functions of the spec on a grid: tanh(x1 + x3), x1 + x3 and x1 * x3, as contour plots and as
the share of their variance that no sum g(x1) + h(x3) explains (two-way ANOVA: 0 for a sum,
1 for a pure product).

  python -m experiments.interaction --workdir runs/interaction              # cpu, ~50 cpu-s
  python -m experiments.interaction --size accel --workdir runs/interaction_accel

cpu: MQAR V=64 L=16 K=4, D=64, 2 layers, batch 32, up to 1000 steps. Expect bilinear and
lowrank to jump to ~1.0 within a few hundred steps and additive to stay at the floor of
guessing among the context's values; tanh (K=16) is what it measures: see the report.
Measured (cpu, seed 0): additive 0.322 (1000 steps); bilinear and lowrank 0.999 (300 steps);
tanh 0.971 (700 steps): it recalls too, slower, although tanh(x1 + x3) is 84% a sum as a
scalar surface (share beyond a sum 0.16; x1 * x3: 1.0). The claim's "tanh interacts weakly"
holds for the surface, not for recall by a network of K=16 such units.
accel: MQAR V=256 L=128 K=16, D=128, up to 8000 steps, tanh with K=32.
"""

import sys

import ml_collections
import numpy as np

from experiments import harness, report, run_all

NAME = "interaction"
CLAIM = (
  "Pure-interaction coefficients (bilinear, lowrank) learn associative recall where the "
  "additive form g(x_i) + h(x_L) fails; tanh(U x_i + W x_L) interacts only weakly."
)

INTERACTIONS = ("additive", "tanh", "bilinear", "lowrank")
PURE = ("bilinear", "lowrank")

# The criterion, stated from the spec's claim before any result was seen.
RECALLS = 0.9  # every pure interaction: MQAR accuracy >= this
FAILS = 0.5  # additive: accuracy <= this
WEAK = 0.5  # tanh(x1 + x3): share of variance beyond a sum <= this (x1 * x3: ~1)
GRID_RANGE = 3.0  # the contour grid spans [-GRID_RANGE, GRID_RANGE]^2


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.interactions = INTERACTIONS  # which scorers to train
  c.vocab_size = 64  # V: MQAR keys in [1, V/2), values in [V/2, V)
  c.seq_len = 16  # L
  c.num_kv_pairs = 4  # K pairs per example, each queried once
  c.num_examples = 20_000  # training examples
  c.num_test_examples = 512  # held-out examples (eval accuracy)
  c.d_model = 64  # D
  c.num_layers = 2  # blocks
  c.tanh_rank = 16  # K of tanh: it materializes B x L x M x K, so it is kept small
  c.batch_size = 32  # examples per step
  c.learning_rate = 3e-3  # peak of warmup + cosine
  c.total_steps = 1000  # upper bound per run; early stop at early_stop_accuracy
  c.eval_every = 100  # steps between evals
  c.early_stop_accuracy = 0.95  # stop a run once eval accuracy reaches this
  c.seed = 0  # init, data order and data generation
  c.grid_points = 121  # per axis of the contour grid
  if size == "tiny":
    c.d_model, c.num_layers, c.tanh_rank, c.seq_len, c.num_kv_pairs = 16, 1, 4, 8, 2
    c.batch_size, c.total_steps, c.eval_every = 16, 4, 2
    c.num_examples, c.num_test_examples, c.grid_points = 256, 64, 21
  elif size == "accel":
    c.vocab_size, c.seq_len, c.num_kv_pairs = 256, 128, 16
    c.d_model, c.tanh_rank, c.batch_size = 128, 32, 256
    c.total_steps, c.eval_every, c.num_examples = 8000, 250, 100_000
    c.learning_rate = 1e-3
  elif size not in ("quick", "full"):  # both are the cpu size until redesigned
    raise ValueError(f"size={size!r}: expected tiny, cpu or accel")
  return c


def model_overrides(config, interaction):
  """The matrix_sum rung with one head, a softmax over the sources and pre-layer-norm."""
  model = harness.model_fields(config, interaction=interaction, num_heads=1, normalizer="softmax")
  if interaction == "tanh":
    model["rank"] = config.tanh_rank
  return model


FUNCTIONS = {
  "tanh(x1 + x3)": lambda a, b: np.tanh(a + b),
  "x1 + x3": lambda a, b: a + b,
  "x1 * x3": lambda a, b: a * b,
}

# The scalar function of two inputs each interaction reduces to (one coordinate each).
ANALOGUE = {
  "additive": "x1 + x3",
  "tanh": "tanh(x1 + x3)",
  "bilinear": "x1 * x3",
  "lowrank": "x1 * x3",
}


def interaction_share(z_AB):
  """Share of the variance of z over a grid not explained by g(x1) + h(x3).

  The best additive fit on a full grid is row mean + column mean - grand mean; what is left
  is the pure interaction (0 for a sum, 1 for x1 * x3 on a symmetric grid).
  """
  z = np.asarray(z_AB, np.float64)
  additive = z.mean(axis=1, keepdims=True) + z.mean(axis=0, keepdims=True) - z.mean()
  total = np.sum((z - z.mean()) ** 2)
  return float(np.sum((z - additive) ** 2) / total) if total > 0 else 0.0


def grid(config):
  x = np.linspace(-GRID_RANGE, GRID_RANGE, config.grid_points)
  return np.meshgrid(x, x, indexing="ij")


def criteria(metrics, config):
  acc = metrics["accuracy"]
  share = metrics["interaction_share"]
  pure = {m: acc[m] for m in PURE}
  return [
    report.Criterion(
      f"pure interactions recall: bilinear and lowrank >= {RECALLS}",
      all(v >= RECALLS for v in pure.values()),
      {f"acc_{m}": v for m, v in pure.items()},
    ),
    report.Criterion(
      f"the additive form fails: additive <= {FAILS}",
      acc["additive"] <= FAILS,
      {"acc_additive": acc["additive"]},
    ),
    report.Criterion(
      f"tanh(x1 + x3) interacts weakly: its share of variance beyond a sum <= {WEAK} "
      "(x1 * x3 for comparison)",
      share["tanh(x1 + x3)"] <= WEAK,
      {"share_tanh": share["tanh(x1 + x3)"], "share_product": share["x1 * x3"]},
    ),
  ]


def run(config, workdir):
  x1, x3 = grid(config)
  surfaces = {name: f(x1, x3) for name, f in FUNCTIONS.items()}
  share = {name: interaction_share(z) for name, z in surfaces.items()}

  task = harness.mqar_task(config)
  accuracy, steps, curves = {}, {}, {}
  cpu = 0.0
  for interaction in config.interactions:
    summary = harness.train(
      "matrix_sum",
      task,
      model_overrides(config, interaction),
      **harness.schedule(config),
    )
    accuracy[interaction] = harness.accuracy(summary)
    steps[interaction] = summary["final_step"]
    curves[interaction] = [[s, a] for s, _, a in summary["evals"]]
    cpu += summary["cpu_seconds"]
    print(
      f"  {NAME}: {interaction:9s} acc={accuracy[interaction]:.3f} after {steps[interaction]} "
      f"steps ({summary['cpu_seconds']:.1f} cpu s)",
      flush=True,
    )

  metrics = {
    "accuracy": accuracy,
    "steps": steps,
    "eval_curves": curves,
    "interaction_share": share,
    "train_cpu_seconds": cpu,
  }
  plots = [_plot_contours(surfaces, share, x1, x3, workdir), _plot_curves(curves, workdir)]
  table = [
    {
      "interaction": m,
      "scalar analogue": ANALOGUE[m],
      "its share beyond a sum": share[ANALOGUE[m]],
      "MQAR accuracy": accuracy[m],
      "steps": steps[m],
    }
    for m in config.interactions
  ]
  setup = (
    f"{_tanh_observation(accuracy, share)} "
    f"Rung matrix_sum, 1 head, softmax over the sources, pre-layer-norm, D={config.d_model}, "
    f"{config.num_layers} layers (tanh: K={config.tanh_rank}; lowrank: K=D). MQAR V="
    f"{config.vocab_size} L={config.seq_len} K={config.num_kv_pairs}, batch "
    f"{config.batch_size}, lr {config.learning_rate}, up to {config.total_steps} steps (early "
    f"stop at {config.early_stop_accuracy}), seed {config.seed}. Share beyond a sum: two-way "
    f"ANOVA interaction share of each f on a {config.grid_points}^2 grid over "
    f"[-{GRID_RANGE:g}, {GRID_RANGE:g}]^2."
  )
  return report.Result(
    experiment=NAME,
    claim=CLAIM,
    setup=setup,
    criteria=criteria(metrics, config),
    metrics=metrics,
    table=table,
    plots=plots,
  )


def _tanh_observation(accuracy, share):
  """What tanh did, in words computed from its numbers (no criterion rides on it)."""
  if "tanh" not in accuracy:
    return ""
  acc = accuracy["tanh"]
  did = "recalled" if acc >= RECALLS else ("failed" if acc <= FAILS else "partly recalled")
  return (
    f"tanh {did} (accuracy {acc:.3f}) although tanh(x1 + x3) is {1 - share['tanh(x1 + x3)']:.0%}"
    " a sum as a scalar surface: a network of K such units can still build an interaction."
  )


def _plot_contours(surfaces, share, x1, x3, workdir):
  fig = harness.figure(cols=3, width=4.0, height=3.6)
  for ax, (name, z) in zip(fig.subplots(1, 3), surfaces.items(), strict=True):
    filled = ax.contourf(x1, x3, z, levels=15, cmap="RdBu_r")
    ax.contour(x1, x3, z, levels=15, colors="k", linewidths=0.4)
    fig.colorbar(filled, ax=ax, shrink=0.8)
    ax.set(xlabel="x1", ylabel="x3", title=f"{name}  (share beyond a sum {share[name]:.2f})")
    ax.set_aspect("equal")
  return harness.save(fig, workdir, f"{NAME}_contours.png")


def _plot_curves(curves, workdir):
  fig = harness.figure()
  ax = fig.add_subplot()
  for name, points in curves.items():
    if points:
      s, a = zip(*points, strict=True)
      ax.plot(s, a, marker="o", label=name, linestyle="-" if name in PURE else "--")
  ax.set(xlabel="train step", ylabel="MQAR eval accuracy", ylim=(-0.02, 1.02))
  ax.set_title("coefficient a(x_i, x_L) by interaction")
  ax.legend()
  return harness.save(fig, workdir, f"{NAME}_accuracy.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
