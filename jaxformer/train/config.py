"""The training config: every field `jaxformer.train.loop.train` reads, with a comment each.

  from jaxformer.train import config as config_lib
  c = config_lib.get_config("transformer")            # CPU size: MQAR V=64 L=32 K=4
  c = config_lib.get_config("transformer", "accel")   # one GPU / TPU host

`experiments/configs/default.py` is the command-line face of this config (`--config=...:rung=`).
"""

import ml_collections

from jaxformer import ladder

SIZES = ("cpu", "accel")
CPU_TASK = "mqar:vocab_size=64,seq_len=32,num_kv_pairs=4"
ACCEL_TASK = "mqar:vocab_size=8192,seq_len=256,num_kv_pairs=32,num_examples=100000"


def accel_model(rung):
  """The rung's model at accelerator size: wider and deeper, heads of 64."""
  model = ladder.default_config(rung)
  with model.unlocked():
    model.vocab_size, model.max_len = 8192, 256
    model.d_model, model.num_layers, model.d_ff = 256, 4, 1024
    if rung != ladder.CUSTOM:  # a custom mixer's heads are its own fields
      model.num_heads = 4
    if rung == "full_dynamic":  # D^2 scalar functions: keep D small
      model.d_model, model.num_heads = 32, 1
    if rung == "diagonal_dynamic":
      model.d_model, model.num_heads = 128, 2
  return model


def get_config(rung="transformer", size="cpu"):
  """The training config of `rung` at `size` (cpu or accel)."""
  if rung not in ladder.BUILDABLE:
    raise ladder.ConfigError(f"rung={rung!r}: expected one of {', '.join(ladder.BUILDABLE)}")
  if size not in SIZES:
    raise ladder.ConfigError(f"size={size!r}: expected one of {', '.join(SIZES)}")
  accel = size == "accel"
  recurrent = rung in ladder.RECURRENT_RUNGS

  c = ml_collections.ConfigDict()
  c.rung = rung  # which model of the ladder (jaxformer.ladder.RUNGS, or custom: any mixer)
  c.model = accel_model(rung) if accel else ladder.default_config(rung)  # its ConfigDict
  c.task = ACCEL_TASK if accel else CPU_TASK  # jaxformer.data task spec string
  c.data_dir = ml_collections.FieldReference(None, field_type=str)  # None: $JAXFORMER_DATA_DIR
  c.seed = 0  # init, per-step rng and data order

  c.batch_size = 256 if accel else 64  # global batch (all processes), per train step
  c.total_steps = 20_000 if accel else 600  # train steps (micro-steps when accumulating)
  c.learning_rate = 3e-3 if recurrent else 1e-3  # peak of warmup + cosine decay
  c.end_learning_rate_factor = 0.1  # the cosine ends at learning_rate * this
  c.warmup_steps = 1000 if accel else 50  # linear warmup from 0
  c.weight_decay = 0.1  # AdamW decoupled decay; norms and biases are skipped
  c.adam_b1 = 0.9  # AdamW first-moment decay
  c.adam_b2 = 0.95  # AdamW second-moment decay
  c.grad_clip_norm = ml_collections.FieldReference(1.0, field_type=float)  # None: no clipping
  c.grad_accum_steps = 1  # k > 1: one update per k batches (optax.MultiSteps)
  c.skip_nonfinite = False  # False: stop at a non-finite loss; True: skip the batch, count it

  c.eval_every = 1000 if accel else 100  # steps between evals on the test split
  c.eval_batches = ml_collections.FieldReference(None, field_type=int)  # None: whole split
  c.early_stop_accuracy = ml_collections.FieldReference(None, field_type=float)  # stop at it
  c.checkpoint_every = 2000 if accel else 300  # steps between (async) checkpoints
  c.keep_checkpoints = 3  # the last N checkpoints are kept
  c.log_every = 100 if accel else 20  # steps between metrics.jsonl / TensorBoard records

  c.mesh_shape = (-1, 1, 1)  # (data, fsdp, tensor); one -1 takes the remaining devices
  c.peak_flops_per_device = ml_collections.FieldReference(None, field_type=float)  # None: measure
  return c
