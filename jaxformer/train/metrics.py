"""What a run reports: metrics.jsonl, TensorBoard events, progress, and the MFU arithmetic.

metrics.jsonl holds one JSON object per logged step (`step`, `loss`, ...; eval records
carry `eval_loss` and `eval_accuracy`), appended, so a resumed run continues the file;
records past the restored step (logged after the last checkpoint by the run that died)
are dropped on resume so every step appears once.

Model FLOPs per token (forward + backward = 3 x forward, PaLM appendix B):
  6 N  +  6 L (score_width + mix_width) per mixer layer
N counts the parameters used in matmuls (not the embedding gather or the position table);
a score of q . k over L sources costs 2 L H K forward, mixing values 2 L H K again, so the
transformer rung gives the familiar 6 N + 12 layers L D (with H K = D). The 'full' and
'diagonal' dynamic weights mix through D x D and D entries per source instead.
MFU = FLOPs/token x tokens/s / peak, the peak from the config or `measure_matmul_peak`.
"""

import functools
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxformer import ladder

METRICS_FILE = "metrics.jsonl"
GATHERED_PARAMS = ("embed", "pos_embed")  # used by index, not by matmul


def matmul_param_count(params, tie_embeddings=False):
  """Parameters that take part in matmuls: all but the embedding table and positions."""
  total = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    keys = [p.key for p in path if isinstance(p, jax.tree_util.DictKey)]  # boxed or not
    name = keys[-1] if keys else None
    if name == "pos_embed" or (name == "embed" and not tie_embeddings):
      continue
    total += math.prod(np.shape(leaf))
  return total


def flops_per_token(rung, model_config, seq_len, matmul_params):
  """Model FLOPs (forward + backward) per trained token, by the formula in the docstring."""
  c = model_config
  if rung == ladder.CUSTOM:  # a custom mixer's own arithmetic has no formula here
    return 6 * matmul_params
  if rung in ladder.RECURRENT_RUNGS:
    mixer_layers = 1 if rung == "rnn_attention" else 0
  else:
    mixer_layers = c.num_layers
  heads_width = c.num_heads * ladder.head_rank(c)
  mix_width = {"full": c.d_model * c.d_model, "diagonal": c.d_model}.get(c.weights, heads_width)
  if rung in ladder.RECURRENT_RUNGS:  # the read over states uses the attention defaults
    mix_width = heads_width
  per_layer = 6 * seq_len * (heads_width + mix_width)
  return 6 * matmul_params + mixer_layers * per_layer


def matmul_flops(mesh, size, dtype, repeats=5, clock=time.perf_counter):
  """FLOP per second of `clock` of a square matmul on every device of `mesh` at once (best
  of `repeats`): the rows of a (size x devices) x size operand are split over the devices,
  so each multiplies its own size x size block. `clock`: wall time (time.perf_counter) or
  process CPU time (time.process_time, all threads)."""
  accel = mesh.devices.flat[0].platform != "cpu"
  rows, replicated = NamedSharding(mesh, P(mesh.axis_names[0])), NamedSharding(mesh, P())
  key_a, key_b = jax.random.split(jax.random.key(size))
  a = jax.device_put(jax.random.normal(key_a, (size * mesh.size, size), dtype), rows)
  b = jax.device_put(jax.random.normal(key_b, (size, size), dtype), replicated)
  matmul = jax.jit(jnp.matmul, out_shardings=rows)
  jax.block_until_ready(matmul(a, b))
  calls = 10 if accel else 1  # amortize dispatch where a matmul takes a millisecond
  best = math.inf
  for _ in range(repeats):
    start = clock()
    for _ in range(calls):
      out = matmul(a, b)
    jax.block_until_ready(out)
    best = min(best, (clock() - start) / calls)
  return 2 * size**3 * mesh.size / max(best, 1e-9)


@functools.cache
def measure_matmul_peak(size=None, dtype=None, repeats=5):
  """Measured FLOP/s of one device on a square matmul (best of `repeats`).

  Defaults: 1024 float32 on CPU, 8192 bfloat16 on accelerators. Cached per process,
  so the loop pays for it once.
  """
  device = jax.local_devices()[0]
  accel = device.platform != "cpu"
  size = size or (8192 if accel else 1024)
  dtype = dtype or (jnp.bfloat16 if accel else jnp.float32)
  mesh = jax.make_mesh((1,), ("devices",), axis_types=(AxisType.Auto,), devices=[device])
  return matmul_flops(mesh, size, dtype, repeats)


def system_peak(mesh, peak_flops_per_device=None):
  """Peak FLOP/s of the whole mesh. Simulated CPU devices share one CPU: count it once."""
  platform = mesh.devices.flat[0].platform
  per_device = peak_flops_per_device or measure_matmul_peak()
  return per_device * (1 if platform == "cpu" else mesh.size)


class Writer:
  """metrics.jsonl and TensorBoard events in `workdir`; does nothing when disabled."""

  def __init__(self, workdir, *, enabled=True, resume_step=None):
    self.enabled = enabled and workdir is not None
    self._file = self._tb = None
    if not self.enabled:
      return
    path = os.path.join(workdir, METRICS_FILE)
    if resume_step is not None:
      _truncate_after(path, resume_step)
    self._file = open(path, "a")  # noqa: SIM115  (closed in close())
    self._tb = _summary_writer()(os.path.join(workdir, "tensorboard"))

  def write(self, step, scalars):
    if not self.enabled:
      return
    record = {"step": int(step), **{k: _json_value(v) for k, v in scalars.items()}}
    self._file.write(json.dumps(record) + "\n")
    self._file.flush()
    for name, value in record.items():
      if name != "step" and isinstance(value, int | float):  # "nan" strings are skipped
        self._tb.add_scalar(name, value, int(step))

  def close(self):
    if self._file:
      self._file.close()
      self._tb.close()
      self._file = self._tb = None


def _summary_writer():
  """tensorboardX's SummaryWriter, imported without torch.

  tensorboardX imports torch when it is installed (only to accept torch tensors; we pass
  floats), which is the slowest import of a training process (~2 s of a ~4 s start on a
  2-core CPU). Hiding torch during that import skips it; torch stays importable afterwards.
  """
  hide = "torch" not in sys.modules
  if hide:
    sys.modules["torch"] = None  # `import torch` raises ImportError while this is set
  try:
    from tensorboardX import SummaryWriter
  finally:
    if hide:
      del sys.modules["torch"]
  return SummaryWriter


def _json_value(value):
  value = np.asarray(value).item() if hasattr(value, "shape") else value
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)  # JSON has no nan/inf; keep the record parseable
  return value


def _truncate_after(path, step):
  if not os.path.exists(path):
    return
  with open(path) as f:
    kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
  with open(path, "w") as f:
    f.writelines(kept)


def read_metrics(workdir):
  """The records of metrics.jsonl, in order."""
  with open(os.path.join(workdir, METRICS_FILE)) as f:
    return [json.loads(line) for line in f if line.strip()]


class Progress:
  """A tqdm bar with ETA on an interactive terminal, plain log lines every `every` otherwise."""

  def __init__(self, total, initial=0, *, every=10, enabled=True, stream=None):
    self.stream = stream or sys.stdout
    self.enabled, self.every, self.total = enabled, every, total
    self._bar = None
    self._start, self._initial = time.perf_counter(), initial
    if enabled and self.stream.isatty():
      from tqdm import tqdm

      self._bar = tqdm(total=total, initial=initial, file=self.stream, dynamic_ncols=True)

  def update(self, step, scalars):
    if not self.enabled:
      return
    shown = {k: scalars[k] for k in ("loss", "accuracy", "tokens_per_sec") if k in scalars}
    if self._bar is not None:
      self._bar.update(step - self._bar.n)
      self._bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
    elif step % self.every == 0 or step == self.total:
      done = step - self._initial
      elapsed = time.perf_counter() - self._start
      eta = elapsed / done * (self.total - step) if done else math.nan
      fields = " ".join(f"{k}={v:.4g}" for k, v in shown.items())
      print(f"step {step}/{self.total} {fields} eta={eta:.0f}s", file=self.stream, flush=True)

  def message(self, text):
    if not self.enabled:
      return
    if self._bar is not None:
      self._bar.write(text, file=self.stream)
    else:
      print(text, file=self.stream, flush=True)

  def close(self):
    if self._bar is not None:
      self._bar.close()
      self._bar = None
