"""contract == jnp.einsum in value and in gradient, for every spec the pieces use."""

import contextlib

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxformer.math.contract import contract, parse, transpose_narrower

SHAPES = {"B": 2, "L": 3, "M": 3, "D": 5, "H": 2, "K": 4, "F": 7, "V": 6}
SPECS = ["BLD,DHK->BLHK", "BLHK,HKD->BLD", "BLD,DF->BLF", "BLF,FD->BLD", "BLD,VD->BLV"]


def _operands(spec, seed):
  xs, ws, _ = parse(spec)
  kx, kw = jax.random.split(jax.random.key(seed))
  x = jax.random.normal(kx, tuple(SHAPES[c] for c in xs))
  w = jax.random.normal(kw, tuple(SHAPES[c] for c in ws))
  return x, w


@pytest.mark.parametrize("narrower", [False, True])
@pytest.mark.parametrize("spec", SPECS)
def test_value_and_gradients_equal_einsum(spec, narrower):
  """Both weight-gradient orders: x^T g, and under transpose_narrower (g^T x)^T where g is
  the smaller operand (here 'BLF,FD->BLD' and 'BLD,VD->BLV'; F > D > V in SHAPES)."""
  x, w = _operands(spec, SPECS.index(spec))
  chex.assert_trees_all_close(contract(spec, x, w), jnp.einsum(spec, x, w))

  def loss(fn):
    # a nonlinear loss so that the cotangent differs from a constant
    return lambda x, w: jnp.sum(jnp.sin(fn(spec, x, w)))

  want = jax.grad(loss(jnp.einsum), argnums=(0, 1))(x, w)
  with transpose_narrower() if narrower else contextlib.nullcontext():
    grad_fn = jax.jit(jax.grad(loss(contract), argnums=(0, 1)))
    got = grad_fn(x, w)
  chex.assert_trees_all_close(got, want, atol=1e-5, rtol=1e-5)


def test_transpose_narrower_puts_the_cotangent_first_where_it_is_smaller():
  """The weight gradient of 'BLF,FD->BLD' is one dot_general whose left operand is x [B, L,
  F] by default and the smaller cotangent g [B, L, D] under transpose_narrower."""
  x, w = _operands("BLF,FD->BLD", 0)

  def lhs_of_weight_gradient():
    jaxpr = jax.make_jaxpr(jax.grad(lambda w: jnp.sum(contract("BLF,FD->BLD", x, w))))(w)
    weight_sized = {w.shape, w.shape[::-1]}  # (g^T x) comes out transposed
    (dot,) = [
      e
      for e in jaxpr.jaxpr.eqns
      if e.primitive.name == "dot_general" and e.outvars[0].aval.shape in weight_sized
    ]
    return dot.invars[0].aval.shape

  assert lhs_of_weight_gradient() == x.shape
  with transpose_narrower():
    assert lhs_of_weight_gradient() == (SHAPES["B"], SHAPES["L"], SHAPES["D"])


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
