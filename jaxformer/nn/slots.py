"""The contracts of the mixer's slots (jaxformer.nn.mixer.Mixer), as `typing.Protocol`s.

A piece for a slot is any Linen module with these members; pieces state `rank` and
`num_heads` the way their step needs (a class constant where the step fixes it, a dataclass
field where the config sets it, a property where another field implies it), and the
protocols are what every form shares. `tests/nn/test_slots.py` checks every rung's pieces.
"""

from typing import Protocol, runtime_checkable


@runtime_checkable
class Scorer(Protocol):
  """scores_BHLM for H functions from queries(x_L) and keys(x_i) (steps 3 and 5)."""

  num_heads: int  # H
  # K: the size a score is taken over; the default temperature is sqrt(rank) (1 for the
  # scorers without a query . key product)
  rank: int

  def queries(self, x_BLD): ...  # None where the scorer has no queries (source_only)

  def keys(self, x_BMD): ...

  def scores(self, q, k, length): ...  # -> scores_BHLM for `length` receivers


@runtime_checkable
class Valuer(Protocol):
  """values(x_i) -> v_BMHK and combine(o_BLHK) -> s_BLD (steps 4 and 7)."""

  num_heads: int  # H: the scorer is built with as many functions

  def values(self, x_BMD): ...

  def combine(self, o_BLHK): ...
