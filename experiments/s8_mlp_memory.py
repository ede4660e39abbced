"""Section 8: the MLP is a key-value memory (Geva et al. 2021).

  mlp(x) = sum_f sigma(x . k_f + b_f) v_f + b2,   k_f = W1[:, f] (key), v_f = W2[f] (value)

Claim 8.2: W2's rows are vectors written into the residual stream, and units fire on
recognisable input patterns. Where it binds: `facts` (jaxformer/data/tasks.py), triples
`s r o` from one fixed random table o = T[s, r] of S x R facts, scored at r. Each relation's
column is a permutation of the S objects and no fact repeats in a sequence, so neither the
context nor s or r alone tells o: attention can bring s to r but reads only what it is
given, and the direct path is additive in s and r, so the table lives in the MLPs, whose keys
should be the (s, r) bigrams and whose values the objects. The axis is R, the table's load.
(The old experiments/mlp_memory.py read a character model of this repository's source,
where no pattern is known in advance.)

Every arm is the `transformer` rung (pre-norm, split skip, biases, one head, D = 16, 2
blocks) at its selected learning rate; only the MLP differs:

  w2        F = D units, each writes its learned W2 row: any vector
  no_w2     F = D units, unit f writes coordinate f
  fixed_w2  F = D units writing a fixed orthonormal W2 (not learned): no_w2 up to a rotation
  w2_4d     F = 4D units with W2, the usual MLP (the positive cases)
  blind     w2 seeing only its own position: no pair to key on, chance by construction

W2 at equal width: within its capacity each MLP stores the table (sizing: every arm at 0.99,
D = 16 to 32), so the claim is read as the cost of storing it, steps to 0.9 validation
accuracy, at the largest table; a learned W2 must beat the fixed one. (W2 at equal
parameters, the old module's extension: no W2 at F = 2D stored it as fast as w2 in sizing,
ratio 1.0-1.1, as on text; dropped from the arms for quick's time.) The probe
(jaxformer/analysis/mlp_probe.py, mlp_controls.py) reads the last block's units on held-out
sequences: keys, how often a unit's top contexts end in one bigram, trained minus the same
network at init; values, how often the token its W2 row promotes through the unembedding is
the next token there, beyond random value vectors and the untrained units; causal, zeroing
the unit (jaxformer.analysis.interventions) lowers that token's logit there more than
zeroing another unit, trained minus init. Whether units beat random directions of their own
pre-activations is an extension: any such direction is itself a mixture of keys, so it asks
for a privileged unit basis, which 8.2 does not claim (the old text run refuted it).

  python -m experiments.engine run mlp_memory --size quick    # ~1 minute on one CPU core
  python -m experiments.engine run mlp_memory --size full     # ~15-40 minutes (estimated)

Expected (sizing, seeds 100 and stand-ins 200-202 at quick): w2 at 0.9 in 350-450 steps,
no_w2 in 500-600 (ratio 1.2-1.5), fixed_w2 in 450-550, w2_4d in 250-300; keys +0.2 to +0.5
over init, values 0.05-0.3 over the controls, ablation +7 to +10 logits over init, blind
rejected by each; units vs random directions -0.15 to +0.15. Claim 8.1 (W1 folds into Wo)
is a check. Sizing and verdicts: results/mlp_memory/.
"""

import math

import jax
import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import inputs, mlp_controls, mlp_probe
from jaxformer.analysis.cache import cached

D = 16


def _arm(name, note, width=D, **fields):
  return Arm(name, "transformer", {"num_heads": 1, "d_ff": width, **fields}, note)


ARMS = (
  _arm("w2", "F = D units, each writes its learned W2 row"),
  _arm("no_w2", "F = D units, unit f writes coordinate f", mlp_w2=False),
  _arm("fixed_w2", "F = D units, W2 a fixed orthonormal matrix", mlp_w2_trained=False),
  _arm("w2_4d", "F = 4D units with W2: the usual MLP", 4 * D),
  _arm("blind", "w2 seeing only its own position: at chance", mask="self"),
)
PROBED = ("w2", "w2_4d", "blind")
SIDES = {"key": "bigram rate of top contexts", "value": "promoted token = next token"}
WHO = ("units", "random", "untrained")

METRICS = (
  *(Metric(f"{side}_{who}", 0.0, 1.0, untrained=f"{side}_untrained" if who == "units" else "",
           note=f"{what}: {who}") for side, what in SIDES.items() for who in WHO),
  Metric("keys_over_random", -1.0, 1.0, note="key_units - key_random"),
  Metric("values", -1.0, 1.0, note="value_units - max(value_random, value_untrained)"),
  Metric("ablation", -math.inf, math.inf, untrained="ablation_untrained",
         note="own - another unit's drop of the promoted token's logit at the top contexts"),
  Metric("ablation_untrained", -math.inf, math.inf, note="ablation of the same networks at init"),
)  # fmt: skip
ONE_FACT_PER_UNIT = Case(
  values=(0.5,),
  why="units that key one fact each (F >= S x R, a one-hot memory): a unit's top contexts are "
  "its fact's bigram (rate 1), a random mixture's spread over the units it mixes (rate ~1/F)",
)


def _probe(name, metric, says, threshold, statistic="value", tests="8.2", positive=None):
  return Criterion(name, tests, says, metric=metric, arm="w2", at="last", threshold=threshold,
                   statistic=statistic, positive=positive or Case(arm="w2_4d"),
                   falsification=Case(arm="blind"), guarded_by=("w2_4d_recalls",))  # fmt: skip


CRITERIA = (
  Criterion("w2_4d_recalls", "control", "the usual MLP holds the table", metric="adjusted",
            arm="w2_4d", at="last", threshold=0.9),
  Criterion("w2_recalls", "control", "units with W2 hold the table", metric="adjusted",
            arm="w2", at="last", threshold=0.9),
  Criterion("no_w2_learns", "control", "units without W2 hold the smallest table",
            metric="adjusted", arm="no_w2", at="first", threshold=0.9),
  Criterion("w2_writes_faster", "8.2", "at equal width, units that write a coordinate need "
            "more steps to store the table than units that write any vector",
            metric="steps_to", statistic="ratio", arm="no_w2", against="w2", at="last",
            threshold=1.25, positive=Case(against="w2_4d"),
            falsification=Case(against="fixed_w2"), guarded_by=("w2_recalls", "no_w2_learns")),
  _probe("keys_match_patterns", "key_units", "training makes units' top contexts share a "
         "bigram (the fact's key)", 0.1, "gain"),
  _probe("values_write_answers", "values", "the token a unit's W2 row promotes is the next "
         "token at its top contexts, beyond random values and the untrained units", 0.05),
  _probe("ablation_lowers_promoted", "ablation", "training makes zeroing a unit lower its "
         "promoted token at its top contexts more than zeroing another", 0.1, "gain"),
  _probe("keys_beat_random_directions", "keys_over_random", "units' top contexts share a "
         "bigram more than random directions of the same pre-activations'", 0.05,
         tests="extension", positive=ONE_FACT_PER_UNIT),
)  # fmt: skip

MODEL = {"d_model": D, "num_layers": 2}


def _size(relations, subjects, layers=2, **fields):
  task = {"num_subjects": subjects, "seq_len": 24, **fields.pop("task")}
  return Size(task=task, model=MODEL | {"num_layers": layers}, points=relations, **fields)


SIZES = {
  "tiny": _size(
    (2,), 4, 1, task={"num_examples": 64, "num_test_examples": 32}, steps=4, step_cap=4,
    learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2, batch_size=8,
    eval_every=2, warmup_steps=1, extra={"probe": 16, "top": 4},
  ),
  "quick": _size(
    (16,), 16, task={"num_examples": 20_000, "num_test_examples": 2048}, steps=1500,
    step_cap=3000, learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=5,
    confirm_only=True, eval_every=25, early_stop_accuracy=0.95, arm_steps={"blind": (500, 1000)},
    extra={"probe": 1024, "top": 16},
  ),
  "full": _size(
    (8, 16, 32), 16, task={"num_examples": 40_000, "num_test_examples": 4096}, steps=2000,
    step_cap=6000, learning_rates=(3e-3, 1e-2), exploratory_seeds=(100,), confirmatory=5,
    eval_every=50, early_stop_accuracy=0.95, warmup_steps=100,
    arm_steps={"blind": (500, 1000)},
    extra={"probe": 2048, "top": 16},
  ),
}  # fmt: skip


def task(size, point):
  return spec("facts", {**size.task, "num_relations": point, "table_seed": 0, "seed": 0})


def _unit_probe(model, params, untrained, tokens_NL, top, rng):
  """{metric: value} of one seed: the last block's units, keys and values, against random
  directions and the same network at init; the causal ablation, trained and untrained."""
  layer = len(model.layers) - 1
  name = f"layers_{layer}/ffn/mlp_pre"
  pre = {w: np.asarray(cached(model, {"params": p}, tokens_NL, (name,))[name])
         for w, p in (("units", params), ("untrained", untrained))}  # fmt: skip
  width = pre["units"].shape[-1]
  tops = {
    "units": mlp_controls.top_positions(pre["units"], top),
    "random": mlp_controls.top_positions(
      pre["units"] @ mlp_controls.random_directions(rng, width, width), top),
    "untrained": mlp_controls.top_positions(pre["untrained"], top),
  }  # fmt: skip
  swapped = jax.tree.map(lambda x: x, params)
  swapped[f"layers_{layer}"]["ffn"]["w2"] = mlp_controls.random_directions(rng, D, width).T
  nets = {"units": params, "random": swapped, "untrained": untrained}
  promoted = {w: mlp_probe.value_tokens(p, layer, k=1)["tokens"][:, 0] for w, p in nets.items()}
  targets_NL = np.zeros_like(tokens_NL)
  targets_NL[:, :-1] = tokens_NL[:, 1:]
  out = {}
  for who in WHO:
    read = tops[who] if who != "random" else tops["units"]  # random values: the units' contexts
    out[f"key_{who}"] = float(mlp_controls.suffix_rate(tokens_NL, *tops[who], n=2).mean())
    agree = mlp_controls.next_token_agreement(targets_NL, *read, promoted[who])
    out[f"value_{who}"] = float(agree.mean())
  others = (np.arange(width) + rng.integers(1, width)) % width
  for suffix, p, who in (("", params, "units"), ("_untrained", untrained, "untrained")):
    drops = [
      mlp_controls.ablation_drops(model, p, tokens_NL, layer, *tops[who], promoted[who], a).mean()
      for a in (range(width), others)
    ]
    out[f"ablation{suffix}"] = float(drops[0] - drops[1])
  out["keys_over_random"] = out["key_units"] - out["key_random"]
  out["values"] = out["value_units"] - max(out["value_random"], out["value_untrained"])
  return out


def measure(trained, size):
  """Per probed arm and point, per seed: the probe of the last block's units."""
  out = {}
  for arm in PROBED:
    for point in size.points:
      unit = trained.unit(arm, point)
      model = unit.model()
      tokens = inputs.eval_inputs(task(size, point), size.extra["probe"])
      initial = inputs.initial_params(model, trained.seeds, tokens.shape)
      for seed, params, untrained in zip(trained.seeds, unit.params(), initial, strict=True):
        rng = np.random.default_rng(seed)
        for metric, value in _unit_probe(model, params, untrained, tokens, size.extra["top"],
                                         rng).items():  # fmt: skip
          out.setdefault(metric, {}).setdefault(arm, {}).setdefault(point, []).append(value)
  return out


def figure(result, path):
  """Steps to 0.9 against R per arm (dots: seeds); the probe at the largest table; curves."""
  fig = figures.new(cols=3)
  ax = fig.add_subplot(1, 3, 1)
  steps = result["metrics"]["steps_to"]
  for i, arm in enumerate(a.name for a in ARMS):
    points = list(steps[arm])
    ax.plot([int(p) for p in points], [np.mean(steps[arm][p]) for p in points], "o-",
            color=f"C{i}", label=arm)  # fmt: skip
    for p in points:
      ax.plot([int(p)] * len(steps[arm][p]), steps[arm][p], ".", color=f"C{i}", markersize=3)
  ax.set(xlabel="R (S x R facts)", ylabel="steps to 0.9 (never: the budget)", xscale="log",
         title="storing the table")  # fmt: skip
  ax.legend(fontsize=7)
  last = list(steps["w2"])[-1]
  figures.bars(fig.add_subplot(1, 3, 2), result, ("key_units", "key_random", "key_untrained",
               "value_units", "value_random", "value_untrained"), PROBED, last,
               title=f"probe at R = {last}")  # fmt: skip
  figures.curves(fig.add_subplot(1, 3, 3), result, last, f"R = {last}: validation accuracy")
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="mlp_memory",
  section=8,
  claims=("8.2",),
  summary="The transformer rung on a fixed table of S x R facts (s r -> o): MLP units with "
  "and without W2 at equal width and at equal parameters, and a probe of the units' keys, "
  "values and ablations against random directions and the untrained networks.",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  axis=Axis("R", note="relations: the table holds S x R facts, the memory's load"),
  measure=measure,
  figure=figure,
)
