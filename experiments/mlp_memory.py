"""Experiment 9 (docs/reconstruction.md section 8): the MLP is a key-value memory -> W1, W2.

mlp(x) = sum_f sigma(x . k_f + b_f) v_f + b2: columns of W1 are keys, rows of W2 the values
written into the residual stream (Geva et al. 2021). On a character-level language model of this
repository's own Python source, three questions:

  W2        two claims kept apart, each at one factor: at equal width F = D, with W2 (each unit
            writes any vector) vs without (unit f writes coordinate f); and with W2, F = D vs
            F = 4D (more memories). Since W2 also adds D x F parameters, (a') compares W2 at
            F = D with no W2 at F = 2D, where W1 alone has the same parameters (unit f writes
            coordinate f mod D). Falsification: a W2 fixed at a random orthonormal matrix (not
            learned) writes fixed directions, as no W2 does up to a rotation, so criterion (a)
            read with it in place of the learned W2 must reject it. Eval loss per seed.
  W1 fold   a 2 x 2 of {single, split skip} x {no norm, pre-norm} (rung `mlp_kv`, biases on):
            the best linear fold of W1 into the mixing output, by least squares over
            real activations (jaxformer.analysis.absorption.fit, biases included), two ways:
            into the heads' outputs alone (W1 absorbed into Wo: pre ~ o C + c), and also
            allowing a matrix on the block input (pre ~ x A + o C + c, the split skip's x W1).
            The algebra: a single skip's MLP reads o Wo + bo, so W1 folds exactly, and a
            pre-norm changes nothing there (it normalizes the mixer's input, not what W1
            reads); a split skip's MLP reads x + o Wo + bo, so the fold needs W1 itself on the
            skip path (what the split skip costs); with a layer norm between them no linear
            fold is exact (what the norm costs). All four hold for any weights, so they are
            checks, proven by the tests on random networks (since v14; versions 1-13 trained
            the split cells and read (d), (e) as criteria, which held before training); the
            report shows the fold of the trained (single, pre) cell, the widest W2 model.
  probe     per unit of the last layer of the widest W2 model: its top-k contexts (key side) and
            the token its value vector promotes through the unembedding (value side), against
            two controls: the same model's random directions (random combinations of the
            units' pre-activations; random value vectors) and an untrained model of the same
            architecture. Key side: the rate at which a unit's top contexts end in one bigram;
            value side: how often the promoted token is the next token of its top contexts.

Control (else INCONCLUSIVE): each model of the W2 claims learns (chance-adjusted next-character
accuracy >= 0.2, every seed; chance 1/V). Claims, every seed (paired by seed):
(a) W2 at equal width: eval loss without W2 - with W2 (F = D) >= 0.02 nats/char;
(a') W2 at equal parameters (version 5): eval loss without W2 at F = 2D - with W2 at F = D
    >= 0.02 nats/char;
(b) with W2, F = 4D - F = D: eval loss of F = D - of F = 4D >= 0.02 (sizes with F = 4D);
Checks (the tests, on random weights): (c) single skip, no norm and pre-norm: the fold into
the mixer is exact; (d) split skip, no norm: the fold into the mixer alone leaves a residual,
the fold with x A is exact (exact only by keeping W1 on the skip path); (e) split skip with a
layer norm: even the fold with x A leaves a residual. Claims, continued:
(f) key side: bigram rate of the units - the larger of the two controls' >= 0.1;
(g) value side: agreement of the units - the larger of the two controls' >= 0.05;
(h) causal (version 3): zeroing a unit (jaxformer.analysis.interventions) lowers the logit of
    the token its value promotes at its top contexts more than zeroing another unit does: the
    mean over units of own - another's drop, read as trained minus the same network at init
    (version 4: at init the direct path already makes it hold), >= 0.01, every seed.

  python -m experiments.mlp_memory --workdir runs/mlp_memory                 # quick
  python -m experiments.mlp_memory --size full --workdir runs/mlp_memory_full

Sizes: quick (`make run`): D=64, 2 heads, 2 layers, L=32; W2 claims (a), (a') at F = D (the
(single, pre-norm) fold cell is the F = D W2 model), 3+1 seeds at lr 3e-3, 200 steps. full
(v14): D=32, L=16, F in {D, 4D} (claim (b)), one exploratory seed x lr logspace(1e-3, 1e-2,
4), then confirmatory seeds 20-24 at the selected rate, 3,000 steps growing x2 to 24,000 under
"wsd", read by the doubling, the W2 claims' models at one budget. Measured numbers:
docs/experiments.md.
"""

import functools
import sys

import jax
import ml_collections
import numpy as np

from experiments import harness, protocol, report, run_all, sizes
from jaxformer import data
from jaxformer.analysis import mlp_controls, mlp_probe
from jaxformer.analysis.cache import run_with_cache

NAME = "mlp_memory"
CLAIM = (
  "W2 lets MLP units write any vector (lower loss at equal width) and more units lower it "
  "further; W1 folds into the mixer exactly in the single skip, the split skip keeps W1 on "
  "its skip path and the layer norm between leaves no exact fold; trained units' keys and "
  "values match their contexts beyond an untrained model and random directions."
)
CELLS = (("single", "none"), ("single", "pre"), ("split", "none"), ("split", "pre"))
NORMS = {"none": {"norm": "none", "final_norm": False}, "pre": {"norm": "pre", "final_norm": True}}

# The criterion, stated from the spec's claim before any result was seen.
CONTROL_LEARNS = 0.2  # adjusted next-character accuracy of each W2-claim model >= this
LOSS_MARGIN = 0.02  # (a), (b): eval loss difference >= this, nats / char
EXACT = 1e-4  # (c), (d): a fold residual <= this is exact
SKIP_COST = 0.05  # (d), a check since v14: the mixer-only fold of the split skip leaves >= this
NORM_COST = 0.02  # (e), a check since v14: the fold with x A across a layer norm leaves >= this
ABLATION_GAIN = 0.01  # (h): own - another's logit drop, trained minus init, >= this (v4)
MATCHED = 2  # (a'): no W2 at F = MATCHED x D has the parameters of W1 and W2 at F = D
PATTERN_MARGIN = 0.1  # (f) bigram rate: units - max(controls) >= this
VALUE_MARGIN = 0.05  # (g) next-token agreement: units - max(controls) >= this

# The registered design (experiments/protocol.py; the design log: docs/experiments.md).
# v2: folds (c), (d with x A) are checks; v3: ablation (h); v4: (h) from init;
# v5: the parameter-matched arm (a') and the fixed-W2 falsification arm; v6: the full grid of four
# rates; v7: the models take their vocabulary and length from the corpus when they run
# v8: full in two stages, the confirmatory seeds at the selected point only; v9: quick's
# budget 200 (make run's 10 minutes); v10: the pinned source corpus (harness.SOURCE_CORPUS), not
# the live source; v11: full at D = 32 under "wsd" to a 12,000-step cap, read by the doubling,
# one exploratory seed, fresh confirmatory seeds 5-9
# v12: full's cap 24,000, no (single, none) fold cell at full (its fold is an identity, tested),
# the "learns" control a bound more training cannot reverse (Spec.learning_keeps), fresh
# confirmatory seeds 10-14
# v13: the W2 claims' models at one budget (budget_groups), fresh seeds 15-19
# v14: (d) and (e) are checks (they hold at init), so no fold cell trains for the fold alone
# (the bias control goes with them); full at L = 16; fresh seeds 20-24
VERSION = 14
SPECS = (
  protocol.Spec(
    "w2_models_learn",
    f"each W2-claim model: adjusted next-character accuracy >= {CONTROL_LEARNS}, every seed",
    threshold=CONTROL_LEARNS,
    control=True,
    learning_keeps=report.SUPPORTED,  # v12
  ),
  protocol.Spec(
    "w2_helps", f"(a) loss without W2 - with W2 >= {LOSS_MARGIN}", threshold=LOSS_MARGIN
  ),
  protocol.Spec(
    "w2_helps_matched",
    f"(a') loss without W2 at F = {MATCHED} D (the parameters of W1 and W2 at F = D) - with W2 at "
    f"F = D >= {LOSS_MARGIN}",
    threshold=LOSS_MARGIN,
  ),
  protocol.Spec(
    "width_helps", f"(b) loss at F = D - at a wider F >= {LOSS_MARGIN}", threshold=LOSS_MARGIN
  ),
  protocol.Spec(
    "keys_beat_controls",
    f"(f) bigram rate - controls >= {PATTERN_MARGIN}",
    threshold=PATTERN_MARGIN,
  ),
  protocol.Spec(
    "values_beat_controls",
    f"(g) next-token agreement - controls >= {VALUE_MARGIN}",
    threshold=VALUE_MARGIN,
  ),
  protocol.Spec(
    "ablation_lowers_promoted",
    "(h) zeroing a unit lowers the logit of the token its value promotes, at its top contexts, "
    "more than zeroing another unit does: the mean over units of (own - another's drop), "
    f"trained minus the same network at init, >= {ABLATION_GAIN} logit, every seed",
    threshold=ABLATION_GAIN,
    at_init=True,
  ),
)
CHECKS = (
  protocol.Spec(
    "single_skip_folds",
    f"(c) single skip, with or without a pre-norm: W1 folds into the mixer exactly (the "
    f"report still shows the trained residual; version 1 read it as a criterion, <= {EXACT})",
    tag="identity",
    test="tests/analysis/test_absorption.py::AbsorptionTest::"
    "test_w1_folds_exactly_without_a_norm_between",
  ),
  protocol.Spec(
    "split_skip_with_xa",
    f"(d) split skip, no norm: with W1 kept on the skip path (x A) the fold is exact (version "
    f"1: a criterion, <= {EXACT})",
    tag="identity",
    test="tests/analysis/test_absorption.py::AbsorptionTest::"
    "test_w1_folds_exactly_without_a_norm_between",
  ),
  # v14: (d)'s and (e)'s costs hold on untrained networks (docs/experiments.md, the probe after
  # v13: 0.79-0.83 and 0.10-0.11 at init, trained minus untrained -0.05 to -0.01 and +0.04 to
  # +0.07): properties of the architecture, proven on random weights, not of what training found
  protocol.Spec(
    "split_skip_mixer_only",
    f"(d) split skip, no norm: the fold into the mixer alone leaves a residual (the tests: > "
    f"{SKIP_COST}; versions 1-13 read it on trained networks as a criterion, >= {SKIP_COST})",
    tag="architectural",
    test="tests/analysis/test_mlp_controls.py::test_fold_residuals_of_each_cell",
  ),
  protocol.Spec(
    "norm_blocks_fold",
    f"(e) split skip with a layer norm: even the fold with x A leaves a residual (versions 1-13: "
    f"a criterion on trained networks, >= {NORM_COST})",
    tag="architectural",
    test="tests/analysis/test_absorption.py::AbsorptionTest::"
    "test_w1_does_not_fold_across_the_layer_norm_of_the_split_skip",
  ),
)
FALSIFICATION = (
  protocol.Falsification(
    "F=D fixed W2",
    "w2_helps",
    "W2 fixed at a random orthonormal matrix, not learned (jaxformer.math.mlp.fixed_values): "
    "its units write fixed directions, as without W2 up to a rotation, so criterion (a) read "
    "with it in place of the learned W2 must reject it",
  ),
)


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.corpus = harness.SOURCE_CORPUS  # v10 (v9: the live jaxformer/**/*.py)
  c.seq_len = 32  # L: characters per example
  c.stride = 16  # window start step (overlapping windows: more examples)
  c.d_model = 64  # D
  c.num_heads = 2
  c.num_layers = 2
  c.widths = (64,)  # F of the W2 models; F = D is also trained without W2
  # v14: the (single, pre) cell alone, the widest W2 model: no cell trains for the fold alone
  # (v13: the split cells for (d) and (e), now checks; full 853 s of its 4,865). A user may name
  # more (CELLS): the report shows their trained folds.
  c.fold_cells = NEEDED_CELLS
  # steps of the fold cells other than (single, pre-norm). v5: 300 at quick (v4: 100), the
  # cap: every quick run grew each cell 100 -> 200 -> 300, retraining from scratch each time;
  # v9: 200, as every quick arm (make run's 10 minutes)
  c.fold_steps = 200
  c.fold_sequences = 64  # training windows the folds are fitted on (x L positions)
  c.top_k = 50  # contexts per unit
  c.probe_sequences = 512  # training windows scanned by the probe
  c.shown_units = 4  # units listed in the report's table
  c.context_chars = 16  # characters of context shown before the marked one
  protocol.set_seeds(c, size if size in protocol.SEEDS else "quick")
  c.learning_rates = (3e-3,)
  c.weight_decays = (0.1,)
  c.batch_size = 32
  c.total_steps = 200  # v9 (v8: 300)
  c.warmup_steps = 50
  c.eval_every = 100  # no early stop on text: the plateau reads the last half's evaluations
  c.step_cap = 200  # quick: no growth; full: x2
  c.probe_seed = 0  # picks the probe's windows and random directions
  if size == "tiny":  # the tests: seconds
    c.corpus = "jaxformer/math/*.py"
    c.seq_len, c.stride, c.d_model, c.widths, c.num_layers = 16, 16, 16, (16,), 1
    c.total_steps, c.fold_steps, c.eval_every, c.warmup_steps, c.step_cap = 4, 2, 2, 1, 4
    c.batch_size, c.fold_sequences, c.probe_sequences, c.top_k = 8, 16, 32, 4
  elif size == "full":
    # v11: D = 32 (v10: 64, every text model still learning at its 3,000-step cap, +0.04 to
    # +0.08 over the last half). Sizing (seeds 100 and 101, F = D with and without W2, 1e-2,
    # "wsd"; docs/experiments.md): at D = 32 the best validation accuracy gains 0.001-0.011
    # from 6,000 to 12,000 steps (flat under the doubling reading), and W2 leads by 0.046-0.054
    # nats/char at 12,000
    c.d_model, c.widths = 32, (32, 128)
    # v14: L = 16, windows every 8 characters (v13: 32, every 16). A probe after v13 (seeds 100
    # and 101, docs/experiments.md): 0.57x the wall time per replica-step, the same slow
    # plateau, no W2 - W2 0.061 / 0.053 nats/char at 24,000 steps (L = 32: 0.055 / 0.044)
    c.seq_len, c.stride = 16, 8
    # v11: confirmatory seeds 5-9 (v10 read 0-4, whose numbers decided this version)
    # v12: seeds 10-14 (v11 read 5-9, whose report decided this version); v13: 15-19;
    # v14: 20-24
    c.confirmatory_seeds = protocol.FRESH_FULL_SEEDS_4
    sizes.full(
      c,
      total_steps=3000,
      # v12: 24,000 (v11: 12,000, where 2 of 48 replicas gained +0.021 and +0.022 over their
      # last doubling, just over the 0.02 tolerance, and held the verdict)
      step_cap=24_000,
      fold_steps=3000,
      eval_every=500,
      confirm_at_selected=True,
      # v11: a growing budget continues each sweep, and every replica of a grown budget is
      # read by the doubling (v10: cosine from step 0 at each budget, read by the window)
      **protocol.WSD,
      **protocol.DOUBLING_EVERY_REPLICA,
      **protocol.ONE_EXPLORATORY,  # v11: one exploratory seed (100) selects (v10: 100 and 101)
    )
  elif size == "accel":
    c.seq_len, c.stride, c.d_model, c.num_heads, c.num_layers = 256, 64, 256, 4, 4
    c.widths, c.fold_steps, c.probe_sequences = (256, 1024), 2000, 4096
    # examples: the corpus's sequences, not num_examples
    sizes.accel(c, 5000, None, batch_size=64, eval_every=500, warmup_steps=200)
  else:
    sizes.check(size)
  # v13: the models the loss criteria (a), (a'), (b) and the falsification arm compare, grown
  # to one budget (v12: each stopped at its own plateau, read on accuracy, at 6,000, 12,000
  # and 24,000 steps, loss still 0.03-0.09 nats/char apart across a doubling)
  c.budget_groups = (tuple(claim_models(c)),)
  return c


def check(config):
  if config.d_model not in config.widths:
    raise ValueError(f"widths={config.widths}: must hold F = D = {config.d_model} (claim a)")


def task_spec(config):
  return harness.text_task(config.corpus, config.seq_len, config.stride)


SETTING = "text"


def w2_name(width, w2=True):
  return f"F={width}" + (" W2" if w2 else " no W2")


def fixed_name(width):
  return f"F={width} fixed W2"


def claim_models(config):
  """The W2 claims' models: no W2 at F = D and at the matched width, W2 at every width, and
  the falsification arm (W2 fixed) at F = D."""
  d = config.d_model
  return [
    w2_name(d, False),
    w2_name(MATCHED * d, False),
    *(w2_name(w) for w in config.widths),
    fixed_name(d),
  ]


def cell_name(skip, norm):
  return f"{skip} skip, LN {norm}"


# The cell the probe reads (the widest W2 model). v14: the others are optional (`fold_cells`):
# their folds are checks, proven by the tests on random weights (v12-v13 needed the split cells
# for the criteria (d) and (e))
NEEDED_CELLS = (("single", "pre"),)


def fold_cells(config):
  """The fold cells of `config`: `fold_cells` where a size names them (optional, absent in
  the designs registered before it: all four)."""
  cells = tuple(tuple(c) for c in config.get("fold_cells", CELLS))
  unknown = [c for c in cells if c not in CELLS]
  missing = [c for c in NEEDED_CELLS if c not in cells]
  if unknown or missing:
    raise ValueError(
      f"fold_cells={[list(c) for c in cells]}: each must be one of {[list(c) for c in CELLS]}"
      f", and {[list(c) for c in NEEDED_CELLS]} must be there (the probe reads it)"
    )
  return cells


def fold_models(config):
  """(skip, norm) -> the model name trained for that cell: (single, pre) is the widest W2
  model (the same fields), the others are trained for the fold alone."""
  widest = w2_name(max(config.widths))
  return {
    cell: widest if cell == ("single", "pre") else cell_name(*cell) for cell in fold_cells(config)
  }


def fields(config, width, w2=True, skip="single", norm="pre", trained=True):
  extra = {} if trained else {"mlp_w2_trained": False}  # only the fixed-W2 arm names the field
  return (
    harness.model_fields(
      config,
      **harness.SIZED_BY_CORPUS,
      num_heads=config.num_heads,
      d_ff=width,
      mlp_w2=w2,
      **extra,
      use_bias=True,  # the fold must carry bo W1 + b1
      skip=skip,
    )
    | NORMS[norm]
  )


def arms(config):
  check(config)
  task = task_spec(config)
  d = config.d_model
  out = [
    protocol.Arm(w2_name(w, False), SETTING, "mlp_kv", task, fields(config, w, w2=False))
    for w in (d, MATCHED * d)
  ]
  out.append(protocol.Arm(fixed_name(d), SETTING, "mlp_kv", task, fields(config, d, trained=False)))
  out += [
    protocol.Arm(w2_name(w), SETTING, "mlp_kv", task, fields(config, w)) for w in config.widths
  ]
  for (skip, norm), name in fold_models(config).items():
    if name == cell_name(skip, norm):
      out.append(
        protocol.Arm(
          name,
          SETTING,
          "mlp_kv",
          task,
          fields(config, max(config.widths), skip=skip, norm=norm),
          train={"total_steps": config.fold_steps},
        )
      )
  return out


# --- measurements of the trained models ---------------------------------------------------


def read_windows(dataset, indices):
  """int32 (inputs [N, L], targets [N, L]) of training windows `indices` (one read)."""
  records = dataset.source.__getitems__([int(i) for i in indices])
  return tuple(
    np.stack([np.asarray(r[k]) for r in records]).astype(np.int32) for k in ("inputs", "targets")
  )


def max_bias(params):
  """max |bo|, |b1| over the blocks: the biases the fold must carry."""
  values = []
  for layer, tree in params.items():
    if layer.startswith("layers_"):
      values.append(np.max(np.abs(tree["mixer"]["valuer"]["bo"])))
      values.append(np.max(np.abs(tree["ffn"]["b1"])))
  return float(max(values))


def cached_run(model):
  """run_with_cache of `model`, jitted once, keeping what the folds and the probe read."""
  names = ["*/resid_pre", "*/mixer/head_outputs", "*/ffn/mlp_pre"]
  return jax.jit(functools.partial(run_with_cache, model, names=names))


def folds(run, params_per_seed, tokens_BL):
  """Per seed: the worst layer's residual of each fold (mlp_controls.fold_residuals)."""
  out = {"mixer": [], "mixer_and_skip": []}
  for params in params_per_seed:
    _, cache = run({"params": params}, tokens_BL)
    per_layer = mlp_controls.fold_residuals(jax.device_get(cache))
    for kind in out:
      out[kind].append(max(r[kind] for r in per_layer.values()))
  return out


def pre_activations(run, params, inputs_NL, layer, batch_size):
  """Layer `layer`'s MLP pre-activations [N, L, F] over the windows, in batches of one shape
  (N a multiple of batch_size: one compiled program)."""
  name = f"layers_{layer}/ffn/mlp_pre"
  parts = [
    np.asarray(run({"params": params}, inputs_NL[i : i + batch_size])[1][name])
    for i in range(0, len(inputs_NL), batch_size)
  ]
  return np.concatenate(parts)


def probe_seed(run, model, params, untrained, layer, windows, rng, k, batch_size):
  """Key-side bigram rates and value-side agreements: units, random directions, untrained;
  and the causal test: each unit's ablation against another unit's, read on the logit of the
  token its value promotes at its top contexts."""
  inputs_NL, targets_NL = windows
  batch = functools.partial(pre_activations, layer=layer, batch_size=batch_size)
  pre_NLF = batch(run, params, inputs_NL)
  units = mlp_controls.top_positions(pre_NLF, k)
  random_keys = mlp_controls.random_directions(rng, pre_NLF.shape[-1], pre_NLF.shape[-1])
  shuffled = mlp_controls.top_positions(pre_NLF @ random_keys, k)
  cold = mlp_controls.top_positions(batch(run, untrained, inputs_NL), k)
  promoted = mlp_probe.value_tokens(params, layer, k=1)["tokens"][:, 0]
  w2 = params[f"layers_{layer}"]["ffn"]["w2"]
  random_values = mlp_controls.random_directions(rng, w2.shape[1], w2.shape[0]).T
  swapped = jax.tree.map(lambda x: x, params)
  swapped[f"layers_{layer}"]["ffn"]["w2"] = random_values
  random_promoted = mlp_probe.value_tokens(swapped, layer, k=1)["tokens"][:, 0]
  cold_promoted = mlp_probe.value_tokens(untrained, layer, k=1)["tokens"][:, 0]

  def rate(tops):
    return float(mlp_controls.suffix_rate(inputs_NL, *tops, n=2).mean())

  def agree(tops, promoted_F):
    return float(mlp_controls.next_token_agreement(targets_NL, *tops, promoted_F).mean())

  count = len(promoted)
  others = (np.arange(count) + rng.integers(1, count)) % count  # another unit for every f
  ablation = {}
  for who, p, tops, tokens in (
    ("", params, units, promoted),
    ("untrained ", untrained, cold, cold_promoted),
  ):
    ablation[f"{who}units"] = mlp_controls.ablation_drops(
      model, p, inputs_NL, layer, *tops, tokens, range(count)
    )
    ablation[f"{who}another unit"] = mlp_controls.ablation_drops(
      model, p, inputs_NL, layer, *tops, tokens, others
    )
  return {
    "ablation": {who: float(drops.mean()) for who, drops in ablation.items()},
    "keys": {"units": rate(units), "random": rate(shuffled), "untrained": rate(cold)},
    "keys_unigram": float(mlp_controls.suffix_rate(inputs_NL, *units, n=1).mean()),
    "values": {
      "units": agree(units, promoted),
      "random": agree(units, random_promoted),
      "untrained": agree(cold, cold_promoted),
    },
    "tops": units,
  }


def measure(config, trained, workdir):
  task = task_spec(config)
  train_ds = data.get_dataset(task, "train")
  rng = np.random.default_rng(config.probe_seed)
  fold_rows = rng.choice(len(train_ds), min(config.fold_sequences, len(train_ds)), replace=False)
  fold_tokens, _ = read_windows(train_ds, fold_rows)
  fold, bias, runs = {}, {}, {}
  for cell, name in fold_models(config).items():
    arm = trained.get(name, SETTING)
    params = arm.params()
    runs[cell] = cached_run(arm.model())
    fold[cell_name(*cell)] = folds(runs[cell], params, fold_tokens)
    bias[cell_name(*cell)] = [max_bias(p) for p in params]

  # The probe: the last layer of the widest W2 model (the (single, pre) cell's program), each
  # seed against its controls, in batches shaped like the fold's.
  arm = trained.get(w2_name(max(config.widths)), SETTING)
  model, layer, batch = arm.model(), config.num_layers - 1, len(fold_rows)
  count = max(batch, min(config.probe_sequences, len(train_ds)) // batch * batch)
  windows = read_windows(train_ds, rng.choice(len(train_ds), count, replace=False))
  probes = []
  for seed, params in zip(trained.seeds_in_view(), arm.params(), strict=True):
    untrained = harness.init_params(model, windows[0][:1], seed)
    probes.append(
      probe_seed(
        runs[("single", "pre")], model, params, untrained, layer, windows, rng, config.top_k, batch
      )
    )
  metrics = {
    "fold": fold,
    "max_bias": bias,
    "probe_keys": {k: [p["keys"][k] for p in probes] for k in ("units", "random", "untrained")},
    "probe_keys_unigram": [p["keys_unigram"] for p in probes],
    "probe_values": {k: [p["values"][k] for p in probes] for k in ("units", "random", "untrained")},
    "ablation": {k: [p["ablation"][k] for p in probes] for k in probes[0]["ablation"]},
  }
  table = [
    {"measurement": f"W1 fold into the mixer alone (o C + c), {cell}", "per seed": v["mixer"]}
    for cell, v in fold.items()
  ]
  table += [
    {
      "measurement": f"W1 fold with the skip (x A + o C + c), {cell}",
      "per seed": v["mixer_and_skip"],
    }
    for cell, v in fold.items()
  ]
  table += [{"measurement": f"max |bo|, |b1|, {cell}", "per seed": v} for cell, v in bias.items()]
  for side, what in (
    ("probe_keys", "bigram rate of top contexts"),
    ("probe_values", "next-token agreement of the promoted token"),
  ):
    table += [
      {"measurement": f"probe {what}: {who}", "per seed": metrics[side][who]}
      for who in ("units", "random", "untrained")
    ]
  table += [
    {"measurement": f"ablation: mean logit drop of the promoted token, {who}", "per seed": v}
    for who, v in metrics["ablation"].items()
  ]
  table += [
    {
      "measurement": "probe: top contexts sharing their current character (units)",
      "per seed": metrics["probe_keys_unigram"],
    }
  ]
  table += _examples(config, train_ds, windows[0], probes[0]["tops"], layer, trained)
  plots = [_plot(config, trained, fold, metrics, workdir)]
  setup = (
    f"char-level LM on `{config.corpus}` (V={train_ds.vocab_size}), L={config.seq_len}, "
    f"D={config.d_model}, {config.num_heads} heads, {config.num_layers} layers, rung mlp_kv with "
    f"biases; W2 models single skip + pre-norm, F in {list(config.widths)} (F = D also without "
    f"W2); fold cells at F={max(config.widths)}, fitted on {len(fold_rows)} x {config.seq_len} "
    f"training positions, the (single, pre) cell is the {w2_name(max(config.widths))} model. "
    f"Probe: layer {layer} of {w2_name(max(config.widths))}, top-{config.top_k} contexts among "
    f"{count} training windows; controls: {max(config.widths)} random directions of the same "
    "pre-activations (key side) and random value vectors (value side), and an untrained model."
  )
  return protocol.Section(metrics=metrics, table=table, plots=plots, setup=setup)


def _examples(config, dataset, inputs_NL, tops, layer, trained):
  """A few units of the first seed's model, each with its three top contexts."""
  seq_FK, pos_FK = tops
  return [
    {
      "measurement": f"seed {trained.seeds_in_view()[0]}, layer {layer} unit {unit}: top contexts",
      "per seed": " / ".join(
        _context(dataset, inputs_NL[s], p, config.context_chars)
        for s, p in zip(seq_FK[unit, :3], pos_FK[unit, :3], strict=True)
      ),
    }
    for unit in range(min(config.shown_units, seq_FK.shape[0]))
  ]


def _context(dataset, sequence_L, position, chars):
  before = dataset.decode(sequence_L[max(0, position - chars) : position])
  current = dataset.decode(sequence_L[position : position + 1])
  return (before + "[" + current + "]").replace("\n", "\\n").replace("|", "\\|")


# --- the verdict --------------------------------------------------------------------------


def _paired(a, b):
  return [x - y for x, y in zip(a, b, strict=True)]


def controls(metrics, config):
  adj = metrics["adjusted"]
  return [
    report.every_seed(
      f"{name} learns: adjusted next-character accuracy >= {CONTROL_LEARNS}",
      adj[name][SETTING],
      lambda a: a >= CONTROL_LEARNS,
      name="w2_models_learn",
      reads=[(name, SETTING)],
    )
    for name in claim_models(config)
  ]


def _beats_controls(description, side, margin, what, name, reads):
  """Per seed: the units' statistic - the larger of the two controls' >= margin."""
  gaps = [
    u - max(r, c) for u, r, c in zip(side["units"], side["random"], side["untrained"], strict=True)
  ]
  return report.every_seed(
    description,
    gaps,
    lambda g: g >= margin,
    name=name,
    reads=reads,
    **{f"{what} {who}": v for who, v in side.items()},
  )


def criteria(metrics, config):
  loss = metrics["eval_loss"]
  d = config.d_model
  out = [
    report.every_seed(
      f"(a) W2 at equal width F = D: eval loss without W2 - with W2 >= {LOSS_MARGIN} nats/char",
      _paired(loss[w2_name(d, False)][SETTING], loss[w2_name(d)][SETTING]),
      lambda g: g >= LOSS_MARGIN,
      name="w2_helps",
      reads=[(w2_name(d, False), SETTING), (w2_name(d), SETTING)],
    )
  ]
  matched = w2_name(MATCHED * d, False)
  out.append(
    report.every_seed(
      f"(a') W2 at equal parameters: eval loss without W2 at F = {MATCHED * d} - with W2 at F = "
      f"{d} >= {LOSS_MARGIN} nats/char",
      _paired(loss[matched][SETTING], loss[w2_name(d)][SETTING]),
      lambda g: g >= LOSS_MARGIN,
      name="w2_helps_matched",
      reads=[(matched, SETTING), (w2_name(d), SETTING)],
    )
  )
  for width in (w for w in config.widths if w > d):
    out.append(
      report.every_seed(
        f"(b) more memories: eval loss with W2 at F = {d} - at F = {width} >= {LOSS_MARGIN}",
        _paired(loss[w2_name(d)][SETTING], loss[w2_name(width)][SETTING]),
        lambda g: g >= LOSS_MARGIN,
        name="width_helps",
        reads=[(w2_name(d), SETTING), (w2_name(width), SETTING)],
      )
    )
  # the probe's readings are measured on a trained model: each reads its model's plateau
  probed = [(w2_name(max(config.widths)), SETTING)]
  out += [
    _beats_controls(
      f"(f) keys: the units' top-{config.top_k} contexts end in one bigram more often than the "
      f"controls' (random directions, untrained model), by >= {PATTERN_MARGIN}",
      metrics["probe_keys"],
      PATTERN_MARGIN,
      "bigram rate",
      "keys_beat_controls",
      probed,
    ),
    _beats_controls(
      f"(g) values: the token a unit's value promotes is the next token of its top contexts "
      f"more often than the controls', by >= {VALUE_MARGIN}",
      metrics["probe_values"],
      VALUE_MARGIN,
      "agreement",
      "values_beat_controls",
      probed,
    ),
    report.trained_minus_untrained(
      f"(h) causal: training makes zeroing a unit lower its promoted token's logit at its "
      f"top-{config.top_k} contexts more than zeroing another unit does, by >= {ABLATION_GAIN} "
      "(per seed: the mean over units of own - another's drop, trained minus the same network "
      "at init)",
      *_ablation_minus_another(metrics["ablation"]),
      ABLATION_GAIN,
      name="ablation_lowers_promoted",
      reads=probed,
      **{f"drop, {who}": v for who, v in metrics["ablation"].items()},
    ),
  ]
  return out


def falsification(metrics, config):
  """Criterion (a) read with the fixed W2 in place of the learned one: it must reject it."""
  loss, d = metrics["eval_loss"], config.d_model
  return [
    report.every_seed(
      f"(a) on the falsification arm: eval loss without W2 - with a fixed (not learned) W2, "
      f"F = {d}, >= {LOSS_MARGIN} nats/char",
      _paired(loss[w2_name(d, False)][SETTING], loss[fixed_name(d)][SETTING]),
      lambda g: g >= LOSS_MARGIN,
      name="w2_helps",
      reads=[(w2_name(d, False), SETTING), (fixed_name(d), SETTING)],
    )
  ]


def _ablation_minus_another(ablation):
  """(trained, untrained), per seed: own - another unit's drop, of the trained model and of
  the same network at init (where the direct path alone already makes a unit's own ablation
  lower the token its value row promotes where it fires most)."""
  trained = _paired(ablation["units"], ablation["another unit"])
  return trained, _paired(ablation["untrained units"], ablation["untrained another unit"])


def _plot(config, trained, fold, metrics, workdir):
  fig = harness.figure(cols=3)
  ax_loss, ax_fold, ax_probe = fig.subplots(1, 3)
  names = claim_models(config)
  loss = trained.metrics()["eval_loss"]
  protocol.spread(ax_loss, list(range(len(names))), [loss[n][SETTING] for n in names], "eval")
  ax_loss.set_xticks(range(len(names)), [n.replace(" ", "\n", 1) for n in names], fontsize=7)
  ax_loss.set(ylabel="eval loss (nats / char; points: seeds)", title="W2 and width")
  cells = list(fold)
  for j, (kind, label) in enumerate((("mixer", "o C + c"), ("mixer_and_skip", "x A + o C + c"))):
    for i, cell in enumerate(cells):
      values = np.maximum(fold[cell][kind], 1e-12)
      ax_fold.scatter(
        [i + 0.15 * j] * len(values), values, s=18, color=f"C{j}", label=label if i == 0 else None
      )
  ax_fold.axhline(EXACT, color="gray", linestyle=":")
  ax_fold.set_xticks(range(len(cells)), [c.replace(", ", "\n") for c in cells], fontsize=7)
  ax_fold.set_xlim(-0.5, len(cells) - 0.35)  # one cell (v14's default) sits in the middle
  ax_fold.set(yscale="log", ylabel="relative residual of the best fold", title="W1 folded")
  ax_fold.legend(fontsize="small")
  for j, key in enumerate(("probe_keys", "probe_values")):
    for i, who in enumerate(("units", "random", "untrained")):
      values = metrics[key][who]
      ax_probe.scatter(
        [j * 4 + i] * len(values), values, s=18, label=who if j == 0 else None, color=f"C{i}"
      )
  ax_probe.set_xticks([1, 5], ["keys: bigram rate", "values: next-token agreement"])
  ax_probe.set(ylabel="per seed", title=f"probe, top-{config.top_k} contexts")
  ax_probe.legend(fontsize="small")
  return harness.save(fig, workdir, f"{NAME}.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
