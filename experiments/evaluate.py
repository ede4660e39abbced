r"""Evaluate a trained run on its task's test split, without training.

  python -m experiments.evaluate --workdir=/tmp/jaxformer/text [--batch_size=N] \
    [--eval_batches=N] [--trust_mixer] [--debug]

Reads the workdir's config.json and only the params of its newest checkpoint that verifies,
prepares the task's test split (for a text task the text files must be where the run read
them), and prints `step N: eval_loss=..., eval_accuracy=...`. It runs data parallel on every
local device whatever mesh trained the run. A usage error prints one line naming the flag and
exits 2. A custom rung's mixer file is imported only with `--trust_mixer` and an unchanged
sha256 (see experiments/sample.py).
"""

from absl import app, flags

from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "The directory a training run wrote.")
_BATCH_SIZE = flags.DEFINE_integer(
  "batch_size", None, "Examples per eval batch (default: the run's).", lower_bound=1
)
_EVAL_BATCHES = flags.DEFINE_integer(
  "eval_batches", None, "Evaluate the first N batches only (default: all).", lower_bound=1
)
_DEBUG = flags.DEFINE_bool("debug", False, "Show tracebacks of usage errors.")
_TRUST_MIXER = flags.DEFINE_bool(
  "trust_mixer",
  False,
  "Import and run the custom mixer file the workdir's config names (only if its sha256 is the "
  "one the run recorded). Without it a custom run is refused: its file is someone's code.",
)


def main(argv):
  with cli.usage_errors(argv, _DEBUG.value):
    from jaxformer.train import loop

    workdir = cli.check_workdir_given(_WORKDIR.value)
    result = loop.evaluate_workdir(
      workdir,
      batch_size=_BATCH_SIZE.value,
      eval_batches=_EVAL_BATCHES.value,
      trust_code=_TRUST_MIXER.value,
    )
  print(
    f"step {result['step']}: eval_loss={result['eval_loss']:.4f} "
    f"eval_accuracy={result['eval_accuracy']:.4f} ({workdir})",
    flush=True,
  )


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
