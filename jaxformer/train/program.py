"""What the loop compiles for a config, and the checks that a config can run at all.

`build(config, mesh, batch_shape)` returns the jitted init / train / eval programs and the
state's abstract shapes with shardings. Programs are cached by (rung, model config,
optimizer fields, mesh, batch shape): experiments call `loop.train` many times on small
models, and a repeat with the same key compiles nothing.
"""

import dataclasses
import os

import flax.linen as nn
import jax

from jaxformer import data, ladder
from jaxformer.train import optimizer, sharding, step

SIZED_FIELDS = ("max_len", "vocab_size")  # model fields that None takes from the task


def check_config(config, model_on_host=True):
  """Raises ConfigError naming the first training field that cannot work (model included).

  model_on_host=False (a compile for another device: jaxformer.train.compile_only) leaves the
  model's arrays out of this machine's memory bound; the device's own check judges them.

  model.vocab_size and model.max_len may be None (taken from the task by `resolve`); every
  other model field is checked here, before any data is read.
  """
  c = config
  model = c.model
  if any(model[f] is None for f in SIZED_FIELDS):
    model = model.copy_and_resolve_references()
    with model.unlocked():
      for field in SIZED_FIELDS:
        if model[field] is None:
          model[field] = 1  # a stand-in: resolve() puts the task's size here
  ladder.validate(c.rung, model)
  optimizer.validate(c)
  for field in ("batch_size", "eval_every", "checkpoint_every", "keep_checkpoints", "log_every"):
    if not isinstance(c[field], int) or isinstance(c[field], bool) or c[field] <= 0:
      raise ladder.ConfigError(f"{field}={c[field]!r}: must be a positive integer")
  if c.eval_batches is not None and c.eval_batches <= 0:
    raise ladder.ConfigError(f"eval_batches={c.eval_batches!r}: must be positive or None")
  if c.early_stop_accuracy is not None and not 0 < c.early_stop_accuracy <= 1:
    raise ladder.ConfigError(f"early_stop_accuracy={c.early_stop_accuracy!r}: must be in (0, 1]")
  if c.peak_flops_per_device is not None and not c.peak_flops_per_device > 0:
    raise ladder.ConfigError(f"peak_flops_per_device={c.peak_flops_per_device!r}: must be > 0")
  if not isinstance(c.seed, int) or not 0 <= c.seed < 2**32:
    raise ladder.ConfigError(f"seed={c.seed!r}: must be an integer in [0, 2**32)")
  name, params = data.parse_spec(c.task)  # DataError naming the task field
  seq_len = params.get("seq_len")
  if seq_len is not None and c.model.max_len is not None and seq_len > c.model.max_len:
    # the same check as resolve(), before the data is prepared
    raise ladder.ConfigError(
      f"task seq_len={seq_len} > model.max_len={c.model.max_len}: raise model.max_len or "
      "shorten the task (or leave model.max_len unset to take the task's)"
    )
  check_sizes(c, name, params, model_on_host=model_on_host)


def memory_bytes():
  """This machine's physical memory (bytes)."""
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_sizes(config, task_name, task_params, memory=None, model_on_host=True):
  """ConfigError naming the field whose arrays alone would not fit in this machine's memory
  (float32 bytes, a lower bound on what training allocates), before any of them is built:
  a huge max_len, vocabulary or task otherwise ends in a MemoryError or an OOM kill."""
  memory = memory or memory_bytes()
  m = config.model
  seq_len = task_params.get("seq_len") or 1
  width = m.get("d_model") or 1
  examples = (task_params.get("num_examples") or 0) + (task_params.get("num_test_examples") or 0)
  positions = m.get("positions", "learned")
  table = {"none": 0, "sinusoidal": 1}.get(positions, 3)  # learned: the table and Adam's two
  asks = [
    # (field, value, bytes, what)
    (
      "model.max_len",
      m.max_len,
      (m.max_len or 0) * width * 4 * table,
      "a [max_len, d_model] table",
    ),
    ("model.vocab_size", m.vocab_size, (m.vocab_size or 0) * width * 4 * 3, "the embedding"),
    (f"task {task_name}.seq_len", seq_len, examples * seq_len * 3 * 4, "the prepared examples"),
  ]
  if not model_on_host:  # only the prepared examples live in this machine's memory
    asks = asks[-1:]
  for field, value, need, what in asks:
    if need > memory:
      raise ladder.ConfigError(
        f"{field}={value}: {what} alone would take {need / 2**30:.3g} GiB, more than this "
        f"machine's {memory / 2**30:.3g} GiB of memory"
      )


def resolve(config, dataset):
  """The config with the model sized for the task: a None model.vocab_size / model.max_len
  becomes the task's vocabulary / sequence length; an explicit value must cover the task.

  Returns a new locked ConfigDict (the input is not changed): the config the loop builds,
  writes to the workdir and fingerprints checkpoints with.
  """
  needed = {"max_len": dataset.seq_len, "vocab_size": dataset.vocab_size}
  task_field = {"max_len": "seq_len", "vocab_size": "vocab_size"}
  resolved = config.copy_and_resolve_references()
  with resolved.unlocked():
    for field in SIZED_FIELDS:
      given = resolved.model[field]
      if given is None:
        resolved.model[field] = needed[field]
      elif given < needed[field]:
        why = {
          "max_len": "raise model.max_len or shorten the task",
          "vocab_size": "token ids would index past the embedding",
        }[field]
        raise ladder.ConfigError(
          f"task {task_field[field]}={needed[field]} > model.{field}={given}: {why} "
          f"(or leave model.{field} unset to take the task's)"
        )
  resolved.lock()
  return resolved


# Model fields added after checkpoints were written, left out of the fingerprint at their
# default so that those checkpoints still resume (the model they build is the same)
LATER_MODEL_FIELDS = {"value_rank": None}


def fingerprint(config):
  """What a checkpoint must match to be resumed: the rung, its model config and the task."""
  model = config.model.to_dict()
  for field, default in LATER_MODEL_FIELDS.items():
    if field in model and model[field] == default:
      del model[field]
  return {"rung": config.rung, "model": model, "task": config.task}


@dataclasses.dataclass(frozen=True)
class Program:
  """Everything compiled for one (rung, model, optimizer, mesh, batch shape)."""

  model: object
  abstract_state: object  # ShapeDtypeStructs carrying the state's shardings
  init: object  # rng key -> state, created sharded
  train_step: object  # (state, batch) -> (state, metrics), state donated
  eval_step: object  # (params, batch) -> sums
  batch_sharding: object


_PROGRAMS = {}
_MAX_PROGRAMS = 8
# The training fields build's programs bake in (the optimizer's schedule and settings).
_OPTIMIZER_FIELDS = (
  "learning_rate",
  "end_learning_rate_factor",
  "warmup_steps",
  "total_steps",
  "weight_decay",
  "adam_b1",
  "adam_b2",
  "grad_clip_norm",
  "grad_accum_steps",
)


def cache_key(config, fields, *compiled_for):
  """The key of a compiled program of `config` (build's cache here, and the sweep's): its
  rung, its model config, the training `fields` the program bakes in, then what it was
  compiled for (mesh, batch shapes, replicas)."""
  model = config.model.to_json(sort_keys=True)
  return (config.rung, model, tuple(config[f] for f in fields), *compiled_for)


def remember(cache, key, value, max_entries):
  """cache[key] = value (returned), the oldest entry dropped first when `cache` (a dict, in
  insertion order) holds max_entries."""
  if len(cache) >= max_entries:
    cache.pop(next(iter(cache)))
  cache[key] = value
  return value


def build(config, mesh, batch_shape):
  """The jitted init / train / eval for this config, reused across calls with equal keys."""
  key = cache_key(config, _OPTIMIZER_FIELDS, mesh, batch_shape)
  if key in _PROGRAMS:
    return _PROGRAMS[key]
  unsized = [f for f in SIZED_FIELDS if config.model[f] is None]
  if unsized:
    raise ladder.ConfigError(
      f"model.{unsized[0]}=None: size the model for its task first, "
      "config = program.resolve(config, dataset) (loop.train does)"
    )
  model = ladder.build(config.rung, config.model)
  tx = optimizer.make(config)
  init_boxed = lambda rng: step.init_state(model, tx, rng, batch_shape)  # noqa: E731
  # the key inside eval_shape: an eager jax.random.key would run on the default device, which a
  # compile-only mesh (jaxformer.train.compile_only) does not have
  boxed = jax.eval_shape(lambda: init_boxed(jax.random.key(0)))
  shardings = sharding.logical_shardings(boxed, mesh)
  abstract = sharding.with_shardings(sharding.strip_boxes(boxed), shardings)
  sharding.check_divisible(abstract, shardings)
  batch_sharding = sharding.batch_sharding(mesh)
  program = Program(
    model=model,
    abstract_state=abstract,
    init=jax.jit(lambda rng: nn.meta.unbox(init_boxed(rng)), out_shardings=shardings),
    train_step=step.jit_train_step(model, tx, shardings, batch_sharding),
    eval_step=step.jit_eval_step(model, shardings["params"], batch_sharding),
    batch_sharding=batch_sharding,
  )
  return remember(_PROGRAMS, key, program, _MAX_PROGRAMS)
