r"""A char-level transformer on your own text: the vocabulary (its characters) and the
sequence length come from the task, nothing is sized by hand.

  get_config("path=FILE[,size=cpu|accel]")   FILE: a text file, a directory or a glob

CPU (4 layers, D=128, 4 heads, context 128, batch 16, 2,000 steps):
  python -m experiments.main --config=experiments/configs/text.py:path=input.txt \
    --workdir=/tmp/jaxformer/text
  python -m experiments.sample --workdir=/tmp/jaxformer/text --prompt="ROMEO:"
  Expected (seed 0, input.txt = tinyshakespeare from karpathy/char-rnn: 1,115,394 characters,
  65 distinct, so vocab_size=65 and max_len=128 are taken from the task): "completed at step
  2000, eval_loss=1.7768, eval_accuracy=0.4715" (nats per character on the last 10% of the
  text; 2.43 / 1.98 / 1.88 / 1.78 at steps 250 / 1000 / 1250 / 2000, still falling). Measured
  on a 2-core x86 CPU shared with ~20 runnable processes (load average 20): 1 h 09 min wall,
  776 CPU-seconds, ~1k tokens/s; an idle machine was not available to time it. A sample at
  --temperature=0.8 reads like "ROMEO:\nHe joy wellow eyess, 'twere courbak sir.\n\n
  GRETARET:\nYou shall fight want many lord,": Shakespeare's layout, not yet its words.

Accelerator (6 layers, D=384, 6 heads, context 256, batch 64, 5,000 steps):
  python -m experiments.main --config=experiments/configs/text.py:path=input.txt,size=accel \
    --workdir=$HOME/runs/text
  Expected: not measured yet (no accelerator was available).

Any field can be overridden: --config.total_steps=500 --config.model.num_layers=2 ...
"""

from jaxformer import ladder
from jaxformer.train import config as config_lib


def parse_arg(arg):
  """'path=input.txt,size=cpu' -> {'path': 'input.txt', 'size': 'cpu'}."""
  usage = "path=FILE[,size=cpu|accel], e.g. path=input.txt"
  fields = config_lib.parse_arg(arg, {"path": None, "size": "cpu"}, usage)
  if not fields["path"]:
    raise ladder.ConfigError(
      "config argument path: required, e.g. --config=experiments/configs/text.py:path=input.txt"
    )
  return fields


def get_config(arg=None):
  """The training config for `--config=experiments/configs/text.py:path=FILE[,size=S]`."""
  args = parse_arg(arg)
  return config_lib.text_config(args["path"], args["size"])
