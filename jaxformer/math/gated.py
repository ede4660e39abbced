"""A gated linear recurrence: a fixed matrix state with input-dependent diagonal decay.

The Mamba / GLA family (Gu & Dao 2023; Yang et al. 2024, Gated Linear Attention) keeps,
per head, one state S [K, J] written by every token and decayed by a gate of the token:

  S_l = diag(a_l) S_{l-1} + k_l v_l^T,    out_l = q_l^T S_l,    a_l in (0, 1)^K

Linear attention (jaxformer.math.linear_attention) is the case a_l = 1. The state does not
grow with L (fixed memory, section 1), yet training need not walk L steps one by one (the
pressure of section 2): the update is an affine map S -> a * S + b, and affine maps compose
associatively,

  (a1, b1) then (a2, b2)  =  (a1 a2, a2 b1 + b2),

so every prefix state comes from `jax.lax.associative_scan` in ~2 log2 L dependent steps.
Three forms of the same function, equal up to rounding (tests/math/test_gated.py):

  scan        the associative (parallel prefix) scan: depth ~log L, every S_l materialized
              ([B, L, H, K, J] floats)
  recurrent   `lax.scan` over positions, one state carried: depth ~L, O(H K J) memory
  decode      the recurrent form continued from a cached state (a prompt, then one token
              at a time): what inference keeps is the state alone.
"""

import jax
import jax.numpy as jnp
from jax import lax

from jaxformer.math import shapes

FORMS = ("scan", "recurrent")


def compose(first, second):
  """The affine map `first` then `second`, each (a_...K, b_...KJ): S -> a * S + b."""
  a1, b1 = first
  a2, b2 = second
  return a1 * a2, a2[..., None] * b1 + b2


def states(a_BLHK, b_BLHKJ, state_BHKJ=None):
  """Every prefix state S_l [B, L, H, K, J] by the associative scan over L."""
  if state_BHKJ is not None:  # fold the starting state into the first update
    b_BLHKJ = b_BLHKJ.at[:, 0].add(a_BLHK[:, 0, ..., None] * state_BHKJ)
  _, s_BLHKJ = lax.associative_scan(compose, (a_BLHK, b_BLHKJ), axis=1)
  return s_BLHKJ


def gated_linear_attention(q_BLHK, k_BLHK, v_BLHJ, a_BLHK, state_BHKJ=None, *, form="scan"):
  """out_l = q_l^T S_l with S_l = diag(a_l) S_{l-1} + k_l v_l^T, from `state_BHKJ` (zeros if
  None). Returns (out_BLHJ, the final state S_L [B, H, K, J]); float32 arithmetic."""
  if form not in FORMS:
    raise ValueError(f"form={form!r}: expected one of {', '.join(FORMS)}")
  sizes = shapes.check("gated", q_BLHK=q_BLHK, k_BLHK=k_BLHK, a_BLHK=a_BLHK, v_BLHJ=v_BLHJ)
  shapes.check("gated", sizes, state_BHKJ=state_BHKJ)
  q, k, v, a = (x.astype(jnp.float32) for x in (q_BLHK, k_BLHK, v_BLHJ, a_BLHK))
  B, _, H, K = q.shape
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, v.shape[-1]), jnp.float32)
  state_BHKJ = state_BHKJ.astype(jnp.float32)
  if form == "scan":
    s_BLHKJ = states(a, jnp.einsum("BLHK,BLHJ->BLHKJ", k, v), state_BHKJ)
    return jnp.einsum("BLHK,BLHKJ->BLHJ", q, s_BLHKJ), s_BLHKJ[:, -1]

  def step(s_BHKJ, x):
    q_BHK, k_BHK, v_BHJ, a_BHK = x
    s_BHKJ = a_BHK[..., None] * s_BHKJ + jnp.einsum("BHK,BHJ->BHKJ", k_BHK, v_BHJ)
    return s_BHKJ, jnp.einsum("BHK,BHKJ->BHJ", q_BHK, s_BHKJ)

  xs = tuple(jnp.swapaxes(x, 0, 1) for x in (q, k, v, a))
  final_BHKJ, out_LBHJ = lax.scan(step, state_BHKJ, xs)
  return jnp.swapaxes(out_LBHJ, 0, 1), final_BHKJ


def short_conv(x_BLD, w_CD, history_BCD=None):
  """A causal depthwise convolution over the last C positions, y_l = sum_c w_c * x_(l-c)
  (Mamba's and H3's short convolution: it hands each position its neighbours before the
  recurrence, so a previous-token read is one layer's work). `history_BCD` holds the C - 1
  inputs before x (zeros if None); returns (y_BLD, the new history: the last C - 1 inputs)."""
  width = w_CD.shape[0]
  if history_BCD is None:
    history_BCD = jnp.zeros((x_BLD.shape[0], width - 1, x_BLD.shape[2]), x_BLD.dtype)
  padded_BMD = jnp.concatenate([history_BCD.astype(x_BLD.dtype), x_BLD], axis=1)
  length = x_BLD.shape[1]
  y_BLD = sum(
    w_CD[c] * lax.slice_in_dim(padded_BMD, width - 1 - c, width - 1 - c + length, axis=1)
    for c in range(width)
  )
  return y_BLD, padded_BMD[:, padded_BMD.shape[1] - (width - 1) :]


def log_decay(gate_BLHK, temperature):
  """log a = log sigmoid(gate) / temperature (float32, <= 0): the decay as the chunked form
  (jaxformer.math.chunked) takes it."""
  return jax.nn.log_sigmoid(gate_BLHK.astype(jnp.float32)) / temperature


def decay(gate_BLHK, temperature):
  """a = sigmoid(gate)^(1 / temperature), in (0, 1): GLA's gate, kept near 1 by a
  temperature > 1 so that a fresh model remembers for ~temperature / log 2 tokens."""
  return jnp.exp(log_decay(gate_BLHK, temperature))
