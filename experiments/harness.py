"""Plumbing the experiments share: a rung's training config, one run of it, a figure.

Every experiment trains through the one training loop (`jaxformer.train.loop.train`, or its
sweep of replicas) with a config from `experiments/configs/default.py`, overriding only the
fields it varies (`train_config`: the engine's policy and the scorecard build theirs here;
`train`: one run, as the notebooks train):

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


# Model fields of an arm on a text corpus: None lets the loop size the model from the corpus
# (program.resolve), so a design does not depend on which characters the corpus holds today.
SIZED_BY_CORPUS = {"vocab_size": None, "max_len": None}


# A text corpus (the old protocol's text arms read it; colabs/05_mlp_as_memory.ipynb does):
# jaxformer's own source, jaxformer/**/*.py at commit 7a28022 (the files in sorted order, one
# stream, 589,846 characters), gzipped. Pinned: the live source changes with every commit, so
# a text arm reading it reproduced only at the commit that ran it. SOURCE_CORPUS_SHA256 is the
# digest of the decompressed stream (tests/experiments/test_harness.py).
SOURCE_CORPUS = "experiments/corpora/jaxformer_source_7a28022.txt.gz"
SOURCE_CORPUS_SHA256 = "0cb1a6e38966486387288d9b10ec3609c94fd621e3e48ae18308acc995e18605"


def init_params(model, tokens_BL, seed=0):
  """Unboxed freshly initialized params of `model` (jax.random.key(seed)) for inputs shaped
  like tokens_BL: one program per model and shape, kept for the next seed (sweep.init_params)."""
  return sweep.init_params(model, [jax.random.key(seed)], np.shape(tokens_BL))[0]


def figure(cols=1, rows=1, width=4.5, height=3.5):
  fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
  FigureCanvasAgg(fig)
  return fig


def save(fig, workdir, name):
  """Writes `fig` as workdir/name (a .png) and returns the name relative to workdir."""
  os.makedirs(workdir, exist_ok=True)
  fig.savefig(os.path.join(workdir, name), dpi=100)
  return name
