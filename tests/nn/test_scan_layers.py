"""scan_layers=True (one nn.scan over the blocks, params stacked under 'layers') computes the
same function, gradients and cached decoding as the unrolled stack; remat changes nothing
but memory; the two parameter layouts convert both ways."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxformer import decode, ladder
from jaxformer.nn import axes, lm

LAYERS = 3


def _models(**fields):
  c = ladder.default_config("transformer")
  c.vocab_size, c.max_len, c.d_model, c.d_ff, c.num_layers = 32, 16, 16, 32, LAYERS
  for key, value in fields.items():
    c[key] = value
  unrolled = ladder.build("transformer", c)
  c.scan_layers = True
  return unrolled, ladder.build("transformer", c), c


def _loss(model, params, tokens_BL):
  logits_BLV = model.apply({"params": params}, tokens_BL)
  return jnp.mean(jax.nn.log_softmax(logits_BLV)[:, :-1] * jax.nn.one_hot(tokens_BL[:, 1:], 32))


@pytest.mark.parametrize("remat", ["none", "dots", "full"])
def test_scanned_equals_unrolled_in_value_and_gradient(remat):
  unrolled, _, c = _models(attention="blockwise")
  c.remat = remat
  scanned = ladder.build("transformer", c)
  tokens_BL = jax.random.randint(jax.random.key(1), (2, 12), 0, 32)
  params = nn.unbox(unrolled.init(jax.random.key(0), tokens_BL))["params"]
  stacked = lm.stack_layers(params, LAYERS)
  chex.assert_trees_all_close(
    scanned.apply({"params": stacked}, tokens_BL),
    unrolled.apply({"params": params}, tokens_BL),
    atol=1e-5,
    rtol=1e-5,
  )
  grad = jax.jit(jax.grad(_loss, argnums=1), static_argnums=0)
  chex.assert_trees_all_close(
    grad(scanned, stacked, tokens_BL),
    lm.stack_layers(grad(unrolled, params, tokens_BL), LAYERS),
    atol=1e-5,
    rtol=1e-5,
  )


def test_scanned_params_are_the_stacked_layout_with_a_layers_axis():
  unrolled, scanned, _ = _models()
  tokens_BL = jnp.zeros((1, 8), jnp.int32)
  boxed = scanned.init(jax.random.key(0), tokens_BL)["params"]
  params = nn.unbox(boxed)
  assert set(params) == {"embed", "pos_embed", "layers", "final_norm", "unembed"}
  unrolled_params = nn.unbox(unrolled.init(jax.random.key(0), tokens_BL))["params"]
  shapes = lambda tree: jax.tree.map(jnp.shape, tree)  # noqa: E731
  assert shapes(lm.stack_layers(unrolled_params, LAYERS)) == shapes(params)
  assert shapes(lm.unstack_layers(params)) == shapes(unrolled_params)
  # the layers differ (each its own init), and the round trip is exact
  w1 = params["layers"]["ffn"]["w1"]
  assert not np.allclose(w1[0], w1[1])
  chex.assert_trees_all_equal(lm.stack_layers(lm.unstack_layers(params), LAYERS), params)
  # the stacked axis carries its logical name (replicated by axes.RULES)
  assert boxed["layers"]["ffn"]["w1"].names == (axes.LAYERS, axes.EMBED, axes.MLP)
  assert (axes.LAYERS, None) in axes.RULES
  with pytest.raises(ValueError, match="unstack_layers"):
    lm.unstack_layers(unrolled_params)
  with pytest.raises(ValueError, match="stack_layers"):
    lm.stack_layers(params, LAYERS)


def test_scanned_cached_decoding_equals_unrolled():
  unrolled, scanned, _ = _models()
  tokens_BL = jax.random.randint(jax.random.key(2), (2, 9), 0, 32)
  params = unrolled.init(jax.random.key(0), tokens_BL)["params"]
  want = decode.cached_logits(unrolled, params, tokens_BL, 3)[0]
  got = decode.cached_logits(scanned, lm.stack_layers(params, LAYERS), tokens_BL, 3)[0]
  chex.assert_trees_all_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
  "rung, fields, message",
  [
    ("transformer", {"remat": "dots"}, "model.remat='dots': needs model.scan_layers=True"),
    ("transformer", {"remat": "some", "scan_layers": True}, "model.remat='some'"),
    ("rnn", {"scan_layers": True}, "model.scan_layers=True: rung 'rnn'"),
  ],
)
def test_bad_scan_fields_name_the_field(rung, fields, message):
  c = ladder.default_config(rung)
  with c.unlocked():
    c.update(fields)
  with pytest.raises(ladder.ConfigError, match=message):
    ladder.build(rung, c)
