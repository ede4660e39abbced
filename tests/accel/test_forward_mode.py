"""Forward-mode autodiff through every rung: jax.jvp of the logits and a forward-over-reverse
Hessian-vector product of the loss, each checked against reverse mode (the jvp by
<J t, u> = <t, J^T u>, the HVP against reverse-over-reverse)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxformer import ladder

V, L, B = 16, 4, 1


def tiny(rung):
  c = ladder.default_config(rung)
  with c.unlocked():
    c.vocab_size, c.max_len, c.num_layers = V, L, 1
    if rung not in ("full_dynamic", "diagonal_dynamic"):
      c.d_model, c.d_ff = 16, 32
  return c


def vdot(a, b):
  return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def like(tree, key):
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(key, len(leaves))
  return treedef.unflatten(
    [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
  )


@pytest.mark.parametrize("rung", ladder.RUNGS)
def test_jvp_and_hessian_vector_product(rung):
  model = ladder.build(rung, tiny(rung))
  k_tokens, k_init, k_t, k_u = jax.random.split(jax.random.key(0), 4)
  tokens = jax.random.randint(k_tokens, (B, L), 0, V)
  targets = jnp.roll(tokens, -1, axis=1)
  params = model.init(k_init, tokens)["params"]
  t = like(params, k_t)

  def logits(p):
    return model.apply({"params": p}, tokens)

  def loss(p):
    return optax.softmax_cross_entropy_with_integer_labels(logits(p), targets).mean()

  @jax.jit
  def products(p, t):
    out, jt = jax.jvp(logits, (p,), (t,))
    u = jax.random.normal(k_u, out.shape, out.dtype)
    (jtu,) = jax.vjp(logits, p)[1](u)
    hvp_forward = jax.jvp(jax.grad(loss), (p,), (t,))[1]
    hvp_reverse = jax.grad(lambda p: vdot(jax.grad(loss)(p), t))(p)
    return jnp.vdot(jt, u), vdot(t, jtu), hvp_forward, hvp_reverse

  jt_u, t_jtu, hvp_forward, hvp_reverse = products(params, t)
  np.testing.assert_allclose(jt_u, t_jtu, rtol=1e-4)
  scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(hvp_reverse))
  assert scale > 0
  for got, want in zip(jax.tree.leaves(hvp_forward), jax.tree.leaves(hvp_reverse), strict=True):
    np.testing.assert_allclose(got, want, atol=1e-4 * scale, rtol=1e-4)
