"""Small shared pure layers: layer norm and sinusoidal positions."""

import jax.numpy as jnp


def layer_norm(x_BLD, scale_D, bias_D, eps=1e-5):
  x = x_BLD.astype(jnp.float32)
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  y = (x - mean) * jnp.reciprocal(jnp.sqrt(var + eps))
  return (y * scale_D + bias_D).astype(x_BLD.dtype)


def sinusoidal_positions(length, width, max_timescale=10_000.0):
  """Vaswani et al. 2017: sin on even, cos on odd channels, geometric wavelengths."""
  pos_L1 = jnp.arange(length, dtype=jnp.float32)[:, None]
  inv_freq = max_timescale ** (-jnp.arange(0, width, 2, dtype=jnp.float32) / width)
  angles_LK = pos_L1 * inv_freq[None, :]
  table_LD = jnp.zeros((length, width), jnp.float32)
  table_LD = table_LD.at[:, 0::2].set(jnp.sin(angles_LK))
  return table_LD.at[:, 1::2].set(jnp.cos(angles_LK[:, : width // 2]))
