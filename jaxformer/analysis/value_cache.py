"""The value cache a model keeps to decode, measured on its real decoding cache.

value_floats(model)    floats per token and layer in the 'values' arrays of the model's
                       'cache' collection (jaxformer.decode): H D for summed heads, H r_v
                       for concat + Wo; shapes only, nothing is allocated
"""

import jax
import jax.numpy as jnp


def value_floats(model, length=8):
  """Floats one layer caches per token as values: the 'values' arrays of the decoding cache
  of one sequence of `length` tokens, over tokens and layers (0 when nothing caches values)."""
  tokens_BL = jax.ShapeDtypeStruct((1, length), jnp.int32)
  cache = jax.eval_shape(
    lambda t: model.init(jax.random.key(0), t, decode=True).get("cache", {}), tokens_BL
  )
  values = [
    leaf
    for path, leaf in jax.tree_util.tree_leaves_with_path(cache)
    if getattr(path[-1], "key", None) == "values"
  ]
  return sum(x.size for x in values) / (length * len(values)) if values else 0.0
