"""The dynamic-weight layer, as named slots (steps 2-7, 9).

  s_BLD = combine( sum_M normalize(scores(queries(x_L), keys(x_i)) | mask) values(x_i) )

Slots, each filled by a piece from one step file:
  scorer  (steps 3, 5): queries, keys, scores -> scores_BHLM for H functions
  mask    (steps 3, 9): causal, self (stateless), a sliding window, or bidirectional (an
          encoder: every position reads every other; it cannot decode)
  normalizer (step 6):  none | sum | softmax with temperature tau (default sqrt(K))
  valuer  (steps 4, 7): values(x) -> v_BMHK, combine(o_BLHK) -> s_BLD
A rung is a choice of pieces (jaxformer.ladder); this module only wires them, and checks
with chex (jaxformer.math.shapes) that x_BLD, the values v_BMHK, the head outputs o_BLHK
and s_BLD fit together: a piece that returns a wrong shape is named where it happens.

`impl` selects how the softmax(q . k) case is computed: 'generic' materializes
scores_BHLM with any scorer and normalizer; the others call the attention kernels of
jaxformer.math.attention (dense, blockwise, sliding window, ...), which need a
query/key scorer and a softmax.

Decoding (`decode=True`): only the receiver needs x_L, the sources need only what
`scorer.keys` and `valuer.values` made of x_i, so those are kept in the 'cache'
collection (as Flax's own attention does) with the next position: a prompt of any
length is prefilled in one call, then tokens follow one at a time. With a sliding
window the cache is a ring of `window` slots (jaxformer.math.cache). A batch of prompts
of different lengths is left-padded: `pad_B[b]` slots of row b hold padding, which no
query reads (a key mask), so each row attends exactly as it would alone.
"""

import math

import flax.linen as nn
import jax.numpy as jnp

from jaxformer.math import cache as cache_math
from jaxformer.math import mixing, shapes

GENERIC = "generic"


class Mixer(nn.Module):
  scorer: nn.Module  # a jaxformer.nn.slots.Scorer
  valuer: nn.Module  # a jaxformer.nn.slots.Valuer
  normalizer: str = "softmax"
  temperature: float | None = None
  mask: str = "causal"
  window: int | None = None
  impl: str = GENERIC

  @property
  def tau(self):
    return self.temperature if self.temperature is not None else math.sqrt(self.scorer.rank)

  @nn.compact
  def __call__(self, x_BLD, decode=False, pad_B=None):
    sizes = shapes.check("Mixer", x_BLD=x_BLD)
    length = x_BLD.shape[1]
    q = self.scorer.queries(x_BLD)
    k = self.scorer.keys(x_BLD)
    v_BMHK = self.valuer.values(x_BLD)
    sizes = shapes.check("Mixer", {**sizes, "M": length}, v_BMHK=v_BMHK)
    for name, value in (("queries", q), ("keys", k), ("values", v_BMHK)):
      if value is not None:
        self.sow("intermediates", name, value)
    if decode:
      if self.mask == "bidirectional":
        raise ValueError(
          "mask='bidirectional': an encoder reads later tokens, so it cannot decode one "
          "token at a time"
        )
      k, v_BMHK, mask_LM, start, pos_M = self._through_cache(k, v_BMHK)
      # slots of a row's left padding are never read; the positions are slot indices, so
      # distances (causality, the window) are the same as within the row
      kv_valid_BM = None if pad_B is None else pos_M[None, :] >= pad_B[:, None]
      if self.impl == GENERIC or self.window is not None:
        # a ring's slots are not in position order; every kernel that takes a window is
        # exact windowed softmax, which the materialized form computes from the mask.
        if kv_valid_BM is not None:
          mask_LM = mask_LM[None, None] & kv_valid_BM[:, None, None, :]  # [B, 1, L, M]
        o_BLHK = self._mix(q, k, v_BMHK, mask_LM)
      else:  # the full cache is in position order: the kernel itself, query 0 at `start`
        o_BLHK = self._kernel(q, k, v_BMHK, q_offset=start, kv_mask_BM=kv_valid_BM)
    elif self.impl == GENERIC:
      o_BLHK = self._mix(q, k, v_BMHK, self.mask_LM(length))
    else:
      o_BLHK = self._kernel(q, k, v_BMHK)
    shapes.check("Mixer", sizes, o_BLHK=o_BLHK)
    self.sow("intermediates", "head_outputs", o_BLHK)
    s_BLD = self.valuer.combine(o_BLHK)
    shapes.check_same_shape("Mixer", x_BLD=x_BLD, s_BLD=s_BLD)
    return s_BLD

  def _mix(self, q, k, v_BMHK, mask_LM):
    """The materialized form: any scorer, any normalizer, any mask ([L, M] or [B, 1, L, M])."""
    scores_BHLM = self.scorer.scores(q, k, mask_LM.shape[-2])  # L receivers
    a_BHLM = mixing.normalize(scores_BHLM, mask_LM, self.normalizer, self.tau)
    self.sow("intermediates", "weights", a_BHLM)
    return mixing.mix(a_BHLM, v_BMHK)

  def _kernel(self, q_BLHK, k_BMHK, v_BMHK, **position):
    from jaxformer.math import attention  # the kernels of step 9

    linear = self.impl.startswith("linear")  # no softmax, so no temperature
    return attention.attend(
      q_BLHK,
      k_BMHK,
      v_BMHK,
      impl=self.impl,
      causal=True,
      temperature=None if linear else self.tau,
      window=self.window,
      **position,
    )

  def mask_LM(self, length):
    if self.mask == "self":
      return mixing.self_mask(length)
    if self.mask == "bidirectional":
      if self.window is not None:
        raise ValueError(f"mask='bidirectional' with window={self.window}: a window is causal")
      return mixing.bidirectional_mask(length)
    return mixing.causal_mask(length, window=self.window)

  def _through_cache(self, k, v_BMHK):
    """Adds this call's keys and values to the cache.

    Returns the memory to read (keys, values), its mask_LM, the position of this call's
    first token and the position held by each memory slot (pos_M).

    The first call (inside `init`) sizes the cache from its input: the full length, or
    `window` slots for a sliding window.
    """
    batch, length = v_BMHK.shape[:2]
    ring = self.window is not None
    slots = min(self.window, length) if ring else length
    keys = self.variable("cache", "keys", jnp.zeros, (batch, slots, *k.shape[2:]), k.dtype)
    values = self.variable(
      "cache", "values", jnp.zeros, (batch, slots, *v_BMHK.shape[2:]), v_BMHK.dtype
    )
    index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
    start, slots = index.value, keys.value.shape[1]
    pos_L = start + jnp.arange(length)
    if ring:  # read the window before the new tokens overwrite the slots it still needs
      pos_M = jnp.concatenate([cache_math.slot_positions(start, slots, ring=True), pos_L])
      k_mem = jnp.concatenate([keys.value, k.astype(keys.value.dtype)], axis=1)
      v_mem = jnp.concatenate([values.value, v_BMHK.astype(values.value.dtype)], axis=1)
      keys.value = cache_math.write_ring(keys.value, k, start)
      values.value = cache_math.write_ring(values.value, v_BMHK, start)
    else:
      keys.value = cache_math.write_full(keys.value, k, start)
      values.value = cache_math.write_full(values.value, v_BMHK, start)
      k_mem, v_mem = keys.value, values.value
      pos_M = cache_math.slot_positions(start + length, slots, ring=False)
    index.value = start + length
    mask_LM = cache_math.position_mask(pos_L, pos_M, self.mask, self.window)
    return k_mem, v_mem, mask_LM, start, pos_M
