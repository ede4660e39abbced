"""How alike neighbouring units are: the symmetry measure of step 3.

Pressure (docs/reconstruction.md, step 3): with source-only weights W_iL = f(x_i), x_i sends the
same weight into every later unit, so unit L and unit L+1 mix almost the same inputs with
the same coefficients and compute nearly the same thing. The measure:

  sim(offset) = mean over b in B and L in [start, length - offset) of
                cos(s_BLD[b, L], s_BLD[b, L + offset])

where s_BLD is the mixer output (the weighted sum s_L of the spec, after the head combine,
before the skip adds x_L back): cache['layers_i/mixer/out'] from run_with_cache. The
neighbouring-unit similarity is sim(1); sim at larger offsets is the baseline it is read
against. Per head, the same with o_BLHK (cache['layers_i/mixer/head_outputs']) in place of
s_BLD gives one number per head. A zero vector has cosine 0 with everything.

Read per position and centred (`offset_contrast`): a mean shared by every unit of a
sequence makes all of them alike, neighbours or not, so the mean over positions is removed
first; then the contrast sim_l(1) - sim_l(far) at each position l says how much more alike a
unit is to its neighbour than to a unit `far` away. A running average over the sources
(source-only weights) gives a contrast > 0 that persists along the sequence.
"""

import jax.numpy as jnp

_EPS = 1e-12


def neighbour_similarity(s_BLD, offset=1, start=0):
  """Mean cosine between s[:, L] and s[:, L + offset] over batch and L >= start."""
  s_BLD = jnp.asarray(s_BLD, jnp.float32)
  length = s_BLD.shape[1]
  if offset < 1 or start < 0 or start + offset >= length:
    raise ValueError(f"offset={offset}, start={start}: need 1 <= offset, start + offset < {length}")
  return jnp.mean(_cosine(s_BLD[:, start : length - offset], s_BLD[:, start + offset :]))


def head_neighbour_similarity(o_BLHK, offset=1, start=0):
  """neighbour_similarity per head: (H,) from per-head outputs o_BLHK."""
  o_HBLK = jnp.moveaxis(jnp.asarray(o_BLHK, jnp.float32), 2, 0)
  return jnp.stack([neighbour_similarity(o_BLK, offset, start) for o_BLK in o_HBLK])


def similarity_by_offset(s_BLD, max_offset, start=0):
  """sim(1), ..., sim(max_offset): neighbours against units further apart."""
  return jnp.stack([neighbour_similarity(s_BLD, d, start) for d in range(1, max_offset + 1)])


def mixer_similarity(cache, layer=0, offset=1, start=0, per_head=False):
  """The measure on one layer of a run_with_cache cache (mixer output, or per head)."""
  name = layer if isinstance(layer, str) else f"layers_{layer}"
  key = f"{name}/mixer/{'head_outputs' if per_head else 'out'}"
  if key not in cache:
    raise KeyError(f"{key} is not in the cache (a rung with a mixer at {name} is needed)")
  if per_head:
    return head_neighbour_similarity(cache[key], offset, start)
  return neighbour_similarity(cache[key], offset, start)


def _cosine(a_XD, b_XD):
  dot = jnp.sum(a_XD * b_XD, axis=-1)
  norms = jnp.linalg.norm(a_XD, axis=-1) * jnp.linalg.norm(b_XD, axis=-1)
  return dot / jnp.maximum(norms, _EPS)


def centre(s_BLD):
  """s minus its mean over positions, per sequence and feature: a component every unit of a
  sequence shares (a bias, a common direction) no longer makes neighbours look alike."""
  s_BLD = jnp.asarray(s_BLD, jnp.float32)
  return s_BLD - jnp.mean(s_BLD, axis=1, keepdims=True)


def position_similarity(s_BLD, offset):
  """[L - offset]: per position l, the mean over the batch of cos(s[:, l], s[:, l + offset])."""
  s_BLD = jnp.asarray(s_BLD, jnp.float32)
  length = s_BLD.shape[1]
  if not 1 <= offset < length:
    raise ValueError(f"offset={offset}: need 1 <= offset < {length}")
  return jnp.mean(_cosine(s_BLD[:, : length - offset], s_BLD[:, offset:]), axis=0)


def offset_contrast(s_BLD, far, centred=True):
  """[L - far]: per position l, sim_l(1) - sim_l(far), the neighbour's similarity beyond
  that of a unit `far` positions away (on centred outputs unless centred=False). Near 0 when
  a unit's output does not depend on where it sits; > 0 when neighbours compute nearly the
  same thing because they are neighbours (a running average over the sources)."""
  if far < 2:
    raise ValueError(f"far={far}: the far offset must be >= 2 (offset 1 is the neighbour)")
  s_BLD = centre(s_BLD) if centred else jnp.asarray(s_BLD, jnp.float32)
  length = s_BLD.shape[1]
  return position_similarity(s_BLD, 1)[: length - far] - position_similarity(s_BLD, far)
