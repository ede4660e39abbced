"""The training config: every field `jaxformer.train.loop.train` reads, with a comment each.

  from jaxformer.train import config as config_lib
  c = config_lib.get_config("transformer")            # CPU size: MQAR V=64 L=32 K=4
  c = config_lib.get_config("transformer", "accel")   # one GPU / TPU host
  c = config_lib.text_config("input.txt")            # a char-level transformer on a text file

`experiments/configs/default.py` and `experiments/configs/text.py` are the command-line faces
of these configs (`--config=...:rung=` and `--config=...:path=`).
"""

import ml_collections

from jaxformer import ladder

SIZES = ("cpu", "accel")
CPU_TASK = "mqar:vocab_size=64,seq_len=32,num_kv_pairs=4"
ACCEL_TASK = "mqar:vocab_size=8192,seq_len=256,num_kv_pairs=32,num_examples=100000"


def parse_arg(arg, defaults, usage):
  """A config file's argument 'key=value,...' over `defaults`; an item that is not
  key=value with a key of `defaults` raises ConfigError naming it and `usage`."""
  fields = dict(defaults)
  for item in filter(None, (arg or "").split(",")):
    key, sep, value = item.partition("=")
    if not sep or key not in fields:
      raise ladder.ConfigError(f"config argument {item!r}: expected {usage}")
    fields[key] = value
  return fields


def sized_by_task(model):
  """`model` with vocab_size and max_len None: the loop takes them from the task
  (jaxformer.train.program.resolve); an explicit value must cover the task."""
  with model.unlocked():
    model.vocab_size = ml_collections.FieldReference(None, field_type=int)
    model.max_len = ml_collections.FieldReference(None, field_type=int)
  return model


def accel_model(rung):
  """The rung's model at accelerator size: wider and deeper, heads of 64, bfloat16 compute
  (parameters and optimizer state stay float32), and for the concat-head rungs attention
  through jax.nn.dot_product_attention (cuDNN on a GPU, jaxformer.math.attention)."""
  model = ladder.default_config(rung)
  with model.unlocked():
    model.d_model, model.num_layers, model.d_ff = 256, 4, 1024
    if rung != ladder.CUSTOM:  # a custom mixer's heads are its own fields
      model.num_heads = 4
    model.dtype = "bfloat16"
    if rung in ladder.RUNGS and ladder.RUNGS.index(rung) >= ladder.RUNGS.index("concat_wo"):
      model.attention = "dot_product"
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
  # The rung's ConfigDict; vocab_size and max_len None: the task's (set them to override).
  c.model = sized_by_task(accel_model(rung) if accel else ladder.default_config(rung))
  c.task = ACCEL_TASK if accel else CPU_TASK  # jaxformer.data task spec string
  c.data_dir = ml_collections.FieldReference(None, field_type=str)  # None: $JAXFORMER_DATA_DIR
  c.seed = 0  # init, per-step rng and data order
  # A GPT-2 checkpoint directory (or weights file) to fine-tune from: the transformer rung at
  # its sizes, its tokenizer for a text task (jaxformer.interop.finetune); None: from scratch
  c.init_from = ml_collections.FieldReference(None, field_type=str)

  # Global batch (all processes), per train step. accel: 512 divides every power-of-two device
  # count up to 512, so the default mesh (every device data parallel) fits any of them.
  c.batch_size = 512 if accel else 64
  c.total_steps = 20_000 if accel else 600  # train steps (micro-steps when accumulating)
  c.learning_rate = 3e-3 if recurrent else 1e-3  # the schedule's peak
  # "cosine": warmup + cosine decay; "wsd": warmup, the peak, then a linear decay over the
  # last lr_decay_fraction of the steps (a run continues exactly into a longer budget)
  c.lr_schedule = "cosine"
  c.lr_decay_fraction = 0.2
  c.end_learning_rate_factor = 0.1  # the schedule ends at learning_rate * this
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
  # a sweep's programs on a CPU at XLA's short-sweep options (sweep.FAST_COMPILE): True / False;
  # None: when total_steps <= sweep.FAST_COMPILE_STEPS
  c.fast_compile = ml_collections.FieldReference(None, field_type=bool)
  c.checkpoint_every = 2000 if accel else 300  # steps between (async) checkpoints
  c.keep_checkpoints = 3  # the last N checkpoints are kept
  c.log_every = 100 if accel else 20  # steps between metrics.jsonl / TensorBoard records

  c.mesh_shape = (-1, 1, 1)  # (data, fsdp, tensor); one -1 takes the remaining devices
  # Several slices / hosts: how many each mesh axis spans, e.g. (2, 1, 1) for data parallelism
  # over 2 slices (jaxformer.train.sharding); None: one slice
  c.dcn_mesh_shape = ml_collections.FieldReference(None, field_type=tuple)
  c.peak_flops_per_device = ml_collections.FieldReference(None, field_type=float)  # None: measure
  return c


# The char-level text preset: (model fields, training fields, seq_len) per size.
TEXT_SIZES = {
  "cpu": (
    dict(d_model=128, num_layers=4, num_heads=4, d_ff=512),
    dict(batch_size=16, total_steps=2000, warmup_steps=100, eval_every=250),
    128,
  ),
  "accel": (  # nanoGPT's shakespeare-char size, without dropout
    dict(d_model=384, num_layers=6, num_heads=6, d_ff=1536),
    dict(batch_size=64, total_steps=5000, warmup_steps=200, eval_every=500),
    256,
  ),
}


def text_config(path, size="cpu"):
  """A char-level transformer (the `transformer` rung) on the text files at `path` (a file,
  directory or glob; the last 10% held out), vocabulary and length from the task."""
  if size not in SIZES:
    raise ladder.ConfigError(f"size={size!r}: expected one of {', '.join(SIZES)}")
  if not path or any(ch in path for ch in ",="):
    raise ladder.ConfigError(f"path={path!r}: expected a text file, directory or glob (no , or =)")
  model_fields, fields, seq_len = TEXT_SIZES[size]
  c = get_config("transformer", size)
  c.task = f"text:path={path},level=char,seq_len={seq_len}"
  with c.unlocked():
    for field, value in model_fields.items():
      c.model[field] = value
    for field, value in fields.items():
      c[field] = value
    c.checkpoint_every = c.eval_every * 2
    c.log_every = 50
  return c
