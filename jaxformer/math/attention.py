"""Attention kernels (step 9). Placeholder with the dense reference only; replaced by
the full set of implementations (blockwise, sliding window, ...) on the attention branch."""

import jax.numpy as jnp

from jaxformer.math import mixing

IMPLEMENTATIONS = ("dense",)


def attend(q_BLHK, k_BMHK, v_BMHK, *, impl="dense", causal=True, temperature=None, window=None):
  if impl not in IMPLEMENTATIONS:
    raise ValueError(f"impl={impl!r}: expected one of {IMPLEMENTATIONS}")
  temperature = temperature or jnp.sqrt(q_BLHK.shape[-1])
  scores = jnp.einsum("BLHK,BMHK->BHLM", q_BLHK, k_BMHK)
  mask = mixing.causal_mask(q_BLHK.shape[1], k_BMHK.shape[1], window=window)
  if not causal:
    mask = jnp.ones_like(mask)
  return mixing.mix(mixing.normalize(scores, mask, "softmax", temperature), v_BMHK)
