"""Figure helpers every declaration's `figure(result, path)` draws with: matplotlib's Agg
canvas without pyplot (no global state), read from a result dict only, so a figure can be
redrawn from a committed record."""

import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new(cols=1, rows=1, width=4.2, height=3.3):
  fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
  FigureCanvasAgg(fig)
  return fig


def save(fig, path):
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=90)


def _selected(unit):
  sel = unit["selected"]
  if sel is None:
    return []
  return [r for r in unit["replicas"]
          if (r["learning_rate"], r["weight_decay"]) == (sel["learning_rate"], sel["weight_decay"])]  # fmt: skip


def curves(ax, result, point="*", title=""):
  """Validation accuracy by step of each arm's selected runs (one line per seed)."""
  for i, unit in enumerate(u for u in result["units"] if u["point"] == point):
    for j, r in enumerate(_selected(unit)):
      steps, acc = (
        zip(*r["val_accuracy_by_step"], strict=True) if r["val_accuracy_by_step"] else ((), ())
      )
      ax.plot(steps, acc, color=f"C{i}", linewidth=0.9, label=unit["arm"] if j == 0 else None)
  ax.set(xlabel="train step", ylabel="validation accuracy", ylim=(-0.02, 1.02), title=title)
  ax.legend(fontsize=7)


def bars(ax, result, metrics, arms, point="*", title=""):
  """Per arm, the mean of each metric over every seed (dots: the seeds)."""
  width = 0.8 / len(metrics)
  for k, metric in enumerate(metrics):
    for i, arm in enumerate(arms):
      values = np.asarray(result["metrics"][metric][arm][point], dtype=float)
      x = i + (k - (len(metrics) - 1) / 2) * width
      ax.bar(x, np.nanmean(values), width, color=f"C{k}", alpha=0.6,
             label=metric if i == 0 else None)  # fmt: skip
      ax.plot(np.full(values.shape, x), values, "k.", markersize=3)
  ax.set_xticks(range(len(arms)), arms, rotation=30, fontsize=8)
  ax.set_title(title)
  if len(metrics) > 1:
    ax.legend(fontsize=7)
