"""Every attention implementation against its reference: values, gradients, decoding, memory."""

import functools

import chex
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from jaxformer.math import attention, blockwise, linear_attention, masks
from jaxformer.math.attention import IMPLEMENTATIONS, attend
from jaxformer.math.dense import dense_attention

WINDOWED = ("dense", "dot_product", "blockwise", "sliding_window")
B, L, H, K = 2, 19, 2, 8  # L on purpose not a multiple of BLOCK
BLOCK, WINDOW = 8, 5
TOL = dict(atol=2e-5, rtol=2e-5)
NOT_WINDOWED = ("block_sparse", "linear")
FAST = IMPLEMENTATIONS[1:]  # all but dense, the reference itself (checked against numpy)


def _inputs(seed, L=L, M=L, dtype=jnp.float32):
  """q, k, v, a kv mask and an output cotangent g, from a seeded generator (numpy: no
  compilation per shape, unlike jax.random in eager mode)."""
  rng = np.random.default_rng(seed)
  q_BLHK, g_BLHK = rng.standard_normal((2, B, L, H, K), np.float32)
  k_BMHK, v_BMHK = rng.standard_normal((2, B, M, H, K), np.float32)
  kv_mask_BM = rng.random((B, M)) < 0.8
  return (*(jnp.asarray(x, dtype) for x in (q_BLHK, k_BMHK, v_BMHK)), kv_mask_BM, g_BLHK)


def _numpy_attention(q_BLHK, k_BMHK, v_BMHK, readable, linear=False):
  """Independent float64 loop: query l of batch b reads key m iff readable(b, l, m)."""
  q_BLHK, k_BMHK, v_BMHK = (np.asarray(x, np.float64) for x in (q_BLHK, k_BMHK, v_BMHK))
  (B, L, H, K), M = q_BLHK.shape, k_BMHK.shape[1]
  out_BLHK = np.zeros_like(q_BLHK)
  phi = lambda x: np.where(x > 0, x + 1.0, np.exp(x))  # noqa: E731  elu(x) + 1
  for b in range(B):
    for l in range(L):
      ms = [m for m in range(M) if readable(b, l, m)]
      for h in range(H):
        if not ms:
          continue
        if linear:
          w = phi(k_BMHK[b, ms, h]) @ phi(q_BLHK[b, l, h])
        else:
          w = np.exp(k_BMHK[b, ms, h] @ q_BLHK[b, l, h] / np.sqrt(K))
        out_BLHK[b, l, h] = w @ v_BMHK[b, ms, h] / w.sum()
  return out_BLHK


def reference(
  impl,
  q_BLHK,
  k_BMHK,
  v_BMHK,
  *,
  causal=True,
  window=None,
  q_offset=0,
  kv_mask_BM=None,
  block_size=BLOCK,
):
  """What `impl` must equal: dense softmax (or the masked linear form) with its mask."""
  L, M = q_BLHK.shape[1], k_BMHK.shape[1]
  kw = dict(causal=causal, q_offset=q_offset, kv_mask_BM=kv_mask_BM)
  if impl.startswith("linear"):
    return linear_attention.linear_attention_reference(q_BLHK, k_BMHK, v_BMHK, **kw)
  if impl == "block_sparse":
    mask_BLM = masks.block_sparse_mask(L, M, block_size=block_size, **kw)
  else:
    mask_BLM = masks.attention_mask(L, M, window=window, **kw)
  return dense_attention(q_BLHK, k_BMHK, v_BMHK, mask_BLM)


def _window(impl):
  return WINDOW if impl == "sliding_window" else None


def _loss(fn, g_BLHK):
  """A scalar whose gradient is the VJP of `fn` with cotangent g (so all outputs count)."""
  return lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32) * g_BLHK)


def _grads(fn, g, q, k, v):
  return jax.value_and_grad(_loss(fn, g), (0, 1, 2))(q, k, v)


def _attend_and_reference(impl, *, block_size=BLOCK, **kw):
  fn = functools.partial(attend, impl=impl, block_size=block_size, **kw)
  return fn, functools.partial(reference, impl, block_size=block_size, **kw)


NUMPY_CASES = {
  # name: (attend kwargs, who reads whom with p = q_offset + l)
  "causal_kv": (dict(kv=True), lambda p, m, kv: m <= p and kv),
  "full": (dict(causal=False), lambda p, m, kv: True),
  "window": (dict(window=4, q_offset=3), lambda p, m, kv: p - 4 < m <= p),
  "band": (dict(causal=False, window=3), lambda p, m, kv: abs(p - m) < 3),
  "block_sparse": (
    dict(impl="block_sparse", block_size=2, q_offset=1),
    lambda p, m, kv: m <= p and (m // 2 in (p // 2, p // 2 - 1) or (m // 2 + 1) % 4 == 0),
  ),
  "linear": (dict(impl="linear", kv=True), lambda p, m, kv: m <= p and kv),
}


class AttentionTest(chex.TestCase):
  @parameterized.parameters(*NUMPY_CASES)
  def test_dense_and_masks_against_numpy_loop(self, case):
    """The references themselves (dense, masks.py, the linear form) against loops."""
    kwargs, readable = NUMPY_CASES[case]
    kwargs = dict(kwargs)
    q, k, v, kv_mask, _ = _inputs(11, L=7, M=12)
    impl, offset = kwargs.pop("impl", "dense"), kwargs.get("q_offset", 0)
    if kwargs.pop("kv", False):
      kwargs["kv_mask_BM"] = kv_mask
    fn = jax.jit(functools.partial(attend, impl=impl, **kwargs))
    want = _numpy_attention(
      q, k, v, lambda b, l, m: readable(offset + l, m, kv_mask[b, m]), impl == "linear"
    )
    np.testing.assert_allclose(fn(q, k, v), want, atol=1e-5, rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*FAST)
  def test_equals_reference_forward_and_grad(self, impl):
    """Causal with a kv mask, L not a multiple of the block."""
    q, k, v, kv_mask, g = _inputs(0)
    fn, ref = _attend_and_reference(impl, window=_window(impl), kv_mask_BM=kv_mask)
    got = self.variant(functools.partial(_grads, fn, g))(q, k, v)
    chex.assert_trees_all_close(got, jax.jit(functools.partial(_grads, ref, g))(q, k, v), **TOL)

  @parameterized.parameters(*FAST[:-1])  # linear_recurrent: same non-causal code as linear
  def test_non_causal_and_windows(self, impl):
    """Non-causal grads (no window); for windowed impls a causal window below the block (4)
    and a non-causal one above it."""
    q, k, v, _, g = _inputs(1, L=29)
    configs = [dict(causal=False, window=None)] if impl in ("blockwise", *NOT_WINDOWED) else []
    if impl in WINDOWED:
      configs += [dict(causal=True, window=3), dict(causal=False, window=12)]

    @jax.jit
    def run(q, k, v):
      pairs = [_attend_and_reference(impl, block_size=4, **c) for c in configs]
      return [(_grads(fn, g, q, k, v), _grads(ref, g, q, k, v)) for fn, ref in pairs]

    for (got, want), config in zip(run(q, k, v), configs, strict=True):
      chex.assert_trees_all_close(got, want, **TOL, custom_message=str(config))

  @parameterized.parameters(*IMPLEMENTATIONS)
  def test_kv_cache_decoding_and_prefill(self, impl):
    """One query at position t over a cache whose slots > t hold garbage (masked) equals
    row t of full attention, with t static and traced; and 6 queries at positions 9..14
    over the cache equal the reference, causal and not."""
    M, t = 23, 17
    q, k, v, kv_mask, _ = _inputs(2, L=M, M=M)
    window = _window(impl)
    garbage = 100.0 * jax.random.normal(jax.random.key(3), k.shape)
    slot_BM = jnp.broadcast_to(jnp.arange(M) <= t, (B, M))
    k_cache = jnp.where(slot_BM[..., None, None], k, garbage)
    v_cache = jnp.where(slot_BM[..., None, None], v, garbage)

    @jax.jit
    def run(q, traced_t):
      full = reference(impl, q, k, v, causal=True, window=window)
      decode = functools.partial(
        attend, impl=impl, window=window, block_size=BLOCK, kv_mask_BM=slot_BM
      )
      q_t = q[:, t : t + 1]
      pairs = [
        (decode(q_t, k_cache, v_cache, q_offset=o), full[:, t : t + 1]) for o in (t, traced_t)
      ]
      for causal in (True, False):
        kw = dict(causal=causal, window=window, q_offset=9, kv_mask_BM=kv_mask)
        fn, ref = _attend_and_reference(impl, **kw)
        pairs.append((fn(q[:, :6], k, v), ref(q[:, :6], k, v)))
      return pairs

    for got, want in run(q, jnp.int32(t)):
      chex.assert_equal_shape([got, want])
      chex.assert_trees_all_close(got, want, **TOL)

  def test_query_with_no_readable_key_gives_zeros(self):
    q, k, v, _, _ = _inputs(5)
    kv_mask = jnp.zeros((B, L), bool).at[1].set(True)  # batch 0 reads nothing

    @jax.jit
    def run(q, k, v):
      return {
        impl: attend(q, k, v, impl=impl, window=_window(impl), kv_mask_BM=kv_mask)
        # one impl per code path that produces the zeros
        for impl in ("dense", "dot_product", "blockwise", "linear", "linear_recurrent")
      }

    for impl, out in run(q, k, v).items():
      np.testing.assert_array_equal(out[0], 0.0, err_msg=impl)
      self.assertTrue(bool(jnp.all(jnp.isfinite(out[1]))), impl)
      self.assertTrue(bool(jnp.any(out[1] != 0.0)), impl)

  def test_bfloat16(self):
    """bf16 in, bf16 out, float32 accumulation: close to the float32 reference (one impl
    per dtype code path); gradients too for blockwise (its backward is hand-written)."""
    q, k, v, kv_mask, g = _inputs(6, dtype=jnp.bfloat16)
    pairs = {
      impl: _attend_and_reference(impl, window=_window(impl), kv_mask_BM=kv_mask)
      for impl in ("blockwise", "sliding_window", "linear")
    }

    @jax.jit
    def run(q, k, v):
      f32 = [x.astype(jnp.float32) for x in (q, k, v)]
      outs = {impl: (fn(q, k, v), ref(*f32)) for impl, (fn, ref) in pairs.items()}
      fn, ref = pairs["blockwise"]
      grads = jax.grad(_loss(fn, g), (0, 1, 2))(q, k, v)
      return outs, (grads, jax.grad(_loss(ref, g), (0, 1, 2))(*f32))

    outs, (grads, want_grads) = run(q, k, v)
    for impl, (out, want) in outs.items():
      self.assertEqual(out.dtype, jnp.bfloat16, impl)
      chex.assert_trees_all_close(
        out.astype(jnp.float32), want, atol=3e-2, rtol=3e-2, custom_message=impl
      )
    self.assertEqual({x.dtype for x in grads}, {jnp.dtype(jnp.bfloat16)})
    grads = tuple(x.astype(jnp.float32) for x in grads)
    chex.assert_trees_all_close(grads, want_grads, atol=6e-2, rtol=6e-2)

  def test_temperature(self):
    q, k, v, _, _ = _inputs(7)
    hot, want, cold = jax.jit(
      lambda q, k, v: (
        attend(q, k, v, impl="blockwise", temperature=0.5, block_size=BLOCK),
        attend(q / 0.5 * np.sqrt(K), k, v),  # default temperature sqrt(K)
        attend(q, k, v),
      )
    )(q, k, v)
    chex.assert_trees_all_close(hot, want, **TOL)
    self.assertGreater(float(jnp.abs(hot - cold).max()), 1e-2)


class LinearAttentionTest(chex.TestCase):
  @chex.variants(with_jit=True)
  def test_parallel_equals_recurrent(self):
    """Chunked-parallel (chunk 7, L = 45) and scan forms: same values and gradients."""
    q, k, v, kv_mask, g = _inputs(8, L=45, M=45)
    fns = [
      functools.partial(
        linear_attention.linear_attention, chunk=7, recurrent=recurrent, kv_mask_BM=kv_mask
      )
      for recurrent in (False, True)
    ]
    par, rec = (self.variant(jax.value_and_grad(_loss(f, g), (0, 1, 2)))(q, k, v) for f in fns)
    chex.assert_trees_all_close(par, rec, **TOL)

  def test_is_not_softmax_attention(self):
    q, k, v, _, _ = _inputs(9)
    gap = jax.jit(lambda q, k, v: jnp.abs(attend(q, k, v, impl="linear") - attend(q, k, v)).max())(
      q, k, v
    )
    self.assertGreater(float(gap), 1e-2)


def _largest_intermediate(fn, *args):
  """Number of elements of the largest array in the jaxpr of fn, sub-jaxprs included."""
  biggest = 0

  def walk(jaxpr):
    nonlocal biggest
    for eqn in jaxpr.eqns:
      for var in eqn.outvars:
        biggest = max(biggest, int(np.prod(getattr(var.aval, "shape", ()))))
      for sub in jax.extend.core.jaxprs_in_params(eqn.params):
        walk(sub)

  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return biggest


class BlockwiseMemoryTest(chex.TestCase):
  """Blockwise never holds an [L, M] array, forward or backward; dense does (so the
  measurement can fail)."""

  LM = 1024

  def _grad_fn(self, impl):
    fn = functools.partial(attend, impl=impl, block_size=64)
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), (0, 1, 2))

  def test_no_l_by_m_intermediate_in_jaxpr(self):
    x = jnp.ones((1, self.LM, 1, 16))
    # the largest blockwise arrays are q, k, v themselves: L x K, not L x M
    self.assertLessEqual(_largest_intermediate(self._grad_fn("blockwise"), x, x, x), x.size)
    self.assertGreaterEqual(_largest_intermediate(self._grad_fn("dense"), x, x, x), self.LM**2)

  def test_compiled_temp_memory_far_below_l_by_m(self):
    x = jnp.ones((1, self.LM, 1, 16))
    lm_bytes = self.LM * self.LM * 4

    def temp(impl):
      compiled = jax.jit(self._grad_fn(impl)).lower(x, x, x).compile()
      return compiled.memory_analysis().temp_size_in_bytes

    self.assertLess(temp("blockwise"), lm_bytes / 8)
    self.assertGreaterEqual(temp("dense"), lm_bytes)


def test_blockwise_skips_masked_blocks():
  """Causal: query block i visits key blocks 0..i; a window of w visits about w / block."""
  cfg = (True, None, 8, 8, 6, 6)
  assert [tuple(map(int, blockwise._key_range(i, 0, cfg))) for i in range(6)] == [
    (0, i + 1) for i in range(6)
  ]
  cfg = (True, 8, 8, 8, 6, 6)
  assert [tuple(map(int, blockwise._key_range(i, 0, cfg))) for i in range(3)] == [
    (0, 1),
    (0, 2),
    (1, 3),
  ]


def test_sliding_window_cost_is_linear_in_length():
  def flops(impl, n):
    x = jnp.ones((1, n, 1, 16))
    fn = functools.partial(attend, impl=impl, window=16, block_size=16)
    return jax.jit(fn).lower(x, x, x).compile().cost_analysis()["flops"]

  assert flops("sliding_window", 1024) / flops("sliding_window", 512) < 2.2
  assert flops("dense", 1024) / flops("dense", 512) > 3.5


@pytest.mark.parametrize(
  "kwargs, field",
  [
    (dict(impl="flash"), "impl='flash'"),
    (dict(impl="dense", window=0), "window=0"),
    (dict(impl="dense", window=2.5), "window=2.5"),
    (dict(impl="sliding_window"), "window="),
    (dict(impl="linear", window=4), "window=4"),
    (dict(impl="blockwise", block_size=0), "block_size"),
    (dict(impl="dense", temperature=-1.0), "temperature"),
    (dict(impl="linear", temperature=2.0), "temperature"),
  ],
)
def test_errors_name_the_field(kwargs, field):
  q, k, v, _, _ = _inputs(10)
  with pytest.raises(ValueError, match=field.replace("(", r"\(")) as err:
    attend(q, k, v, **kwargs)
  if "impl" in kwargs and kwargs["impl"] == "flash":
    for name in IMPLEMENTATIONS:
      assert name in str(err.value)


def test_cudnn_where_dtype_and_shape_allow_else_xla_with_the_reason(caplog):
  """dot_product asks for cuDNN's fused kernel where dtype and shape allow, whatever the host;
  what it cannot take falls back to XLA and says why (where the CUDA plugin is installed)."""
  bf16 = jnp.zeros((1, 8, 2, 64), jnp.bfloat16)
  assert attention.cudnn_choice(bf16, True) == ("cudnn", None)
  impl, why = attention.cudnn_choice(bf16.astype(jnp.float32), True)
  assert impl is None and "dtype float32" in why
  impl, why = attention.cudnn_choice(jnp.zeros((1, 8, 2, 256), jnp.bfloat16), True)
  assert impl is None and "head dim 256" in why
  impl, why = attention.cudnn_choice(jnp.zeros((1, 8, 2, 60), jnp.float16), True)
  assert impl is None and "head dim 60" in why
  assert attention.cudnn_choice(bf16, False)[1].startswith("a query offset")
  # the fallback is logged (once per reason) when the kernel is traced
  attention._log_fallback.cache_clear()
  with caplog.at_level("WARNING"), pytest.MonkeyPatch.context() as mp:
    mp.setattr(attention, "cudnn_available", lambda: True)
    mp.setattr(attention, "cudnn_choice", lambda q, own: (None, "dtype float32: test"))
    q = jax.random.normal(jax.random.key(0), (1, 5, 3, 8))  # a shape no other test traces
    out = attend(q, q, q, impl="dot_product")
  assert "XLA instead of cuDNN (dtype float32: test)" in caplog.text
  chex.assert_trees_all_close(out, attend(q, q, q, impl="dense"), atol=1e-6)


def test_cudnn_is_chosen_by_the_lowering_platform_not_the_host(monkeypatch):
  """Lowered for cuda from this CPU host, dot_product takes the cuDNN branch; lowered for cpu
  or tpu, XLA's. Failed before: the choice keyed on jax.default_backend() (this host's cpu), so
  a cuda lowering silently got XLA. cuDNN itself needs the CUDA wheels to trace: a stand-in
  kernel with a telltale op (cbrt) takes its place."""
  monkeypatch.setattr(attention, "cudnn_available", lambda: True)
  monkeypatch.setattr(attention, "_cudnn_attention", lambda q, k, v, **kw: jax.lax.cbrt(q))
  q = jnp.ones((1, 24, 2, 64), jnp.bfloat16)
  dot = jax.jit(lambda q: attend(q, q, q, impl="dot_product"))
  try:
    lowered = {
      p: dot.trace(q).lower(lowering_platforms=(p,)).as_text() for p in ("cuda", "cpu", "tpu")
    }
    assert "cbrt" in lowered["cuda"]
    assert "cbrt" not in lowered["cpu"] and "cbrt" not in lowered["tpu"]
    # on this host the program runs XLA's attention
    chex.assert_trees_all_close(dot(q), attend(q, q, q, impl="dense"), atol=2e-2)
  finally:
    attention._attend_static_offset.clear_cache()  # no later test may reuse the stand-in


def test_a_missing_cuda_plugin_is_not_hidden(monkeypatch):
  """cuDNN's own "not detected" error (a RuntimeError) is not swallowed by the fallback."""
  if attention.cudnn_available():
    pytest.skip("the CUDA plugin is installed here: cuDNN is detected")
  monkeypatch.setattr(attention, "cudnn_available", lambda: True)
  q = jnp.ones((1, 40, 2, 64), jnp.bfloat16)  # a shape no other test traces
  with pytest.raises(RuntimeError, match="cuDNN"):
    jax.jit(lambda q: attend(q, q, q, impl="dot_product")).trace(q)


@pytest.mark.parametrize(
  "kwargs", [dict(), dict(window=WINDOW), dict(causal=False), dict(q_offset=3, kv=True)]
)
def test_blockwise_unrolled_blocks_equal_the_loops(kwargs, monkeypatch):
  """Few visible block pairs and a static offset: Python-unrolled blocks (no loop, the mask
  only on cut blocks) give the loops' values and gradients."""
  kwargs = dict(kwargs)
  q, k, v, kv_mask, g = _inputs(7)
  if kwargs.pop("kv", False):
    kwargs["kv_mask_BM"] = kv_mask
  fn = functools.partial(blockwise.blockwise_attention, block_size=BLOCK, **kwargs)

  def traced(max_pairs):
    monkeypatch.setattr(blockwise, "UNROLL_MAX_PAIRS", max_pairs)
    grads = functools.partial(_grads, fn, g)
    jaxpr = str(jax.make_jaxpr(grads)(q, k, v))
    return jaxpr.count("while[") + jaxpr.count("scan["), jax.jit(grads)(q, k, v)

  (unrolled_loops, unrolled), (loop_loops, loops) = traced(16), traced(0)
  assert unrolled_loops == 0 and loop_loops > 0
  chex.assert_trees_all_close(unrolled, loops, **TOL)
