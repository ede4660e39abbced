"""One training step and one eval step: pure functions, jitted once with shardings.

The train state is a plain dict (what Orbax saves, no class to unpickle):
  step       int32 []        train steps done (micro-steps when accumulating)
  params     model params    float32, sharded by the logical rules
  opt_state  optax state     mirrors params' shardings
  rng        uint32 [2]      key data; step t uses fold_in(rng, t) (dropout-style noise)
Loss is the cross-entropy averaged over the positions with mask = 1 (MQAR scores only the
query answers); accuracy is argmax = target over the same positions.
A non-finite loss or gradient norm leaves params and optimizer state unchanged (so the
last good state survives); `metrics['finite']` tells the loop, which stops or skips.
"""

import functools

import jax
import jax.numpy as jnp
import optax

from jaxformer.math import contract
from jaxformer.train import optimizer


def init_state(model, tx, rng, batch_shape):
  """Params and optimizer state (boxed: leaves carry logical names), step 0, the rng."""
  params_rng, state_rng = jax.random.split(rng)
  params = model.init(params_rng, jnp.zeros(batch_shape, jnp.int32))["params"]
  return {
    "step": jnp.zeros((), jnp.int32),
    "params": params,
    "opt_state": tx.init(params),
    "rng": jax.random.key_data(state_rng),
  }


def masked_sums(logits_BLV, targets_BL, mask_BL):
  """Sum of cross-entropy, of correct argmaxes and of weights over positions with mask = 1."""
  weights_BL = mask_BL.astype(jnp.float32)
  ce_BL = optax.softmax_cross_entropy_with_integer_labels(logits_BLV, targets_BL)
  correct_BL = (jnp.argmax(logits_BLV, axis=-1) == targets_BL).astype(jnp.float32)
  return {
    "loss_sum": jnp.sum(ce_BL * weights_BL),
    "correct_sum": jnp.sum(correct_BL * weights_BL),
    "weight_sum": jnp.sum(weights_BL),
  }


def _loss_fn(params, batch, model, rng):
  with contract.reverse_mode_only():  # only value_and_grad differentiates it: CPU matmul rule
    logits_BLV = model.apply({"params": params}, batch["inputs"], rngs={"dropout": rng})
  sums = masked_sums(logits_BLV, batch["targets"], batch["mask"])
  loss = sums["loss_sum"] / jnp.maximum(sums["weight_sum"], 1.0)
  return loss, sums


def train_step(state, batch, *, model, tx):
  """One optimizer step (one micro-step under gradient accumulation) on a global batch."""
  step_rng = jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), state["step"])
  grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
  (loss, sums), grads = grad_fn(state["params"], batch, model, step_rng)
  grad_norm = optax.tree.norm(grads)
  updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)

  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
  new_state = {
    "step": state["step"] + 1,
    "params": keep(params, state["params"]),
    "opt_state": keep(opt_state, state["opt_state"]),
    "rng": state["rng"],
  }
  metrics = {
    "loss": loss,
    "accuracy": sums["correct_sum"] / jnp.maximum(sums["weight_sum"], 1.0),
    "grad_norm": grad_norm,
    "learning_rate": optimizer.learning_rate(new_state["opt_state"]),
    "finite": finite,
  }
  return new_state, metrics


def eval_step(params, batch, *, model):
  """Masked sums over one batch; the caller adds them up over the split."""
  logits_BLV = model.apply({"params": params}, batch["inputs"])
  return masked_sums(logits_BLV, batch["targets"], batch["mask"])


def jit_train_step(model, tx, state_shardings, batch_sharding):
  """train_step jitted once: state in and out with its shardings, donated."""
  return jax.jit(
    functools.partial(train_step, model=model, tx=tx),
    in_shardings=(state_shardings, batch_sharding),
    out_shardings=(state_shardings, None),
    donate_argnums=0,
  )


def jit_eval_step(model, params_shardings, batch_sharding):
  return jax.jit(
    functools.partial(eval_step, model=model),
    in_shardings=(params_shardings, batch_sharding),
  )
