"""The MLP as a key-value memory (step 8; Geva et al. 2021).

W2 sigma(W1 x): rows of W1 are keys (patterns matched against x), columns of W2 are
values written into the residual stream, weighted by how well their key matched:
  mlp(x) = sum_f sigma(k_f . x + b_f) v_f  (+ b2)
Without W2 (jaxformer.steps.s8_mlp, `w2=False`) hidden unit f can only write coordinate f, so F must equal D.
"""

import jax
import jax.numpy as jnp

ACTIVATIONS = {
  "gelu": lambda x: jax.nn.gelu(x, approximate=True),
  "relu": jax.nn.relu,
  "tanh": jnp.tanh,
  "identity": lambda x: x,
}


def mlp(x_BLD, w1_DF, b1_F, w2_FD, b2_D, activation="gelu"):
  h_BLF = ACTIVATIONS[activation](x_BLD @ w1_DF + b1_F)
  return h_BLF @ w2_FD + b2_D


def mlp_as_memory(x_BLD, keys_FD, key_bias_F, values_FD, value_bias_D, activation="gelu"):
  """The same function written as an explicit sum over F key-value pairs (a scan)."""
  act = ACTIVATIONS[activation]

  def add_pair(acc_BLD, pair):
    k_D, b, v_D = pair
    return acc_BLD + act(x_BLD @ k_D + b)[..., None] * v_D, None

  init = jnp.broadcast_to(value_bias_D, x_BLD.shape).astype(x_BLD.dtype)
  out_BLD, _ = jax.lax.scan(add_pair, init, (keys_FD, key_bias_F, values_FD))
  return out_BLD
