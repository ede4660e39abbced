"""Experiment 2 (docs/reconstruction.md section 2): recurrence serializes training.

With recurrence, unit (layer n, position t) waits for (n, t-1): the last output is ~L
dependent steps from the input. A non-recurrent layer reads all of the layer below at once.
This measures the real programs, not a graph drawn for the argument: the sequential depth of
each rung's actual train step (the loop's `jaxformer.train.step.train_step`: forward,
backward, AdamW), read from its jaxpr by `jaxformer.analysis.depth` (every primitive one
step; a `scan` / `while` / `fori_loop` its trip count x its body; lowering only, nothing is
trained or run), at L from 32 to 4096:

  rungs    every rung of the ladder at its default config (2 layers)
  kernels  the transformer rung with each attention kernel of section 9 (dense, blockwise,
           sliding_window, block_sparse, linear, linear_recurrent)

Control (else INCONCLUSIVE): the instrument reads known programs right at the same lengths:
a `lax.scan` of L trips over a 3-operation body measures exactly 3 L, an elementwise
operation over L positions measures 1 at every L.
Claim: (a) each recurrent rung's depth grows linearly: log-log slope between the two largest
L >= LINEAR_SLOPE; (b) each non-recurrent rung's depth stays constant: largest / smallest
depth over the grid <= CONSTANT_FACTOR; (c) a kernel grows with L exactly when its algorithm
loops over L (blockwise attention's loop over key and query blocks, linear attention's
recurrent form: slope >= GROWS_SLOPE), the others stay constant; (d) available parallelism
(FLOPs / depth) grows at least linearly in L for the transformer (slope >= LINEAR_SLOPE)
and stays flat for the rnn (|slope| <= FLAT_SLOPE). All are single exact measurements (no
seeds: nothing is trained).
Wall time of one jitted train step vs L at batch 1, for an LSTM (`rnn`) and a Transformer of
the same width, depth and matmul work per token, is measured at every size; its verdict
(LSTM seconds-per-token slope >= SLOPE_RATIO x the Transformer's) applies at accel size
only, where the L positions of a layer run at once: a CPU runs them one after another too
(measured before: slope ratio 0.73-1.11 on this CPU, FAIL), so at CPU sizes the depth is
where the claim shows. The critical-path arithmetic of `jaxformer.steps.s2_parallel` stays a
unit-tested illustration of the graph argument (the spec's 2-layer RNN over 4 tokens: 5
steps), not a verdict.

  python -m experiments.parallelism --workdir runs/parallelism                # quick
  python -m experiments.parallelism --size full --workdir runs/parallelism_full
  python -m experiments.parallelism --size accel --workdir runs/parallelism_accel

Sizes: quick (`make run`): every rung and the kernels blockwise, sliding_window,
block_sparse, linear and linear_recurrent at L in {32, 512, 4096}; step time of 1-layer
models at L in {64, 256}. full: every kernel (dense and dot_product too) at L in {32, 64, ...,
4096}; 2-layer step time at L in {32, ..., 512}. accel: L up to 16384; step time of 4-layer
models of D = 256 at L in {256, ..., 4096}, with its verdict.
Measured numbers: docs/experiments.md.
"""

import math
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax import lax

from experiments import harness, protocol, report, run_all, sizes
from jaxformer import ladder
from jaxformer.analysis import cost, depth

NAME = "parallelism"
CLAIM = (
  "The sequential depth of a recurrent rung's compiled train step grows linearly in L while "
  "every non-recurrent rung's stays constant, so only the latter's available parallelism "
  "(FLOPs per dependent step) grows with L; an attention kernel that loops over blocks or "
  "positions brings depth that grows with L back."
)

# The criterion, stated from the spec's claim before any measurement.
LINEAR_SLOPE = 0.9  # log-log slope (two largest L) of a depth that grows linearly
CONSTANT_FACTOR = 1.05  # largest / smallest depth over the grid of a constant one
GROWS_SLOPE = 0.5  # a kernel "grows with L" at or above this slope (log L stays far below)
FLAT_SLOPE = 0.1  # |slope| of a flat available parallelism
SLOPE_RATIO = 2.0  # accel: recurrent seconds-per-token slope >= this x the non-recurrent one

# The registered design (experiments/protocol.py; the design log: docs/experiments.md). Nothing
# is trained: every criterion reads the real compiled train step (lowering only) or, at accel,
# timed steps; seeds do not apply.
VERSION = 1
SPECS = (
  protocol.Spec(
    "instrument_reads_known_programs",
    "a scan of L trips over 3 operations reads 3 L, an elementwise operation 1",
    control=True,
  ),
  protocol.Spec(
    "recurrent_depth_linear",
    f"recurrent rungs' depth slope >= {LINEAR_SLOPE}",
    threshold=LINEAR_SLOPE,
  ),
  protocol.Spec(
    "parallel_depth_constant",
    f"non-recurrent rungs' depth within {CONSTANT_FACTOR}x over L",
    threshold=CONSTANT_FACTOR,
  ),
  protocol.Spec(
    "kernels_loop_where_they_do",
    f"a kernel's depth slope >= {GROWS_SLOPE} exactly where it loops over L",
    threshold=GROWS_SLOPE,
  ),
  protocol.Spec(
    "available_parallelism",
    f"FLOPs / depth: transformer slope >= {LINEAR_SLOPE}, rnn |slope| <= {FLAT_SLOPE}",
    threshold=LINEAR_SLOPE,
  ),
  protocol.Spec(
    "time_slope_ratio",
    f"accel: recurrent s/token slope >= {SLOPE_RATIO} x the transformer's",
    threshold=SLOPE_RATIO,
  ),
)
# The transformer's train step, read by the recurrent rungs' "depth grows linearly" criterion:
# it must be rejected.
FALSIFICATION = (
  protocol.Falsification("transformer", "recurrent_depth_linear", "a rung with no loop over L"),
)

# What each kernel's algorithm implies (jaxformer.math.attention), stated before measuring:
# True where it walks L in a sequential loop.
KERNEL_LOOPS = {
  "dense": False,
  "dot_product": False,
  "blockwise": True,  # lax.map over query blocks, fori_loop / scan over key blocks
  "sliding_window": False,
  "block_sparse": False,
  "linear": False,  # chunked: a cumulative sum across chunks
  "linear_recurrent": True,  # lax.scan over positions
}

RECURRENT, PARALLEL = "lstm", "transformer"
# Timed models: same D and depth; d_ff = 2 D gives the Transformer the LSTM's matmul work per
# token and layer (LSTM: 4 gates x 2 D^2 = 8 D^2; Transformer: q, k, v, o 4 D^2 + MLP 4 D^2).
TIMED = {RECURRENT: ("rnn", {"cell": "lstm"}), PARALLEL: ("transformer", {"num_heads": 1})}
FF_PER_D = 2


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.lengths = (32, 512, 4096)  # L of the depth measurement (lowering only)
  c.rungs = tuple(ladder.RUNGS)
  c.kernels = ("blockwise", "sliding_window", "block_sparse", "linear", "linear_recurrent")
  c.window = 16  # the sliding_window kernel's window
  c.num_layers = 2
  c.vocab_size = 64
  c.batch_size = 4  # of the measured programs (depth does not depend on it)
  c.time_lengths = (64, 256)  # L of the timed train steps
  c.time_batch = 1
  c.time_layers = 1  # layers of both timed models (one: the compiles dominate a quick run)
  c.d_model = 64  # D of the timed models
  c.repeats = 5  # timed steps per (model, L) after a warm-up; the median is kept
  c.time_verdict = False  # the wall-time criterion applies at accel size only
  if size == "tiny":
    c.lengths, c.rungs, c.kernels = (16, 128), ("rnn", "transformer"), ("blockwise", "linear")
    c.num_layers, c.time_lengths, c.d_model, c.repeats = 1, (8, 16), 16, 1
  elif size == "full":
    c.lengths = (32, 64, 128, 256, 512, 1024, 2048, 4096)
    c.kernels = tuple(KERNEL_LOOPS)
    c.time_lengths, c.time_layers, c.repeats = (32, 64, 128, 256, 512), 2, 10
  elif size == "accel":
    c.lengths = (64, 512, 4096, 16384)
    c.kernels = tuple(KERNEL_LOOPS)
    c.time_lengths, c.d_model, c.time_layers = (256, 512, 1024, 2048, 4096), 256, 4
    c.repeats = 10
    c.time_verdict = True
  else:
    sizes.check(size)
  return c


def models(config):
  """name -> (rung, model overrides): every rung, then the transformer with each kernel."""
  out = {rung: (rung, {}) for rung in config.rungs}
  for kernel in config.kernels:
    fields = {"attention": kernel}
    if kernel == "sliding_window":
      fields["window"] = config.window
    out[f"transformer+{kernel}"] = ("transformer", fields)
  return out


def _train_config(rung, fields, config, length, **extra):
  model = {"vocab_size": config.vocab_size, "max_len": length, "num_layers": config.num_layers}
  return harness.train_config(
    rung, f"mqar:vocab_size={config.vocab_size},seq_len={length}", model | fields | extra
  )


def last_slope(xs, ys):
  """log-log slope between the two largest x (the growth exponent where it is cleanest)."""
  return float(math.log(ys[-1] / ys[-2]) / math.log(xs[-1] / xs[-2]))


def slope(lengths, seconds):
  """Least-squares slope of seconds vs L (seconds per token position)."""
  return float(np.polyfit(np.asarray(lengths, float), np.asarray(seconds, float), 1)[0])


def measure_depths(config, log=print):
  out = {}
  for name, (rung, fields) in models(config).items():
    rows = [
      depth.train_step(_train_config(rung, fields, config, n), (config.batch_size, n))
      for n in config.lengths
    ]
    out[name] = {
      "depth": [r.depth for r in rows],
      "flops": [r.flops for r in rows],
      "parallelism": [r.parallelism for r in rows],
      "loop_trips": [r.loop_trips for r in rows],
      "dynamic_loops": [r.dynamic_loops for r in rows],
    }
    log(f"  {NAME}: {name}: depth {out[name]['depth']} at L={list(config.lengths)}")
  return out


def instrument(config):
  """The control: depths of programs whose depth is known, at the same lengths."""

  def scan3(x):
    zero = jnp.zeros((), jnp.float32)  # a strongly typed carry: no conversion in the body
    return lax.scan(lambda c, v: (jnp.sin(jnp.cos(c + v)), None), zero, x)[0]

  out = {"scan_3_ops": [], "elementwise": []}
  for n in config.lengths:
    x = jax.ShapeDtypeStruct((n,), jnp.float32)
    out["scan_3_ops"].append(depth.measure(scan3, x).depth)
    out["elementwise"].append(depth.measure(jnp.sin, x).depth)
  return out


def measure_times(config, log=print):
  out = {}
  for name, (rung, fields) in TIMED.items():
    out[name] = []
    for n in config.time_lengths:
      width = {"d_model": config.d_model, "d_ff": FF_PER_D * config.d_model}
      tc = _train_config(rung, fields, config, n, **width, num_layers=config.time_layers)
      out[name].append(cost.train_step(tc, (config.time_batch, n), repeats=config.repeats))
      log(f"  {NAME}: {name} L={n}: {1e3 * out[name][-1]['seconds']:.2f} ms/step")
  return out


def measure(config, trained, workdir):
  del trained  # nothing is trained
  depths = measure_depths(config)
  times = measure_times(config)
  metrics = {
    "lengths": list(config.lengths),
    "depth": depths,
    "instrument": instrument(config),
    "kernel_loops": {k: KERNEL_LOOPS[k] for k in config.kernels},
    "recurrent_rungs": [r for r in config.rungs if r in ladder.RECURRENT_RUNGS],
    "time_lengths": list(config.time_lengths),
    "step_seconds": {n: [t["seconds"] for t in ts] for n, ts in times.items()},
    "step_cpu_seconds": {n: [t["cpu_seconds"] for t in ts] for n, ts in times.items()},
    "step_peak_bytes": {n: [t["peak_bytes"] for t in ts] for n, ts in times.items()},
  }
  metrics["time_slope"] = {
    n: slope(config.time_lengths, s) for n, s in metrics["step_seconds"].items()
  }
  table = [
    {
      "model": name,
      **{f"depth L={n}": d for n, d in zip(config.lengths, m["depth"], strict=True)},
      "depth slope": last_slope(config.lengths, m["depth"]),
      f"FLOPs/depth L={config.lengths[-1]}": m["parallelism"][-1],
      "parallelism slope": last_slope(config.lengths, m["parallelism"]),
      f"loop trips L={config.lengths[-1]}": m["loop_trips"][-1],
      "traced-count loops": m["dynamic_loops"][-1],
    }
    for name, m in depths.items()
  ]
  setup = (
    f"Depth: jaxformer.analysis.depth of each model's train step (forward, backward, AdamW) "
    f"at batch {config.batch_size}, {config.num_layers} layers, V={config.vocab_size}, every "
    f"rung at its default width, the kernels through the transformer rung (window "
    f"{config.window}); lowering only. Every primitive counts one step, a loop its trips x "
    "its body; a while loop of traced trip count counts one trip (a lower bound; its count "
    "is the table's last column). Slopes are log-log between the two largest L. Step time: "
    f"median of {config.repeats} jitted train steps after a warm-up, batch "
    f"{config.time_batch}, {config.time_layers} layer(s), D={config.d_model} (Transformer d_ff={FF_PER_D * config.d_model}: "
    f"the LSTM's 8 D^2 matmul work per token and layer), one {jax.devices()[0].platform} "
    "device; its verdict applies at accel size only. Measured: "
    + "; ".join(
      f"{name} "
      + ", ".join(
        f"{1e3 * t:.3g} ms at L={n}"
        for n, t in zip(config.time_lengths, metrics["step_seconds"][name], strict=True)
      )
      for name in TIMED
    )
    + "."
  )
  plots = [_plot(config, depths, metrics, workdir)]
  return protocol.Section(metrics=metrics, table=table, plots=plots, setup=setup)


def controls(metrics, config):
  lengths = config.lengths
  known = metrics["instrument"]
  return [
    report.Criterion(
      "the depth measure reads known programs: a scan of L trips over 3 operations = 3 L, "
      "an elementwise operation = 1, at every L",
      known["scan_3_ops"] == [3 * n for n in lengths]
      and known["elementwise"] == [1] * len(lengths),
      {"scan_3_ops": known["scan_3_ops"], "elementwise": known["elementwise"]},
      name="instrument_reads_known_programs",
    )
  ]


def _grows(config, d, threshold):
  return last_slope(config.lengths, d) >= threshold


def _constant(d):
  return max(d) <= CONSTANT_FACTOR * min(d)


def criteria(metrics, config):
  depths = metrics["depth"]
  recurrent = [r for r in config.rungs if r in ladder.RECURRENT_RUNGS]
  parallel = [r for r in config.rungs if r not in ladder.RECURRENT_RUNGS]
  out = [
    _linear(config, depths, recurrent, "recurrent rungs"),
    report.Criterion(
      f"non-recurrent rungs: depth constant in L (largest / smallest <= {CONSTANT_FACTOR})",
      bool(parallel) and all(_constant(depths[r]["depth"]) for r in parallel),
      {r: max(depths[r]["depth"]) / min(depths[r]["depth"]) for r in parallel},
      name="parallel_depth_constant",
    ),
  ]
  if config.kernels:
    measured = {
      k: _grows(config, depths[f"transformer+{k}"]["depth"], GROWS_SLOPE) for k in config.kernels
    }
    flat = {k: _constant(depths[f"transformer+{k}"]["depth"]) for k in config.kernels}
    out.append(
      report.Criterion(
        f"kernels: depth grows with L (slope >= {GROWS_SLOPE}) exactly where the algorithm "
        f"loops over L ({', '.join(k for k in config.kernels if KERNEL_LOOPS[k]) or 'none'}), "
        "constant elsewhere",
        all(measured[k] if KERNEL_LOOPS[k] else flat[k] for k in config.kernels),
        {
          k: last_slope(config.lengths, depths[f"transformer+{k}"]["depth"]) for k in config.kernels
        },
        name="kernels_loop_where_they_do",
      )
    )
  if "transformer" in depths and "rnn" in depths:
    tf = last_slope(config.lengths, depths["transformer"]["parallelism"])
    rnn = last_slope(config.lengths, depths["rnn"]["parallelism"])
    out.append(
      report.Criterion(
        f"available parallelism (FLOPs / depth): transformer's slope >= {LINEAR_SLOPE}, "
        f"rnn's |slope| <= {FLAT_SLOPE}",
        tf >= LINEAR_SLOPE and abs(rnn) <= FLAT_SLOPE,
        {"transformer_slope": tf, "rnn_slope": rnn},
        name="available_parallelism",
      )
    )
  if config.time_verdict:
    rec, par = metrics["time_slope"][RECURRENT], metrics["time_slope"][PARALLEL]
    ratio = rec / par if par > 0 else (math.inf if rec > 0 else 0.0)
    out.append(
      report.Criterion(
        f"step time (batch {config.time_batch}): {RECURRENT} slope (s per token) >= "
        f"{SLOPE_RATIO} x {PARALLEL} slope",
        ratio >= SLOPE_RATIO,
        {"slope_ratio": ratio, f"{RECURRENT}_s_per_token": rec, f"{PARALLEL}_s_per_token": par},
        name="time_slope_ratio",
      )
    )
  return out


def _linear(config, depths, rungs, what):
  """The "depth grows linearly in L" criterion, read on `rungs`."""
  return report.Criterion(
    f"{what}: depth grows linearly in L (log-log slope >= {LINEAR_SLOPE})",
    bool(rungs) and all(_grows(config, depths[r]["depth"], LINEAR_SLOPE) for r in rungs),
    {r: last_slope(config.lengths, depths[r]["depth"]) for r in rungs},
    name="recurrent_depth_linear",
  )


def falsification(metrics, config):
  """The transformer's step, read by the recurrent rungs' linear-growth criterion: must fail."""
  return [_linear(config, metrics["depth"], ["transformer"], "the transformer (falsification)")]


def _plot(config, depths, metrics, workdir):
  fig = harness.figure(cols=3)
  left, mid, right = fig.subplots(1, 3)
  for name, m in depths.items():
    style = "--" if "+" in name else "-"
    left.plot(config.lengths, m["depth"], style, marker="o", label=name)
    mid.plot(config.lengths, m["parallelism"], style, marker="o", label=name)
  left.set(xlabel="L", ylabel="dependent operations of the train step", title="depth")
  mid.set(xlabel="L", ylabel="FLOPs / depth", title="available parallelism")
  for ax in (left, mid):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
  left.legend(fontsize="x-small", ncol=2)
  for name in TIMED:
    right.plot(
      config.time_lengths, [1e3 * s for s in metrics["step_seconds"][name]], "o-", label=name
    )
  right.set(xlabel="L", ylabel="ms per train step", title=f"measured, batch {config.time_batch}")
  right.legend()
  return harness.save(fig, workdir, f"{NAME}_depth_vs_length.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
