"""Matmul suite: XLA's speed on each matrix product the train step runs, beside PyTorch's.

  python -m experiments.bench matmul                  # gpt_small's products, XLA alone
  python -m experiments.bench matmul --compare torch  # and torch.matmul on the same operands

The train suite says how fast the whole step is; this suite says how much of a gap to
PyTorch is in the matrix-multiply kernel itself, before any fusion, scheduling or glue. For
the train suite's model at `model_size` (jaxformer.bench.train.MODELS) it lists the products
of one train step: for each projection x[T, a] @ W[a, b] (T = batch x seq_len tokens; q, k,
v and o; the MLP's two matrices; the unembedding) the forward product x W, the input gradient
g W^T and the weight gradient x^T g, and the blockwise attention's batched block products
(batch x heads blocks of bq x head_dim against bk x head_dim; the backward pass recomputes
some, see `products`). Each is one jitted
`lax.dot_general` with those dimension numbers, so XLA sees the operand layouts the step's
products have (no transpose copies: a row reports any it finds in the compiled program), and
torch.matmul gets the same operands as transposed views, which MKL reads without a copy.

Every product is timed standalone, the best of `repeats` loops of `calls` calls; with torch,
XLA is timed before and after it and keeps its better time.
`per_step` counts how often the step runs the product; the `all` row weighs every product by
it: the time the step's matrix products would take if each ran as fast as it does alone
(`dot_s_per_step`), and that time's ratio, torch / XLA (`speed_vs_torch` > 1: XLA faster).
"""

import functools
import inspect
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxformer.bench import BenchError, Suite, check_choice, check_positive
from jaxformer.bench import train as train_bench
from jaxformer.math import blockwise
from jaxformer.train import metrics

COMPARE = (None, "torch")
# the block size of the step's attention: blockwise_attention's default
ATTENTION_BLOCK = inspect.signature(blockwise.blockwise_attention).parameters["block_size"].default

# contracting dims (lhs, rhs) of x W, g W^T and x^T g
NN, NT, TN = ((1,), (0,)), ((1,), (1,)), ((0,), (0,))


def products(model_size="gpt_small"):
  """[(name, lhs shape, rhs shape, contracting, batch, per_step)] of one train step."""
  m = train_bench.MODELS[model_size]
  T = m["batch_size"] * m["seq_len"]
  d, f, v, layers = (m["model"][k] for k in ("d_model", "d_ff", "vocab_size", "num_layers"))
  out = []
  for name, a, b, per_step in (
    ("q/k/v/o", d, d, 4 * layers),
    ("mlp in", d, f, layers),
    ("mlp out", f, d, layers),
    ("unembed", d, v, 1),
  ):
    out += [
      (f"{name} x W", (T, a), (a, b), NN, None, per_step),
      (f"{name} g W^T", (T, b), (a, b), NT, None, per_step),
      (f"{name} x^T g", (T, a), (T, b), TN, None, per_step),
    ]
  heads, L = m["model"]["num_heads"], m["seq_len"]
  k, c = d // heads, min(ATTENTION_BLOCK, L)
  n = L // c
  pairs = layers * n * (n + 1) // 2  # causal block pairs per step
  bh = m["batch_size"] * heads
  batch = ((0,), (0,))
  # Per block pair the preset's step (remat='dots') runs 8 block products, as counted in a
  # profile of it: the forward's q k^T and p v; the backward's q k^T again (p recomputed
  # from the saved lse), do v^T, p^T do, ds k and ds^T q; and one more p v, where remat
  # recomputes the forward's output for the backward.
  out += [
    # q k^T (twice) and do v^T: bq x K against bk x K
    ("attention q k^T", (bh, c, k), (bh, c, k), ((2,), (2,)), batch, 3 * pairs),
    # p v (twice) and ds k: bq x bk against bk x K
    ("attention p v", (bh, c, c), (bh, c, k), ((2,), (1,)), batch, 3 * pairs),
    # p^T do and ds^T q: bk x bq (transposed) against bq x K
    ("attention p^T do", (bh, c, c), (bh, c, k), ((1,), (1,)), batch, 2 * pairs),
  ]
  return out


def _flops(lhs, rhs, contracting, batch):
  """2 x every (batch, row, column, summed) index of the product."""
  batch = batch or ((), ())
  summed = int(np.prod([lhs[i] for i in contracting[0]]))
  nbatch = int(np.prod([lhs[i] for i in batch[0]]))

  def free(shape, side):
    skip = set(contracting[side]) | set(batch[side])
    return int(np.prod([s for i, s in enumerate(shape) if i not in skip]))

  return 2 * nbatch * free(lhs, 0) * free(rhs, 1) * summed


def _best(fn, repeats, calls):
  """Best wall seconds per call after one warm-up call (metrics.time_calls)."""
  return metrics.time_calls(fn, repeats, calls, warmup=True).best


def _torch_matmul(lhs, rhs, contracting, batch):
  """torch.matmul on views of `lhs` and `rhs` arranged as [batch,] M x K by K x N."""
  import torch

  a, b = torch.from_numpy(lhs), torch.from_numpy(rhs)
  nb = 1 if batch else 0
  if contracting[0][0] == nb:  # lhs is K x M: its transposed view
    a = a.transpose(-1, -2)
  if contracting[1][0] == nb + 1:  # rhs is N x K
    b = b.transpose(-1, -2)
  return lambda: torch.matmul(a, b)


def _warm_torch(seconds=0.5):
  """Multiply for a while before timing torch: its first products in a process run ~15% slow
  (its thread pool spinning up), which would fall on whichever product comes first."""
  import torch

  a = torch.ones(1024, 1024)
  start = time.perf_counter()
  while time.perf_counter() - start < seconds:
    torch.matmul(a, a)


def run(model_size="gpt_small", repeats=5, calls=5, compare=None):
  """One row per product of the train step at `model_size`, and an `all` row."""
  check_choice("model_size", model_size, tuple(train_bench.MODELS))
  check_choice("compare", compare, COMPARE)
  check_positive(repeats=repeats, calls=calls)
  if compare == "torch" and jax.default_backend() != "cpu":
    raise BenchError(f"compare={compare!r}: runs on a CPU only (PyTorch on CPU)")
  if compare == "torch":
    _warm_torch()
  rng = np.random.default_rng(0)
  rows = []
  for name, lhs_shape, rhs_shape, contracting, batch, per_step in products(model_size):
    lhs = rng.standard_normal(lhs_shape, np.float32)
    rhs = rng.standard_normal(rhs_shape, np.float32)
    dims = (contracting, batch or ((), ()))
    dot = jax.jit(lambda x, w, dims=dims: lax.dot_general(x, w, dims))
    x, w = jnp.asarray(lhs), jnp.asarray(rhs)
    hlo = dot.lower(x, w).compile().as_text()
    jax_fn = functools.partial(dot, x, w)
    flops = _flops(lhs_shape, rhs_shape, contracting, batch)
    row = dict(
      product=name,
      lhs=lhs_shape,
      rhs=rhs_shape,
      contracting=contracting,
      per_step=per_step,
      flops=flops,
      copies=sum(f" {op}(" in hlo for op in ("transpose", "copy")),
    )
    jax_s = _best(jax_fn, repeats, calls)
    if compare == "torch":
      torch_fn = _torch_matmul(lhs, rhs, contracting, batch)
      expected = np.asarray(jax_fn())
      np.testing.assert_allclose(torch_fn().numpy(), expected, rtol=1e-3, atol=1e-2)
      torch_s = _best(torch_fn, repeats, calls)
      jax_s = min(jax_s, _best(jax_fn, repeats, calls))  # after torch, too
      row.update(
        torch_s=torch_s, torch_gflops=flops / torch_s / 1e9, speed_vs_torch=torch_s / jax_s
      )
    row.update(jax_s=jax_s, jax_gflops=flops / jax_s / 1e9)
    rows.append(row)
  total = dict(product="all", per_step=None, flops=sum(r["flops"] * r["per_step"] for r in rows))
  total["dot_s_per_step"] = sum(r["jax_s"] * r["per_step"] for r in rows)
  total["jax_gflops"] = total["flops"] / total["dot_s_per_step"] / 1e9
  if compare == "torch":
    torch_total = sum(r["torch_s"] * r["per_step"] for r in rows)
    total.update(
      torch_dot_s_per_step=torch_total,
      torch_gflops=total["flops"] / torch_total / 1e9,
      speed_vs_torch=torch_total / total["dot_s_per_step"],
    )
  return rows + [total]


SUITE = Suite(
  run=run,
  sizes={
    "gpt_small": dict(model_size="gpt_small"),
    "tiny": dict(model_size="tiny", repeats=2, calls=2),
  },
  columns=(
    "product",
    "lhs",
    "rhs",
    "per_step",
    "copies",
    "jax_gflops",
    "torch_gflops",
    "speed_vs_torch",
    "dot_s_per_step",
    "torch_dot_s_per_step",
  ),
  description="each matrix product of the train step, alone: XLA's GFLOP/s (and torch's)",
)
