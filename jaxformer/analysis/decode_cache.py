"""The bytes a trained model's decoding cache holds, read from its real arrays.

  measured = measure(model, params, prompts_BL)   # {"total", "keys", "values"}: bytes after
                                                  # prefilling the prompts into a fresh cache
  key_bytes_formula(model_config, tokens, batch)  # tokens x layers x key dims x bytes

A bilinear scorer x_L^T A x_i caches the key A x_i, D numbers per head; a factored one,
A = Wq^T Wk with Wq, Wk of shape r x D, caches Wk x_i, r numbers per head: D/r times fewer
key bytes. `measure` counts what `jaxformer.decode` really keeps; the formula states what
`decode.cache_dims` says it keeps (tests/analysis/test_decode_cache.py holds them equal).
"""

import jax
import jax.numpy as jnp

from jaxformer import decode


def measure(model, params, prompts_BL):
  """Prefills `prompts_BL` into a fresh cache; bytes of all its arrays, its keys, its values."""
  cache = decode.init_cache(model, prompts_BL.shape[0], prompts_BL.shape[1])
  _, cache = jax.jit(lambda p, c, t: decode.decode_step(model, p, c, t))(
    params, cache, jnp.asarray(prompts_BL)
  )
  by_name = {"keys": [], "values": []}
  for path, leaf in jax.tree_util.tree_leaves_with_path(cache):
    name = getattr(path[-1], "key", None)
    if name in by_name:
      by_name[name].append(leaf)
  return {
    "total": decode.cache_bytes(cache),
    "keys": decode.cache_bytes(by_name["keys"]),
    "values": decode.cache_bytes(by_name["values"]),
  }


def key_bytes_formula(model_config, tokens, batch=1):
  """tokens x layers x key dims (decode.cache_dims) x bytes, times the batch."""
  key_dims, _ = decode.cache_dims(model_config)
  nbytes = jnp.dtype(model_config.dtype).itemsize
  return batch * tokens * model_config.num_layers * key_dims * nbytes
