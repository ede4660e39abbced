"""Where past tokens live in a decoding cache, as pure functions (no Flax).

A cache holds, for every past source token i, what the scorer's keys and the valuer's
values computed from x_i (steps 5 and 7 decide how many numbers that is). Two layouts:

  full:  S = max_len slots, token at absolute position p sits in slot p.
  ring:  S = window slots (a sliding window, step 9), token p sits in slot p mod S and
         overwrites the token p - S, which the window no longer lets anyone read.

A layer reads the cache through absolute positions: `slot_positions` says which token
each slot holds, `position_mask` which (receiver, source) pairs may interact. This keeps
the mask rule identical to the training path (jaxformer.math.mixing.causal_mask).
"""

import jax.numpy as jnp
from jax import lax

EMPTY = -1  # position of a slot that holds no token yet


def slot_positions(index, slots, ring):
  """pos_S: absolute position of the token held in each slot once `index` tokens are in.

  Full layout: slot s holds token s if s < index. Ring layout: the newest p < index with
  p = s (mod slots). Empty slots get EMPTY.
  """
  s_S = jnp.arange(slots)
  if ring:
    p_S = index - 1 - jnp.mod(index - 1 - s_S, slots)
  else:
    p_S = s_S
  return jnp.where((p_S >= 0) & (p_S < index), p_S, EMPTY)


def position_mask(pos_L, pos_M, kind="causal", window=None):
  """mask_LM from absolute positions: receiver at pos_L[l] may read source pos_M[m].

  causal: m <= l (and m > l - window for a sliding window); self: m == l (stateless).
  Sources at EMPTY are never read.
  """
  l_L1, m_1M = pos_L[:, None], pos_M[None, :]
  if kind == "self":
    mask_LM = m_1M == l_L1
  else:
    mask_LM = m_1M <= l_L1
    if window is not None:
      mask_LM &= m_1M > l_L1 - window
  return mask_LM & (m_1M != EMPTY)


def write_full(cache_BS, new_BL, index):
  """Writes new tokens at positions index .. index+L-1 into a full-layout cache."""
  return lax.dynamic_update_slice_in_dim(cache_BS, new_BL.astype(cache_BS.dtype), index, axis=1)


def write_ring(cache_BS, new_BL, index):
  """Writes new tokens at positions index .. into a ring of S slots (slot = position mod S).

  Of more than S new tokens only the last S survive, as they would one at a time.
  """
  slots, length = cache_BS.shape[1], new_BL.shape[1]
  keep = min(length, slots)
  slot_idx = jnp.mod(index + length - keep + jnp.arange(keep), slots)
  return cache_BS.at[:, slot_idx].set(new_BL[:, length - keep :].astype(cache_BS.dtype))
