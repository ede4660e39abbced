"""Cache layout math: ring and full slots, position masks, chunked writes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer.math import cache, mixing


def _simulate(written, slots, ring):
  """Slot -> position after writing positions 0..written-1 one at a time (python reference)."""
  held = [cache.EMPTY] * slots
  for p in range(written):
    if ring or p < slots:
      held[p % slots if ring else p] = p
  return held


@pytest.mark.parametrize("ring", [False, True])
@pytest.mark.parametrize("written", [0, 1, 3, 4, 5, 11])
def test_slot_positions_match_one_by_one_writes(ring, written):
  slots = 4 if ring else 12
  got = cache.slot_positions(jnp.int32(written), slots, ring)
  np.testing.assert_array_equal(got, _simulate(written, slots, ring))


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("offset", [0, 5])
def test_position_mask_is_the_training_mask(window, offset):
  length, memory = 4, 9
  pos_L = offset + jnp.arange(length)
  got = cache.position_mask(pos_L, jnp.arange(memory), "causal", window)
  want = mixing.causal_mask(length, memory, offset=offset, window=window)
  np.testing.assert_array_equal(got, want)


def test_position_mask_self_and_empty_slots():
  pos_M = jnp.array([0, 1, cache.EMPTY, 3])
  got = cache.position_mask(jnp.array([1, 3]), pos_M, "self")
  np.testing.assert_array_equal(got, [[False, True, False, False], [False, False, False, True]])
  # an empty slot is never read, even by a window that reaches below position 0
  got = cache.position_mask(jnp.array([0]), pos_M, "causal", window=4)
  np.testing.assert_array_equal(got, [[True, False, False, False]])


@pytest.mark.parametrize("start, length", [(0, 2), (3, 3), (2, 7), (6, 1)])
def test_ring_chunk_write_equals_token_by_token(start, length):
  slots = 4
  rng = np.random.default_rng(start + 10 * length)
  base = jnp.asarray(rng.normal(size=(2, slots, 3)), jnp.float32)
  new = jnp.asarray(rng.normal(size=(2, length, 3)), jnp.float32)
  want = base
  for t in range(length):
    want = cache.write_ring(want, new[:, t : t + 1], start + t)
  got = cache.write_ring(base, new, start)
  np.testing.assert_array_equal(got, want)
  # the token at position p sits in slot p mod slots
  last = start + length - 1
  np.testing.assert_array_equal(got[:, last % slots], new[:, -1])


def test_full_write_places_tokens_at_their_positions():
  base = jnp.zeros((1, 6, 2))
  new = jax.random.normal(jax.random.key(0), (1, 2, 2))
  got = cache.write_full(base, new, jnp.int32(3))
  np.testing.assert_array_equal(got[:, 3:5], new)
  np.testing.assert_array_equal(got[:, :3], 0.0)
  np.testing.assert_array_equal(got[:, 5:], 0.0)
