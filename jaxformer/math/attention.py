"""One interface, several attention implementations of the same weights.value function.

  out_BLHK = softmax_M(q_BLHK . k_BMHK / tau + mask_BLM) v_BMHK,   tau = sqrt(K) by default

`attend(..., impl=...)` picks how it is computed; every softmax implementation equals `dense`
under the same mask (`masks.py`), `linear` replaces the softmax (section 9 of
docs/reconstruction.md: why the Transformer is not inevitable):

  dense           the reference: the [L, M] scores materialized. O(L M) time and memory.
  dot_product     `jax.nn.dot_product_attention`: lowered for a GPU, its cuDNN fused kernel
                  (implementation='cudnn') where the dtype and shape allow, else XLA's
                  materialized softmax, with the reason logged once (`cudnn_choice`).
  blockwise       exact, online softmax over key blocks, recomputing backward: O(L) memory.
  sliding_window  exact within the last `window` keys, linear in L (needs `window`).
  block_sparse    exact within a fixed block pattern (see `masks.block_pattern`).
  linear          elu+1 feature-map linear attention, chunked parallel form: NOT softmax.
  linear_recurrent  the same function as a `lax.scan` over a fixed-size state (fixed memory
                  in inference; autodiff through the scan still saves one state per step).

All take q_BLHK [B, L, H, K] and k_BMHK, v_BMHK [B, M, H, K], any L, M (padded internally),
float32 or bfloat16 (accumulated in float32), and return out_BLHK in q's dtype. Query l sits
at absolute position `q_offset + l` (KV-cache decoding); `kv_mask_BM` marks valid keys. A
query that can read no key returns zeros.
"""

import functools
import importlib.util
import logging
import math

import jax
import jax.numpy as jnp

from jaxformer.math import blockwise, linear_attention, local_attention, masks, shapes
from jaxformer.math.dense import dense_attention

IMPLEMENTATIONS = (
  "dense",
  "dot_product",
  "blockwise",
  "sliding_window",
  "block_sparse",
  "linear",
  "linear_recurrent",
)
_NO_WINDOW = ("block_sparse", "linear", "linear_recurrent")


CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128  # and a multiple of 8 (cuDNN's fused attention)


def cudnn_available():
  """Whether cuDNN attention can be traced here: jax's CUDA plugin is installed (a GPU host, or
  a CPU host with the CUDA wheels compiling for a GPU)."""
  return importlib.util.find_spec("jax_cuda12_plugin") is not None


def cudnn_choice(q_BLHK, own_flags):
  """(implementation for jax.nn.dot_product_attention on a GPU, why not cuDNN): ('cudnn', None)
  when the dtype and head dim allow and the causal / window flags express the mask, else
  (None, the reason). Whether the program runs on a GPU is decided later, from the platform it
  is lowered for (`dot_product`), not from this host's default backend."""
  K = q_BLHK.shape[-1]
  if jnp.dtype(q_BLHK.dtype).name not in CUDNN_DTYPES:
    return None, f"dtype {jnp.dtype(q_BLHK.dtype).name}: cuDNN takes {' or '.join(CUDNN_DTYPES)}"
  if K > CUDNN_MAX_HEAD_DIM or K % 8:
    return None, f"head dim {K}: cuDNN takes a multiple of 8 up to {CUDNN_MAX_HEAD_DIM}"
  if not own_flags:
    return None, "a query offset, L != M or a kv mask needs an explicit mask"
  return "cudnn", None


@functools.cache
def _log_fallback(reason):
  logging.getLogger(__name__).warning("attention: XLA instead of cuDNN (%s)", reason)


def _cudnn_attention(q_BLHK, k_BMHK, v_BMHK, **kwargs):
  return jax.nn.dot_product_attention(q_BLHK, k_BMHK, v_BMHK, implementation="cudnn", **kwargs)


def _on_gpu_cudnn(q_BLHK, k_BMHK, v_BMHK, **kwargs):
  """cuDNN's kernel when the program is lowered for cuda, XLA's on every other platform
  (`lax.platform_dependent`: both are traced, the lowering keeps one). A configuration the
  cuDNN build refuses at trace time falls back to XLA, logged; a missing plugin is not caught."""
  xla = functools.partial(jax.nn.dot_product_attention, implementation=None, **kwargs)
  try:
    jax.eval_shape(functools.partial(_cudnn_attention, **kwargs), q_BLHK, k_BMHK, v_BMHK)
  except (ValueError, NotImplementedError) as e:
    _log_fallback(f"cuDNN refused: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    return xla(q_BLHK, k_BMHK, v_BMHK)
  cudnn = functools.partial(_cudnn_attention, **kwargs)
  return jax.lax.platform_dependent(q_BLHK, k_BMHK, v_BMHK, cuda=cudnn, default=xla)


def dot_product(
  q_BLHK, k_BMHK, v_BMHK, *, causal, temperature, window, q_offset, kv_mask_BM, implementation
):
  """`jax.nn.dot_product_attention`, with its own causal/window flags when they suffice.

  Its flags assume query l sits at position l; with an offset, L != M or a kv mask we pass
  an explicit boolean mask instead. implementation='auto': where the CUDA plugin is installed
  (`cudnn_available`) and `cudnn_choice` allows, cuDNN when lowered for cuda and XLA elsewhere;
  else XLA (on a CUDA host, the reason logged once).
  """
  B, L, H, K = q_BLHK.shape
  M = k_BMHK.shape[1]
  scale = 1.0 / (math.sqrt(K) if temperature is None else temperature)
  k_BMHK, v_BMHK = k_BMHK.astype(q_BLHK.dtype), v_BMHK.astype(q_BLHK.dtype)
  own_flags = isinstance(q_offset, int) and q_offset == 0 and L == M and kv_mask_BM is None
  cudnn = False
  if implementation == "auto":
    implementation = None
    if cudnn_available():
      choice, reason = cudnn_choice(q_BLHK, own_flags)
      cudnn = choice == "cudnn"
      if reason is not None:
        _log_fallback(reason)
  if own_flags:
    local = None
    if window is not None:
      local = (window - 1, 0 if causal else window - 1)
    kwargs = dict(scale=scale, is_causal=causal, local_window_size=local)
    if cudnn:
      return _on_gpu_cudnn(q_BLHK, k_BMHK, v_BMHK, **kwargs)
    return jax.nn.dot_product_attention(
      q_BLHK, k_BMHK, v_BMHK, implementation=implementation, **kwargs
    )
  mask_BLM = masks.attention_mask(
    L, M, causal=causal, window=window, q_offset=q_offset, kv_mask_BM=kv_mask_BM
  )
  out_BLHK = jax.nn.dot_product_attention(
    q_BLHK, k_BMHK, v_BMHK, mask=mask_BLM[:, None], scale=scale, implementation=implementation
  )
  # it gives a fully masked row the mean of v; the other implementations give zeros
  return out_BLHK * mask_BLM.any(-1)[:, :, None, None].astype(out_BLHK.dtype)


def _check(impl, q_BLHK, k_BMHK, v_BMHK, temperature, window, block_size, kv_mask_BM):
  if impl not in IMPLEMENTATIONS:
    raise ValueError(f"attend: unknown impl={impl!r}; allowed: {', '.join(IMPLEMENTATIONS)}")
  if window is not None and (not isinstance(window, int) or window <= 0):
    raise ValueError(f"attend: window must be a positive int or None, got window={window!r}")
  if impl == "sliding_window" and window is None:
    raise ValueError("attend: impl='sliding_window' needs window=<positive int>, got None")
  if impl in _NO_WINDOW and window is not None:
    raise ValueError(f"attend: impl={impl!r} does not take a window (got window={window})")
  if not isinstance(block_size, int) or block_size <= 0:
    raise ValueError(f"attend: block_size must be a positive int, got {block_size!r}")
  if impl.startswith("linear") and temperature is not None:
    raise ValueError(f"attend: impl={impl!r} has no temperature (got temperature={temperature})")
  if temperature is not None and not (isinstance(temperature, int | float) and temperature > 0):
    raise ValueError(f"attend: temperature must be a Python number > 0, got {temperature!r}")
  return shapes.check("attend", q_BLHK=q_BLHK, k_BMHK=k_BMHK, v_BMHK=v_BMHK, kv_mask_BM=kv_mask_BM)


def attend(
  q_BLHK,
  k_BMHK,
  v_BMHK,
  *,
  impl="dense",
  causal=True,
  temperature=None,
  window=None,
  block_size=128,
  q_offset=0,
  kv_mask_BM=None,
):
  """Attention of q_BLHK over k_BMHK, v_BMHK -> out_BLHK, computed by `impl`.

  temperature: scores are q.k / temperature (default sqrt(K)). window: read only the last
  `window` keys (a band of width 2 window - 1 when not causal). block_size: the block /
  chunk length of blockwise, sliding_window, block_sparse and linear. q_offset: absolute
  position of query 0 (int or traced int). kv_mask_BM: boolean, False marks an invalid key.

  Jitted per static configuration (impl, causal, temperature, window, block_size and a
  Python-int q_offset), so a call outside jit compiles once instead of dispatching op by
  op; inside jit it is inlined. Shapes are checked by chex from static shapes alone
  (`jaxformer.math.shapes`): a wrong one raises chex's AssertionError naming the argument.
  """
  sizes = _check(impl, q_BLHK, k_BMHK, v_BMHK, temperature, window, block_size, kv_mask_BM)
  static = isinstance(q_offset, int)
  out_BLHK = (_attend_static_offset if static else _attend_traced_offset)(
    q_BLHK,
    k_BMHK,
    v_BMHK,
    impl=impl,
    causal=causal,
    temperature=temperature,
    window=window,
    block_size=block_size,
    q_offset=q_offset,
    kv_mask_BM=kv_mask_BM,
  )
  shapes.check("attend", sizes, out_BLHK=out_BLHK)
  return out_BLHK


def _attend(
  q_BLHK, k_BMHK, v_BMHK, *, impl, causal, temperature, window, block_size, q_offset, kv_mask_BM
):
  kw = dict(causal=causal, q_offset=q_offset, kv_mask_BM=kv_mask_BM)
  if impl == "dense":
    L, M = q_BLHK.shape[1], k_BMHK.shape[1]
    mask_BLM = masks.attention_mask(L, M, window=window, **kw)
    return dense_attention(q_BLHK, k_BMHK, v_BMHK, mask_BLM, temperature=temperature)
  if impl == "dot_product":
    return dot_product(
      q_BLHK,
      k_BMHK,
      v_BMHK,
      temperature=temperature,
      window=window,
      implementation="auto",
      **kw,
    )
  if impl == "blockwise":
    return blockwise.blockwise_attention(
      q_BLHK,
      k_BMHK,
      v_BMHK,
      temperature=temperature,
      window=window,
      block_size=block_size,
      **kw,
    )
  if impl == "sliding_window":
    return local_attention.sliding_window_attention(
      q_BLHK,
      k_BMHK,
      v_BMHK,
      temperature=temperature,
      window=window,
      block_size=block_size,
      **kw,
    )
  if impl == "block_sparse":
    return local_attention.block_sparse_attention(
      q_BLHK, k_BMHK, v_BMHK, temperature=temperature, block_size=block_size, **kw
    )
  recurrent = impl == "linear_recurrent"
  return linear_attention.linear_attention(
    q_BLHK, k_BMHK, v_BMHK, chunk=block_size, recurrent=recurrent, **kw
  )


_STATIC = ("impl", "causal", "temperature", "window", "block_size")
_attend_traced_offset = jax.jit(_attend, static_argnames=_STATIC)
_attend_static_offset = jax.jit(_attend, static_argnames=(*_STATIC, "q_offset"))
