"""metrics.jsonl / TensorBoard writer, progress output, FLOPs per token and the matmul peak."""

import io
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import pytest

from jaxformer import ladder
from jaxformer.train import metrics
from tests.train.train_helpers import fake_object_store


def _params(rung, **fields):
  config = ladder.default_config(rung)
  with config.unlocked():
    for k, v in fields.items():
      config[k] = v
  model = ladder.build(rung, config)
  tokens = jnp.zeros((1, 8), jnp.int32)
  params = jax.eval_shape(lambda k: model.init(k, tokens), jax.random.key(0))["params"]
  return config, params  # boxed (nn.Partitioned) leaves: the count must see through them


def test_transformer_flops_are_6n_plus_12_layers_l_d_causal_halved():
  config, params = _params("transformer")
  n = metrics.matmul_param_count(params)
  total = sum(x.size for x in jax.tree.leaves(params))  # the boxes' values
  assert n == total - 64 * 64 - 64 * 64  # minus the token table and the position table
  L, D = 32, config.d_model
  # causal (the default mask): a query reads half the sequence on average (MaxText's count)
  assert metrics.flops_per_token("transformer", config, L, n) == 6 * n + 6 * 2 * L * D
  with config.unlocked():
    config.mask = "self"  # not causal: every score is counted
  assert metrics.flops_per_token("transformer", config, L, n) == 6 * n + 12 * 2 * L * D


def test_tied_embedding_counts_as_a_matmul():
  _, params = _params("transformer", tie_embeddings=True)
  untied = sum(x.size for x in jax.tree.leaves(params)) - 64 * 64  # minus positions
  assert metrics.matmul_param_count(params, tie_embeddings=True) == untied


def test_rnn_has_no_attention_term_and_full_dynamic_mixes_d_squared():
  config, params = _params("rnn")
  n = metrics.matmul_param_count(params)
  assert metrics.flops_per_token("rnn", config, 32, n) == 6 * n
  config, params = _params("full_dynamic")
  n = metrics.matmul_param_count(params)
  hk = config.num_heads * config.rank
  expected = 6 * n + config.num_layers * 3 * 32 * (hk + config.d_model**2)  # causal: half
  assert metrics.flops_per_token("full_dynamic", config, 32, n) == expected


class _Device:
  def __init__(self, platform, device_kind):
    self.platform, self.device_kind = platform, device_kind


def test_peak_convention_vendor_on_accelerators_measured_on_cpu(monkeypatch):
  h200 = _Device("gpu", "NVIDIA H200")
  assert metrics.device_peak(h200, "bfloat16") == (989.4e12, "vendor")
  assert metrics.device_peak(h200, jnp.float32)[0] == 494.7e12  # TF32, JAX's f32 default
  assert metrics.device_peak(h200, "bfloat16", configured=5e14) == (5e14, "config")
  monkeypatch.setattr(metrics, "measure_matmul_peak", lambda: 1.5e11)
  assert metrics.device_peak(_Device("cpu", "cpu"), "float32") == (1.5e11, "measured")
  assert metrics.device_peak(_Device("cpu", "cpu"), "bfloat16") == (1.5e11, "measured")
  assert metrics.device_peak(_Device("gpu", "Some Future GPU"), "bfloat16") == (1.5e11, "measured")


def test_time_calls_times_each_loop_after_an_optional_warm_up():
  calls = []
  timed = metrics.time_calls(lambda: calls.append(1) or time.sleep(0.02), 3, calls=2, warmup=True)
  assert len(calls) == 1 + 3 * 2  # the warm-up, then 3 loops of 2
  assert len(timed.wall) == len(timed.cpu) == 3 and min(timed.wall) >= 0.02
  assert timed.best == min(timed.wall) <= timed.median and timed.best_cpu <= timed.median_cpu
  assert timed.median_cpu < 0.01  # sleeping costs no CPU time: the clocks are not one


def test_measure_matmul_peak_is_positive_and_cached():
  peak = metrics.measure_matmul_peak(256, repeats=2)
  assert 1e6 < peak < 1e16
  assert metrics.measure_matmul_peak(256, repeats=2) == peak  # cached: measured once


HIDDEN_TORCH = """
import importlib.abc, importlib.util, json, sys
from jaxformer.train import metrics
metrics._summary_writer()
out = {"kept_out": "torch" not in sys.modules}
out["importable"] = importlib.util.find_spec("torch") is not None
tried = []
class Refuse(importlib.abc.MetaPathFinder):  # records the attempt, imports nothing
  def find_spec(self, name, path=None, target=None):
    if name == "torch":
      tried.append(name)
      raise ImportError(name)
for name in [m for m in sys.modules if m.split(".")[0] == "tensorboardX"]:
  del sys.modules[name]
sys.meta_path.insert(0, Refuse())
import tensorboardX
out["tensorboardx_tries_torch"] = bool(tried)
print(json.dumps(out))
"""


def test_summary_writer_keeps_torch_out_which_tensorboardx_still_imports():
  """metrics._summary_writer hides torch while tensorboardX imports: this fails when that
  stops working, or when tensorboardX no longer tries torch at import (the hiding can go)."""
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = {**os.environ, "PYTHONPATH": repo}
  done = subprocess.run(
    [sys.executable, "-c", HIDDEN_TORCH], capture_output=True, text=True, timeout=300, env=env
  )
  assert done.returncode == 0, done.stderr[-2000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert out == {"kept_out": True, "importable": True, "tensorboardx_tries_torch": True}


def test_writer_appends_jsonl_and_tensorboard(tmp_path):
  writer = metrics.Writer(str(tmp_path))
  writer.write(1, {"loss": jnp.float32(2.5), "accuracy": 0.25})
  writer.write(2, {"loss": float("nan")})
  writer.write(2, {"eval_loss": 1.5, "eval_accuracy": 0.5})
  writer.close()
  records = metrics.read_metrics(str(tmp_path))
  assert records[0] == {"step": 1, "loss": 2.5, "accuracy": 0.25}
  assert records[1] == {"step": 2, "loss": "nan"}  # still valid JSON
  assert records[2]["eval_accuracy"] == 0.5
  events = os.listdir(tmp_path / "tensorboard")
  assert len(events) == 1 and events[0].startswith("events.out.tfevents")
  assert os.path.getsize(tmp_path / "tensorboard" / events[0]) > 100


def test_writer_on_resume_drops_records_past_the_restored_step(tmp_path):
  path = tmp_path / metrics.METRICS_FILE
  path.write_text("".join(json.dumps({"step": s, "loss": s}) + "\n" for s in (1, 2, 3, 4)))
  writer = metrics.Writer(str(tmp_path), resume_step=2)
  writer.write(3, {"loss": 30.0})
  writer.close()
  assert [(r["step"], r["loss"]) for r in metrics.read_metrics(str(tmp_path))] == [
    (1, 1),
    (2, 2),
    (3, 30.0),
  ]


def test_writer_on_an_object_store_writes_the_file_whole(tmp_path):
  """gs:// cannot append: each record rewrites metrics.jsonl; a resume drops later steps;
  without google-cloud-storage there are no TensorBoard events, and the run says so."""
  note = io.StringIO()
  with fake_object_store(tmp_path):
    writer = metrics.Writer("gs://bucket/run", stream=note)
    writer.write(1, {"loss": 2.5})
    assert metrics.read_metrics("gs://bucket/run") == [{"step": 1, "loss": 2.5}]  # durable
    writer.write(2, {"loss": 2.0})
    writer.close()
    resumed = metrics.Writer("gs://bucket/run", resume_step=1, stream=note)
    resumed.write(2, {"loss": 1.5})
    resumed.close()
    records = metrics.read_metrics("gs://bucket/run")
  assert records == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 1.5}]
  assert os.listdir(tmp_path / "bucket" / "run") == [metrics.METRICS_FILE]
  assert "no TensorBoard events in gs://bucket/run/tensorboard" in note.getvalue()
  assert "google.cloud.storage" in note.getvalue()


def test_disabled_writer_writes_nothing(tmp_path):
  writer = metrics.Writer(str(tmp_path), enabled=False)
  writer.write(1, {"loss": 1.0})
  writer.close()
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("step,shown", [(5, False), (10, True), (12, True)])
def test_plain_progress_logs_every_n_and_the_last_step(step, shown):
  out = io.StringIO()  # not a TTY: plain lines
  progress = metrics.Progress(12, every=10, stream=out)
  progress.update(step, {"loss": 1.25, "accuracy": 0.5, "grad_norm": 3.0})
  progress.close()
  text = out.getvalue()
  assert bool(text) == shown
  if shown:
    assert text.startswith(f"step {step}/12 loss=1.25 accuracy=0.5") and "eta=" in text


def test_tty_progress_uses_a_bar():
  class Tty(io.StringIO):
    def isatty(self):
      return True

  out = Tty()
  progress = metrics.Progress(10, every=5, stream=out)
  progress.update(3, {"loss": 2.0})
  progress.message("step 3: eval")
  progress.close()
  text = out.getvalue()
  assert "3/10" in text and "loss=2" in text and "step 3: eval" in text


def test_writer_on_resume_drops_a_cut_short_last_line_with_a_warning(tmp_path):
  """A crash mid-write leaves half a record: the resume drops it (one warning), and the file
  is rewritten through a rename, so no temporary file is left."""
  path = tmp_path / metrics.METRICS_FILE
  path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
  stream = io.StringIO()
  w = metrics.Writer(str(tmp_path), resume_step=2, stream=stream)
  w.write(3, {"loss": 1.0})
  w.close()
  assert [r["step"] for r in metrics.read_metrics(str(tmp_path))] == [1, 2, 3]
  assert stream.getvalue().startswith(f"warning: {path}: its last line is not a complete record")
  assert stream.getvalue().count("\n") == 1 + stream.getvalue().count("note:")
  assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [metrics.METRICS_FILE]


def test_a_bad_record_before_the_last_line_is_named(tmp_path):
  path = tmp_path / metrics.METRICS_FILE
  path.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
  with pytest.raises(ladder.ConfigError, match=rf"{path}: line 2 is not a metrics record"):
    metrics.Writer(str(tmp_path), resume_step=2)
