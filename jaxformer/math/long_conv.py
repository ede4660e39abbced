"""A long convolution whose kernel is a diagonal state-space model (H3's SSM, Fu et al. 2023;
the S4D parametrization, Gu et al. 2022).

Per channel d, N states h [N] with a diagonal decay a_dn = e^(log_a_dn) in (0, 1):

  h_l = a * h_(l-1) + b u_l,    y_l = c . h_l
      = sum_(s <= l) kernel_(l - s) u_s,    kernel_t = sum_n c_n a_n^t b_n

Two forms of the same function:

  conv       the kernel materialized for the L lags and applied by FFT (zero-padded to 2L,
             so the circular convolution is the causal one): O(L log L) per channel, depth
             ~log L, the form H3 trains with
  recurrent  `lax.scan` over positions carrying h: N numbers per channel, what decoding
             keeps whatever the length.
"""

import jax.numpy as jnp
from jax import lax

from jaxformer.math import shapes

_F32 = jnp.float32


def kernel(log_a_DN, b_DN, c_DN, length):
  """kernel_LD: kernel_t[d] = sum_n c_dn e^(t log_a_dn) b_dn for t < length."""
  shapes.check("long_conv.kernel", log_a_DN=log_a_DN, b_DN=b_DN, c_DN=c_DN)
  t_L = jnp.arange(length, dtype=_F32)
  powers_LDN = jnp.exp(t_L[:, None, None] * log_a_DN.astype(_F32))
  return jnp.einsum("LDN,DN->LD", powers_LDN, (b_DN * c_DN).astype(_F32))


def causal_conv(u_BLD, kernel_LD):
  """y_l = sum_(s <= l) kernel_(l - s) u_s by FFT over 2L points; float32."""
  shapes.check("long_conv.causal_conv", u_BLD=u_BLD, kernel_LD=kernel_LD)
  length = u_BLD.shape[1]
  n = 2 * length
  u_f = jnp.fft.rfft(u_BLD.astype(_F32), n=n, axis=1)
  k_f = jnp.fft.rfft(kernel_LD.astype(_F32), n=n, axis=0)
  return jnp.fft.irfft(u_f * k_f[None], n=n, axis=1)[:, :length]


def conv(u_BLD, log_a_DN, b_DN, c_DN):
  """The SSM's output by its long convolution (the training form)."""
  return causal_conv(u_BLD, kernel(log_a_DN, b_DN, c_DN, u_BLD.shape[1]))


def recurrent(u_BLD, log_a_DN, b_DN, c_DN, state_BDN=None):
  """(y_BLD, final h [B, D, N]) by `lax.scan` over positions, from `state_BDN` (zeros if
  None); float32."""
  sizes = shapes.check("long_conv.recurrent", u_BLD=u_BLD, log_a_DN=log_a_DN, b_DN=b_DN)
  shapes.check("long_conv.recurrent", sizes, c_DN=c_DN, state_BDN=state_BDN)
  if state_BDN is None:
    state_BDN = jnp.zeros((sizes["B"], sizes["D"], sizes["N"]), _F32)
  a_DN, b_DN, c_DN = (x.astype(_F32) for x in (jnp.exp(log_a_DN), b_DN, c_DN))

  def step(h_BDN, u_BD):
    h_BDN = a_DN * h_BDN + b_DN * u_BD[..., None]
    return h_BDN, jnp.einsum("BDN,DN->BD", h_BDN, c_DN)

  final_BDN, y_LBD = lax.scan(step, state_BDN.astype(_F32), jnp.swapaxes(u_BLD.astype(_F32), 0, 1))
  return jnp.swapaxes(y_LBD, 0, 1), final_BDN
