"""Interventions: ablations match the weight surgery they stand for, and patching reproduces
the run the patches came from."""

import functools

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import ladder
from jaxformer.analysis import interventions as iv
from jaxformer.analysis.cache import run_with_cache

BATCH, LENGTH = 2, 8


@functools.cache
def _setup(rung="transformer"):
  config = ladder.default_config(rung)
  config.num_layers, config.vocab_size, config.max_len = 2, 32, LENGTH
  model = ladder.build(rung, config)
  keys = jax.random.split(jax.random.key(1), 2)
  tokens_A, tokens_B = (jax.random.randint(k, (BATCH, LENGTH), 0, 32) for k in keys)
  params = nn.meta.unbox(model.init(jax.random.key(0), tokens_A))
  leaves, tree = jax.tree_util.tree_flatten(params)  # non-trivial norms and biases
  rng = np.random.default_rng(2)
  leaves = [x + 0.1 * rng.standard_normal(x.shape, np.float32) for x in leaves]
  return config, model, jax.tree_util.tree_unflatten(tree, leaves), tokens_A, tokens_B


def _with(params, path, fn):
  """params with the leaf at 'a/b/c' replaced by fn(leaf)."""
  tree = jax.tree_util.tree_map(lambda x: x, params)  # a copy of the containers
  node = tree["params"]
  *parents, leaf = path.split("/")
  for key in parents:
    node = node[key]
  node[leaf] = fn(node[leaf])
  return tree


def test_zeroing_a_head_is_removing_its_wo_block():
  _, model, params, tokens, _ = _setup()
  layer, head = 1, 1
  ablated = iv.run_with_interventions(
    model, params, tokens, {f"layers_{layer}/mixer/head_outputs": iv.zero_head(head)}
  )
  surgery = _with(params, f"layers_{layer}/mixer/valuer/wo", lambda w: w.at[head].set(0))
  np.testing.assert_allclose(ablated, model.apply(surgery, tokens), atol=1e-6, rtol=0)
  assert np.max(np.abs(ablated - model.apply(params, tokens))) > 1e-3  # the head mattered


def test_zeroing_an_mlp_unit_is_removing_its_w2_row():
  _, model, params, tokens, _ = _setup()
  unit = 5
  ablated = iv.run_with_interventions(
    model, params, tokens, {"layers_0/ffn/mlp_post": iv.zero_units(unit)}
  )
  surgery = _with(params, "layers_0/ffn/w2", lambda w: w.at[unit].set(0))
  np.testing.assert_allclose(ablated, model.apply(surgery, tokens), atol=1e-5, rtol=0)
  assert np.max(np.abs(ablated - model.apply(params, tokens))) > 1e-4


def test_patching_every_activation_from_a_reproduces_a():
  _, model, params, tokens_A, tokens_B = _setup()
  logits_A, cache_A = run_with_cache(model, params, tokens_A)
  patched = jax.jit(functools.partial(iv.run_with_interventions, model))(
    params, tokens_B, iv.patch(cache_A)
  )
  np.testing.assert_allclose(patched, logits_A, atol=1e-5, rtol=0)


def test_patching_what_each_layer_writes_reproduces_a():
  # the residual stream is the embedding plus what each mixer and MLP writes: patching those
  # alone (no residual, no final norm) must carry A's computation into the run on B
  _, model, params, tokens_A, tokens_B = _setup()
  logits_A, cache_A = run_with_cache(model, params, tokens_A)
  written = ["embedded"] + [f"layers_{i}/{m}/out" for i in range(2) for m in ("mixer", "ffn")]
  patched = iv.run_with_interventions(model, params, tokens_B, iv.patch(cache_A, written))
  np.testing.assert_allclose(patched, logits_A, atol=1e-5, rtol=0)
  # without the embedding, B's tokens still reach the logits through the residual stream
  partial = iv.run_with_interventions(model, params, tokens_B, iv.patch(cache_A, written[1:]))
  assert np.max(np.abs(partial - logits_A)) > 1e-3


def test_names_are_run_with_cache_names():
  _, model, params, tokens, _ = _setup()
  _, cache = run_with_cache(model, params, tokens)
  listed = iv.names(model, params, tokens)
  assert set(listed) <= set(cache)
  assert set(cache) - set(listed) == {f"layers_{i}/resid_mid" for i in range(2)}


def test_an_unknown_or_unreplaceable_name_is_an_error_naming_it():
  _, model, params, tokens, _ = _setup()
  with pytest.raises(ValueError, match="layers_7/mixer/out"):
    iv.run_with_interventions(model, params, tokens, {"layers_7/mixer/out": iv.zero_head(0)})
  with pytest.raises(ValueError, match="layers_0/resid_mid.*not replaceable"):
    iv.run_with_interventions(model, params, tokens, {"layers_0/resid_mid": lambda a: a})
  with pytest.raises(ValueError, match="layers_0/mixer/out.*shape"):
    iv.run_with_interventions(model, params, tokens, {"layers_0/mixer/out": np.zeros(3)})


def test_replaced_attention_weights_are_what_the_mixer_mixes():
  # uniform causal weights in layer 0: head outputs are then the running mean of the values
  _, model, params, tokens, _ = _setup()
  uniform_LM = np.tril(np.ones((LENGTH, LENGTH))) / np.arange(1, LENGTH + 1)[:, None]
  name = "layers_0/mixer/weights"
  edited = iv.run_with_interventions(
    model, params, tokens, {name: lambda a: np.broadcast_to(uniform_LM, a.shape)}
  )
  _, cache = run_with_cache(model, params, tokens)
  v_BMHK = np.asarray(cache["layers_0/mixer/values"])
  mean_BLHK = np.cumsum(v_BMHK, axis=1) / np.arange(1, LENGTH + 1)[None, :, None, None]
  by_outputs = iv.run_with_interventions(
    model, params, tokens, {"layers_0/mixer/head_outputs": mean_BLHK}
  )
  np.testing.assert_allclose(edited, by_outputs, atol=1e-5, rtol=0)
  same = iv.run_with_interventions(model, params, tokens, {name: cache[name]})
  np.testing.assert_allclose(same, model.apply(params, tokens), atol=1e-6, rtol=0)
  assert np.max(np.abs(edited - model.apply(params, tokens))) > 1e-3


def test_weights_of_a_kernel_mixer_are_an_error_naming_them():
  config = ladder.default_config("transformer")
  config.num_layers, config.vocab_size, config.max_len, config.attention = 1, 32, LENGTH, "dense"
  model = ladder.build("transformer", config)
  tokens = np.zeros((1, LENGTH), np.int32)
  params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
  with pytest.raises(ValueError, match="layers_0/mixer/weights.*generic"):
    iv.run_with_interventions(model, params, tokens, {"layers_0/mixer/weights": lambda a: a})
  iv.run_with_interventions(model, params, tokens, {"layers_0/mixer/head_outputs": iv.zero_head(0)})
