"""Plumbing shared by the design-pressure experiments: train a rung, probe it, plot.

Every experiment trains through the one training loop (`jaxformer.train.loop.train`) with a
config from `experiments/configs/default.py`, overriding only the fields it varies:

  summary = harness.train("rnn", "mqar:vocab_size=64,seq_len=16,num_kv_pairs=2",
                          model={"cell": "elman"}, total_steps=400)
  summary["final_eval_accuracy"], summary["params"], summary["model"]

Figures are drawn on matplotlib's Agg canvas without pyplot (no global state, no display),
and saved as PNGs named `<experiment>_<what>.png` beside the report.
"""

import os
import time

import jax
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from jaxformer import ladder
from jaxformer.train import sweep

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_config(rung, task, model=None, **fields):
  """The training config of `rung` on `task`, with model fields and top-level fields replaced.

  A field name that does not exist raises (ConfigDict refuses new keys on a locked dict).
  """
  from experiments.configs import default  # the training config

  config = default.get_config(f"rung={rung}")
  config.task = task
  # The experiments report accuracy, not MFU: a nominal peak skips the loop's matmul
  # measurement.
  config.peak_flops_per_device = 1e11
  with config.model.unlocked():
    for key, value in (model or {}).items():
      if key not in config.model:
        raise ladder.ConfigError(f"model.{key}: no such model field")
      config.model[key] = value
  for key, value in fields.items():
    if key not in config:
      raise ladder.ConfigError(f"{key}: no such training field")
    config[key] = value
  return config


def train(rung, task, model=None, **fields):
  """Trains once (no workdir: nothing written); the loop's summary plus `model`, `config`
  and `cpu_seconds` (process CPU time: on a shared machine it tracks the cost better than
  wall time)."""
  config = train_config(rung, task, model, **fields)
  from jaxformer.train import loop  # the heavy import only when something trains

  start = time.process_time()
  summary = loop.train(config)
  summary["cpu_seconds"] = time.process_time() - start
  summary["model"] = ladder.build(rung, summary["config"].model)  # sized for the task
  return summary


def model_fields(config, **fields):
  """The model fields every compared model of an experiment shares, then `fields`: width
  and depth from `config`, vocab_size and max_len from its task (unless `fields` names
  them), and a layer norm before each mixer and the output (pre-norm + final norm) for every
  model alike."""
  shared = {"d_model": config.d_model, "num_layers": config.num_layers}
  shared |= {"norm": "pre", "final_norm": True}
  if "vocab_size" not in fields:
    shared["vocab_size"] = config.vocab_size
  if "max_len" not in fields:
    shared["max_len"] = config.seq_len
  return shared | fields


# Model fields of an arm on a text corpus: None lets the loop size the model from the corpus
# (program.resolve), so a design does not depend on which characters the corpus holds today.
SIZED_BY_CORPUS = {"vocab_size": None, "max_len": None}


# The text arms' corpus (heads, mlp_memory): jaxformer's own source, jaxformer/**/*.py at
# commit 7a28022 (the files in sorted order, one stream, 589,846 characters), gzipped. Pinned:
# the live source changes with every commit, so a text arm reading it reproduced only at the
# commit that ran it. SOURCE_CORPUS_SHA256 is the digest of the decompressed stream
# (tests/experiments/test_harness.py). mlp_memory v8's full run read this source (its commit).
SOURCE_CORPUS = "experiments/corpora/jaxformer_source_7a28022.txt.gz"
SOURCE_CORPUS_SHA256 = "0cb1a6e38966486387288d9b10ec3609c94fd621e3e48ae18308acc995e18605"


def text_task(corpus, seq_len, stride):
  """The char-level text spec of `corpus` (a glob relative to the repository root): windows of
  seq_len characters every `stride`."""
  path = os.path.join(REPO_ROOT, corpus)
  return f"text:path={path},level=char,seq_len={seq_len},stride={stride}"


def mqar_task(config, seq_len=None, num_kv_pairs=None, vocab_size=None):
  """The MQAR spec of an experiment config (its vocab_size, seq_len, num_kv_pairs,
  num_examples, num_test_examples and seed); a grid point passes its own seq_len, pairs or
  vocabulary."""
  seq_len = config.seq_len if seq_len is None else seq_len
  num_kv_pairs = config.num_kv_pairs if num_kv_pairs is None else num_kv_pairs
  vocab_size = config.vocab_size if vocab_size is None else vocab_size
  return (
    f"mqar:vocab_size={vocab_size},seq_len={seq_len},num_kv_pairs={num_kv_pairs},"
    f"num_examples={config.num_examples},num_test_examples={config.num_test_examples},"
    f"seed={config.seed}"
  )


def init_params(model, tokens_BL, seed=0):
  """Unboxed freshly initialized params of `model` (jax.random.key(seed)) for inputs shaped
  like tokens_BL: one program per model and shape, kept for the next seed (sweep.init_params)."""
  return sweep.init_params(model, [jax.random.key(seed)], np.shape(tokens_BL))[0]


def read_inputs(dataset, indices):
  """int32 [N, L] input tokens of examples `indices` of a jaxformer.data Dataset (one read)."""
  indices = [int(i) for i in indices]
  getitems = getattr(dataset.source, "__getitems__", None)
  records = getitems(indices) if getitems else [dataset.source[i] for i in indices]
  return np.stack([np.asarray(r["inputs"]) for r in records]).astype(np.int32)


def figure(cols=1, rows=1, width=4.5, height=3.5):
  fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
  FigureCanvasAgg(fig)
  return fig


def save(fig, workdir, name):
  """Writes `fig` as workdir/name (a .png) and returns the name relative to workdir."""
  os.makedirs(workdir, exist_ok=True)
  fig.savefig(os.path.join(workdir, name), dpi=100)
  return name


def finite(values):
  """True when every number in a nested dict / list is finite (for tests and sanity)."""
  if isinstance(values, dict):
    return all(finite(v) for v in values.values())
  if isinstance(values, (list, tuple)):
    return all(finite(v) for v in values)
  if isinstance(values, (int, float, np.floating, np.integer)):
    return bool(np.isfinite(values))
  return True
