"""Train suite: tokens/s, step time and MFU of the transformer rung's full train step.

  python -m experiments.bench train [--size gpt_small|tiny] [--json] [--set attention=blockwise]
  python -m experiments.bench train --compare torch     # beside a PyTorch eager model
  python -m experiments.bench train --set dtype=bfloat16

The step is jaxformer.train.step.train_step (forward, backward, AdamW with clipping, the
non-finite guard), jitted with the state donated, on random tokens. MFU = model FLOPs per step
(jaxformer.train.metrics.flops_per_token: 6 N + attention, causal attention at half) / step
time / peak, by the convention of jaxformer.train.metrics: on a CPU the float32 matmul peak
measured in the same run (the best of several square sizes, so it is not understated),
again before every window of `steps` steps; on a GPU / TPU the vendor's dense peak for the
compute dtype, with the measured matmul peak (`peak_flops_measured`) beside it. The median
window is reported (`mfu_windows` lists them all). `mfu_cpu_time` is the same ratio in
process CPU seconds, for a shared machine where other processes take the cores away. Steps
are dispatched back to back, one host sync per window.

`compare='torch'` (CPU only) adds a row for a plain PyTorch eager model of the same shape
(jaxformer.bench.torch_reference: same parameter count, same FLOP formula, same peak, same
batch and tokens, AdamW with clipping, in the same dtype) timed in the same process in
alternating windows (jaxformer first in even windows, torch first in odd ones), so both see
the same machine load; `speed_vs_torch` is the median over windows of torch's step time /
jaxformer's in the same window (> 1: jaxformer is faster).
"""

import functools
import os
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxformer import compile_cache, ladder
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
ACCEL_TARGET_MFU = 0.50  # of the vendor's peak for the dtype, on a GPU or TPU (BENCHMARKS.md)
CPU_PEAK_SIZES = (1024, 2048)
ACCEL_PEAK_SIZES = (4096, 8192)


DTYPES = ("float32", "bfloat16")
COMPARE = (None, "torch")


def config(size="gpt_small", attention=None, **model_fields):
  """The training config (jaxformer.train.config) at `size` for the transformer rung, with
  `model_fields` (dtype, scan_layers, remat, ...) set on its model config."""
  c = config_lib.get_config("transformer")
  spec = MODELS[size]
  with c.unlocked():
    for field, value in {**spec["model"], **model_fields}.items():
      c.model[field] = value
    if attention is not None:
      c.model.attention = attention
    c.batch_size = spec["batch_size"]
    c.total_steps = 1000
  return c, spec["seq_len"]


def matmul_peak(mesh, dtype, cpu=False, sizes=None, repeats=2):
  """The best `metrics.matmul_flops` (all of the mesh's devices at once) over a few square
  sizes, so the peak is not understated."""
  accel = mesh.devices.flat[0].platform != "cpu"
  sizes = sizes or (ACCEL_PEAK_SIZES if accel else CPU_PEAK_SIZES)
  return max(metrics.matmul_flops(mesh, n, dtype, repeats, cpu) for n in sizes)


def run(
  model_size="gpt_small",
  steps=3,
  windows=5,
  attention=None,
  devices=1,
  dtype="float32",
  scan_layers=False,
  remat="none",
  compare=None,
  num_layers=None,
):
  """Times the train step; one row (tokens_per_s, step_time_s, mfu, peak_flops, ...), and a
  second row for the PyTorch model when `compare='torch'`.

  dtype: the compute dtype (bfloat16: activations and matmuls in bfloat16, parameters and
  optimizer state in float32). scan_layers / remat: the model's layer stack (jaxformer.nn.lm).
  num_layers: another depth than the preset's (compile time vs depth; `compile_s` and
  `compile_cpu_s` count tracing and compiling the step, `compile_cache_hits` says whether the
  persistent cache served it: set JAXFORMER_COMPILATION_CACHE=off to time a cold compile).
  devices > 1: data parallel over the first `devices` devices (the batch split over them,
  the state replicated, gradients all-reduced): several GPUs or TPU cores, or on a CPU the
  devices `python -m experiments.bench --cpu-devices N` makes.
  """
  check_choice("model_size", model_size, tuple(MODELS))
  check_choice("dtype", dtype, DTYPES)
  check_choice("compare", compare, COMPARE)
  check_positive(steps=steps, windows=windows, devices=devices)
  fields = dict(dtype=dtype, scan_layers=scan_layers, remat=remat)
  if num_layers is not None:
    check_positive(num_layers=num_layers)
    fields["num_layers"] = num_layers
  c, seq_len = config(model_size, attention, **fields)
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
  accel = mesh.devices.flat[0].platform != "cpu"
  if compare == "torch" and (accel or devices > 1):
    raise BenchError(f"compare={compare!r}: runs on one CPU device only (PyTorch eager on CPU)")
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

  hits = compile_cache.counts()["cache_hits"]
  start, start_cpu = time.perf_counter(), time.process_time()
  train_step = train_step.lower(state, batch).compile()  # timed apart from running
  compile_s, compile_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
  compile_cache_hits = compile_cache.counts()["cache_hits"] - hits
  state, out = train_step(state, batch)
  jax.block_until_ready(out["loss"])
  state, out = train_step(state, batch)  # one more warm step
  jax.block_until_ready(out["loss"])
  box = {"state": state}

  def jax_window():
    state = box["state"]
    for _ in range(steps):
      state, out = train_step(state, batch)
    jax.block_until_ready(out["loss"])
    box["state"], box["loss"] = state, out["loss"]

  runners = {"jaxformer": jax_window}
  torch_params = None
  if compare == "torch":
    runners["torch"], torch_params = _torch_runner(c, np.asarray(tokens), steps)

  # Windows of `steps` steps, each right after a matmul peak measurement: on a shared
  # machine the load changes over minutes, so each window is compared with its own peak and
  # the median window is reported (on a quiet machine every window gives the same answer).
  # The MFU peak follows jaxformer.train.metrics: measured float32 on a CPU, the vendor's
  # dense peak for the compute dtype on an accelerator (the measured one beside it).
  vendor = metrics.vendor_peak(mesh.devices.flat[0], dtype)
  peak_dtype = jnp.dtype(dtype) if accel else jnp.float32
  params = metrics.matmul_param_count(state["params"], c.model.tie_embeddings)
  tokens_per_step = c.batch_size * seq_len
  flops_per_step = metrics.flops_per_token(c.rung, c.model, seq_len, params) * tokens_per_step
  measured = {name: [] for name in runners}
  for w in range(windows):
    measured_peak = matmul_peak(mesh, peak_dtype)
    peak = vendor * devices if vendor else measured_peak
    peak_cpu = matmul_peak(mesh, peak_dtype, True, CPU_PEAK_SIZES[-1:], repeats=3)
    for name in list(runners)[:: 1 if w % 2 == 0 else -1]:
      wall, cpu = time.perf_counter(), time.process_time()
      runners[name]()
      step_s = (time.perf_counter() - wall) / steps
      step_cpu_s = (time.process_time() - cpu) / steps
      measured[name].append((step_s, peak, step_cpu_s, peak_cpu, measured_peak))

  target = ACCEL_TARGET_MFU if accel else TARGET_MFU
  base = dict(
    rung=c.rung,
    num_layers=c.model.num_layers,
    attention=c.model.attention,
    dtype=dtype,
    scan_layers=scan_layers,
    remat=remat,
    devices=devices,
    batch=c.batch_size,
    seq_len=seq_len,
    flops_per_step=flops_per_step,
    mfu_target=target,
    peak_source="vendor" if vendor else "measured",
    load_avg_1m=os.getloadavg()[0],
    xla_flags=os.environ.get("XLA_FLAGS", ""),
  )

  def row(name, **extra):
    windows_ = measured[name]
    mfus = [flops_per_step / step_s / peak for step_s, peak, *_ in windows_]
    # the median window by MFU (its own peak), reported whole
    step_s, peak, step_cpu_s, peak_cpu, measured_peak = windows_[
      sorted(range(len(mfus)), key=mfus.__getitem__)[len(mfus) // 2]
    ]
    mfu = flops_per_step / step_s / peak
    return {
      "framework": name,
      **base,
      "step_time_s": step_s,
      "tokens_per_s": tokens_per_step / step_s,
      "peak_flops": peak,
      "peak_flops_measured": measured_peak,
      "mfu": mfu,
      "mfu_target_met": bool(mfu >= target),
      # the same ratio in process CPU seconds: on a shared machine less disturbed by others
      "step_cpu_s": step_cpu_s,
      "mfu_cpu_time": flops_per_step / step_cpu_s / peak_cpu,
      "mfu_windows": [round(m, 4) for m in mfus],
      **extra,
    }

  rows = [
    row(
      "jaxformer",
      params=int(sum(x.size for x in jax.tree.leaves(box["state"]["params"]))),
      compile_s=compile_s,
      compile_cpu_s=compile_cpu_s,
      compile_cache_hits=compile_cache_hits,
      final_loss=float(box["loss"]),
    )
  ]
  if compare == "torch":
    ratios = [t[0] / j[0] for j, t in zip(measured["jaxformer"], measured["torch"], strict=True)]
    rows[0]["speed_vs_torch"] = statistics.median(ratios)
    rows[0]["speed_vs_torch_windows"] = [round(r, 4) for r in ratios]
    import torch

    rows.append(
      row(
        "torch",
        params=torch_params,
        torch_threads=torch.get_num_threads(),
        attention="sdpa",  # F.scaled_dot_product_attention, not jaxformer's kernel
      )
    )
  return rows


def _torch_runner(c, tokens, steps):
  """(run one window of `steps` PyTorch steps, parameter count) on the same tokens."""
  import torch

  from jaxformer.bench import torch_reference

  model, opt = torch_reference.build(c.model, c)
  ids = torch.from_numpy(tokens.astype(np.int64))
  inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
  autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=c.model.dtype == "bfloat16")

  def window():
    for _ in range(steps):
      with autocast:
        loss = torch_reference.train_step(model, opt, inputs, targets, c.grad_clip_norm)
    loss.item()  # the steps ran eagerly; .item() only reads the last loss

  window()  # warm: allocator, optimizer state, autograd graph caches
  return window, sum(p.numel() for p in model.parameters())


SUITE = Suite(
  run=run,
  sizes={
    # blockwise attention skips the causal mask's empty blocks (3-7% of the step over the
    # materialized 'generic' form); one scan over the layers with remat='dots' (recompute
    # all but matmul outputs) cut the CPU time per step by 11-13% against the unrolled stack
    # in interleaved runs (BENCHMARKS.md)
    "gpt_small": dict(
      model_size="gpt_small", attention="blockwise", scan_layers=True, remat="dots"
    ),
    "gpt_small_unrolled": dict(model_size="gpt_small", attention="blockwise"),
    "gpt_small_generic": dict(model_size="gpt_small"),
    # on a GPU: bfloat16 compute, jax.nn.dot_product_attention (cuDNN where it applies)
    "gpt2_small": dict(model_size="gpt2_small", attention="dot_product", dtype="bfloat16"),
    "tiny": dict(model_size="tiny", steps=2, windows=1),
  },
  columns=(
    "framework",
    "attention",
    "dtype",
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
    "speed_vs_torch",
  ),
  description="transformer train step (fwd, bwd, AdamW): tokens/s and MFU vs a measured matmul peak",
)
