"""Coefficient functions a_j(x_i, x_L): the "query . key -> score" slot (steps 3 and 5).

Every interaction is split into what can be computed from the source x_i alone (the
*keys*, cached for every past token) and from the receiver x_L alone (the *queries*),
plus a `score` that combines them into scores_BHLM for H functions. The split is
what makes caching possible and is where the cache size of step 5 comes from.

  source   g_j(x_i)                                (source-only: symmetric)
  additive g_j(x_i) + h_j(x_L)                     (one-argument terms only)
  tanh     w_j . tanh(U_j x_i + W_j x_L)           (Bahdanau et al. 2015)
  bilinear x_L^T A_j x_i                           (cache: A_j x_i, D per head)
  lowrank  (Wq_j x_L) . (Wk_j x_i),  A_j = Wq_j^T Wk_j  (cache: K per head)

Receivers are indexed by L, sources by M (the dimension key in jaxformer.nn.axes).
"""

import jax.numpy as jnp

INTERACTIONS = ("source", "additive", "tanh", "bilinear", "lowrank")


def source_scores(k_BMH, length):
  """Source-only: every receiver L sees the same score for source i."""
  s_BHM = jnp.swapaxes(k_BMH, 1, 2)
  return jnp.broadcast_to(s_BHM[:, :, None, :], (*s_BHM.shape[:2], length, s_BHM.shape[-1]))


def additive_scores(q_BLH, k_BMH):
  """g(x_i) + h(x_L): a sum of one-argument terms, no interaction at all."""
  return jnp.swapaxes(q_BLH, 1, 2)[:, :, :, None] + jnp.swapaxes(k_BMH, 1, 2)[:, :, None, :]


def tanh_scores(q_BLHK, k_BMHK, w_HK):
  """Bahdanau: w . tanh(U x_i + W x_L). Materializes B x L x M x H x K."""
  hidden_BLMHK = jnp.tanh(q_BLHK[:, :, None] + k_BMHK[:, None, :])
  return jnp.einsum("BLMHK,HK->BHLM", hidden_BLMHK, w_HK)


def dot_scores(q_BLHK, k_BMHK):
  """The pure interaction q . k, for lowrank (K = r) and bilinear (K = D, q = x_L)."""
  return jnp.einsum("BLHK,BMHK->BHLM", q_BLHK, k_BMHK)


def bilinear_keys(x_BMD, a_HDE):
  """A_j x_i: what a bilinear interaction caches for every past token (D per head)."""
  return jnp.einsum("HDE,BME->BMHD", a_HDE, x_BMD)


def bilinear_scores(x_BLD, x_BMD, a_HDE):
  """x_L^T A_j x_i, evaluated directly (the reference for the cached form)."""
  return jnp.einsum("BLD,HDE,BME->BHLM", x_BLD, a_HDE, x_BMD)
