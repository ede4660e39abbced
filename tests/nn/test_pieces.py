"""Equivalences between pieces of neighbouring steps, on the real Linen modules."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from jaxformer import ladder
from jaxformer.math import layers as layers_math
from jaxformer.math import mlp as mlp_math
from jaxformer.steps.s4_values_heads import MatrixSum
from jaxformer.steps.s7_concat_wo import ConcatWo


def test_rank_d_values_with_identity_wo_equal_summed_full_values():
  d, h = 6, 3
  x = jax.random.normal(jax.random.key(0), (2, 5, d))
  summed = MatrixSum(width=d, num_heads=h)
  v_params = nn.unbox(summed.init(jax.random.key(1), x, method=MatrixSum.values))
  v_HDE = v_params["params"]["v"]
  concat = ConcatWo(width=d, num_heads=h, rank=d)
  c_params = {
    "params": {"wv": jnp.transpose(v_HDE, (1, 0, 2)), "wo": jnp.broadcast_to(jnp.eye(d), (h, d, d))}
  }
  o = jax.random.normal(jax.random.key(2), (2, 5, h, d))
  chex.assert_trees_all_close(
    concat.apply(c_params, x, method=ConcatWo.values),
    summed.apply(v_params, x, method=MatrixSum.values),
    atol=1e-5,
  )
  chex.assert_trees_all_close(
    concat.apply(c_params, o, method=ConcatWo.combine),
    summed.apply(v_params, o, method=MatrixSum.combine),
    atol=1e-5,
  )


def _block_io(name, **overrides):
  config = ladder.default_config(name)
  with config.unlocked():
    config.update(overrides)
  model = ladder.build(name, config)
  tokens = jax.random.randint(jax.random.key(3), (2, 10), 0, config.vocab_size)
  params = nn.unbox(model.init(jax.random.key(4), tokens))
  _, state = model.apply(params, tokens, mutable=["intermediates"])
  inter = state["intermediates"]
  layer = params["params"]["layers_1"]
  x_in = inter["layers_0"]["resid_post"][0]
  o = inter["layers_1"]["mixer"]["head_outputs"][0]
  return config, layer, x_in, o, inter["layers_1"]["resid_post"][0]


def _absorbed(config, layer, x, o):
  """x + W2 sigma(o (Wo W1) + b1) + b2: W1 folded into every Wo_j (one matrix per head)."""
  valuer, ffn = layer["mixer"]["valuer"], layer["ffn"]
  wo_w1_HKF = jnp.einsum("HKD,DF->HKF", valuer["wo"], ffn["w1"])
  hidden = jnp.einsum("BLHK,HKF->BLF", o, wo_w1_HKF) + valuer["bo"] @ ffn["w1"] + ffn["b1"]
  return x + mlp_math.ACTIVATIONS[config.activation](hidden) @ ffn["w2"] + ffn["b2"]


def test_w1_absorbs_into_wo_in_the_single_skip_block():
  config, layer, x, o, out = _block_io("mlp_kv", use_bias=True)
  chex.assert_trees_all_close(_absorbed(config, layer, x, o), out, atol=1e-4, rtol=1e-4)


def test_w1_does_not_absorb_in_the_split_skip_block_with_norm():
  config, layer, x, o, out = _block_io("transformer")
  # The best absorbed form for the split block: the mixer's skip is added back, but the
  # MLP still sees o through Wo W1 only, not through layer_norm(x + o Wo).
  mixed = (
    x
    + jnp.einsum("BLHK,HKD->BLD", o, layer["mixer"]["valuer"]["wo"])
    + layer["mixer"]["valuer"]["bo"]
  )
  attempt = _absorbed(config, layer, mixed, o)
  gap = float(jnp.abs(attempt - out).max())
  assert gap > 1e-2, f"absorption unexpectedly held in the split block (gap {gap})"
  # And the unabsorbed split block is what the module computes.
  norm2 = layer["norm2"]
  h = layers_math.layer_norm(mixed, norm2["scale"], norm2["bias"])
  ffn = layer["ffn"]
  explicit = mixed + mlp_math.mlp(h, ffn["w1"], ffn["b1"], ffn["w2"], ffn["b2"], config.activation)
  chex.assert_trees_all_close(explicit, out, atol=1e-4, rtol=1e-4)
  assert np.isfinite(gap)


def test_every_bias_starts_at_zero():
  # A random (H, K) key bias adds bq . k_i to every score: a source-only term that stalled
  # recall training. Biases of every shape must start at zero, like GPT-2's.
  model = ladder.build("transformer")
  params = nn.unbox(model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32)))["params"]
  biases = {
    jax.tree_util.keystr(path): leaf
    for path, leaf in jax.tree_util.tree_leaves_with_path(params)
    if jax.tree_util.keystr(path).split("'")[-2].startswith("b")
  }
  assert {"bq", "bk", "bv", "bo", "b1", "b2"} <= {k.split("'")[-2] for k in biases}
  for name, leaf in biases.items():
    assert not np.any(np.asarray(leaf)), f"{name} is not zero at init"
