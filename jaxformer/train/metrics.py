"""What a run reports: metrics.jsonl, TensorBoard events, progress, and the MFU arithmetic.

metrics.jsonl holds one JSON object per logged step (`step`, `loss`, ...; eval records
carry `eval_loss` and `eval_accuracy`), appended, so a resumed run continues the file;
records past the restored step (logged after the last checkpoint by the run that died)
are dropped on resume so every step appears once.

Model FLOPs per token (forward + backward = 3 x forward, PaLM appendix B):
  6 N  +  6 L (score_width + mix_width) per mixer layer, halved when the mask is causal
N counts the parameters used in matmuls (not the embedding gather or the position table);
a score of q . k over L sources costs 2 L H K forward, mixing values 2 L H K again, so a
non-causal transformer gives the familiar 6 N + 12 layers L D (with H K = D). A causal
query reads on average half the sequence, so causal attention counts half (as MaxText
does): 6 N + 6 layers L D. The 'full' and 'diagonal' dynamic weights mix through D x D and
D entries per source instead.

MFU convention (one for the loop and the benchmarks): MFU = FLOPs/token x tokens/s / peak.
  CPU            peak = the measured float32 matmul peak (`measure_matmul_peak`);
  GPU / TPU      peak = the vendor's dense peak for the compute dtype (`VENDOR_PEAKS`, e.g.
                 H200 989 TFLOP/s bf16); the measured matmul peak is reported beside it.
An accelerator missing from the table falls back to the measured peak and says so
(`peak_source`); `peak_flops_per_device` in the config overrides both.
"""

import dataclasses
import functools
import importlib.util
import json
import math
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from etils import epath
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxformer import files, ladder

METRICS_FILE = "metrics.jsonl"
GATHERED_PARAMS = ("embed", "pos_embed")  # used by index, not by matmul

# Dense (no sparsity) peak FLOP/s per device from the vendors' data sheets, by compute dtype,
# keyed by a substring of jax's `device_kind`. float32 on NVIDIA is the TF32 tensor-core peak
# (JAX computes float32 matmuls in TF32 there by default) and on TPU the bfloat16 peak (one
# bfloat16 pass by default). SXM parts; a PCIe H100 is slower than this row.
VENDOR_PEAKS = {
  "H200": {"bfloat16": 989.4e12, "float32": 494.7e12},
  "H100 80GB HBM3": {"bfloat16": 989.4e12, "float32": 494.7e12},
  "A100-SXM4": {"bfloat16": 312e12, "float32": 156e12},
  "TPU v4": {"bfloat16": 275e12, "float32": 275e12},
  "TPU v5 lite": {"bfloat16": 197e12, "float32": 197e12},
  "TPU v5p": {"bfloat16": 459e12, "float32": 459e12},
  "TPU v6 lite": {"bfloat16": 918e12, "float32": 918e12},
}


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
  value_width = c.num_heads * ladder.value_rank(c)  # = heads_width unless model.value_rank
  mix_width = {"full": c.d_model * c.d_model, "diagonal": c.d_model}.get(c.weights, value_width)
  if rung in ladder.RECURRENT_RUNGS:  # the read over states uses the attention defaults
    mix_width = heads_width
  per_layer = 6 * seq_len * (heads_width + mix_width)
  if c.mask == "causal":
    per_layer //= 2  # a causal query reads half the sequence on average (MaxText's count)
  return 6 * matmul_params + mixer_layers * per_layer


def matmul_flops(mesh, size, dtype, repeats=5, cpu=False):
  """FLOP per wall second (with cpu: per second of process CPU time, all threads) of a square
  matmul on every device of `mesh` at once (best of `repeats`): the rows of a
  (size x devices) x size operand are split over the devices, so each multiplies its own
  size x size block."""
  accel = mesh.devices.flat[0].platform != "cpu"
  rows, replicated = NamedSharding(mesh, P(mesh.axis_names[0])), NamedSharding(mesh, P())
  key_a, key_b = jax.random.split(jax.random.key(size))
  a = jax.device_put(jax.random.normal(key_a, (size * mesh.size, size), dtype), rows)
  b = jax.device_put(jax.random.normal(key_b, (size, size), dtype), replicated)
  matmul = jax.jit(jnp.matmul, out_shardings=rows)
  calls = 10 if accel else 1  # amortize dispatch where a matmul takes a millisecond
  timed = time_calls(lambda: matmul(a, b), repeats, calls, warmup=True)
  return 2 * size**3 * mesh.size / max(timed.best_cpu if cpu else timed.best, 1e-9)


@dataclasses.dataclass(frozen=True)
class Timings:
  """Seconds per call in each timed loop of time_calls: wall clock, and process CPU time (all
  of this process's threads; on a shared machine less disturbed by other processes)."""

  wall: tuple
  cpu: tuple

  @property
  def best(self):
    return min(self.wall)

  @property
  def best_cpu(self):
    return min(self.cpu)

  @property
  def median(self):
    return statistics.median(self.wall)

  @property
  def median_cpu(self):
    return statistics.median(self.cpu)


def time_calls(fn, repeats, calls=1, warmup=False):
  """The one timer of the loop and the benchmarks: Timings of `repeats` loops of `calls`
  calls of fn(), each loop waiting for its last result (jax arrays, or anything else as it
  is); with warmup, one untimed call first (the compile)."""
  if warmup:
    jax.block_until_ready(fn())
  wall, cpu = [], []
  for _ in range(repeats):
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(calls):
      out = fn()
    jax.block_until_ready(out)
    wall.append((time.perf_counter() - start) / calls)
    cpu.append((time.process_time() - cpu_start) / calls)
  return Timings(tuple(wall), tuple(cpu))


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


def vendor_peak(device, dtype):
  """The data-sheet dense peak FLOP/s of `device` for compute `dtype`; None on a CPU or a
  device missing from VENDOR_PEAKS."""
  if device.platform == "cpu":
    return None
  for kind, peaks in VENDOR_PEAKS.items():
    if kind in device.device_kind:
      return peaks.get(jnp.dtype(dtype).name)
  return None


def device_peak(device, dtype, configured=None):
  """(peak FLOP/s of one device, where it came from) by the convention in the docstring:
  'config', 'vendor' (accelerators) or 'measured' (CPUs, unknown accelerators)."""
  if configured:
    return configured, "config"
  vendor = vendor_peak(device, dtype)
  if vendor is not None:
    return vendor, "vendor"
  return measure_matmul_peak(), "measured"


def system_peak(mesh, peak_flops_per_device=None, dtype="float32"):
  """Peak FLOP/s of the whole mesh (`device_peak` per device). Simulated CPU devices share
  one CPU: count it once."""
  device = mesh.devices.flat[0]
  per_device, _ = device_peak(device, dtype, peak_flops_per_device)
  return per_device * (1 if device.platform == "cpu" else mesh.size)


class Writer:
  """metrics.jsonl and TensorBoard events in `workdir`; does nothing when disabled.

  A local workdir's metrics.jsonl is appended to, one flushed line per record. An object
  store (gs://...) cannot append: there the file is written whole after each record (it
  stays small: one line per logged step). TensorBoard events go through tensorboardX, which
  writes gs:// only with google-cloud-storage installed; without it the run says so once and
  writes metrics.jsonl alone.
  """

  def __init__(self, workdir, *, enabled=True, resume_step=None, stream=None):
    self.enabled = enabled and workdir is not None
    self._file = self._tb = self._lines = None
    if not self.enabled:
      return
    root = epath.Path(workdir)
    self._path = root / METRICS_FILE
    lines = _lines_until(self._path, resume_step, stream or sys.stderr)
    if files.is_local(workdir):
      if resume_step is not None:
        _replace(self._path, "".join(lines))
      self._file = self._path.open("a")
    else:
      self._lines = lines
    self._tb = _tensorboard(root / "tensorboard", stream or sys.stderr)

  def write(self, step, scalars):
    if not self.enabled:
      return
    record = {"step": int(step), **{k: _json_value(v) for k, v in scalars.items()}}
    line = json.dumps(record) + "\n"
    if self._file is not None:
      self._file.write(line)
      self._file.flush()
    else:
      self._lines.append(line)
      _replace(self._path, "".join(self._lines))
    if self._tb is not None:
      for name, value in record.items():
        if name != "step" and isinstance(value, int | float):  # "nan" strings are skipped
          self._tb.add_scalar(name, value, int(step))

  def close(self):
    if self._file is not None:
      self._file.close()
    if self._tb is not None:
      self._tb.close()
    self._file = self._tb = self._lines = None
    self.enabled = False


def _tensorboard(logdir, stream):
  """A tensorboardX SummaryWriter on `logdir`, or None (with one line on `stream`) where
  tensorboardX cannot write."""
  text = os.fspath(logdir)
  needs = {"gs://": "google.cloud.storage", "s3://": "boto3"}
  if not files.is_local(text):
    module = next((m for prefix, m in needs.items() if text.startswith(prefix)), None)
    if module is None or not _importable(module):
      print(
        f"note: no TensorBoard events in {text}: tensorboardX writes there only with "
        f"{module or 'a local path'} installed; metrics.jsonl holds the same scalars",
        file=stream,
        flush=True,
      )
      return None
  return _summary_writer()(text)


def _importable(module):
  try:
    return importlib.util.find_spec(module) is not None
  except ModuleNotFoundError:  # a parent package is missing
    return False


def _summary_writer():
  """tensorboardX's SummaryWriter, imported without torch.

  tensorboardX imports torch when it is installed (only to accept torch tensors; we pass
  floats), which is the slowest import of a training process (~2 s of a ~4 s start on a
  2-core CPU). Hiding torch during that import skips it; torch stays importable afterwards.
  There is no public switch for this; tests/train/test_metrics.py fails when tensorboardX
  stops trying torch at import (then this can go) or when hiding it stops working.
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


def _replace(path, text):
  """Writes `path` whole through a temporary file renamed over it: a crash mid-write leaves
  the old file or the new one, never a half of either."""
  tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
  tmp.write_text(text)
  tmp.replace(path)


def _step_of(line):
  try:
    record = json.loads(line)
  except json.JSONDecodeError:
    return None
  step = record.get("step") if isinstance(record, dict) else None
  return step if isinstance(step, int) else None


def _lines_until(path, step, stream=None):
  """The lines of metrics.jsonl at `path` (an epath) up to `step` (all if None).

  A last line that does not parse (a write cut short by a crash) is dropped with a warning
  on `stream` (stderr); a bad line before the last is an error naming the file and line."""
  if not path.exists():
    return []
  lines = [line + "\n" for line in path.read_text().splitlines() if line.strip()]
  steps = [_step_of(line) for line in lines]
  if lines and steps[-1] is None:
    print(
      f"warning: {path}: its last line is not a complete record (a write cut short); "
      f"dropped: {_clip(lines[-1].strip())}",
      file=stream or sys.stderr,
      flush=True,
    )
    lines, steps = lines[:-1], steps[:-1]
  if None in steps:
    raise ladder.ConfigError(
      f"{path}: line {steps.index(None) + 1} is not a metrics record; fix or delete that line"
    )
  return [line for line, s in zip(lines, steps, strict=True) if step is None or s <= step]


def _clip(text, limit=60):
  return text if len(text) <= limit else text[: limit - 3] + "..."


def read_metrics(workdir):
  """The records of metrics.jsonl, in order (a local path or an epath URL)."""
  return [json.loads(line) for line in _lines_until(epath.Path(workdir) / METRICS_FILE, None)]


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
