"""experiments.sizes: the size blocks the experiments share set exactly the fields they name."""

import ml_collections
import numpy as np
import pytest

from experiments import protocol, sizes


def _config():
  return protocol.set_sweep_defaults(ml_collections.ConfigDict(), total_steps=300)


def test_tiny_sets_the_tests_schedule_then_the_fields_given():
  c = sizes.tiny(_config(), learning_rates=(3e-3, 1e-2), total_steps=2)
  assert (c.batch_size, c.total_steps, c.eval_every, c.warmup_steps, c.step_cap) == (8, 2, 2, 1, 4)
  assert (c.num_examples, c.num_test_examples, c.learning_rates) == (64, 32, (3e-3, 1e-2))


def test_full_grid_with_a_cap_twice_the_budget():
  c = sizes.full(_config(), total_steps=1000, eval_every=100)
  assert c.learning_rates == protocol.FULL_LEARNING_RATES and c.lr_cap == sizes.FULL_LR_CAP
  assert (c.total_steps, c.step_cap, c.eval_every) == (1000, 2000, 100)
  assert sizes.full(_config()).total_steps == 300  # no budget given: the config's stays


def test_accel_is_zoologys_grid_on_one_host():
  c = sizes.accel(_config(), total_steps=8000, num_test_examples=1024)
  np.testing.assert_allclose(c.learning_rates, [1e-4, 4.64e-4, 2.154e-3, 1e-2])
  assert c.lr_cap == (1e-5, 3e-2) and (c.batch_size, c.warmup_steps, c.eval_every) == (
    256,
    500,
    250,
  )
  assert (c.total_steps, c.step_cap, c.num_examples, c.num_test_examples) == (
    8000,
    16000,
    100_000,
    1024,
  )


def test_accel_can_leave_the_examples_alone():
  c = sizes.accel(_config(), 5000, None, batch_size=64)
  assert (c.num_examples, c.num_test_examples) == (20_000, 512)  # set_sweep_defaults'
  assert (c.batch_size, c.total_steps, c.step_cap) == (64, 5000, 10_000)


def test_check_names_an_unknown_size():
  for size in protocol.SIZES:
    sizes.check(size)
  with pytest.raises(ValueError, match="size='huge': expected one of tiny, quick, full, accel"):
    sizes.check("huge")
