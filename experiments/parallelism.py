"""Experiment 2 (docs/reconstruction.md section 2): recurrence serializes training.

With recurrence, unit (layer n, position t) waits for (n, t-1) and (n-1, t): the last output
is L + layers - 1 dependent steps from the input (a 2-layer RNN over 4 tokens: 5 steps). A
non-recurrent layer reads all of the layer below at once: one step per layer, whatever L.
Two measurements:
  critical path  `jaxformer.steps.s2_parallel.critical_path` per rung and L (the longest
                 chain on the real dependency graph, not the closed form)
  step time      wall time of one jitted train step (forward, backward, AdamW; built by the
                 training loop's `program.build`) vs L, for an LSTM (rung `rnn`) and a
                 Transformer (rung `transformer`) of the same width and depth, on one device.

  python -m experiments.parallelism --workdir runs/parallelism              # cpu, 40 cpu-s
  python -m experiments.parallelism --size accel --workdir runs/parallelism_accel

cpu: D=64, 2 layers, batch 4, L in 32..256 (up to 4 D). Measured (fastest of 30 steps):
LSTM 0.06-0.11 ms per token, Transformer 0.06-0.15: slope ratio 0.73-1.11 over four runs
(1.11 on a quiet machine), FAIL; at batch 1 the LSTM was still the cheaper per token (0.014
vs 0.025 ms). A CPU runs the Transformer's positions one after another too, so both
grow linearly with L at similar cost per token; the critical path (exact) is where the claim
shows here, and the wall-time claim needs hardware that runs the L positions at once (accel).
(Past L = 4 D the Transformer's L^2 attention takes over on a CPU: at L = 512 its step took
331 ms and the LSTM's 116 ms in sizing runs; that is section 9's pressure, not this one.)
accel: D=256, 4 layers, batch 32, L up to 4096: on a GPU the Transformer's step is nearly flat
in L at these sizes while the LSTM's grows linearly, so the slope ratio should be far larger.
"""

import sys
import time

import jax
import ml_collections
import numpy as np

from experiments import harness, report, run_all
from jaxformer import ladder
from jaxformer.steps.s2_parallel import critical_path

NAME = "parallelism"
CLAIM = (
  "A recurrent rung's critical path grows as L + layers - 1 and its train-step time grows "
  "with L markedly faster than a non-recurrent rung's, whose critical path is one step per "
  "layer whatever L."
)

# The criterion, stated from the spec's claim before any measurement.
SPEC_EXAMPLE = {"length": 4, "layers": 2, "recurrent": 5, "non_recurrent": 2}
SLOPE_RATIO = 2.0  # recurrent seconds-per-token slope >= this x the non-recurrent one

RECURRENT, PARALLEL = "lstm", "transformer"
# name: (rung, model overrides). Same D and depth; d_ff = 2 D gives the Transformer the LSTM's
# matmul work per token and layer (LSTM: 4 gates x (D x D input + D x D state) = 8 D^2;
# Transformer: q, k, v, o 4 D^2 + MLP 2 x D x 2D = 8 D^2), plus attention's 2 L D.
MODELS = {
  RECURRENT: ("rnn", {"cell": "lstm"}),
  PARALLEL: ("transformer", {"num_heads": 1}),
}
FF_PER_D = 2  # the Transformer's d_ff = FF_PER_D * d_model


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  # L grid of the timed train steps, up to 4 D: there attention's 2 L D multiply-adds per token
  # reach the 8 D^2 of the projections; beyond it the quadratic cost of section 9, not the
  # recurrence, dominates a CPU that runs every position serially anyway.
  c.lengths = (32, 128, 256)
  c.path_lengths = (4, 16, 64, 256, 1024, 4096)  # L grid of the critical-path table
  c.d_model = 64  # D: both models' width (the LSTM's state size)
  c.num_layers = 2  # blocks, or stacked recurrent layers
  c.batch_size = 4  # sequences per train step: small, so per-token arithmetic is cheap
  c.vocab_size = 64  # V
  c.repeats = 30  # timed steps per (model, L) after one compiling step; the fastest is kept
  if size == "tiny":
    c.lengths, c.path_lengths = (8, 16), (4, 8, 16)
    c.d_model, c.num_layers, c.batch_size, c.repeats = 16, 1, 4, 2
  elif size == "accel":
    c.lengths = (256, 512, 1024, 2048, 4096)
    c.path_lengths = (4, 64, 1024, 4096, 16384)
    c.d_model, c.num_layers, c.batch_size, c.repeats = 256, 4, 32, 10
  elif size not in ("quick", "full"):  # both are the cpu size until redesigned
    raise ValueError(f"size={size!r}: expected tiny, cpu or accel")
  return c


def path_table(config):
  """Critical path per rung and L, from the dependency graph (s2_parallel)."""
  layers = config.num_layers
  rows = []
  for length in config.path_lengths:
    row = {"L": length}
    for rung in ladder.RUNGS:
      recurrent = rung in ladder.RECURRENT_RUNGS
      steps = critical_path(length, layers, recurrent)
      if rung == "rnn_attention":
        steps += 1  # its attention block reads every state of the top recurrent layer at once
      row[rung] = steps
    rows.append(row)
  return rows


def slope(lengths, seconds):
  """Least-squares slope of seconds vs L (seconds per token position)."""
  return float(np.polyfit(np.asarray(lengths, float), np.asarray(seconds, float), 1)[0])


def step_seconds(rung, model_overrides, config, length):
  """Median wall time of one jitted train step at sequence length `length`, one device."""
  from jaxformer.train import program as programs
  from jaxformer.train import sharding

  train_config = harness.train_config(
    rung,
    f"mqar:vocab_size={config.vocab_size},seq_len={length}",  # names the shapes only
    model={
      **model_overrides,
      "d_model": config.d_model,
      "num_layers": config.num_layers,
      "vocab_size": config.vocab_size,
      "max_len": max(config.lengths),
      "d_ff": FF_PER_D * config.d_model,
    },
    batch_size=config.batch_size,
  )
  mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  rng = np.random.default_rng(0)
  shape = (config.batch_size, length)
  with sharding.active(mesh):
    program = programs.build(train_config, mesh, shape)
    state = program.init(jax.random.key(0))
    batch = {
      "inputs": rng.integers(0, config.vocab_size, shape, dtype=np.int32),
      "targets": rng.integers(0, config.vocab_size, shape, dtype=np.int32),
      "mask": np.ones(shape, np.int32),
    }
    batch = jax.device_put(batch, program.batch_sharding)
    state, metrics = program.train_step(state, batch)  # compiles
    jax.block_until_ready(metrics)
    times = []
    for _ in range(config.repeats):
      start = time.perf_counter()
      state, metrics = program.train_step(state, batch)
      jax.block_until_ready(metrics)
      times.append(time.perf_counter() - start)
  return min(times)


def criteria(metrics, config):
  example = metrics["spec_example"]
  paths = metrics["critical_path"]
  layers = config.num_layers
  recurrent_ok = all(p == n + layers - 1 for n, p in zip(paths["L"], paths["rnn"], strict=True))
  flat_ok = all(p == layers for p in paths["transformer"])
  ratio = metrics["slope"][RECURRENT] / max(metrics["slope"][PARALLEL], 1e-12)
  if metrics["slope"][PARALLEL] <= 0:  # a flat or shrinking non-recurrent time
    ratio = float("inf") if metrics["slope"][RECURRENT] > 0 else 0.0
  return [
    report.Criterion(
      "spec example: a 2-layer RNN over 4 tokens needs 5 dependent steps, "
      "a 2-layer non-recurrent net 2",
      example["recurrent"] == SPEC_EXAMPLE["recurrent"]
      and example["non_recurrent"] == SPEC_EXAMPLE["non_recurrent"],
      {"recurrent": example["recurrent"], "non_recurrent": example["non_recurrent"]},
    ),
    report.Criterion(
      f"critical path: rnn = L + {layers - 1} at every L, transformer = {layers} at every L",
      recurrent_ok and flat_ok,
      {"rnn_at_max_L": paths["rnn"][-1], "transformer_at_max_L": paths["transformer"][-1]},
    ),
    report.Criterion(
      f"step time: {RECURRENT} slope (s per token) >= {SLOPE_RATIO} x {PARALLEL} slope",
      ratio >= SLOPE_RATIO,
      {
        "slope_ratio": ratio,
        f"{RECURRENT}_ms_per_token": 1e3 * metrics["slope"][RECURRENT],
        f"{PARALLEL}_ms_per_token": 1e3 * metrics["slope"][PARALLEL],
      },
    ),
  ]


def run(config, workdir):
  table = path_table(config)
  example = {
    "recurrent": critical_path(SPEC_EXAMPLE["length"], SPEC_EXAMPLE["layers"], True),
    "non_recurrent": critical_path(SPEC_EXAMPLE["length"], SPEC_EXAMPLE["layers"], False),
  }
  paths = {"L": [row["L"] for row in table]}
  for rung in ("rnn", "rnn_attention", "transformer"):
    paths[rung] = [row[rung] for row in table]

  seconds = {}
  for name, (rung, overrides) in MODELS.items():
    seconds[name] = []
    for length in config.lengths:
      seconds[name].append(step_seconds(rung, overrides, config, length))
      print(f"  {NAME}: {name} L={length}: {1e3 * seconds[name][-1]:.1f} ms/step", flush=True)
  metrics = {
    "spec_example": example,
    "critical_path": paths,
    "lengths": list(config.lengths),
    "step_seconds": seconds,
    "slope": {name: slope(config.lengths, s) for name, s in seconds.items()},
    "time_ratio_max_over_min_L": {name: s[-1] / s[0] for name, s in seconds.items()},
  }

  plots = [_plot(config, paths, seconds, workdir)]
  rows = [
    {
      "L": length,
      "critical path rnn": critical_path(length, config.num_layers, True),
      "critical path transformer": critical_path(length, config.num_layers, False),
      f"{RECURRENT} ms/step": 1e3 * seconds[RECURRENT][i],
      f"{PARALLEL} ms/step": 1e3 * seconds[PARALLEL][i],
    }
    for i, length in enumerate(config.lengths)
  ]
  setup = (
    f"Critical path from the dependency graph of {config.num_layers} layers (rnn_attention: its "
    f"recurrent stack + 1 attention block; every non-recurrent rung: one step per layer). "
    f"Step time: fastest of {config.repeats} jitted AdamW train steps after compilation, "
    f"D={config.d_model} (Transformer d_ff={FF_PER_D * config.d_model}: the LSTM's 8 D^2 "
    f"matmul work per token and layer), {config.num_layers} layers, batch {config.batch_size}, V="
    f"{config.vocab_size}, one {jax.devices()[0].platform} device, L in {list(config.lengths)} "
    f"(up to 4 D: past it attention's quadratic work, section 9, dominates a serial CPU); "
    f"slopes are least-squares fits of seconds vs L. Full critical-path table (all rungs) in "
    f"results.json."
  )
  return report.Result(
    experiment=NAME,
    claim=CLAIM,
    setup=setup,
    criteria=criteria(metrics, config),
    metrics={**metrics, "critical_path_all_rungs": table},
    table=rows,
    plots=plots,
  )


def _plot(config, paths, seconds, workdir):
  fig = harness.figure(cols=2)
  left, right = fig.subplots(1, 2)
  for rung, style in (("rnn", "o-"), ("rnn_attention", "s--"), ("transformer", "^-")):
    left.plot(paths["L"], paths[rung], style, label=rung)
  left.set(
    xscale="log",
    yscale="log",
    xlabel="sequence length L",
    ylabel="dependent steps (critical path)",
    title=f"{config.num_layers} layers",
  )
  left.legend()
  for name in MODELS:
    right.plot(config.lengths, [1e3 * s for s in seconds[name]], "o-", label=name)
  right.set(xlabel="sequence length L", ylabel="ms per train step", title="measured step time")
  right.legend()
  return harness.save(fig, workdir, f"{NAME}_steps_vs_length.png")


if __name__ == "__main__":
  sys.exit(run_all.main(single=NAME))
