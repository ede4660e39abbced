"""Step 1: a fixed memory fails at recall.

Pressure: an RNN writes every input into one state h_BD of fixed size D, so facts
compete for the same room and old ones are overwritten.
Equation: h_t = cell(h_{t-1}, x_t), logits_t = h_t W_out (cells: Elman, GRU, LSTM).
Fix (Bahdanau et al. 2015): keep every state and read from all of them; the
`rnn_attention` rung composes this layer with a `Mixer` over the states h_BMD.
Decoding (`decode=True`) keeps the carry in the 'cache' collection and continues from it;
a row's left padding (`pad_B`) leaves the carry untouched.
`forget_bias` (LSTM only) initializes the forget gate's bias: at 0 (the default) the
untrained cell keeps about sigmoid(0) = 1/2 of its memory per step, so what it read 10
tokens back is scaled by about 2^-10, and its gradient as much; Gers, Schmidhuber &
Cummins 2000 and Jozefowicz, Zaremba & Sutskever 2015 start it at 1 (e^-0.31 per step).
Reference: Hochreiter & Schmidhuber 1997; Bahdanau, Cho & Bengio 2015.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxformer.math import recurrent
from jaxformer.nn import axes
from jaxformer.nn.layers import param


def gate_bias(cell, forget_bias=0.0):
  """The gates' bias initializer: zeros, but `forget_bias` on an LSTM's forget gate (its gates
  are i, f, g, o, each of width N: recurrent.lstm)."""

  def init(key, shape, dtype=jnp.float32):
    del key
    b = np.zeros(shape, np.float32)
    if cell == "lstm":
      width = shape[0] // recurrent.GATES["lstm"]
      b[width : 2 * width] = forget_bias
    return jnp.asarray(b, dtype)

  return init


class Recurrent(nn.Module):
  """One recurrent layer: x_BLE -> states h_BLD, scanned over L."""

  cell: str = "lstm"
  width: int = 64
  forget_bias: float = 0.0  # the LSTM forget gate's initial bias (module docstring)

  @nn.compact
  def __call__(self, x_BLE, decode=False, pad_B=None):
    if self.forget_bias and self.cell != "lstm":
      raise ValueError(f"forget_bias={self.forget_bias}: only an LSTM has a forget gate")
    gates = recurrent.GATES[self.cell] * self.width
    params = {
      "wx": param(self, "wx", (x_BLE.shape[-1], gates), (axes.EMBED, axes.MLP)),
      "wh": param(self, "wh", (self.width, gates), (axes.EMBED_OUT, axes.MLP)),
      "b": param(self, "b", (gates,), (axes.MLP,), init=gate_bias(self.cell, self.forget_bias)),
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
