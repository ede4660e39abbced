"""Train suite: tokens/s, step time and MFU of the transformer rung's full train step.

  python -m experiments.bench train [--size gpt_small|tiny] [--json] [--set attention=blockwise]

The step is jaxformer.train.step.train_step (forward, backward, AdamW with clipping, the
non-finite guard), jitted with the state donated, on random tokens. MFU = model FLOPs per step
(jaxformer.train.metrics.flops_per_token: 6 N + attention, PaLM appendix B) / step time /
a matmul peak measured in the same run in the model's dtype (the best of several square
sizes, so the peak is not understated), measured again before every window of `steps`
steps; the median window is reported (`mfu_windows` lists them all). `mfu_cpu_time` is the
same ratio in process CPU seconds, for a shared machine where other processes take the
cores away. Steps are dispatched back to back, one host sync per window.
"""

import functools
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxformer import ladder
from jaxformer.bench import BenchError, Suite, check_choice, check_positive
from jaxformer.train import config as config_lib
from jaxformer.train import metrics, optimizer, step

MODELS = {
  # ~10.9M params, ~146 GFLOP per step: the size of the CPU facts in docs/jax-notes.md
  "gpt_small": dict(
    model=dict(d_model=384, num_heads=6, num_layers=6, d_ff=1536, vocab_size=256, max_len=256),
    batch_size=8,
    seq_len=256,
  ),
  # GPT-2 small's body (85M matmul params) at vocab 256: big enough to load an accelerator
  "gpt2_small": dict(
    model=dict(d_model=768, num_heads=12, num_layers=12, d_ff=3072, vocab_size=256, max_len=1024),
    batch_size=8,
    seq_len=1024,
  ),
  "tiny": dict(
    model=dict(d_model=64, num_heads=2, num_layers=2, d_ff=256, vocab_size=64, max_len=64),
    batch_size=4,
    seq_len=64,
  ),
}
TARGET_MFU = 0.80  # of the measured matmul peak, at gpt_small on the 2-core CPU
CPU_PEAK_SIZES = (1024, 2048)
ACCEL_PEAK_SIZES = (4096, 8192)


def config(size="gpt_small", attention=None):
  """The training config (jaxformer.train.config) at `size` for the transformer rung."""
  c = config_lib.get_config("transformer")
  spec = MODELS[size]
  with c.unlocked():
    for field, value in spec["model"].items():
      c.model[field] = value
    if attention is not None:
      c.model.attention = attention
    c.batch_size = spec["batch_size"]
    c.total_steps = 1000
  return c, spec["seq_len"]


def matmul_peak(mesh, dtype, clock=time.perf_counter, sizes=None, repeats=2):
  """The best `metrics.matmul_flops` (all of the mesh's devices at once) over a few square
  sizes, so the peak is not understated."""
  accel = mesh.devices.flat[0].platform != "cpu"
  sizes = sizes or (ACCEL_PEAK_SIZES if accel else CPU_PEAK_SIZES)
  return max(metrics.matmul_flops(mesh, n, dtype, repeats, clock) for n in sizes)


def run(model_size="gpt_small", steps=3, windows=5, attention=None, devices=1):
  """Times the train step; one row with tokens_per_s, step_time_s, mfu, peak_flops, ...

  devices > 1: data parallel over the first `devices` devices (the batch split over them,
  the state replicated, gradients all-reduced): several GPUs or TPU cores, or on a CPU the
  devices `python -m experiments.bench --cpu-devices N` makes.
  """
  check_choice("model_size", model_size, tuple(MODELS))
  check_positive(steps=steps, windows=windows, devices=devices)
  c, seq_len = config(model_size, attention)
  ladder.validate(c.rung, c.model)
  if devices > jax.device_count():
    raise BenchError(
      f"devices={devices}: only {jax.device_count()} device(s); on a CPU run "
      f"`python -m experiments.bench train --cpu-devices {devices}`"
    )
  if c.batch_size % devices:
    raise BenchError(f"devices={devices}: must divide the batch of {c.batch_size}")
  mesh = jax.make_mesh(
    (devices,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:devices]
  )
  replicated = NamedSharding(mesh, P())
  model = ladder.build(c.rung, c.model)
  tx = optimizer.make(c)
  batch_shape = (c.batch_size, seq_len)
  init = jax.jit(
    lambda rng: nn.meta.unbox(step.init_state(model, tx, rng, batch_shape)),
    out_shardings=replicated,
  )
  state = init(jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (c.batch_size, seq_len + 1), 0, c.model.vocab_size)
  batch = {
    "inputs": tokens[:, :-1],
    "targets": tokens[:, 1:],
    "mask": jnp.ones(batch_shape, jnp.float32),
  }
  batch = jax.device_put(batch, NamedSharding(mesh, P("data")))
  train_step = jax.jit(
    functools.partial(step.train_step, model=model, tx=tx),
    donate_argnums=0,
    out_shardings=replicated,
  )

  start = time.perf_counter()
  state, out = train_step(state, batch)
  jax.block_until_ready(out["loss"])
  compile_s = time.perf_counter() - start
  state, out = train_step(state, batch)  # one more warm step
  jax.block_until_ready(out["loss"])

  # Windows of `steps` steps, each right after a matmul peak measurement: on a shared
  # machine the load changes over minutes, so each window is compared with its own peak and
  # the median window is reported (on a quiet machine every window gives the same answer).
  dtype = jnp.dtype(c.model.dtype)
  params = metrics.matmul_param_count(state["params"], c.model.tie_embeddings)
  tokens_per_step = c.batch_size * seq_len
  flops_per_step = metrics.flops_per_token(c.rung, c.model, seq_len, params) * tokens_per_step
  measured = []
  for _ in range(windows):
    peak = matmul_peak(mesh, dtype)
    peak_cpu = matmul_peak(mesh, dtype, time.process_time, CPU_PEAK_SIZES[-1:], repeats=3)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
      state, out = train_step(state, batch)
    jax.block_until_ready(out["loss"])
    step_s, step_cpu_s = (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps
    measured.append((flops_per_step / step_s / peak, step_s, peak, step_cpu_s, peak_cpu))
  mfu, best, peak, best_cpu, peak_cpu = sorted(measured)[len(measured) // 2]
  return [
    {
      "rung": c.rung,
      "attention": c.model.attention,
      "devices": devices,
      "params": int(sum(x.size for x in jax.tree.leaves(state["params"]))),
      "batch": c.batch_size,
      "seq_len": seq_len,
      "flops_per_step": flops_per_step,
      "compile_s": compile_s,
      "step_time_s": best,
      "tokens_per_s": tokens_per_step / best,
      "peak_flops": peak,
      "mfu": mfu,
      "mfu_target": TARGET_MFU,
      "mfu_target_met": bool(mfu >= TARGET_MFU),
      # the same ratio in process CPU seconds: on a shared machine less disturbed by others
      "step_cpu_s": best_cpu,
      "mfu_cpu_time": flops_per_step / best_cpu / peak_cpu,
      "mfu_windows": [round(m[0], 4) for m in measured],
      "load_avg_1m": os.getloadavg()[0],
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "final_loss": float(out["loss"]),
    }
  ]


SUITE = Suite(
  run=run,
  sizes={
    # blockwise attention skips the causal mask's empty blocks; on the 2-core CPU it beat the
    # materialized 'generic' form by 3-7% of the step in interleaved A/B runs (BENCHMARKS.md)
    "gpt_small": dict(model_size="gpt_small", attention="blockwise"),
    "gpt_small_generic": dict(model_size="gpt_small"),
    # on a GPU: jax.nn.dot_product_attention (cuDNN where it applies)
    "gpt2_small": dict(model_size="gpt2_small", attention="dot_product"),
    "tiny": dict(model_size="tiny", steps=2, windows=1),
  },
  columns=(
    "attention",
    "devices",
    "params",
    "step_time_s",
    "tokens_per_s",
    "peak_flops",
    "mfu",
    "mfu_target_met",
    "step_cpu_s",
    "mfu_cpu_time",
    "compile_s",
  ),
  description="transformer train step (fwd, bwd, AdamW): tokens/s and MFU vs a measured matmul peak",
)
