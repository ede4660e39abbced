"""Train suite: tokens/s, step time and MFU of the transformer rung's full train step.

  python -m experiments.bench train [--size gpt_small|tiny] [--json]

The step is jaxformer.train.step.train_step (forward, backward, AdamW with clipping, the
non-finite guard), jitted with the state donated, on random tokens. MFU = model FLOPs per step
(jaxformer.train.metrics.flops_per_token: 6 N + attention, PaLM appendix B) / step time /
a matmul peak measured in the same run in the model's dtype (the best of several square
sizes, so the peak is not understated). Steps are dispatched back to back with one host sync
per window of `steps`; the best of `windows` windows is reported.
"""

import functools
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxformer import ladder
from jaxformer.train import metrics, optimizer, step

SIZES = {
  # ~10.9M params, ~146 GFLOP per step: the size the CPU facts in jax-notes.md were measured at
  "gpt_small": dict(
    model=dict(d_model=384, num_heads=6, num_layers=6, d_ff=1536, vocab_size=256, max_len=256),
    batch_size=8,
    seq_len=256,
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
  """The training config (experiments/configs/default.py) at `size` for the transformer rung."""
  from experiments.configs import default  # the optimizer defaults live there

  c = default.get_config("rung=transformer")
  spec = SIZES[size]
  with c.unlocked():
    for field, value in spec["model"].items():
      c.model[field] = value
    if attention is not None:
      c.model.attention = attention
    c.batch_size = spec["batch_size"]
    c.total_steps = 1000
  return c, spec["seq_len"]


def measure_peak(dtype):
  """Best matmul FLOP/s over a few square sizes, in the model's dtype."""
  accel = jax.devices()[0].platform != "cpu"
  sizes = ACCEL_PEAK_SIZES if accel else CPU_PEAK_SIZES
  return max(metrics.measure_matmul_peak(size=s, dtype=dtype) for s in sizes)


def run(size="gpt_small", steps=5, windows=3, attention=None):
  """Times the train step; returns a JSON-able dict with tokens_per_s, step_time_s, mfu, ..."""
  c, seq_len = config(size, attention)
  ladder.validate(c.rung, c.model)
  model = ladder.build(c.rung, c.model)
  tx = optimizer.make(c)
  batch_shape = (c.batch_size, seq_len)
  init = jax.jit(lambda rng: nn.meta.unbox(step.init_state(model, tx, rng, batch_shape)))
  state = init(jax.random.key(0))
  keys = jax.random.split(jax.random.key(1), 2)
  tokens = jax.random.randint(keys[0], (c.batch_size, seq_len + 1), 0, c.model.vocab_size)
  batch = {
    "inputs": tokens[:, :-1],
    "targets": tokens[:, 1:],
    "mask": jnp.ones(batch_shape, jnp.float32),
  }
  train_step = jax.jit(functools.partial(step.train_step, model=model, tx=tx), donate_argnums=0)

  start = time.perf_counter()
  state, out = train_step(state, batch)
  jax.block_until_ready(out["loss"])
  compile_s = time.perf_counter() - start
  state, out = train_step(state, batch)  # one more warm step
  jax.block_until_ready(out["loss"])

  dtype = jnp.dtype(c.model.dtype)
  peak = measure_peak(dtype)
  best = float("inf")
  for _ in range(windows):
    start = time.perf_counter()
    for _ in range(steps):
      state, out = train_step(state, batch)
    jax.block_until_ready(out["loss"])
    best = min(best, (time.perf_counter() - start) / steps)
  peak = max(peak, measure_peak(dtype))  # measured before and after: the larger counts

  params = metrics.matmul_param_count(state["params"], c.model.tie_embeddings)
  flops_per_step = (
    metrics.flops_per_token(c.rung, c.model, seq_len, params) * c.batch_size * seq_len
  )
  mfu = flops_per_step / best / peak
  device = jax.devices()[0]
  return {
    "suite": "train",
    "size": size,
    "rung": c.rung,
    "attention": c.model.attention,
    "device": f"{device.platform}:{device.device_kind}",
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    "params": int(sum(x.size for x in jax.tree.leaves(state["params"]))),
    "batch": c.batch_size,
    "seq_len": seq_len,
    "flops_per_step": flops_per_step,
    "compile_s": compile_s,
    "step_time_s": best,
    "tokens_per_s": c.batch_size * seq_len / best,
    "peak_flops": peak,
    "mfu": mfu,
    "mfu_target": TARGET_MFU,
    "mfu_target_met": bool(mfu >= TARGET_MFU),
    "final_loss": float(out["loss"]),
  }


def format_table(r):
  met = "met" if r["mfu_target_met"] else "NOT met"
  return "\n".join(
    [
      f"train suite, size={r['size']} ({r['params'] / 1e6:.1f}M params, batch {r['batch']} x "
      f"{r['seq_len']}, {r['flops_per_step'] / 1e9:.0f} GFLOP/step), attention={r['attention']}, "
      f"{r['device']}",
      f"step time {r['step_time_s'] * 1e3:.0f} ms, {r['tokens_per_s']:.0f} tokens/s, "
      f"compile {r['compile_s']:.1f} s",
      f"matmul peak {r['peak_flops'] / 1e9:.0f} GFLOP/s, MFU {r['mfu']:.1%} "
      f"(target >= {r['mfu_target']:.0%}: {met})",
    ]
  )
