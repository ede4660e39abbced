"""Experiment 7 (docs/reconstruction.md section 6): sums over long sequences blow up -> softmax.

s_L = sum_{i<=L} a_iL V x_i: with raw coefficients (`none`) the sum has L terms, so its size
and the weight of the wrong sources grow with L; normalizing over the sources keeps it a
weighted average (`sum`: divide by sum |a|; `softmax`: positive weights summing to 1, pushed
onto a few sources by the temperature tau). Two questions, on MQAR with the same K pairs at
every L (the other slots hold random ids):

  length       normalizer x L x layer norm: the `softmax` rung (summed heads, one head) with
               each normalizer at each L, once with no layer norm anywhere (`LN=none`: the raw
               sum reaches the next layer as it is) and once with a pre-norm in every block and
               a final norm (`LN=pre`: what every compared model had before, which rescales
               each token and can hide the blow-up)
  temperature  softmax with tau in {1/4, 1, 4} x sqrt(r) at several head ranks r (pre-norm, so
               the inputs have unit variance and q . k has variance ~r at init): does
               tau = sqrt(r) track the best tau as r changes?

Controls (else INCONCLUSIVE), per layer-norm setting: the softmax learns at the longest L, and
the unnormalized model learns at the shortest L (chance-adjusted accuracy >= 0.5, every seed):
without them a low score at long L would be a task too hard, not a blow-up. With a tau sweep:
the temperature matters at some rank (best - worst tau >= 0.1 adjusted, every seed).
Claim, per layer-norm setting, every seed (paired by seed; chance 1/K): (a) without
normalization recall degrades as L grows: adjusted accuracy at the shortest L - at the longest
L >= 0.2; (b) the softmax holds where the raw sum fails: softmax - none at the longest
L >= 0.2. An arm that diverged at every learning rate (the sum blew up) counts as recalling
nothing (adjusted 0) in (a) and (b), and fails the controls.
With a tau sweep: (c) at every rank, tau = sqrt(r) is within 0.05 adjusted accuracy of the best
tau (the tau with the best mean over seeds). Falsification arm: the softmax at every L, read
by (a) in place of the raw sum: it must be REFUTED (else the criterion cannot tell).

  python -m experiments.normalization --workdir runs/normalization                 # quick
  python -m experiments.normalization --size full --workdir runs/normalization_full

Sizes: quick (`make run`): D=64, 1 head (r = 64), 2 layers, MQAR V=16 K=4, no layer norm:
none and softmax at L in {16, 64} (the raw sum for claims (a) and (b), the softmax also at 16
for the falsification arm), 3+1 seeds at lr 3e-3, up to 300 steps; no tau sweep (each tau is a
compiled program of its own). full: LN none and pre, none and softmax at L in {16, 128},
and the tau sweep at r in {8, 32, 128}, L=32; the four rates of protocol.FULL_LEARNING_RATES in
two stages (1 exploratory seed at every rate, 5 confirmatory at the selected one: seeds
15-19), budgets 300 doubling up to 2,400 steps, a grown budget's plateau read by the doubling;
MQAR V = 64 (64 ids in D = 64: they cannot all take orthogonal directions), 2,048 held out.
accel: L up to 2048 and 4 learning rates. Measured numbers: docs/experiments.md.
"""

import itertools
import math
import sys

import ml_collections
import numpy as np

from experiments import harness, protocol, report, run_all, sizes

NAME = "normalization"
CLAIM = (
  "Without normalization over the sources, recall degrades as L grows where the softmax holds, "
  "with and without a layer norm; tau = sqrt(r) tracks the best temperature as the head rank r "
  "changes."
)
NORMS = {  # layer-norm setting -> model fields
  "none": {"norm": "none", "final_norm": False},
  "pre": {"norm": "pre", "final_norm": True},
}

# The criterion, stated from the spec's claim before any result was seen.
CONTROL_LEARNS = 0.5  # adjusted accuracy: softmax at the longest L, none at the shortest
DEGRADES = 0.2  # (a) none: adjusted(shortest L) - adjusted(longest L) >= this, every seed
SOFTMAX_MARGIN = 0.2  # (b) adjusted softmax - none at the longest L >= this, every seed
TAU_MATTERS = 0.1  # control: best - worst tau at some rank >= this, every seed
TAU_TOLERANCE = 0.05  # (c) adjusted(sqrt r) >= adjusted(best tau) - this, every rank and seed

# The registered design (experiments/protocol.py; the design log: docs/experiments.md).
VERSION = 8  # v2: the trained falsification arm; v3: the accel batch 64; v4: full at four
# rates in two stages, L up to 128; v5: full under a "wsd" schedule (a budget grows by
# continuing each sweep); v6: full's step cap 2,400 read by the doubling, one exploratory seed,
# fresh confirmatory seeds; v7: full on MQAR V = 128 (63 keys, about D), fresh seeds again;
# v8: full on V = 64 (ids = D) at L in {16, 128}, the tau sweep at L = 32, a held-out split of
# 2,048, fresh seeds again
SPECS = (
  protocol.Spec(
    "softmax_learns_long",
    f"per layer-norm setting, the softmax learns at the longest L: adjusted >= {CONTROL_LEARNS}",
    threshold=CONTROL_LEARNS,
    reads=("softmax",),
    control=True,
  ),
  protocol.Spec(
    "none_learns_short",
    f"per setting, the raw sum learns at the shortest L: adjusted >= {CONTROL_LEARNS}",
    threshold=CONTROL_LEARNS,
    reads=("none",),
    control=True,
  ),
  protocol.Spec(
    "tau_matters",
    f"at some rank the best tau beats the worst by >= {TAU_MATTERS} adjusted, every seed",
    threshold=TAU_MATTERS,
    control=True,
  ),
  protocol.Spec(
    "none_degrades",
    f"per setting, the raw sum loses >= {DEGRADES} adjusted from the shortest L to the longest",
    threshold=DEGRADES,
    reads=("none",),
  ),
  protocol.Spec(
    "softmax_holds",
    f"per setting, softmax - none >= {SOFTMAX_MARGIN} adjusted at the longest L, every seed",
    threshold=SOFTMAX_MARGIN,
    reads=("none", "softmax"),
  ),
  protocol.Spec(
    "sqrt_r_tracks_best_tau",
    f"tau = sqrt(r) within {TAU_TOLERANCE} of the best tau at every r, every seed",
    threshold=TAU_TOLERANCE,
  ),
)
FALSIFICATION = (
  protocol.Falsification(
    "softmax at every L",
    "none_degrades",
    "the softmax trained at every L (the same grid as the raw sum), read by the degradation "
    "criterion in place of the raw sum: it must be rejected",
  ),
)


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.vocab_size = 16  # V: small, so recall is learned in a few hundred steps
  c.num_kv_pairs = 4  # K (chance 1/K), the same at every L
  c.d_model = 64
  c.num_heads = 1  # r = D / H = 64 in the length arms
  c.num_layers = 2
  c.norms = ("none",)  # layer-norm settings (NORMS)
  c.normalizers = ("none", "softmax")
  c.lengths = (16, 64)  # L, growing; the pairs stay the same
  # normalizers trained at every L (the others at the longest only): the raw sum for claim (a),
  # the softmax for the falsification arm, read by (a) in its place
  c.all_lengths = ("none", "softmax")
  c.tau_ranks = ()  # r of the temperature sweep (empty: no sweep)
  c.tau_factors = (0.25, 1.0, 4.0)  # tau = factor x sqrt(r); must hold 1
  c.tau_length = 64  # L of the temperature sweep (pre-norm, softmax)
  protocol.set_sweep_defaults(c, total_steps=300)
  protocol.set_seeds(c, size if size in protocol.SEEDS else "quick")
  if size == "tiny":  # the tests: seconds
    c.d_model, c.num_layers, c.lengths, c.num_kv_pairs = 16, 1, (8, 12), 2
    c.tau_ranks, c.tau_factors, c.tau_length = (4,), (1.0, 4.0), 8
    sizes.tiny(c)
  elif size == "full":
    # v4: the protocol's four rates in two stages, L up to 128 (v3: one rate, L up to 256,
    # whose arms took 12-17 min each at that one rate; the raw sum's L still grows 8x)
    c.norms, c.lengths = ("none", "pre"), (16, 64, 128)
    c.tau_ranks = (8, 32, 128)
    # v5: a budget that grows 300 -> 600 continues each sweep from step 240 (protocol.WSD)
    # v6: the cap 600 -> 2,400, every grown budget read by the doubling (v5: 8 of 21 arms
    # still learning at 600), one exploratory seed selects (the cost), and confirmatory seeds
    # no decision saw (v5 read 0-4 and this cap was decided from them)
    sizes.full(
      c,
      step_cap=2400,
      confirm_at_selected=True,
      **protocol.WSD,
      **protocol.ONE_EXPLORATORY,
      **protocol.DOUBLING_EVERY_REPLICA,
    )
    # v7: V = 128 (v6: 16): with 7 keys every id can take its own orthogonal direction in
    # D = 64, and v6's raw sum recalled at every L (up to 512 in a probe); with about as many
    # keys as dimensions the wrong sources' coefficients cannot all vanish (sizing, seeds 100
    # and 101, 2,400 steps at 2.15e-3: the raw sum 0.91 adjusted at L = 16, at chance at 128;
    # the softmax 0.99 at both by 500 steps). Seeds no decision saw: v6 read 5-9
    # v8: V = 64 (v7: 128), whose 64 ids match D: at V = 128 the raw sum learned slowly even
    # at L = 16 (the short-length control split at 2,400 steps); sizing (seeds 100 and 101,
    # 4.64e-3, not a registered design): at V = 64 it reached 0.98-0.99 adjusted at L = 16 in
    # both settings by 1,800-2,300 steps and stayed at chance at L = 64 without a layer norm.
    # L in {16, 128} (v7: 16, 64, 128) and the tau sweep at L = 32 (v7: 64): the criteria read
    # only the shortest and longest L, and v7 took 46 minutes against the budget's 30.
    # The held-out split 2,048 (the validation-noise audit). Seeds no decision saw: v7 read 10-14
    c.vocab_size, c.lengths, c.tau_length = 64, (16, 128), 32
    c.num_test_examples = sizes.FULL_HELD_OUT
    c.confirmatory_seeds = protocol.FRESH_FULL_SEEDS_3
  elif size == "accel":
    c.vocab_size, c.d_model, c.num_heads = 256, 128, 2
    c.norms, c.normalizers = ("none", "pre"), ("none", "sum", "softmax")
    c.lengths, c.all_lengths = (32, 128, 512, 2048), ("none", "sum", "softmax")
    c.tau_ranks, c.tau_factors, c.tau_length = (8, 32, 128), (0.125, 0.25, 0.5, 1, 2, 4, 8), 256
    # batch 64 (v3; v2: 256): at 256 the L = 2048 train step needed 31-74 GB of temporaries
    # per chip, more than a v5e's 16 (BENCHMARKS.md, compiled for v5e:2x4)
    sizes.accel(c, total_steps=8000, batch_size=64)
  else:
    sizes.check(size)
  return c


def check(config):
  """Raises ValueError naming the field the claims cannot be read without."""
  if "none" not in config.normalizers or "softmax" not in config.normalizers:
    raise ValueError(f"normalizers={config.normalizers}: claims (a), (b) need none and softmax")
  if "none" not in config.all_lengths or "softmax" not in config.all_lengths:
    raise ValueError(
      f"all_lengths={config.all_lengths}: claim (a) needs none at every L, its falsification "
      "arm the softmax"
    )
  if len(config.lengths) < 2 or list(config.lengths) != sorted(config.lengths):
    raise ValueError(f"lengths={config.lengths}: at least two, increasing")
  unknown = [n for n in config.norms if n not in NORMS]
  if unknown or not config.norms:
    raise ValueError(f"norms={config.norms}: expected some of {list(NORMS)}")
  if config.tau_ranks and 1.0 not in config.tau_factors:
    raise ValueError(f"tau_factors={config.tau_factors}: must hold 1 (tau = sqrt(r))")


def setting(norm, length):
  return f"LN={norm} L={length}"


def tau_setting(config):
  return setting("pre", config.tau_length)


def tau_model(rank, factor):
  return f"softmax r={rank} tau={factor:g}sqrt(r)"


def grid(config):
  """(normalizer, norm, L) of the length arms."""
  longest = max(config.lengths)
  return [
    (normalizer, norm, length)
    for norm, normalizer, length in itertools.product(
      config.norms, config.normalizers, config.lengths
    )
    if normalizer in config.all_lengths or length == longest
  ]


def arms(config):
  check(config)
  max_len = max(max(config.lengths), config.tau_length)
  out = []
  for normalizer, norm, length in grid(config):
    fields = harness.model_fields(config, max_len=max_len, num_heads=config.num_heads)
    fields |= NORMS[norm] | {"normalizer": normalizer}
    out.append(
      protocol.Arm(
        normalizer,
        setting(norm, length),
        "softmax",
        harness.mqar_task(config, length),
        fields,
      )
    )
  for rank, factor in itertools.product(config.tau_ranks, config.tau_factors):
    fields = harness.model_fields(config, max_len=max_len, num_heads=config.num_heads)
    fields |= NORMS["pre"] | {"normalizer": "softmax", "rank": rank}
    fields["temperature"] = None if factor == 1 else factor * math.sqrt(rank)
    out.append(
      protocol.Arm(
        tau_model(rank, factor),
        tau_setting(config),
        "softmax",
        harness.mqar_task(config, config.tau_length),
        fields,
      )
    )
  return out


def _paired(a, b):
  return [x - y for x, y in zip(a, b, strict=True)]


def learned(metrics, model, key):
  """Adjusted accuracy per seed, where an arm whose every learning rate diverged (a sum that
  blew up) counts as recalling nothing (0, chance) instead of a missing number."""
  values = metrics["adjusted"][model][key]
  if metrics["diverged"][model][key] and all(math.isnan(v) for v in values):
    return [0.0] * len(values)
  return values


def controls(metrics, config):
  adj = metrics["adjusted"]
  short, long = min(config.lengths), max(config.lengths)
  out = []
  for norm in config.norms:
    out.append(
      report.every_seed(
        f"LN={norm}: the softmax learns at the longest L={long}: adjusted accuracy >= "
        f"{CONTROL_LEARNS}",
        adj["softmax"][setting(norm, long)],
        lambda a: a >= CONTROL_LEARNS,
        name="softmax_learns_long",
        reads=[("softmax", setting(norm, long))],
      )
    )
    out.append(
      report.every_seed(
        f"LN={norm}: the unnormalized sum learns at the shortest L={short}: adjusted accuracy "
        f">= {CONTROL_LEARNS}",
        adj["none"][setting(norm, short)],
        lambda a: a >= CONTROL_LEARNS,
        name="none_learns_short",
        reads=[("none", setting(norm, short))],
      )
    )
  if config.tau_ranks:
    key = tau_setting(config)
    spreads = [
      max(
        max(adj[tau_model(r, f)][key][i] for f in config.tau_factors)
        - min(adj[tau_model(r, f)][key][i] for f in config.tau_factors)
        for r in config.tau_ranks
      )
      for i in range(len(adj["none"][setting(config.norms[0], short)]))
    ]
    out.append(
      report.every_seed(
        f"the temperature matters: at some rank the best tau beats the worst by >= "
        f"{TAU_MATTERS} adjusted accuracy (per seed: the largest such spread)",
        spreads,
        lambda d: d >= TAU_MATTERS,
        name="tau_matters",
        reads=[(tau_model(r, f), key) for r in config.tau_ranks for f in config.tau_factors],
      )
    )
  return out


def _degrades(metrics, config, norm, model):
  """Claim (a), "recall degrades as L grows", read on `model` (none; the falsification arm:
  softmax) at layer-norm setting `norm`."""
  short, long = min(config.lengths), max(config.lengths)
  at_short, at_long = (learned(metrics, model, setting(norm, n)) for n in (short, long))
  what = "without normalization" if model == "none" else f"with the {model}"
  return report.every_seed(
    f"LN={norm}: {what} recall degrades as L grows: adjusted accuracy of {model} at "
    f"L={short} - at L={long} >= {DEGRADES}",
    _paired(at_short, at_long),
    lambda d: d >= DEGRADES,
    name="none_degrades",
    reads=[(model, setting(norm, short)), (model, setting(norm, long))],
  )


def falsification(metrics, config):
  """The degradation criterion read on the softmax at every L: it must reject it."""
  return [_degrades(metrics, config, norm, "softmax") for norm in config.norms]


def best_factor(adjusted, config, rank):
  """The tau factor with the best mean adjusted accuracy over seeds at `rank` (ties: the
  first in tau_factors)."""
  key = tau_setting(config)
  means = [protocol.mean(adjusted[tau_model(rank, f)][key]) for f in config.tau_factors]
  return config.tau_factors[int(np.nanargmax(means))] if np.isfinite(means).any() else math.nan


def criteria(metrics, config):
  adj = metrics["adjusted"]
  long = max(config.lengths)
  out = []
  for norm in config.norms:
    none_long = learned(metrics, "none", setting(norm, long))
    out.append(_degrades(metrics, config, norm, "none"))
    out.append(
      report.every_seed(
        f"LN={norm}: the softmax holds where the raw sum fails: adjusted softmax - none at "
        f"L={long} >= {SOFTMAX_MARGIN}",
        _paired(learned(metrics, "softmax", setting(norm, long)), none_long),
        lambda d: d >= SOFTMAX_MARGIN,
        name="softmax_holds",
        reads=[("none", setting(norm, long)), ("softmax", setting(norm, long))],
      )
    )
  if config.tau_ranks:
    key = tau_setting(config)
    gaps, best = [], {}
    for rank in config.tau_ranks:
      best[f"best factor at r={rank}"] = factor = best_factor(adj, config, rank)
      gaps.append(
        _paired(adj[tau_model(rank, 1.0)][key], adj[tau_model(rank, factor)][key])
        if factor == factor
        else [math.nan] * len(adj[tau_model(rank, 1.0)][key])
      )
    out.append(
      report.every_seed(
        f"tau = sqrt(r) tracks the best tau: at every r in {list(config.tau_ranks)}, adjusted "
        f"accuracy at sqrt(r) >= that of the best tau - {TAU_TOLERANCE} (per seed: the worst "
        "rank's gap)",
        [min(g) for g in zip(*gaps, strict=True)],
        lambda d: d >= -TAU_TOLERANCE,
        name="sqrt_r_tracks_best_tau",
        reads=[(tau_model(r, f), key) for r in config.tau_ranks for f in config.tau_factors],
        **best,
      )
    )
  return out


def measure(config, trained, workdir):
  adj = trained.metrics()["adjusted"]
  short_long = f"L in {list(config.lengths)}"
  plots = [_plot_lengths(config, adj, workdir)]
  if config.tau_ranks:
    plots.append(_plot_taus(config, adj, workdir))
  table = temperature_table(config, adj)
  setup = (
    f"rung softmax (matrix sum, summed heads), D={config.d_model}, {config.num_heads} head, "
    f"{config.num_layers} layers; MQAR V={config.vocab_size} K={config.num_kv_pairs} at "
    f"{short_long}; layer-norm settings {list(config.norms)} (none: no norm anywhere; pre: "
    "pre-norm + final norm). Normalizers "
    f"{list(config.all_lengths)} at every L, the others at the longest."
    + (
      f" Temperature sweep (table: mean adjusted accuracy): pre-norm, L={config.tau_length}, "
      f"tau = {list(config.tau_factors)} x sqrt(r) at r in {list(config.tau_ranks)}."
      if config.tau_ranks
      else ""
    )
  )
  return protocol.Section(table=table, plots=plots, setup=setup)


def temperature_table(config, adj):
  """One row per rank r of the sweep: the mean adjusted accuracy at each tau factor (the same
  columns in every row, so every rank's cells show) and the best factor."""
  return [
    {
      "rank r": rank,
      **{
        f"tau={f:g}sqrt(r)": protocol.mean(adj[tau_model(rank, f)][tau_setting(config)])
        for f in config.tau_factors
      },
      "best factor": best_factor(adj, config, rank),
    }
    for rank in config.tau_ranks
  ]


def _plot_lengths(config, adj, workdir):
  fig = harness.figure(cols=len(config.norms))
  for i, norm in enumerate(config.norms):
    ax = fig.add_subplot(1, len(config.norms), i + 1)
    for normalizer in config.normalizers:
      lengths = [
        n for n in config.lengths if normalizer in config.all_lengths or n == max(config.lengths)
      ]
      per_seed = [adj[normalizer][setting(norm, n)] for n in lengths]
      protocol.spread(ax, lengths, per_seed, normalizer)
    ax.set_xscale("log", base=2)
    ax.set_xticks(config.lengths, [str(n) for n in config.lengths])
    ax.minorticks_off()
    ax.set(xlabel="sequence length L", ylim=(-0.05, 1.05), title=f"layer norm: {norm}")
    if i == 0:
      ax.set_ylabel("MQAR adjusted eval accuracy (points: seeds)")
      ax.legend(loc="lower left", fontsize="small")
  return harness.save(fig, workdir, f"{NAME}_length.png")


def _plot_taus(config, adj, workdir):
  fig = harness.figure()
  ax = fig.add_subplot(1, 1, 1)
  for rank in config.tau_ranks:
    taus = [f * math.sqrt(rank) for f in config.tau_factors]
    per_seed = [adj[tau_model(rank, f)][tau_setting(config)] for f in config.tau_factors]
    line = protocol.spread(ax, taus, per_seed, f"r={rank}")
    ax.axvline(math.sqrt(rank), color=line.get_color(), linestyle=":")
  ax.set_xscale("log", base=2)
  ax.set(xlabel="temperature tau (dotted: sqrt(r))", ylabel="MQAR adjusted eval accuracy")
  ax.set(ylim=(-0.05, 1.05), title=f"softmax, pre-norm, L={config.tau_length}")
  ax.legend(loc="lower left", fontsize="small")
  return harness.save(fig, workdir, f"{NAME}_temperature.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
