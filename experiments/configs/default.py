r"""Train one rung of the ladder on multi-query associative recall (MQAR).

  get_config("rung=NAME[,size=cpu|accel]")   NAME in jaxformer.ladder.RUNGS, size=cpu default

CPU (mqar V=64 L=32 K=4, 600 steps of batch 64; 40-170 s a rung on a busy 2-core CPU):
  python -m experiments.main --config=experiments/configs/default.py:rung=transformer \
    --workdir=/tmp/jaxformer/transformer
  The model's vocab_size and max_len are the task's (64 and 32) unless set.
  Expected: the run ends with "completed at step 600, eval_loss=..., eval_accuracy=...". The
  transformer, measured with this config (seed 0, a shared 2-core x86 CPU): eval accuracy
  0.982 at step 600, ~7k tokens/s under load. With model.max_len=64 (before the model was
  sized from the task; not measured since) softmax, concat_wo and mlp_kv reached 0.90-0.99
  and the recurrent and dynamic-weight rungs stayed at 0.03-0.26, near guessing among the K
  values in context. full_dynamic, with D^2 score functions, runs at ~1.6k tokens/s (~14 min
  for 600 steps).

Accelerator (one GPU or a TPU slice; the mesh takes every device data-parallel):
  python -m experiments.main --config=experiments/configs/default.py:rung=transformer,size=accel \
    --workdir=$HOME/runs/transformer
  Expected: not measured yet (no accelerator was available); mqar V=8192 L=256 K=32 is the
  Zoology-scale task on which the attention rungs should pass 0.9 while rnn, source_only and
  stateless stay near chance. Set --config.early_stop_accuracy=0.99 to stop at the jump.

Any field can be overridden: --config.total_steps=100 --config.model.num_layers=4 ...
"""

from jaxformer.train import config as config_lib
from jaxformer.train.config import ACCEL_TASK, CPU_TASK, SIZES  # noqa: F401 (re-exported)


def parse_arg(arg):
  """'rung=transformer,size=cpu' -> {'rung': 'transformer', 'size': 'cpu'} (values are
  checked by jaxformer.train.config.get_config)."""
  usage = "rung=NAME[,size=cpu|accel], e.g. rung=transformer"
  return config_lib.parse_arg(arg, {"rung": "transformer", "size": "cpu"}, usage)


def get_config(arg=None):
  """The training config for `--config=experiments/configs/default.py:rung=NAME[,size=S]`."""
  args = parse_arg(arg)
  return config_lib.get_config(args["rung"], args["size"])
