"""What the notebooks in colabs/ share: train a rung at a notebook's sizes, plot its curves,
read a test batch. Each notebook wraps these with the sizes of its parameter cell:

  summary = notebook.train("transformer", "mqar:vocab_size=64,seq_len=16,num_kv_pairs=4",
                           d_model=64, num_layers=2, batch_size=64, total_steps=600)
  notebook.plot_curves({"transformer": summary}, "MQAR", task)

Training goes through `experiments.harness.train` (the one training loop, config fields
checked by name); plots use pyplot, for a notebook's inline display.
"""

import matplotlib.pyplot as plt
import numpy as np

from experiments import harness
from jaxformer import compile_cache, data

compile_cache.enable()  # a notebook rerun reads its programs from disk (jaxformer/compile_cache.py)


def train(
  rung,
  task,
  *,
  d_model,
  num_layers,
  model_fields=None,
  seed=0,
  batch_size=64,
  total_steps=600,
  eval_every=50,
  early_stop_accuracy=0.99,
  learning_rate=None,
):
  """Trains `rung` on `task`: the rung's default config sized to the task (the loop takes
  the vocabulary and length from it), with d_model, num_layers and then `model_fields` on top.
  Returns the training loop's summary (evals, losses, params, ...) plus `model` (the Linen
  module the params belong to) and `config` (the training config)."""
  model = {"d_model": d_model, "num_layers": num_layers} | dict(model_fields or {})
  defaults = harness.train_config(rung, task)
  fields = {
    "seed": seed,
    "batch_size": batch_size,
    "total_steps": total_steps,
    "eval_every": eval_every,
    "early_stop_accuracy": early_stop_accuracy,
    "warmup_steps": min(defaults.warmup_steps, total_steps // 4),  # short runs warm up less
  }
  if learning_rate is not None:
    fields["learning_rate"] = learning_rate
  return harness.train(rung, task, model, **fields)


def plot_curves(results, title, task):
  """Eval accuracy (left) and train loss (right) of each run in {name: summary}, per step;
  on an MQAR task the chance level (one of the V/2 value ids) is drawn too."""
  fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 3.8))
  for name, summary in results.items():
    steps, _, accuracy = zip(*summary["evals"], strict=True)
    ax_acc.plot(steps, accuracy, marker="o", label=name)
    ax_loss.plot(np.arange(1, len(summary["losses"]) + 1), summary["losses"], label=name, lw=1)
  name, spec = data.parse_spec(task)
  if name == "mqar":
    ax_acc.axhline(2 / spec["vocab_size"], color="gray", ls=":", label="chance")
  ax_acc.set(xlabel="step", ylabel="eval accuracy", ylim=(0, 1.02), title=title)
  ax_loss.set(xlabel="step", ylabel="train loss", yscale="log", title="training loss")
  ax_acc.legend()
  ax_loss.legend()
  plt.show()


def test_batch(task, n=8):
  """The first n test examples of `task`: int32 [n, L] inputs, targets and mask."""
  test = data.get_dataset(task, "test")
  return next(iter(data.Loader(test, n, seed=0, shuffle=False)))
