"""contract == jnp.einsum in value and in gradient, for every spec the pieces use."""

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxformer.math.contract import contract, parse

SHAPES = {"B": 2, "L": 3, "M": 3, "D": 5, "H": 2, "K": 4, "F": 7, "V": 6}
SPECS = ["BLD,DHK->BLHK", "BLHK,HKD->BLD", "BLD,DF->BLF", "BLF,FD->BLD", "BLD,VD->BLV"]


def _operands(spec, seed):
  xs, ws, _ = parse(spec)
  kx, kw = jax.random.split(jax.random.key(seed))
  x = jax.random.normal(kx, tuple(SHAPES[c] for c in xs))
  w = jax.random.normal(kw, tuple(SHAPES[c] for c in ws))
  return x, w


@pytest.mark.parametrize("spec", SPECS)
def test_value_and_gradients_equal_einsum(spec):
  x, w = _operands(spec, SPECS.index(spec))
  chex.assert_trees_all_close(contract(spec, x, w), jnp.einsum(spec, x, w))

  def loss(fn):
    # a nonlinear loss so that the cotangent differs from a constant
    return lambda x, w: jnp.sum(jnp.sin(fn(spec, x, w)))

  want = jax.grad(loss(jnp.einsum), argnums=(0, 1))(x, w)
  got = jax.jit(jax.grad(loss(contract), argnums=(0, 1)))(x, w)
  chex.assert_trees_all_close(got, want, atol=1e-5, rtol=1e-5)


def test_mixed_dtypes_keep_each_operands_dtype():
  x, w = _operands("BLD,DF->BLF", 0)
  x = x.astype(jnp.bfloat16)
  dx, dw = jax.grad(lambda x, w: jnp.sum(contract("BLD,DF->BLF", x, w.astype(x.dtype))), (0, 1))(
    x, w
  )
  assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.float32


@pytest.mark.parametrize(
  "spec", ["BLD->BLD", "BLD,DF,FV->BLV", "...D,DF->...F", "BLDD,DF->BLF", "BLD,DFK->BLF"]
)
def test_unsupported_specs_are_rejected(spec):
  x = jnp.ones((2, 3, 5))
  with pytest.raises(ValueError, match="contract"):
    contract(spec, x, jnp.ones((5, 7)))
