"""The optimizer: AdamW with a warmup schedule, gradient clipping, optional accumulation.

lr_schedule = "cosine" (the default): warmup + cosine decay,
  lr(t) = peak * t / warmup                                        t < warmup
        = end + (peak - end) * (1 + cos(pi * (t - warmup) / (T - warmup))) / 2   after
lr_schedule = "wsd" (warmup, stable, decay; Hägele et al. 2024, "Scaling Laws and
Compute-Optimal Training Beyond Fixed Training Durations"): the same warmup, then the peak
until S = floor((1 - lr_decay_fraction) * T), then a linear decay to `end` at T,
  lr(t) = peak                                                     warmup <= t < S
        = peak + (end - peak) * (t - S) / (T - S)                  S <= t
with t counting optimizer updates, T = total_steps // grad_accum_steps and end = peak *
end_learning_rate_factor. Under "wsd" every update before S is the same for any longer T, so
a run stopped at step S continues exactly into a longer budget (`continues_until`).
Weight decay skips norm parameters and biases (decaying a LayerNorm scale towards 0 or a
bias towards 0 only fights the model; GPT-2 and nanoGPT decay matrices only).
With `grad_accum_steps = k > 1`, `optax.MultiSteps` averages k batches of gradients and
applies one update every k train steps, so the effective batch is k * batch_size.
"""

import math

import flax.linen as nn
import jax
import optax

from jaxformer import ladder

# Parameter names that are biases or norm parameters in jaxformer's modules
# (LayerNorm scale/bias, Linear bias, q/k/v/o biases, MLP b1/b2, recurrent b).
NO_DECAY_NAMES = frozenset({"scale", "bias", "b", "b1", "b2", "bq", "bk", "bv", "bo"})


class OptimizerError(ladder.ConfigError):
  """An optimizer field holds a value that cannot train; the message names it."""


def decay_mask(params):
  """True for parameters that get weight decay: everything but norms and biases."""

  def decays(path, _):
    name = path[-1].key if isinstance(path[-1], jax.tree_util.DictKey) else str(path[-1])
    return name not in NO_DECAY_NAMES

  return jax.tree_util.tree_map_with_path(decays, nn.meta.unbox(params))


SCHEDULES = ("cosine", "wsd")


def _updates(config):
  """(T, warmup): optimizer updates in all, and in the warmup."""
  accum = config.grad_accum_steps
  updates = max(config.total_steps // accum, 1)
  return updates, min(config.warmup_steps // accum, updates)


def _stable_end(config):
  """S: the first update of a "wsd" schedule's decay."""
  updates, warmup = _updates(config)
  return max(warmup, math.floor((1 - config.lr_decay_fraction) * updates))


def schedule(config, peak=None):
  """The learning rate per optimizer update (train steps // grad_accum_steps), as
  `peak * shape(t)` where shape rises to 1 and ends at end_learning_rate_factor: the peak
  may be a traced value (one per replica of a sweep), the shape stays static."""
  updates, warmup = _updates(config)
  end = config.end_learning_rate_factor
  if config.get("lr_schedule", "cosine") == "wsd":
    stable = _stable_end(config)
    shape = optax.join_schedules(
      [
        optax.linear_schedule(0.0, 1.0, max(warmup, 1)),
        optax.constant_schedule(1.0),
        optax.linear_schedule(1.0, end, max(updates - stable, 1)),
      ],
      boundaries=[warmup, stable],
    )
  else:
    shape = optax.warmup_cosine_decay_schedule(
      init_value=0.0,
      peak_value=1.0,
      warmup_steps=warmup,
      decay_steps=max(updates, warmup + 1),
      end_value=end,
    )
  peak = config.learning_rate if peak is None else peak
  return lambda count: peak * shape(count)


def continues_until(config):
  """The train steps after which a run of `config` is the same as the first steps of any
  longer run (more total_steps, nothing else changed): the start of a "wsd" schedule's
  decay; 0 for a cosine (its every update depends on total_steps) or a warmup cut short by
  total_steps."""
  validate(config)
  accum = config.grad_accum_steps
  updates, warmup = _updates(config)
  if config.get("lr_schedule", "cosine") != "wsd" or config.warmup_steps // accum > warmup:
    return 0
  return _stable_end(config) * accum


def validate(config):
  """Raises OptimizerError naming the first bad optimizer field of a training config."""
  c = config
  for field in ("learning_rate", "weight_decay", "grad_clip_norm", "end_learning_rate_factor"):
    value = c[field]
    if value is None and field == "grad_clip_norm":
      continue
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
      raise OptimizerError(f"{field}={value!r}: must be a finite number >= 0")
  if c.learning_rate <= 0:
    raise OptimizerError(f"learning_rate={c.learning_rate!r}: must be > 0")
  kind = c.get("lr_schedule", "cosine")
  if kind not in SCHEDULES:
    raise OptimizerError(f"lr_schedule={kind!r}: expected one of {SCHEDULES}")
  fraction = c.get("lr_decay_fraction", 0.2)
  if not isinstance(fraction, int | float) or not 0 < fraction <= 1:
    raise OptimizerError(f"lr_decay_fraction={fraction!r}: must be in (0, 1]")
  for field in ("adam_b1", "adam_b2"):
    if not 0 <= c[field] < 1:
      raise OptimizerError(f"{field}={c[field]!r}: must be in [0, 1)")
  for field in ("total_steps", "grad_accum_steps"):
    if not isinstance(c[field], int) or c[field] <= 0:
      raise OptimizerError(f"{field}={c[field]!r}: must be a positive integer")
  if not isinstance(c.warmup_steps, int) or c.warmup_steps < 0:
    raise OptimizerError(f"warmup_steps={c.warmup_steps!r}: must be an integer >= 0")
  return config


def make(config, learning_rate=None, weight_decay=None):
  """The optax transformation for a training config (fields: see jaxformer/train/config.py).

  `learning_rate` (the schedule's peak) and `weight_decay` replace the config's values when
  given; they may be traced arrays, so one jitted step serves replicas with different
  hyperparameters (jaxformer.train.sweep)."""
  validate(config)
  adamw = optax.inject_hyperparams(optax.adamw, static_args=("mask",))(
    learning_rate=schedule(config, learning_rate),
    b1=config.adam_b1,
    b2=config.adam_b2,
    weight_decay=config.weight_decay if weight_decay is None else weight_decay,
    mask=decay_mask,
  )
  parts = []
  if config.grad_clip_norm:
    parts.append(optax.clip_by_global_norm(config.grad_clip_norm))
  tx = optax.chain(*parts, adamw)
  if config.grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=config.grad_accum_steps)
  return tx


def learning_rate(opt_state):
  """The learning rate of the last applied update (stored by inject_hyperparams)."""
  return optax.tree_utils.tree_get(opt_state, "hyperparams")["learning_rate"]
