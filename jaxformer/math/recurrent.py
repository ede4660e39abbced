"""Recurrent cells (step 1): a fixed-size state that every input is written into.

Pure functions over parameter dicts; `run` scans a cell over the sequence with
`lax.scan`, so output t needs t dependent steps (the pressure of step 2).

Shapes: x_BE input at one step, h_BD state (c_BD too for the LSTM), gates stacked along
the last axis G = gates x D: wx_EG, wh_DG, b_G. Each cell checks them with chex from static
shapes (jaxformer.math.shapes), once per trace inside the scan.
"""

import jax
import jax.numpy as jnp

from jaxformer.math import shapes

CELLS = ("elman", "gru", "lstm")
GATES = {"elman": 1, "gru": 3, "lstm": 4}


def _check(cell, params, carry, x_BE):
  c_BD = carry[1] if cell == "lstm" else None
  gates = {"G": GATES[cell] * carry[0].shape[-1]}
  shapes.check(
    cell,
    gates,
    x_BE=x_BE,
    h_BD=carry[0],
    c_BD=c_BD,
    wx_EG=params["wx"],
    wh_DG=params["wh"],
    b_G=params["b"],
  )


def elman(params, carry, x_BE):
  """h' = tanh(W_x x + W_h h + b) (Elman 1990)."""
  _check("elman", params, carry, x_BE)
  (h_BD,) = carry
  h_BD = jnp.tanh(x_BE @ params["wx"] + h_BD @ params["wh"] + params["b"])
  return (h_BD,), h_BD


def gru(params, carry, x_BE):
  """Gated recurrent unit (Cho et al. 2014): update z, reset r, candidate n."""
  _check("gru", params, carry, x_BE)
  (h_BD,) = carry
  xz, xr, xn = jnp.split(x_BE @ params["wx"] + params["b"], 3, axis=-1)
  hz, hr, hn = jnp.split(h_BD @ params["wh"], 3, axis=-1)
  z = jax.nn.sigmoid(xz + hz)
  r = jax.nn.sigmoid(xr + hr)
  n = jnp.tanh(xn + r * hn)
  h_BD = (1.0 - z) * n + z * h_BD
  return (h_BD,), h_BD


def lstm(params, carry, x_BE):
  """LSTM (Hochreiter & Schmidhuber 1997): input, forget, cell, output gates."""
  _check("lstm", params, carry, x_BE)
  h_BD, c_BD = carry
  i, f, g, o = jnp.split(x_BE @ params["wx"] + h_BD @ params["wh"] + params["b"], 4, axis=-1)
  c_BD = jax.nn.sigmoid(f) * c_BD + jax.nn.sigmoid(i) * jnp.tanh(g)
  h_BD = jax.nn.sigmoid(o) * jnp.tanh(c_BD)
  return (h_BD, c_BD), h_BD


_CELL_FNS = {"elman": elman, "gru": gru, "lstm": lstm}


def initial_carry(cell, batch, width, dtype=jnp.float32):
  zeros = jnp.zeros((batch, width), dtype)
  return (zeros, zeros) if cell == "lstm" else (zeros,)


def run(cell, params, x_BLE, carry=None, valid_BL=None):
  """Scans `cell` over L. Returns (final carry, states h_BLD).

  valid_BL: where False (a row's padding) the carry passes through unchanged, so padding
  before a row's first token leaves its state as if the row started there.
  """
  fn = _CELL_FNS[cell]
  shapes.check(f"recurrent.run({cell!r})", x_BLE=x_BLE)
  batch, length, width = *x_BLE.shape[:2], params["wh"].shape[0]
  if carry is None:
    carry = initial_carry(cell, batch, width, x_BLE.dtype)
  if valid_BL is None:
    valid_BL = jnp.ones((batch, length), bool)

  def step(c, inputs):
    x_BE, valid_B = inputs
    new, h_BD = fn(params, c, x_BE)
    return tuple(jnp.where(valid_B[:, None], n, o) for n, o in zip(new, c, strict=True)), h_BD

  carry, h_LBD = jax.lax.scan(step, carry, (jnp.swapaxes(x_BLE, 0, 1), valid_BL.T))
  return carry, jnp.swapaxes(h_LBD, 0, 1)
