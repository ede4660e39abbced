"""Shared Linen layers: parameters carry logical axis names, arithmetic stays pure.

`param` declares every kernel with `nn.with_logical_partitioning` through `self.param`
(never `nn.DenseGeneral` for rank > 2: flax issue 3676), so the training code can map
the names in `jaxformer.nn.axes` onto a device mesh.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import layers as layers_math
from jaxformer.nn import axes


def param(module, name, shape, names, init=None, dtype=jnp.float32):
  """A parameter of `shape` whose dimensions have the logical `names`."""
  if init is None:
    # fan-in = every input dimension of the kernel: all but the last named output axis.
    fan_in = 1
    for size in shape[:-1]:
      fan_in *= size
    init = nn.initializers.normal(stddev=fan_in**-0.5) if len(shape) > 1 else nn.initializers.zeros
  return module.param(name, nn.with_logical_partitioning(init, names), shape, dtype)


class Linear(nn.Module):
  """y = x W (+ b) over the last axis, with logical names for W's two axes."""

  features: int
  names: tuple[str, str]
  use_bias: bool = True
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x):
    w = param(self, "kernel", (x.shape[-1], self.features), self.names)
    y = jnp.einsum("...D,DF->...F", x.astype(self.dtype), w.astype(self.dtype))
    if self.use_bias:
      y = y + param(self, "bias", (self.features,), (self.names[1],)).astype(self.dtype)
    return y


class LayerNorm(nn.Module):
  eps: float = 1e-5

  @nn.compact
  def __call__(self, x_BLD):
    width = x_BLD.shape[-1]
    scale = param(self, "scale", (width,), (axes.EMBED,), nn.initializers.ones)
    bias = param(self, "bias", (width,), (axes.EMBED,), nn.initializers.zeros)
    return layers_math.layer_norm(x_BLD, scale, bias, self.eps)
