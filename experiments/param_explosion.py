"""Experiment 4 (docs/reconstruction.md section 4): a matrix-valued weight function explodes.

W_iL = f(x_i, x_L) is D x D. One scalar function per entry (`full_dynamic`) is D^2 functions,
over 100K of them once D is in the hundreds; a diagonal (`diagonal_dynamic`) is D functions
and sparse only through exact zeros; the matrix sum (`matrix_sum`) W_iL = sum_j a_j V_j has H
functions and H static D x D values. Two measurements:
  counts   parameters of one mixing layer, counted from the real modules' shapes with
           `jax.eval_shape` (no array is allocated, so D^3 counts in the hundreds of millions
           cost nothing), against the closed forms of jaxformer.steps.s4_values_heads:
           full 2 K D^3, diagonal 2 K D^2, matrix sum 2 H K D + H D^2 (K: scorer rank).
  quality  at one matched budget of mixing parameters per layer (full's at a small D), each
           form gets the widest D that fits the budget and trains on MQAR; everything else
           equal (softmax over the sources, pre-layer-norm, same steps and data).

  python -m experiments.param_explosion --workdir runs/param_explosion      # cpu, ~85 cpu-s
  python -m experiments.param_explosion --size accel --workdir runs/param_explosion_accel

cpu: budget = the matrix sum (1 head, K=D) at D=64: 12,288 mixing parameters per layer,
which buys full D=11 (121 functions, K=4) and diagonal D=39; MQAR V=64 L=16 K=4, batch 32,
up to 600 steps. (Sized when token embeddings started at std 0.02: then a matrix sum narrower
than D~48 did not learn this task in 1,000 steps, so the budget sits at D=64.) Expect the matrix sum to recall
and full / diagonal to stay near the ~0.3 of guessing among the context's values.
Measured (cpu, seed 0): counts equal the closed forms up to 1.07e9 (full at D=512, 262,144
functions); full 0.217, diagonal 0.254 (600 steps), matrix sum 1.000 (300 steps).
accel: budget = the matrix sum at D=128 (49,152 per layer: full D=18, diagonal D=78), MQAR
V=256 L=64 K=8, 6000 steps.
"""

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import harness, report, run_all
from jaxformer import ladder

NAME = "param_explosion"
CLAIM = (
  "Per-entry dynamic weights need D^2 functions and 2 K D^3 parameters per layer (over 100K "
  "functions at D in the hundreds), the diagonal 2 K D^2, the matrix sum 2 H K D + H D^2; at "
  "an equal parameter budget the matrix sum recalls better than both."
)

FORMS = {"full": "full_dynamic", "diagonal": "diagonal_dynamic", "matrix_sum": "matrix_sum"}

# The criterion, stated from the spec's claim before any result was seen.
MANY_FUNCTIONS = 100_000  # full: more than this many scalar functions at some D < 1000
MARGIN = 0.1  # matrix_sum accuracy >= max(full, diagonal) + MARGIN at the matched budget


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.widths = (4, 8, 16, 32, 64, 128, 256, 384, 512)  # D grid of the parameter counts
  c.scorer_rank = 4  # K of the full and diagonal forms' scorers (the rungs' default)
  c.count_heads = 2  # H of the matrix sum in the count sweep (K = D / H there)
  c.budget_width = 64  # the matched budget: the matrix sum's mixing parameters/layer at this D
  c.vocab_size = 64  # V: MQAR keys in [1, V/2), values in [V/2, V)
  c.seq_len = 16  # L (short: full's D^2 functions make every step cost D^2 L^2)
  c.num_kv_pairs = 4  # K pairs per example
  c.num_examples = 20_000  # training examples
  c.num_test_examples = 512  # held-out examples
  c.num_layers = 2  # blocks
  c.batch_size = 32  # examples per step
  c.learning_rate = 3e-3  # peak of warmup + cosine
  c.total_steps = 600  # upper bound per run; early stop at early_stop_accuracy
  c.eval_every = 100  # steps between evals
  c.early_stop_accuracy = 0.95  # stop a run once eval accuracy reaches this
  c.seed = 0  # init, data order and data generation
  if size == "tiny":
    c.widths, c.budget_width, c.num_layers, c.seq_len, c.num_kv_pairs = (4, 8), 8, 1, 8, 2
    c.batch_size, c.total_steps, c.eval_every = 16, 4, 2
    c.num_examples, c.num_test_examples = 256, 64
  elif size == "accel":
    c.widths = (8, 16, 32, 64, 128, 256, 384, 512, 768, 1024)
    c.budget_width, c.vocab_size, c.seq_len, c.num_kv_pairs = 128, 256, 64, 8
    c.batch_size, c.total_steps, c.eval_every, c.num_examples = 256, 6000, 250, 100_000
    c.learning_rate = 1e-3
  elif size not in ("quick", "full"):  # both are the cpu size until redesigned
    raise ValueError(f"size={size!r}: expected tiny, cpu or accel")
  return c


def model_config(form, width, config, train=False):
  """The rung's model config at width D: full / diagonal with scorer rank K, the matrix sum
  with `count_heads` heads of K = D / H when counting, one head of K = D when training."""
  rung = FORMS[form]
  model = ladder.default_config(rung)
  with model.unlocked():
    model.d_model = width
    model.vocab_size, model.max_len = config.vocab_size, config.seq_len
    model.num_layers = config.num_layers
    if form == "matrix_sum":
      model.num_heads = 1 if train else config.count_heads
      model.rank = width // model.num_heads
    else:
      model.rank = config.scorer_rank
    if train:
      model.normalizer, model.norm, model.final_norm = "softmax", "pre", True
  return model


def closed_form(form, width, config, train=False):
  """Mixing parameters per layer from s4_values_heads' formulas."""
  d, k = width, config.scorer_rank
  if form == "full":
    return 2 * k * d**3
  if form == "diagonal":
    return 2 * k * d**2
  heads = 1 if train else config.count_heads
  return 2 * heads * (width // heads) * d + heads * d**2


def mixer_shapes(form, width, config, train=False):
  """Shapes of one layer's mixing parameters, from the real module, nothing allocated."""
  model_cfg = model_config(form, width, config, train)
  model = ladder.build(FORMS[form], model_cfg)
  tokens = jax.ShapeDtypeStruct((1, 2), jnp.int32)
  shapes = jax.eval_shape(lambda t: nn.meta.unbox(model.init(jax.random.key(0), t)), tokens)
  return shapes["params"]["layers_0"]["mixer"]


def count(form, width, config, train=False):
  """(mixing parameters per layer, number of scalar coefficient functions H)."""
  shapes = mixer_shapes(form, width, config, train)
  params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
  functions = shapes["scorer"]["wq"].shape[1]  # wq: D x H x K
  return params, functions


def matched_width(form, budget, config):
  """The widest D whose mixing parameters per layer fit the budget (closed form, then the
  count of the real module confirms it)."""
  width = 1
  while closed_form(form, width + 1, config, train=True) <= budget:
    width += 1
  return width


def loglog_slope(widths, counts):
  return float(np.polyfit(np.log(widths), np.log(counts), 1)[0])


def criteria(metrics, config):
  counts, formula = metrics["counts"], metrics["closed_form"]
  exact = all(counts[f] == formula[f] for f in FORMS)
  hundreds = [i for i, d in enumerate(metrics["widths"]) if d < 1000]
  full_functions = max(metrics["functions"]["full"][i] for i in hundreds) if hundreds else 0
  acc = metrics["accuracy"]
  best_other = max(acc["full"], acc["diagonal"])
  return [
    report.Criterion(
      "counted mixing parameters (real modules) == closed forms at every D",
      exact,
      {f"{f}_at_max_D": counts[f][-1] for f in FORMS},
    ),
    report.Criterion(
      f"full_dynamic needs > {MANY_FUNCTIONS:,} scalar functions at some D < 1000",
      full_functions > MANY_FUNCTIONS,
      {"full_functions": full_functions},
    ),
    report.Criterion(
      f"equal budget: matrix_sum accuracy >= max(full, diagonal) + {MARGIN}",
      acc["matrix_sum"] >= best_other + MARGIN,
      {f"acc_{f}": acc[f] for f in FORMS},
    ),
  ]


def run(config, workdir):
  widths = list(config.widths)
  counts = {f: [] for f in FORMS}
  functions = {f: [] for f in FORMS}
  for form in FORMS:
    for width in widths:
      params, funcs = count(form, width, config)
      counts[form].append(params)
      functions[form].append(funcs)
  formula = {f: [closed_form(f, d, config) for d in widths] for f in FORMS}
  print(f"  {NAME}: counted {len(FORMS)} forms at D in {widths}", flush=True)

  budget = closed_form("matrix_sum", config.budget_width, config, train=True)
  task = harness.mqar_task(config)
  accuracy, steps, matched = {}, {}, {}
  cpu = 0.0
  for form in FORMS:
    width = matched_width(form, budget, config)
    params, _ = count(form, width, config, train=True)
    matched[form] = {"d_model": width, "mixing_params_per_layer": params}
    model = model_config(form, width, config, train=True).to_dict()
    summary = harness.train(
      FORMS[form],
      task,
      model,
      **harness.schedule(config),
    )
    accuracy[form] = harness.accuracy(summary)
    steps[form] = summary["final_step"]
    cpu += summary["cpu_seconds"]
    print(
      f"  {NAME}: {form:10s} D={width:<3d} {params} mixing params/layer: "
      f"acc={accuracy[form]:.3f} after {steps[form]} steps ({summary['cpu_seconds']:.1f} cpu s)",
      flush=True,
    )

  metrics = {
    "widths": widths,
    "counts": counts,
    "closed_form": formula,
    "functions": functions,
    "loglog_slope": {f: loglog_slope(widths, counts[f]) for f in FORMS},
    "budget": budget,
    "matched": matched,
    "accuracy": accuracy,
    "steps": steps,
    "train_cpu_seconds": cpu,
  }
  table = [
    {
      "form": f,
      "rung": FORMS[f],
      "params/layer at max D": counts[f][-1],
      "functions at max D": functions[f][-1],
      "growth exponent": metrics["loglog_slope"][f],
      "matched D": matched[f]["d_model"],
      "params/layer at matched D": matched[f]["mixing_params_per_layer"],
      "MQAR accuracy": accuracy[f],
    }
    for f in FORMS
  ]
  setup = (
    f"Counts: mixing parameters of one layer of each rung from jax.eval_shape of its init, D "
    f"in {widths} (full/diagonal scorer rank K={config.scorer_rank}; matrix sum H="
    f"{config.count_heads}, K=D/H); max D={widths[-1]}. Quality: budget {budget:,} mixing "
    f"parameters per layer (the matrix sum, 1 head of K=D, at D={config.budget_width}; each "
    f"form gets the widest D that fits); "
    f"all with softmax over the sources and pre-layer-norm, {config.num_layers} layers, MQAR V="
    f"{config.vocab_size} L={config.seq_len} K={config.num_kv_pairs}, batch "
    f"{config.batch_size}, lr {config.learning_rate}, up to {config.total_steps} steps (early "
    f"stop at {config.early_stop_accuracy}), seed {config.seed}."
  )
  return report.Result(
    experiment=NAME,
    claim=CLAIM,
    setup=setup,
    criteria=criteria(metrics, config),
    metrics=metrics,
    table=table,
    plots=[_plot(widths, counts, functions, workdir)],
  )


def _plot(widths, counts, functions, workdir):
  fig = harness.figure(cols=2)
  left, right = fig.subplots(1, 2)
  for form, marker in zip(FORMS, "os^", strict=True):
    left.plot(widths, counts[form], marker=marker, label=FORMS[form])
    right.plot(widths, functions[form], marker=marker, label=FORMS[form])
  left.set(xlabel="model width D", ylabel="mixing parameters per layer", title="parameters")
  right.axhline(MANY_FUNCTIONS, color="gray", linestyle=":", label=f"{MANY_FUNCTIONS:,}")
  right.set(xlabel="model width D", ylabel="scalar functions a_j", title="functions")
  for ax in (left, right):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.legend()
  return harness.save(fig, workdir, f"{NAME}_counts.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
