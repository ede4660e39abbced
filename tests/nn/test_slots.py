"""Every rung's mixer pieces meet the slot protocols of jaxformer.nn.slots, and `rank` is a
positive int however a piece states it."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from jaxformer import ladder
from jaxformer.nn import slots
from jaxformer.nn.mixer import Mixer


def _mixers(rung):
  config = ladder.default_config(rung)
  config.num_layers = 1
  model = ladder.build(rung, config)
  found = []

  def keep(next_fun, args, kwargs, context):
    if isinstance(context.module, Mixer) and context.method_name == "__call__":
      found.append(context.module)
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(keep):
    jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
  return found


@pytest.mark.parametrize("rung", [r for r in ladder.RUNGS if r != "rnn"])  # rnn: no mixer
def test_every_piece_meets_its_slot(rung):
  mixers = _mixers(rung)
  assert mixers, f"{rung}: no mixer"
  for mixer in mixers:
    assert isinstance(mixer.scorer, slots.Scorer), type(mixer.scorer).__name__
    assert isinstance(mixer.valuer, slots.Valuer), type(mixer.valuer).__name__
    rank = mixer.scorer.rank
    assert isinstance(rank, int) and not isinstance(rank, bool) and rank > 0
    assert mixer.scorer.num_heads == mixer.valuer.num_heads
