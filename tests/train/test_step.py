"""The train / eval step: masked loss and accuracy, sharded == single device, non-finite guard."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer.train import program as program_lib
from jaxformer.train import sharding, step
from tests.train.train_helpers import tiny_config


def _batch(rng, batch=16, length=16, vocab=32):
  return {
    "inputs": rng.integers(0, vocab, (batch, length)).astype(np.int32),
    "targets": rng.integers(0, vocab, (batch, length)).astype(np.int32),
    "mask": (rng.random((batch, length)) < 0.3).astype(np.int32),
  }


def test_masked_sums_match_numpy():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
  targets = rng.integers(0, 7, (3, 5))
  mask = (rng.random((3, 5)) < 0.5).astype(np.int32)
  sums = step.masked_sums(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(mask))
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  ce = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(sums["loss_sum"], (ce * mask).sum(), rtol=1e-5)
  np.testing.assert_allclose(sums["correct_sum"], ((logits.argmax(-1) == targets) * mask).sum())
  assert float(sums["weight_sum"]) == mask.sum()


def _run_steps(config, mesh_shape, batches):
  mesh = sharding.make_mesh(mesh_shape, jax.devices()[: int(np.prod(mesh_shape))])
  with sharding.active(mesh):
    program = program_lib.build(config, mesh, batches[0]["inputs"].shape)
    state = program.init(jax.random.key(config.seed))
    out = []
    for b in batches:
      state, metrics = program.train_step(state, jax.device_put(b, program.batch_sharding))
      out.append(jax.device_get(metrics))
    return jax.device_get(state), out, state


def test_sharded_step_equals_single_device():
  # No q/k biases: the key bias gets an exactly-zero gradient (softmax ignores a shift shared
  # by all keys), so its float noise, which Adam scales up to +-lr, differs between layouts.
  config = tiny_config(learning_rate=3e-3, **{"model.use_bias": False})
  rng = np.random.default_rng(1)
  batches = [_batch(rng) for _ in range(3)]
  single, single_metrics, _ = _run_steps(config, (1, 1, 1), batches)
  sharded, sharded_metrics, on_mesh = _run_steps(config, (2, 2, 2), batches)
  assert on_mesh["params"]["unembed"].sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
  for a, b in zip(single_metrics, sharded_metrics, strict=True):
    assert a["finite"] and b["finite"]
    for key in ("loss", "accuracy", "grad_norm", "learning_rate"):
      np.testing.assert_allclose(a[key], b[key], rtol=2e-5, atol=1e-6, err_msg=key)
  chex.assert_trees_all_close(single["params"], sharded["params"], rtol=2e-5, atol=2e-6)
  chex.assert_trees_all_close(single["opt_state"], sharded["opt_state"], rtol=2e-5, atol=1e-7)
  assert int(single["step"]) == int(sharded["step"]) == 3
  # the loss moved: the steps did train
  assert single_metrics[-1]["loss"] != single_metrics[0]["loss"]


def _loss_and_grads(config, mesh_shape, batch):
  """Loss and gradients of the train step's loss on a mesh, at init + seeded host noise."""
  mesh = sharding.make_mesh(mesh_shape, jax.devices()[: int(np.prod(mesh_shape))])
  rng = np.random.default_rng(5)
  with sharding.active(mesh):
    program = program_lib.build(config, mesh, batch["inputs"].shape)
    params = program.init(jax.random.key(config.seed))["params"]
    noisy = lambda p: p + 0.05 * rng.standard_normal(p.shape).astype(p.dtype)  # noqa: E731
    params = jax.tree.map(lambda p: jax.device_put(noisy(np.asarray(p)), p.sharding), params)
    shardings = jax.tree.map(lambda a: a.sharding, program.abstract_state["params"])
    loss = functools.partial(step._loss_fn, model=program.model, rng=jax.random.key(0))
    grad_fn = jax.jit(
      jax.value_and_grad(loss, has_aux=True),
      in_shardings=(shardings, program.batch_sharding),
      out_shardings=((None, None), shardings),
    )
    (value, _), grads = grad_fn(params, jax.device_put(batch, program.batch_sharding))
    return float(value), grads


def test_sharded_gradients_equal_single_device_with_biases():
  """The default transformer, biases on and every parameter perturbed (so each bias is
  non-zero and takes part): the same loss and gradients on (2, 2, 2) as on one device.
  Gradients, not Adam steps: Adam scales the float noise of the key bias's exactly-zero
  gradient up to +-lr, so its updates differ between layouts while the gradients agree."""
  config = tiny_config()
  assert config.rung == "transformer" and config.model.use_bias
  batch = _batch(np.random.default_rng(4))
  single_loss, single = _loss_and_grads(config, (1, 1, 1), batch)
  sharded_loss, sharded = _loss_and_grads(config, (2, 2, 2), batch)
  assert sharded["unembed"].sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
  np.testing.assert_allclose(sharded_loss, single_loss, rtol=1e-6)
  single, sharded = jax.device_get((single, sharded))
  chex.assert_trees_all_close(sharded, single, rtol=1e-5, atol=1e-7)
  mixer, ffn = single["layers_0"]["mixer"], single["layers_0"]["ffn"]
  for name, grad in [
    ("bq", mixer["scorer"]["bq"]),
    ("bv", mixer["valuer"]["bv"]),
    ("bo", mixer["valuer"]["bo"]),
    ("b1", ffn["b1"]),
    ("b2", ffn["b2"]),
  ]:
    assert np.abs(grad).max() > 1e-4, f"{name}: the bias takes no part"


def test_nonfinite_step_leaves_state_unchanged():
  config = tiny_config()
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  batch = _batch(np.random.default_rng(2))
  with sharding.active(mesh):
    program = program_lib.build(config, mesh, batch["inputs"].shape)
    state = program.init(jax.random.key(0))
    params = dict(state["params"])
    params["unembed"] = params["unembed"].at[0, 0].set(jnp.nan)
    state = {**state, "params": params}
    before = jax.device_get(state)
    after, metrics = program.train_step(state, jax.device_put(batch, program.batch_sharding))
  after = jax.device_get(after)
  assert not metrics["finite"] and not np.isfinite(float(metrics["loss"]))
  chex.assert_trees_all_equal(after["params"], before["params"])
  chex.assert_trees_all_equal(after["opt_state"], before["opt_state"])
  assert int(after["step"]) == 1  # the step is counted; the update is not applied


@pytest.mark.parametrize("mask_value", [0, 1])
def test_eval_step_sums_only_masked_positions(mask_value):
  config = tiny_config()
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  batch = _batch(np.random.default_rng(3))
  batch["mask"][:] = mask_value
  with sharding.active(mesh):
    program = program_lib.build(config, mesh, batch["inputs"].shape)
    state = program.init(jax.random.key(0))
    sums = program.eval_step(state["params"], jax.device_put(batch, program.batch_sharding))
  assert float(sums["weight_sum"]) == mask_value * batch["mask"].size
  assert (float(sums["loss_sum"]) > 0) == bool(mask_value)
