"""`contract(spec, x, w)`: an einsum of an activation with a weight, whose weight gradient
is computed as x^T g (activation first) instead of JAX's g^T x.

Why (measured, jax 0.10 on a 2-core AVX-512 CPU, gpt_small train step): JAX differentiates a
dot_general with the cotangent g as the left operand of the weight-gradient product. XLA:CPU
hands dots to YNNPACK in the canonical layout (contracted dimension last on the left), so it
transposes g. In a residual network g is a chain of elementwise adds through every later
block's LayerNorm backward, and XLA fuses that whole chain into each transpose, recomputing
it: O(layers^2) elementwise work, 24% of the step. With x first, the transpose falls on the
activation, which is in memory already; the step's copies/transposes fell from 24% to 4%.

Inside a scanned layer stack (`transpose_narrower()`, entered by jaxformer.nn.lm) the
cotangent g is a loop-carried buffer, materialized once per layer, so the chain above cannot
form; there the weight gradient transposes whichever of x and g is smaller instead
((g^T x)^T): for W2 of the MLP that is g [N, D] rather than the GELU output [N, F], whose
transposed copy (recomputing GELU, with a 6 KiB stride that thrashes the cache) cost more
than any other copy of the step (measured in BENCHMARKS.md).

Where the rule applies: it pays only on XLA:CPU, and a `jax.custom_vjp` cannot be
differentiated in forward mode (jvp, jacfwd, forward-over-reverse Hessian-vector products).
So contract is plain `jnp.einsum` (every autodiff mode, the gradient program XLA:GPU and TPU
expect) except inside `reverse_mode_only()`, which the train step enters around the loss it
takes `jax.value_and_grad` of; there the rule is staged with `lax.platform_dependent`, so it is
chosen from the platform the program is lowered for (a step lowered for cuda or tpu from a CPU
host gets plain einsum), not from the host's default backend.

Same values as jnp.einsum (forward identical; gradients equal up to summation order).
spec: 'x,w->out' in the dimension key, every letter of w in x or out, every letter of x in
w or out (plain contractions and batch dims; no '...', no letter repeated in one operand).
"""

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp

from jaxformer.math import shapes

_NARROWER = contextvars.ContextVar("transpose_narrower", default=False)
_REVERSE_ONLY = contextvars.ContextVar("reverse_mode_only", default=False)


@contextlib.contextmanager
def reverse_mode_only():
  """Within: contract may use its CPU weight-gradient rule, a `jax.custom_vjp` that forward mode
  cannot differentiate. For code that only reverse mode differentiates (the train step's loss);
  decided when the forward pass is traced."""
  token = _REVERSE_ONLY.set(True)
  try:
    yield
  finally:
    _REVERSE_ONLY.reset(token)


@contextlib.contextmanager
def transpose_narrower():
  """Within: contract's weight gradients transpose the smaller of x and g (see above).
  Decided when the forward pass is traced, so enter it around the forward computation."""
  token = _NARROWER.set(True)
  try:
    yield
  finally:
    _NARROWER.reset(token)


def parse(spec):
  """'BLD,DHK->BLHK' -> ('BLD', 'DHK', 'BLHK'); ValueError naming what is unsupported."""
  inputs, arrow, out = spec.replace(" ", "").partition("->")
  xs, comma, ws = inputs.partition(",")
  if not arrow or not comma or "," in ws or "." in spec:
    raise ValueError(f"contract: spec {spec!r} must read 'x,w->out' without '...'")
  for name, letters in (("x", xs), ("w", ws), ("out", out)):
    if len(set(letters)) != len(letters):
      raise ValueError(f"contract: spec {spec!r} repeats a letter in {name}")
  if set(ws) - set(xs) - set(out) or set(xs) - set(ws) - set(out):
    raise ValueError(f"contract: spec {spec!r} sums a letter of one operand alone")
  return xs, ws, out


def contract(spec, x, w):
  """jnp.einsum(spec, x, w); on CPU inside `reverse_mode_only()`, with the weight gradient
  x^T g (see the module docstring).

  x and w are checked against the spec with chex, from static shapes only: a letter
  shared by x and w must have one size, and the AssertionError names the operand.
  """
  xs, ws, _ = parse(spec)
  sizes = {}
  shapes.check_array(f"contract {spec!r}", "x", x, xs, sizes)
  shapes.check_array(f"contract {spec!r}", "w", w, ws, sizes)
  if not _REVERSE_ONLY.get():
    return jnp.einsum(spec, x, w)
  cpu = functools.partial(_contract, spec, _NARROWER.get())
  return jax.lax.platform_dependent(x, w, cpu=cpu, default=functools.partial(jnp.einsum, spec))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _contract(spec, narrower, x, w):
  return jnp.einsum(spec, x, w)


def _forward(spec, narrower, x, w):
  return jnp.einsum(spec, x, w), (x, w)


def _backward(spec, narrower, residuals, g):
  x, w = residuals
  xs, ws, out = parse(spec)
  if narrower and g.size < x.size:
    dw = _dot(out, g.astype(x.dtype), xs, x, ws)  # g^T x: g is the smaller transpose
  else:
    dw = jnp.einsum(f"{xs},{out}->{ws}", x, g.astype(x.dtype))  # activation first: see above
  dx = jnp.einsum(f"{out},{ws}->{xs}", g, w.astype(g.dtype))
  return dx.astype(x.dtype), dw.astype(w.dtype)


def _dot(a_spec, a, b_spec, b, out_spec):
  """einsum(a_spec,b_spec->out_spec) as one dot_general with `a` as its left operand (jnp.einsum
  picks the operand order itself), then a transpose of the (small) result into out_spec."""
  batch = [c for c in a_spec if c in b_spec and c in out_spec]
  summed = [c for c in a_spec if c in b_spec and c not in out_spec]
  dims = (
    ([a_spec.index(c) for c in summed], [b_spec.index(c) for c in summed]),
    ([a_spec.index(c) for c in batch], [b_spec.index(c) for c in batch]),
  )
  y = jax.lax.dot_general(a, b, dims)
  y_spec = batch + [c for c in a_spec if c not in b_spec] + [c for c in b_spec if c not in a_spec]
  return jnp.transpose(y, [y_spec.index(c) for c in out_spec])


_contract.defvjp(_forward, _backward)
