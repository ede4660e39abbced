"""contract == jnp.einsum in value and in gradient, for every spec the pieces use; its CPU
weight-gradient rule only inside reverse_mode_only and only when lowering for CPU."""

import contextlib
import re

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxformer.math.contract import contract, parse, reverse_mode_only, transpose_narrower

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
  with reverse_mode_only(), transpose_narrower() if narrower else contextlib.nullcontext():
    grad_fn = jax.jit(jax.grad(loss(contract), argnums=(0, 1)))
    got = grad_fn(x, w)
  chex.assert_trees_all_close(got, want, atol=1e-5, rtol=1e-5)


def weight_gradient_lhs(spec, x, w, platform):
  """The shape of the left operand of the weight gradient's dot_general, in the gradient of
  contract under reverse_mode_only lowered for `platform` (StableHLO text)."""
  with reverse_mode_only():
    grad = jax.jit(jax.grad(lambda w: jnp.sum(jnp.sin(contract(spec, x, w)))))
    text = grad.trace(w).lower(lowering_platforms=(platform,)).as_text()
  weight_sized = {w.shape, w.shape[::-1]}  # (g^T x) comes out transposed
  lhs = []
  for a, out in re.findall(
    r"dot_general.*: \((tensor<[^>]*>), tensor<[^>]*>\) -> (tensor<[^>]*>)", text
  ):
    dims = lambda t: tuple(int(d) for d in re.findall(r"(\d+)x", t))  # noqa: E731
    if dims(out) in weight_sized:
      lhs.append(dims(a))
  (shape,) = lhs
  return shape


def test_transpose_narrower_puts_the_cotangent_first_where_it_is_smaller():
  """On CPU the weight gradient of 'BLF,FD->BLD' is one dot_general whose left operand is x
  [B, L, F] by default and the smaller cotangent g [B, L, D] under transpose_narrower."""
  x, w = _operands("BLF,FD->BLD", 0)
  assert weight_gradient_lhs("BLF,FD->BLD", x, w, "cpu") == x.shape
  with transpose_narrower():
    got = weight_gradient_lhs("BLF,FD->BLD", x, w, "cpu")
  assert got == (SHAPES["B"], SHAPES["L"], SHAPES["D"])


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_accelerators_get_jaxs_own_gradient_program(platform):
  """Lowered for a GPU or TPU (from this CPU host), the weight gradient is jnp.einsum's: the
  cotangent g [B, L, D] first, whatever the host; before, the CPU rule went everywhere."""
  x, w = _operands("BLD,DF->BLF", 0)
  assert weight_gradient_lhs("BLD,DF->BLF", x, w, platform) == (
    SHAPES["B"],
    SHAPES["L"],
    SHAPES["F"],
  )
  assert weight_gradient_lhs("BLD,DF->BLF", x, w, "cpu") == x.shape


@pytest.mark.parametrize("spec", SPECS)
def test_forward_mode_outside_reverse_mode_only(spec):
  """jvp (and so jacfwd and forward-over-reverse) works: a custom_vjp failed it before."""
  x, w = _operands(spec, 1)
  dx, dw = _operands(spec, 2)
  out, tangent = jax.jvp(lambda x, w: contract(spec, x, w), (x, w), (dx, dw))
  want = jnp.einsum(spec, dx, w) + jnp.einsum(spec, x, dw)
  chex.assert_trees_all_close(out, jnp.einsum(spec, x, w))
  chex.assert_trees_all_close(tangent, want, atol=1e-5, rtol=1e-5)


def test_mixed_dtypes_keep_each_operands_dtype():
  x, w = _operands("BLD,DF->BLF", 0)
  x = x.astype(jnp.bfloat16)
  with reverse_mode_only():
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
