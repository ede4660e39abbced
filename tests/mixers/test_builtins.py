"""The built-in mixers: each passes the plug-in contract (shape, causality, decoding equals
the full pass) and names every parameter's logical axes; softmax is the transformer rung's own mixer; the gated recurrence computes
one function in its scan and recurrent forms, and its scan's depth grows as log L."""

import json

import chex
import jax
import jax.numpy as jnp
import pytest

from jaxformer import ladder, mixers
from jaxformer.analysis import depth
from jaxformer.mixers.gated import GatedRecurrence
from jaxformer.mixers.hybrid import Hybrid
from jaxformer.mixers.linear import LinearAttention


@pytest.mark.parametrize("name", list(mixers.BUILTINS))
def test_every_builtin_keeps_the_contract_and_decodes(name):
  spec, fields = mixers.BUILTINS[name]
  info = mixers.check(mixers.load(spec), fields, width=8)
  assert info["decode"] and info["params"] > 0
  assert info["unnamed"] == []  # every parameter declared with logical axis names


def _custom(spec, fields=None, **model):
  c = ladder.default_config("custom")
  c.mixer, c.mixer_fields = spec, json.dumps(fields or {})
  c.d_model, c.d_ff, c.vocab_size, c.max_len = 16, 32, 16, 16
  for k, v in model.items():
    c[k] = v
  return ladder.build("custom", c)


def test_softmax_in_the_custom_rung_is_the_transformer_rung():
  c = ladder.default_config("transformer")
  c.d_model, c.num_heads, c.d_ff, c.vocab_size, c.max_len = 16, 1, 32, 16, 16
  transformer = ladder.build("transformer", c)
  custom = _custom(mixers.BUILTINS["softmax"][0])
  tokens_BL = jax.random.randint(jax.random.key(0), (2, 16), 0, 16)
  params = transformer.init(jax.random.key(1), tokens_BL)["params"]
  chex.assert_trees_all_equal_structs(params, custom.init(jax.random.key(1), tokens_BL)["params"])
  logits = [jax.jit(m.apply)({"params": params}, tokens_BL) for m in (custom, transformer)]
  chex.assert_trees_all_close(*logits, atol=1e-6)


@pytest.mark.parametrize("chunk", [4, 5, 16])  # 12 tokens: whole chunks, a padded tail, one
def test_gated_chunked_scan_and_recurrent_forms_are_one_function(chunk):
  x_BLD = jax.random.normal(jax.random.key(2), (2, 12, 16))
  forms = [GatedRecurrence(16, form=f, chunk=chunk) for f in ("chunked", "scan", "recurrent")]
  assert forms[0].form == GatedRecurrence(16).form  # the default
  params = forms[0].init(jax.random.key(3), x_BLD)
  chunked, scan, recurrent = (jax.jit(m.apply)(params, x_BLD) for m in forms)
  chex.assert_trees_all_close(chunked, recurrent, atol=1e-5)
  chex.assert_trees_all_close(scan, recurrent, atol=1e-5)


def test_a_gated_form_that_does_not_exist_is_named():
  x_BLD = jnp.zeros((1, 4, 8))
  with pytest.raises(ValueError, match="form='parallel': expected one of chunked, scan"):
    GatedRecurrence(8, form="parallel").init(jax.random.key(0), x_BLD)


def test_gated_scan_depth_grows_as_log_length_its_recurrent_form_as_length():
  def depths(form):
    out = []
    for length in (64, 256, 1024):
      module = GatedRecurrence(8, num_heads=2, form=form)
      x = jax.ShapeDtypeStruct((1, length, 8), jnp.float32)
      params = jax.eval_shape(module.init, jax.random.key(0), x)
      out.append(depth.measure(module.apply, params, x).depth)
    return out

  scan, recurrent = depths("scan"), depths("recurrent")
  assert scan[2] - scan[1] == scan[1] - scan[0] > 0  # a constant step per 4x in L: ~log L
  assert scan[2] < 2 * scan[0]
  assert recurrent[2] > 3.5 * recurrent[1] > 12 * recurrent[0]  # ~L


def test_the_hybrid_is_its_window_plus_its_linear_branch():
  x_BLD = jax.random.normal(jax.random.key(4), (2, 12, 16))
  hybrid = Hybrid(16, window=4)
  params = hybrid.init(jax.random.key(5), x_BLD)["params"]
  window = mixers.load(mixers.BUILTINS["softmax"][0])(16, window=4, impl="sliding_window")
  linear = LinearAttention(16)
  want = window.apply({"params": params["window"]}, x_BLD) + linear.apply(
    {"params": params["linear"]}, x_BLD
  )
  chex.assert_trees_all_close(hybrid.apply({"params": params}, x_BLD), want, atol=1e-6)


def test_state_of_the_fixed_memory_mixers_does_not_grow_with_length():
  from jaxformer.analysis import cost

  spec = mixers.BUILTINS
  for name, grows in (("softmax", True), ("sliding_window", False), ("gated", False)):
    model = _custom(spec[name][0], spec[name][1], max_len=64)
    short, long = cost.decode_state_bytes(model, 16), cost.decode_state_bytes(model, 64)
    assert (long > short) == grows, name
