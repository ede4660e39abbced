"""Shape checks at the boundaries of the layers, in the dimension key (jaxformer.nn.axes).

  sizes = shapes.check("attend", q_BLHK=q, k_BMHK=k, v_BMHK=v)   # {'B': 2, 'L': 19, ...}

Each keyword names an array and ends in its dimensions after the last '_' (`q_BLHK`:
rank 4, B L H K). A letter that appears in several names (or twice in one) must have one
size; `sizes` fixes some letters beforehand and is returned with every letter seen. The
checks are chex's (`chex.assert_rank`, `chex.assert_shape`, `chex.assert_equal_shape`):
they read static shapes only, so under jit they run once, while tracing, and the compiled
program is the same as without them (tests/math/test_shapes.py compares the jaxprs).

A mismatch raises chex's AssertionError, whose message ends in the place and the argument:
  [Chex] Assertion assert_shape failed: ... input 0 has shape (2, 7, 2, 8) but expected
  (2, 19, 2, 8). [attend: v_BMHK with B=2, M=19, H=2, K=8]
"""

import chex


def check(where, sizes=None, **arrays):
  """Checks each array against the dimensions its name ends in; None arrays are skipped.

  where: the function or module, first in the message. sizes: letter -> size known
  beforehand. Returns a new dict: `sizes` plus every letter bound by these arrays.
  """
  bound = dict(sizes or {})
  for name, x in arrays.items():
    if x is not None:
      check_array(where, name, x, name.rpartition("_")[2], bound)
  return bound


def check_array(where, name, x, letters, bound):
  """Checks one array `name` against `letters` (e.g. 'BLD'); adds new letters to `bound`."""
  known = ", ".join(f"{c}={bound[c]}" for c in dict.fromkeys(letters) if c in bound)
  message = f"{where}: {name}" + (f" with {known}" if known else "")
  expected = tuple(bound.get(c) for c in letters)
  if any(size is not None for size in expected):
    chex.assert_shape(x, expected, custom_message=message)  # the rank too
  else:
    chex.assert_rank(x, len(letters), custom_message=message)
  for c, size in zip(letters, x.shape, strict=True):
    bound.setdefault(c, size)
  if len(set(letters)) < len(letters):  # a letter twice in one name: both sizes equal
    chex.assert_shape(x, tuple(bound[c] for c in letters), custom_message=message)


def check_same_shape(where, **arrays):
  """All arrays have the same shape (e.g. a residual branch keeps x_BLD's shape)."""
  names = ", ".join(arrays)
  chex.assert_equal_shape(list(arrays.values()), custom_message=f"{where}: {names}")
