"""Section 8: attention without positions sees a set, where the mask supplies no order.

The mixer's sum s_L = sum_{i<=L} W(x_i, x_L) V x_i treats its sources as a set: permute them
and s_L is unchanged unless x_i carries where it sits. Copying needs order: `x1 .. xc SEP
x1 .. xc`, and at the j-th copy step the answer is the j-th data token. Six arms of the
`transformer` rung, one head, everything else equal (width, depth, pre-norm + final norm, MLP
4D, data, budget; each at its selected learning rate), differing in the position table and
the mask alone:

  learned, sinusoidal  a position table added to the token embedding, causal mask
  none                 no table, causal mask: the prefix a receiver sees grows with its
                       position, a position signal a stack can learn to read (Haviv et al. 2022)
  encoder              no table, bidirectional mask: each receiver sees its own token and the
                       set of all tokens, where the set argument holds exactly
  encoder_learned      the encoder with a learned table: the same mask, given positions (its
                       answer is the next input token, one position away)
  self                 no table, each receiver sees its own token only: fails by construction

  python -m experiments.engine run positions --size quick    # ~40 seconds on one CPU core
  python -m experiments.engine run positions --size full     # ~25 minutes on 2 CPU cores

Claim 8.4 is scoped by its mask: the encoder without positions fails to copy, and the same
encoder given positions does not; positions let a causal model copy. Whether the causal mask
alone lets it copy is an extension, not the claim, which says the failure holds where the mask
supplies no position. Expected: the claim SUPPORTED at both sizes; the causal model without
positions copies (adjusted above 0.9) but climbs slowly (each doubling of its budget still
adds a few points), so quick leaves the extension UNRESOLVED at its 800-step cap and full,
at the harder c = 10, grows that arm alone up to 16,000 steps to read it. A linear probe of
absolute position (jaxformer/analysis/position_probe.py) on the first block's output of none
and the encoder, trained and at init, is reported and judged by no criterion. Verdicts and
numbers: results/positions/.
"""

import math

from experiments.engine import figures
from experiments.engine.declare import Arm, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import inputs, position_probe


def _arm(name, note, **fields):
  return Arm(name, "transformer", {"num_heads": 1, "positions": "none"} | fields, note)


ARMS = (
  _arm("learned", "a trained position table (GPT-2's), causal", positions="learned"),
  _arm("sinusoidal", "a fixed sinusoidal table (Vaswani et al. 2017), causal",
       positions="sinusoidal"),
  _arm("none", "no position table, causal: the mask's prefix is the only position signal"),
  _arm("encoder", "no position table, bidirectional: the set argument holds exactly",
       mask="bidirectional"),
  _arm("encoder_learned", "the encoder with a trained position table",
       mask="bidirectional", positions="learned"),
  _arm("self", "no position table, each token sees itself only: no set, no order",
       mask="self"),
)  # fmt: skip
UNPOSITIONED = ("none", "encoder")  # the arms the position probe reads: no table
PROBED = "layers_0/resid_post"  # the first block's output

METRICS = (
  Metric("over_guess", 0.0, math.inf,
         note="accuracy x c: 1 is a guess among the c tokens to copy (the set alone)"),
  Metric("position_r2", -math.inf, 1.0, untrained="position_r2_untrained",
         note="held-out R^2 of a ridge probe of absolute position on the first block's output"),
  Metric("position_r2_untrained", -math.inf, 1.0,
         note="position_r2 of the same networks at initialisation"),
)  # fmt: skip

CRITERIA = (
  Criterion(
    "encoder_trains", "control", "the encoder without positions learns which tokens to copy",
    metric="over_guess", arm="encoder", threshold=0.8,
  ),
  Criterion(
    "positions_copy", "8.4", "a learned position table lets a causal model copy in order",
    metric="adjusted", arm="learned", threshold=0.9,
    positive=Case(arm="sinusoidal"), falsification=Case(arm="encoder"),
  ),
  Criterion(
    "encoder_fails", "8.4", "without positions, where the mask supplies none, copying fails",
    metric="adjusted", arm="encoder", compare="<=", threshold=0.5,
    positive=Case(arm="self"), falsification=Case(arm="encoder_learned"),
    guarded_by=("encoder_trains",),
  ),
  Criterion(
    "mask_copies", "extension", "the causal mask alone lets a model without positions copy",
    metric="adjusted", arm="none", threshold=0.9,
    positive=Case(arm="sinusoidal"), falsification=Case(arm="encoder"),
  ),
)  # fmt: skip


def _size(task, d_model, num_layers=2, **fields):
  model = {"d_model": d_model, "d_ff": 4 * d_model, "num_layers": num_layers}
  return Size(task={"vocab_size": 16, **task}, model=model, **fields)


SIZES = {
  "tiny": _size(
    {"seq_len": 8, "copy_len": 3, "num_examples": 64, "num_test_examples": 32}, 8, 1, steps=4,
    step_cap=4, learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2,
    batch_size=8, eval_every=2, warmup_steps=1, extra={"probe_examples": 8},
  ),
  "quick": _size(
    {"seq_len": 16, "copy_len": 6, "num_examples": 20_000, "num_test_examples": 1024}, 32,
    steps=400, step_cap=800, learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2,
    confirm_only=True, extra={"probe_examples": 64},
  ),
  "full": _size(
    {"seq_len": 24, "copy_len": 10, "num_examples": 40_000, "num_test_examples": 2048}, 32,
    steps=1000, step_cap=4000, learning_rates=(3e-3, 1e-2), exploratory_seeds=(100,),
    confirmatory=5, eval_every=100, warmup_steps=100, arm_steps={"none": (1000, 16000)},
    extra={"probe_examples": 128},
  ),
}  # fmt: skip


def task(size, point):
  return spec("copy", {**size.task, "seed": 0})


def measure(trained, size):
  """Per seed: accuracy over a guess among the c tokens to copy, every arm; the position
  probe's R^2 on the first block's output of none and the encoder, trained and at init."""
  copy_len = size.task["copy_len"]
  tokens = inputs.eval_inputs(task(size, None), size.extra["probe_examples"])
  out = {"over_guess": {}, "position_r2": {}, "position_r2_untrained": {}}
  for arm in ARMS:
    accuracy = trained.unit(arm.name).final("eval_accuracy")
    out["over_guess"][arm.name] = {None: [a * copy_len for a in accuracy]}
  for name in UNPOSITIONED:
    unit = trained.unit(name)
    model = unit.model()
    untrained = inputs.initial_params(model, trained.seeds, tokens.shape)
    for metric, params in (("position_r2", unit.params()), ("position_r2_untrained", untrained)):
      r2 = [position_probe.position_r2(model, p, tokens, (PROBED,))[PROBED] for p in params]
      out[metric][name] = {None: r2}
  return out


def figure(result, path):
  """Validation accuracy by step per arm; adjusted accuracy per arm; the position probe."""
  fig = figures.new(cols=3)
  curves, copy, probe = (fig.add_subplot(1, 3, i) for i in (1, 2, 3))
  figures.curves(curves, result, title="copy: validation accuracy (lines: seeds)")
  figures.bars(copy, result, ("adjusted",), [a.name for a in ARMS],
               title="copy: adjusted accuracy (0: chance, 1: perfect)")  # fmt: skip
  figures.bars(probe, result, ("position_r2_untrained", "position_r2"), UNPOSITIONED,
               title="position probe R^2, first block")  # fmt: skip
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="positions",
  section=8,
  claims=("8.4",),
  summary="Copying in order with a learned, a sinusoidal or no position table under a causal "
  "mask, and without a table (or with one) under a bidirectional mask: where a model without "
  "positions sees a set, and where the mask supplies the order.",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  measure=measure,
  figure=figure,
)
