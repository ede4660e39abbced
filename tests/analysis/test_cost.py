"""jaxformer.analysis.cost: decode-state bytes and parameter counts from shapes, equal to the
closed forms and to real arrays; a train step's compiled memory and time."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import harness
from jaxformer import decode, ladder
from jaxformer.analysis import cost


def _config(rung, **model):
  c = ladder.default_config(rung)
  c.vocab_size, c.max_len, c.d_model, c.num_layers = 16, 64, 16, 2
  for k, v in model.items():
    c[k] = v
  return c


@pytest.mark.parametrize(
  "rung, model", [("transformer", {}), ("transformer", {"window": 4}), ("rnn", {})]
)
def test_decode_state_bytes_equal_the_closed_form(rung, model):
  c = _config(rung, **model)
  for length in (8, 64):
    want = decode.cache_bytes_formula(c, length, rung=rung if rung == "rnn" else None)
    assert cost.decode_state_bytes(ladder.build(rung, c), length) == want


def test_decode_state_bytes_equal_the_real_cache():
  model = ladder.build("transformer", _config("transformer"))
  assert cost.decode_state_bytes(model, 32) == decode.cache_bytes(decode.init_cache(model, 1, 32))


def test_param_count_equals_the_initialized_params():
  model = ladder.build("transformer", _config("transformer"))
  params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  want = sum(int(np.prod(np.shape(p))) for p in jax.tree.leaves(params))
  assert cost.param_count(model, (1, 8)) == want


def test_train_step_cost_is_measured_from_the_compiled_step():
  tc = harness.train_config("rnn", "mqar:vocab_size=16,seq_len=8", _config("rnn").to_dict())
  small = cost.train_step(tc, (1, 8), repeats=1)
  assert small["peak_bytes"] > 0 and small["seconds"] > 0 and small["cpu_seconds"] >= 0
