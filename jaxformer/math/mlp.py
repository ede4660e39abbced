"""The MLP as a key-value memory (step 8; Geva et al. 2021).

W2 sigma(W1 x): rows of W1 are keys (patterns matched against x), columns of W2 are
values written into the residual stream, weighted by how well their key matched:
  mlp(x) = sum_f sigma(k_f . x + b_f) v_f  (+ b2)
Without W2 (jaxformer.steps.s8_mlp, `w2=False`) hidden unit f can only write a fixed coordinate:
f itself at F = D; at F = mD (a parameter-matched width: W1 alone then has the parameters of
W1 and W2 at F = D) coordinate f mod D, the values `pooled_values`. A fixed W2 (`w2_trained=
False`) writes fixed, not learned, directions: `fixed_values`, the same matrix in every model.
"""

import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {
  "gelu": lambda x: jax.nn.gelu(x, approximate=True),
  "relu": jax.nn.relu,
  "tanh": jnp.tanh,
  "identity": lambda x: x,
}


def mlp(x_BLD, w1_DF, b1_F, w2_FD, b2_D, activation="gelu"):
  h_BLF = ACTIVATIONS[activation](x_BLD @ w1_DF + b1_F)
  return h_BLF @ w2_FD + b2_D


def pooled_values(d_ff, d_model):
  """[F, D] values of the MLP without W2: unit f writes coordinate f mod D (F a multiple of D)."""
  if d_ff % d_model:
    raise ValueError(f"d_ff={d_ff}: without W2 it must be a multiple of d_model={d_model}")
  return np.tile(np.eye(d_model, dtype=np.float32), (d_ff // d_model, 1))


def fixed_values(d_ff, d_model):
  """[F, D] fixed values (a W2 that is not learned): orthonormal columns (orthonormal rows
  too at F = D) from the QR of a Gaussian drawn at seed 0, the same in every model."""
  gauss = np.random.default_rng(0).standard_normal((max(d_ff, d_model), min(d_ff, d_model)))
  q, r = np.linalg.qr(gauss)
  q = q * np.sign(np.diag(r))  # a unique Q: positive diagonal of R
  return (q if d_ff >= d_model else q.T).astype(np.float32)


def mlp_as_memory(x_BLD, keys_FD, key_bias_F, values_FD, value_bias_D, activation="gelu"):
  """The same function written as an explicit sum over F key-value pairs (a scan)."""
  act = ACTIVATIONS[activation]

  def add_pair(acc_BLD, pair):
    k_D, b, v_D = pair
    return acc_BLD + act(x_BLD @ k_D + b)[..., None] * v_D, None

  init = jnp.broadcast_to(value_bias_D, x_BLD.shape).astype(x_BLD.dtype)
  out_BLD, _ = jax.lax.scan(add_pair, init, (keys_FD, key_bias_F, values_FD))
  return out_BLD
