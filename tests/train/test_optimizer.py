"""Schedule, weight-decay mask, clipping and gradient accumulation of the optimizer."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxformer import ladder
from jaxformer.train import optimizer
from tests.train.train_helpers import tiny_config


def test_schedule_warms_up_then_cosine_decays_to_end_factor():
  c = tiny_config(
    total_steps=100, warmup_steps=10, learning_rate=2e-3, end_learning_rate_factor=0.1
  )
  lr = optimizer.schedule(c)
  np.testing.assert_allclose(float(lr(0)), 0.0)
  np.testing.assert_allclose(float(lr(5)), 1e-3, rtol=1e-6)
  np.testing.assert_allclose(float(lr(10)), 2e-3, rtol=1e-6)
  mid = 2e-4 + (2e-3 - 2e-4) * 0.5  # halfway through the cosine
  np.testing.assert_allclose(float(lr(55)), mid, rtol=1e-5)
  np.testing.assert_allclose(float(lr(100)), 2e-4, rtol=1e-5)


def test_wsd_warms_up_holds_the_peak_then_decays_linearly_over_its_last_fraction():
  fields = dict(warmup_steps=10, learning_rate=2e-3, lr_schedule="wsd", lr_decay_fraction=0.2)
  c = tiny_config(total_steps=100, end_learning_rate_factor=0.1, **fields)
  lr = optimizer.schedule(c)
  np.testing.assert_allclose([float(lr(t)) for t in (0, 5, 10, 50, 79)], [0, 1e-3] + [2e-3] * 3)
  np.testing.assert_allclose(float(lr(90)), (2e-3 + 2e-4) / 2, rtol=1e-6)  # halfway down
  np.testing.assert_allclose(float(lr(100)), 2e-4, rtol=1e-6)
  assert optimizer.continues_until(c) == 80
  # every update before the decay is the same for a longer budget; not for a cosine
  longer = optimizer.schedule(tiny_config(total_steps=250, end_learning_rate_factor=0.1, **fields))
  assert [float(longer(t)) for t in range(80)] == [float(lr(t)) for t in range(80)]
  assert float(longer(81)) == float(lr(79)) > float(lr(81))
  assert optimizer.continues_until(tiny_config(total_steps=100, warmup_steps=10)) == 0
  cut = tiny_config(total_steps=8, warmup_steps=10, lr_schedule="wsd")  # warmup cut short
  assert optimizer.continues_until(cut) == 0


def test_schedule_counts_updates_under_accumulation():
  c = tiny_config(total_steps=100, warmup_steps=10, grad_accum_steps=5)
  np.testing.assert_allclose(float(optimizer.schedule(c)(2)), c.learning_rate, rtol=1e-6)


def test_decay_mask_skips_norms_and_biases():
  model = ladder.build("transformer")
  params = jax.eval_shape(lambda k: model.init(k, jnp.zeros((1, 8), jnp.int32)), jax.random.key(0))
  mask = optimizer.decay_mask(params["params"])
  flat = {jax.tree_util.keystr(p): m for p, m in jax.tree_util.tree_leaves_with_path(mask)}
  assert flat["['layers_0']['ffn']['w1']"] and flat["['unembed']"] and flat["['embed']"]
  assert flat["['layers_0']['mixer']['scorer']['wq']"]
  for name in ("['layers_0']['norm1']['scale']", "['final_norm']['bias']"):
    assert not flat[name]
  for name in ("['layers_0']['ffn']['b1']", "['layers_0']['mixer']['valuer']['bv']"):
    assert not flat[name]  # bv is [H, K]: a bias though 2-D


def test_weight_decay_touches_only_masked_leaves():
  c = tiny_config(learning_rate=1.0, warmup_steps=0, weight_decay=0.5, grad_clip_norm=None)
  tx = optimizer.make(c)
  params = {"kernel": jnp.ones((2, 2)), "norm": {"scale": jnp.ones(2)}, "bias": jnp.ones(2)}
  zero = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zero, tx.init(params), params)
  np.testing.assert_allclose(updates["kernel"], -0.5 * np.ones((2, 2)), rtol=1e-6)  # -lr*wd*p
  np.testing.assert_allclose(updates["norm"]["scale"], 0.0)
  np.testing.assert_allclose(updates["bias"], 0.0)


def test_clipping_bounds_the_update_input():
  c = tiny_config(learning_rate=1.0, warmup_steps=0, weight_decay=0.0, grad_clip_norm=1.0)
  params = {"w": jnp.zeros(4)}
  tx = optimizer.make(c)
  grads = {"w": jnp.full(4, 100.0)}
  clipped, _ = optax.clip_by_global_norm(1.0).update(grads, optax.EmptyState())
  np.testing.assert_allclose(optax.tree.norm(clipped), 1.0, rtol=1e-6)
  updates, state = tx.update(grads, tx.init(params), params)
  # Adam's first step is lr * sign(g) whatever the scale; the state sees the clipped grads.
  np.testing.assert_allclose(updates["w"], -1.0, rtol=1e-4)
  mu = optax.tree_utils.tree_get(state, "mu")
  np.testing.assert_allclose(mu["w"], 0.1 * 0.5, rtol=1e-5)  # (1 - b1) * clipped (0.5 each)


def test_accumulation_of_two_halves_equals_one_full_batch():
  base = dict(learning_rate=0.1, warmup_steps=0)
  full_tx = optimizer.make(tiny_config(**base, total_steps=10))
  accum_tx = optimizer.make(tiny_config(**base, grad_accum_steps=2, total_steps=20))
  params = {"w": jnp.arange(3.0)}
  x = jax.random.normal(jax.random.key(0), (8, 3))
  grad = jax.grad(lambda p, x: jnp.mean((x @ p["w"]) ** 2))
  full, _ = full_tx.update(grad(params, x), full_tx.init(params), params)
  state = accum_tx.init(params)
  first, state = accum_tx.update(grad(params, x[:4]), state, params)
  np.testing.assert_allclose(first["w"], 0.0)  # no update until the k-th micro-step
  second, state = accum_tx.update(grad(params, x[4:]), state, params)
  np.testing.assert_allclose(second["w"], full["w"], rtol=1e-5)
  assert float(optimizer.learning_rate(state)) == pytest.approx(0.1)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("learning_rate", float("nan"), "learning_rate=nan"),
    ("learning_rate", 0.0, "learning_rate=0.0: must be > 0"),
    ("weight_decay", -1.0, "weight_decay=-1.0"),
    ("adam_b2", 1.0, "adam_b2=1.0"),
    ("grad_accum_steps", 0, "grad_accum_steps=0"),
    ("warmup_steps", -1, "warmup_steps=-1"),
    ("lr_schedule", "linear", "lr_schedule='linear': expected one of"),
    ("lr_decay_fraction", 0.0, "lr_decay_fraction=0.0: must be in"),
  ],
)
def test_bad_fields_name_themselves(field, value, match):
  with pytest.raises(optimizer.OptimizerError, match=match):
    optimizer.make(tiny_config(**{field: value}))
