"""Step 1: a fixed memory fails at recall.

Pressure: an RNN writes every input into one state h_BD of fixed size D, so facts
compete for the same room and old ones are overwritten.
Equation: h_t = cell(h_{t-1}, x_t), logits_t = h_t W_out (cells: Elman, GRU, LSTM).
Fix (Bahdanau et al. 2015): keep every state and read from all of them; the
`rnn_attention` rung composes this layer with a `Mixer` over the states h_BMD.
Decoding (`decode=True`) keeps the carry in the 'cache' collection and continues from it;
a row's left padding (`pad_B`) leaves the carry untouched.
Reference: Hochreiter & Schmidhuber 1997; Bahdanau, Cho & Bengio 2015.
"""

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import recurrent
from jaxformer.nn import axes
from jaxformer.nn.layers import param


class Recurrent(nn.Module):
  """One recurrent layer: x_BLE -> states h_BLD, scanned over L."""

  cell: str = "lstm"
  width: int = 64

  @nn.compact
  def __call__(self, x_BLE, decode=False, pad_B=None):
    gates = recurrent.GATES[self.cell] * self.width
    params = {
      "wx": param(self, "wx", (x_BLE.shape[-1], gates), (axes.EMBED, axes.MLP)),
      "wh": param(self, "wh", (self.width, gates), (axes.EMBED_OUT, axes.MLP)),
      "b": param(self, "b", (gates,), (axes.MLP,)),
    }
    if decode:  # the fixed memory is the whole cache: one carry, whatever the length
      carry = self.variable(
        "cache",
        "carry",
        recurrent.initial_carry,
        self.cell,
        x_BLE.shape[0],
        self.width,
        x_BLE.dtype,
      )
      index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
      valid_BL = None
      if pad_B is not None:  # slot index + l holds padding for rows with more pads than that
        valid_BL = index.value + jnp.arange(x_BLE.shape[1])[None, :] >= pad_B[:, None]
      index.value = index.value + x_BLE.shape[1]
      carry.value, h_BLD = recurrent.run(self.cell, params, x_BLE, carry.value, valid_BL)
    else:
      _, h_BLD = recurrent.run(self.cell, params, x_BLE)
    self.sow("intermediates", "states", h_BLD)
    return h_BLD
