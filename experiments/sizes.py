"""What the experiments' size blocks share (`get_config(size)` in experiments/<name>.py): the
tests' tiny schedule, the full and accel learning-rate grids with their caps, the accel
schedule, and the size check. Each sets its fields on the ConfigDict, then any `fields` given:

  if size == "tiny":
    sizes.tiny(c, decode_batch=2)
  elif size == "full":
    sizes.full(c, total_steps=1000, eval_every=100)
  elif size == "accel":
    sizes.accel(c, total_steps=8000, d_model=256)
  else:
    sizes.check(size)  # quick: the defaults; anything else: ValueError
"""

import numpy as np

from experiments import protocol

# Zoology's four learning rates 1e-4 .. 1e-2, the accel grid, and the caps an edge extends to
ACCEL_LEARNING_RATES = tuple(np.logspace(-4, -2, 4).round(6))
ACCEL_LR_CAP = (1e-5, 3e-2)
FULL_LR_CAP = (1e-4, 3e-2)
# A full design's held-out examples where 256 left a validation half of 128 sequences (512
# MQAR queries: a standard error near 0.5 of 0.022, above the plateau tolerance of 0.02):
# half of 2,048 is 1,024 sequences (docs/experiments.md, the protocol's item 4)
FULL_HELD_OUT = 2048


def tiny(c, **fields):
  """The tests' size (seconds): batch 8, 4 steps (the cap too), an eval every 2 steps, 1
  warm-up step, 64 + 32 examples; then `fields`."""
  c.batch_size, c.total_steps, c.eval_every, c.warmup_steps, c.step_cap = 8, 4, 2, 1, 4
  c.num_examples, c.num_test_examples = 64, 32
  return _set(c, fields)


def full(c, total_steps=None, **fields):
  """protocol.FULL_LEARNING_RATES under FULL_LR_CAP; with total_steps, that first budget and
  a cap twice it; then `fields`."""
  c.learning_rates, c.lr_cap = protocol.FULL_LEARNING_RATES, FULL_LR_CAP
  if total_steps is not None:
    c.total_steps, c.step_cap = total_steps, 2 * total_steps
  return _set(c, fields)


def accel(c, total_steps, examples=(100_000, 2000), **fields):
  """One GPU or TPU host: ACCEL_LEARNING_RATES under ACCEL_LR_CAP, batch 256, `total_steps`
  the first budget and twice it the cap, an eval every 250 steps, 500 warm-up steps, and
  `examples` (train, test: num_examples and num_test_examples; None leaves them); then
  `fields`."""
  c.learning_rates, c.lr_cap = ACCEL_LEARNING_RATES, ACCEL_LR_CAP
  c.batch_size, c.total_steps, c.step_cap = 256, total_steps, 2 * total_steps
  c.eval_every, c.warmup_steps = 250, 500
  if examples is not None:
    c.num_examples, c.num_test_examples = examples
  return _set(c, fields)


def check(size):
  """ValueError naming `size` unless it is one of protocol.SIZES."""
  if size not in protocol.SIZES:
    raise ValueError(f"size={size!r}: expected one of {', '.join(protocol.SIZES)}")


def _set(c, fields):
  for key, value in fields.items():
    c[key] = value
  return c
