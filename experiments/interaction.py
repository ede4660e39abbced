"""Experiment 5 (docs/reconstruction.md section 5): the coefficient must be a pure interaction.

Split a(x_i, x_L) = g(x_i) + v(x_i, x_L) + h(x_L). Under a softmax over the sources i, h(x_L)
cancels and g(x_i) is the same for every receiver: the one-argument terms cannot pick the one
source a receiver needs. Only the interaction v can. Four scorers of the `matrix_sum` rung,
of equal rank K = D where a rank exists, everything else equal (softmax over i, pre-norm +
final norm, one head, width, depth, data, budget; each at its selected learning rate):
  additive  g(x_i) + h(x_L)                   no interaction at all (a scalar per side)
  tanh      w . tanh(U x_i + W x_L)           Bahdanau, K = D hidden units
  bilinear  x_L^T A x_i                       A: D x D, a pure interaction
  lowrank   (Wq x_L) . (Wk x_i)               A = Wq^T Wk, K = D

Measured on the trained models, on a probe batch of eval-half sequences:
  interaction share  each layer's raw scores a(x_i, x_L) over every pair of a sequence's
                     tokens (jaxformer.analysis.receivers.scores: the layer's own scorer on
                     the queries and keys it computed), and the share of their variance that
                     the best additive fit g(x_i) + h(x_L) leaves unexplained (two-way ANOVA
                     per sequence, pooled), averaged over layers
  steps to 0.9       per seed, the first evaluated step whose validation accuracy >= 0.9,
                     the fewest over the learning-rate grid: each model at its fastest rate
                     (selection by final accuracy can swing between rates on a near tie:
                     in a full run with 1e-3 in the grid, lowrank selected 1e-3 over 3e-3 at
                     the same 0.99 and took 550 steps there, against 250 at 3e-3 in the
                     next run)
  receiver dependence  jaxformer.analysis.receivers on the trained weights
Checks (asserted: a failure is a bug, not a finding): the trained additive scorer's share is 0
and its weights' receiver dependence is 0: under the softmax over the sources h(x_L) cancels,
so the additive form is source-only weights. The report says so with the numbers.
Illustration (no verdict rides on it): contours of tanh(x1 + x3), x1 + x3 and x1 * x3 and each
surface's share beyond a sum.

Control (else INCONCLUSIVE): the additive model learns where answers come from (raw accuracy
>= INFORMED x the MQAR chance 1/K), every seed. Claim, every seed: bilinear and lowrank reach
adjusted accuracy >= RECALLS; additive stays <= FAILS; tanh is slower: each tanh seed needs
more steps to 0.9 at its fastest rate than every seed of each pure form at theirs (never
reaching it counts as slowest);
the trained bilinear and lowrank scores are mostly interaction (share >= STRONG); the trained
tanh scores are mostly a sum (share <= WEAK).

  python -m experiments.interaction --workdir runs/interaction                 # quick
  python -m experiments.interaction --size full --workdir runs/interaction_full
  python -m experiments.interaction --size accel --workdir runs/interaction_accel

quick: MQAR V=64 L=16 K=4, D=64, 2 layers, batch 32, up to 600 steps, 3+1 seeds at lr 3e-3.
full: the same, 1,500 steps growing x2 to at most 6,000 (a plateau read by the doubling), 5+2 seeds x Zoology's four rates logspace(1e-4, 1e-2, 4). accel:
MQAR V=256 L=128 K=16, D=128.
Measured numbers, and what they show: docs/experiments.md.
"""

import math
import sys

import ml_collections
import numpy as np

from experiments import harness, protocol, report, run_all, sizes, symmetry
from experiments.symmetry import eval_inputs
from jaxformer.analysis import receivers
from jaxformer.analysis.cache import cached

NAME = "interaction"
CLAIM = (
  "Pure-interaction coefficients (bilinear, lowrank) learn associative recall where the "
  "additive form g(x_i) + h(x_L), which under a softmax is source-only weights, fails; "
  "tanh(U x_i + W x_L) learns slower and its trained scores are mostly a sum."
)

INTERACTIONS = ("additive", "tanh", "bilinear", "lowrank")
PURE = ("bilinear", "lowrank")

# The criterion, stated from the spec's claim before any result was seen (adjusted accuracy:
# 0 is a guess among the K values in context, 1 perfect).
RECALLS = 0.9  # bilinear and lowrank: adjusted accuracy >= this, every seed
FAILS = 0.3  # additive: adjusted accuracy <= this, every seed
REACHES = 0.9  # steps to this validation accuracy (raw)
STRONG = 0.5  # bilinear and lowrank: trained interaction share >= this, every seed
WEAK = 0.5  # tanh: trained interaction share <= this, every seed
INFORMED = 0.8  # control: additive's raw accuracy >= this x chance
CHECK_TOLERANCE = 1e-5  # additive: share and receiver dependence are 0 up to this
GRID_RANGE = 3.0  # the contour grid spans [-GRID_RANGE, GRID_RANGE]^2

# The registered design (experiments/protocol.py; the design log: docs/experiments.md).
VERSION = 6  # v2: the 4-point grid at full; the shares read as trained minus untrained
# v3: full's step cap 6,000 (additive still learning at 3,000 on both exploratory seeds)
# v4: full reads a grown budget's plateau by the doubling (protocol.DOUBLING)
# v5: full's confirmatory seeds fresh (v4 re-read v3's seeds): a confirmation of v4
# v6: full's held-out split 2,048 examples (v5: 256; the protocol's validation-noise audit)
SPECS = (
  protocol.Spec(
    "additive_learns_where_answers_come_from",
    f"additive's raw accuracy >= {INFORMED} x chance, every seed",
    threshold=INFORMED,
    reads=("additive",),
    control=True,
  ),
  protocol.Spec(
    "pure_recalls",
    f"bilinear and lowrank adjusted >= {RECALLS}, every seed",
    threshold=RECALLS,
    reads=PURE,
  ),
  protocol.Spec(
    "additive_fails",
    f"additive adjusted <= {FAILS}, every seed",
    threshold=FAILS,
    reads=("additive",),
  ),
  protocol.Spec(
    "tanh_slower",
    f"every tanh seed slower to validation accuracy {REACHES} than every pure-form seed, each "
    "at its fastest learning rate",
    threshold=REACHES,
    reads=("tanh", *PURE),
  ),
  protocol.Spec(
    "pure_share_strong",
    f"bilinear and lowrank interaction share, trained minus untrained, >= {STRONG}",
    threshold=STRONG,
    reads=PURE,
    at_init=True,
  ),
  protocol.Spec(
    "tanh_share_weak",
    f"tanh interaction share, trained minus untrained, <= {WEAK}",
    threshold=WEAK,
    reads=("tanh",),
    at_init=True,
  ),
)
CHECKS = (
  protocol.Spec(
    "additive_is_source_only",
    f"under the softmax over the sources an additive scorer gives source-only weights: the "
    f"trained additive model's interaction share and receiver dependence are 0 (<= "
    f"{CHECK_TOLERANCE:g}), asserted by measure()",
    tag="architectural",
    test="experiments/interaction.py::measure",
  ),
)
# The additive scorer, read by the recall criterion: it must be rejected.
FALSIFICATION = (
  protocol.Falsification("additive", "pure_recalls", "g(x_i) + h(x_L): source-only weights"),
)


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.vocab_size = 64  # V: MQAR keys in [1, V/2), values in [V/2, V)
  c.seq_len = 16  # L
  c.num_kv_pairs = 4  # K pairs per example, each queried once
  c.d_model = 64  # D, and the rank K of tanh and lowrank (bilinear's is D)
  c.num_layers = 2
  protocol.set_seeds(c, size if size in protocol.SEEDS else "quick")
  c.learning_rates = (3e-3,)
  c.weight_decays = (0.1,)
  c.batch_size = 32
  c.total_steps = 600  # the same budget for every model; early stop at early_stop_accuracy
  c.step_cap = 600  # quick: no growth; full: x2
  c.warmup_steps = 50
  c.eval_every = 50  # also the resolution of steps-to-0.9
  c.early_stop_accuracy = 0.99
  c.num_examples = 20_000
  c.num_test_examples = 256  # halves: validation (selection, early stop, steps) and eval
  c.seed = 0  # generates the task's examples
  c.probe_batch = 64  # eval-half sequences whose score grids are measured
  c.grid_points = 121  # per axis of the contour grid
  if size == "tiny":
    c.d_model, c.seq_len, c.num_kv_pairs, c.vocab_size = 8, 8, 2, 16
    sizes.tiny(c, learning_rates=(3e-3, 1e-2), probe_batch=8, grid_points=21)
  elif size == "full":
    # the speed reading takes each model's fastest rate: over Zoology's four, not two
    c.learning_rates, c.lr_cap = sizes.ACCEL_LEARNING_RATES, sizes.ACCEL_LR_CAP
    c.total_steps, c.eval_every, c.warmup_steps, c.step_cap = 1500, 50, 100, 6000
    c.update(protocol.DOUBLING)  # v4: at 6,000 the window read a flat additive scorer as learning
    # v5: v4's rule was registered after its seeds' numbers were seen; confirmed on fresh ones
    c.confirmatory_seeds = protocol.FRESH_FULL_SEEDS
    c.num_test_examples = sizes.FULL_HELD_OUT  # v6
  elif size == "accel":
    c.vocab_size, c.seq_len, c.num_kv_pairs, c.d_model = 256, 128, 16, 128
    sizes.accel(c, total_steps=8000, num_test_examples=1024, probe_batch=128)
  else:
    sizes.check(size)
  return c


def model_fields(config, interaction):
  """The matrix_sum rung with one head of rank K = D, the softmax over the sources."""
  return harness.model_fields(
    config, interaction=interaction, num_heads=1, rank=config.d_model, normalizer="softmax"
  )


def arms(config):
  task = harness.mqar_task(config)
  return [
    protocol.Arm(name, "mqar", "matrix_sum", task, model_fields(config, name))
    for name in INTERACTIONS
  ]


PROBED = (*receivers.SCORE_INPUTS, "*/mixer/weights")  # one compiled forward pass per model


def probe(model, params, tokens_BL):
  """({'layers_i': interaction share of its scores}, receiver dependence: mean over layers
  and heads) of one model on the probe batch."""
  variables = {"params": params}
  cache = cached(model, variables, tokens_BL, PROBED)
  scores = receivers.scores(model, variables, tokens_BL, cache)
  shares = {
    name: receivers.interaction_share(s_BHLM.reshape(-1, *s_BHLM.shape[2:]))
    for name, s_BHLM in scores.items()
  }
  per_layer = receivers.cache_dependence(model, cache, tokens_BL.shape[1])
  return shares, float(np.mean([np.mean(v) for v in per_layer.values()]))


def measure(config, trained, workdir):
  tokens = eval_inputs(harness.mqar_task(config), config.probe_batch)
  metrics = {
    k: {} for k in ("share", "share_untrained", "share_by_layer", "dependence", "steps_to")
  }
  curves = {}
  for name in INTERACTIONS:
    arm = trained.get(name, "mqar")
    model, shares, dependence = arm.model(), [], []
    for params in arm.params():
      per_layer, receiver_tv = probe(model, params, tokens)
      shares.append(float(np.mean(list(per_layer.values()))))
      metrics["share_by_layer"].setdefault(name, []).append(per_layer)
      dependence.append(receiver_tv)
    metrics["share"][name], metrics["dependence"][name] = shares, dependence
    initial = symmetry.initial_params(model, trained.seeds_in_view(), tokens)
    metrics["share_untrained"][name] = [
      float(np.mean(list(probe(model, params, tokens)[0].values()))) for params in initial
    ]
    metrics["steps_to"][name] = arm.fastest_steps_to(REACHES)
    curves[name] = [[(s, va) for s, _, va, _, _ in r.evals] for r in arm.selected_runs()]
  check = max(metrics["share"]["additive"] + metrics["dependence"]["additive"])
  if not check <= CHECK_TOLERANCE:  # a bug in the scorer or the measure, not a finding
    raise RuntimeError(
      f"the trained additive scorer shows an interaction or a receiver dependence ({check:.3g}):"
      " g(x_i) + h(x_L) under a softmax over the sources must reduce to source-only weights"
    )
  x1, x3 = grid(config)
  surfaces = {name: f(x1, x3) for name, f in FUNCTIONS.items()}
  metrics["surface_share"] = {n: receivers.interaction_share(z[None]) for n, z in surfaces.items()}
  plots = [_plot_contours(surfaces, metrics["surface_share"], x1, x3, workdir)]
  plots.append(_plot_curves(curves, workdir))
  return protocol.Section(
    metrics=metrics, table=_table(metrics), plots=plots, setup=_setup(config, metrics)
  )


def _table(metrics):
  return [
    {
      "interaction": name,
      "scalar analogue": ANALOGUE[name],
      "its surface's share beyond a sum": metrics["surface_share"][ANALOGUE[name]],
      "trained share (mean over seeds)": protocol.mean(metrics["share"][name]),
      "untrained share": protocol.mean(metrics["share_untrained"][name]),
      "per seed": [round(v, 3) for v in metrics["share"][name]],
      "receiver TV": protocol.mean(metrics["dependence"][name]),
      f"steps to {REACHES} per seed (fastest rate)": metrics["steps_to"][name],
    }
    for name in INTERACTIONS
  ]


def _setup(config, metrics):
  check = max(metrics["share"]["additive"] + metrics["dependence"]["additive"])
  return (
    f"Check: the trained additive scorer's interaction share and its weights' receiver "
    f"dependence are at most {check:.1g} over seeds: under the softmax over the sources "
    "h(x_L) cancels and g(x_i) + h(x_L) is source-only weights. Rung matrix_sum, 1 head, "
    f"rank K = D = {config.d_model} (tanh's hidden units, lowrank's q and k, bilinear's A), "
    f"softmax over the sources, pre-norm + final norm, {config.num_layers} layers; MQAR "
    f"V={config.vocab_size} L={config.seq_len} K={config.num_kv_pairs}. Trained share: "
    f"each layer's scores over all pairs of {config.probe_batch} eval-half sequences, the "
    "variance beyond the best additive fit per sequence (pooled), mean over layers. Surfaces "
    f"(illustration): {config.grid_points}^2 grid over [-{GRID_RANGE:g}, {GRID_RANGE:g}]^2."
  )


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


def grid(config):
  x = np.linspace(-GRID_RANGE, GRID_RANGE, config.grid_points)
  return np.meshgrid(x, x, indexing="ij")


def _slowest(steps):
  return max(math.inf if math.isnan(s) else s for s in steps)


def _fastest(steps):
  return min(math.inf if math.isnan(s) else s for s in steps)


def controls(metrics, config):
  floor = INFORMED * metrics["chance"]["mqar"]
  return [
    report.every_seed(
      f"additive learns where answers come from: raw accuracy >= {INFORMED} x chance ({floor:.3g})",
      metrics["accuracy"]["additive"]["mqar"],
      lambda a: a >= floor,
      name="additive_learns_where_answers_come_from",
      reads=[("additive", "mqar")],
    )
  ]


def criteria(metrics, config):
  adjusted, share, steps = metrics["adjusted"], metrics["share"], metrics["steps_to"]
  out = [_recalls(metrics, name) for name in PURE]
  out.append(
    report.every_seed(
      f"the additive form fails: adjusted accuracy <= {FAILS}",
      adjusted["additive"]["mqar"],
      lambda a: a <= FAILS,
      name="additive_fails",
      reads=[("additive", "mqar")],
    )
  )
  fastest_tanh = _fastest(steps["tanh"])
  slowest_pure = max(_slowest(steps[name]) for name in PURE)
  out.append(
    report.Criterion(
      f"tanh learns slower: every tanh seed needs more steps to validation accuracy {REACHES} "
      "than every bilinear and lowrank seed, each at its fastest learning rate (never: slowest)",
      fastest_tanh > slowest_pure,
      {f"steps_{name}": steps[name] for name in ("tanh", *PURE)},
      "every seed pair",
      name="tanh_slower",
      reads=[(n, "mqar") for n in ("tanh", *PURE)],
    )
  )
  untrained = metrics["share_untrained"]
  out += [
    report.trained_minus_untrained(
      f"training makes {name}'s scores interaction: share beyond a sum, trained minus "
      f"untrained (same networks, same seeds), >= {STRONG}",
      share[name],
      untrained[name],
      STRONG,
      name="pure_share_strong",
      reads=[(name, "mqar")],
    )
    for name in PURE
  ]
  out.append(
    report.trained_minus_untrained(
      f"training leaves tanh's scores mostly a sum: share beyond a sum, trained minus "
      f"untrained, <= {WEAK}",
      share["tanh"],
      untrained["tanh"],
      WEAK,
      above=False,
      name="tanh_share_weak",
      reads=[("tanh", "mqar")],
    )
  )
  return out


def _recalls(metrics, name):
  return report.every_seed(
    f"{name} recalls: adjusted accuracy >= {RECALLS}",
    metrics["adjusted"][name]["mqar"],
    lambda a: a >= RECALLS,
    name="pure_recalls",
    reads=[(name, "mqar")],
  )


def falsification(metrics, config):
  """The additive scorer, read by the recall criterion: it must be rejected."""
  return [_recalls(metrics, "additive")]


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
  for name, runs in curves.items():
    style = "-" if name in PURE else "--"
    for i, points in enumerate(runs):
      if points:
        s, a = zip(*points, strict=True)
        ax.plot(s, a, linestyle=style, color=f"C{INTERACTIONS.index(name)}",
                label=name if i == 0 else None)  # fmt: skip
  ax.axhline(REACHES, color="gray", linestyle=":", linewidth=0.8)
  ax.set(xlabel="train step", ylabel="MQAR validation accuracy", ylim=(-0.02, 1.02))
  ax.set_title("coefficient a(x_i, x_L) by interaction (lines: seeds)")
  ax.legend()
  return harness.save(fig, workdir, f"{NAME}_accuracy.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
