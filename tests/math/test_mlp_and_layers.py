"""The MLP is an explicit key-value memory; small shared layers are what they claim."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from jaxformer.math import layers, mlp, recurrent
from jaxformer.steps.s8_mlp import MlpKV


class MlpTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("gelu", "relu", "tanh")
  def test_sum_over_key_value_pairs_equals_w2_sigma_w1(self, activation):
    keys = jax.random.split(jax.random.key(0), 5)
    x = jax.random.normal(keys[0], (2, 4, 6))
    w1 = jax.random.normal(keys[1], (6, 10))
    b1 = jax.random.normal(keys[2], (10,))
    w2 = jax.random.normal(keys[3], (10, 6))
    b2 = jax.random.normal(keys[4], (6,))
    dense = self.variant(mlp.mlp, static_argnums=5)(x, w1, b1, w2, b2, activation)
    memory = self.variant(mlp.mlp_as_memory, static_argnums=5)(x, w1.T, b1, w2, b2, activation)
    chex.assert_trees_all_close(dense, memory, atol=1e-4, rtol=1e-5)

  @parameterized.parameters(8, 16, 24)
  def test_without_w2_unit_f_writes_coordinate_f_mod_d(self, d_ff):
    module = MlpKV(d_ff=d_ff, w2=False, use_bias=False)
    x = jax.random.normal(jax.random.key(0), (2, 3, 8))
    params = module.init(jax.random.key(1), x)
    out, inter = module.apply(params, x, mutable="intermediates")
    post = inter["intermediates"]["mlp_post"][0]
    chex.assert_trees_all_close(out, post @ mlp.pooled_values(d_ff, 8), atol=1e-6)
    expected = sum(post[..., i * 8 : (i + 1) * 8] for i in range(d_ff // 8))
    chex.assert_trees_all_close(out, expected, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "multiple of d_model=8"):
      MlpKV(d_ff=12, w2=False).init(jax.random.key(1), x)

  @parameterized.parameters(8, 32, 4)
  def test_a_fixed_w2_is_orthonormal_the_same_everywhere_and_not_a_parameter(self, d_ff):
    module = MlpKV(d_ff=d_ff, w2_trained=False, use_bias=False)
    x = jax.random.normal(jax.random.key(0), (2, 3, 8))
    params = module.init(jax.random.key(1), x)
    assert set(params["params"]) == {"w1"}  # no w2 to learn (nor to decay)
    values = mlp.fixed_values(d_ff, 8)
    gram = values.T @ values if d_ff >= 8 else values @ values.T
    np.testing.assert_allclose(gram, np.eye(min(d_ff, 8)), atol=1e-5)
    np.testing.assert_array_equal(values, mlp.fixed_values(d_ff, 8))  # seed 0, every call
    out, inter = module.apply(params, x, mutable="intermediates")
    chex.assert_trees_all_close(out, inter["intermediates"]["mlp_post"][0] @ values, atol=1e-5)


class LayersTest(chex.TestCase):
  def test_layer_norm_standardizes(self):
    x = 3.0 + 2.0 * jax.random.normal(jax.random.key(1), (4, 5, 16))
    y = layers.layer_norm(x, jnp.ones(16), jnp.zeros(16))
    chex.assert_trees_all_close(y.mean(-1), jnp.zeros((4, 5)), atol=1e-5)
    chex.assert_trees_all_close(y.std(-1), jnp.ones((4, 5)), atol=1e-3)

  def test_sinusoidal_table_values(self):
    table = layers.sinusoidal_positions(50, 8)
    chex.assert_shape(table, (50, 8))
    np.testing.assert_allclose(table[0], [0, 1, 0, 1, 0, 1, 0, 1], atol=1e-7)
    np.testing.assert_allclose(table[7, 0], np.sin(7.0), rtol=1e-6)
    np.testing.assert_allclose(table[7, 3], np.cos(7.0 * 10_000 ** (-2 / 8)), rtol=1e-5)


class RecurrentTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("elman", "gru", "lstm")
  def test_scan_equals_a_python_loop_and_is_causal(self, cell):
    d, e = 5, 3
    g = recurrent.GATES[cell] * d
    keys = jax.random.split(jax.random.key(2), 4)
    params = {
      "wx": jax.random.normal(keys[0], (e, g)) * 0.5,
      "wh": jax.random.normal(keys[1], (d, g)) * 0.5,
      "b": jax.random.normal(keys[2], (g,)) * 0.1,
    }
    x = jax.random.normal(keys[3], (2, 6, e))
    run = self.variant(recurrent.run, static_argnums=0)
    _, h = run(cell, params, x)
    chex.assert_shape(h, (2, 6, d))
    carry = recurrent.initial_carry(cell, 2, d)
    fn = {"elman": recurrent.elman, "gru": recurrent.gru, "lstm": recurrent.lstm}[cell]
    for t in range(6):
      carry, h_t = fn(params, carry, x[:, t])
      chex.assert_trees_all_close(h[:, t], h_t, atol=1e-6)
    _, h2 = run(cell, params, x.at[:, 4].set(0.0))
    chex.assert_trees_all_close(h[:, :4], h2[:, :4])
    self.assertGreater(float(jnp.abs(h[:, 4:] - h2[:, 4:]).max()), 1e-4)

  def test_forget_bias_starts_the_lstm_forget_gate_open(self):
    """forget_bias sets the forget gate's initial bias (gates i, f, g, o), nothing else: with
    zero inputs and state, the untrained cell keeps sigmoid(b_f) of its memory per step."""
    from jaxformer.steps.s1_fixed_memory import Recurrent

    x = jnp.ones((2, 5, 3))
    p0 = Recurrent(cell="lstm", width=4).init(jax.random.key(0), x)["params"]
    p1 = Recurrent(cell="lstm", width=4, forget_bias=1.0).init(jax.random.key(0), x)["params"]
    b = np.asarray(p1["b"].value)
    np.testing.assert_array_equal(b, np.r_[np.zeros(4), np.ones(4), np.zeros(8)])
    np.testing.assert_array_equal(np.asarray(p0["b"].value), np.zeros(16))
    for name in ("wx", "wh"):  # the same weights either way
      np.testing.assert_array_equal(p0[name].value, p1[name].value)
    params = {k: v.value for k, v in p1.items()}
    params["wx"], params["wh"] = jnp.zeros_like(params["wx"]), jnp.zeros_like(params["wh"])
    carry = (jnp.zeros((1, 4)), jnp.ones((1, 4)))
    (_, c), _ = recurrent.lstm(params, carry, jnp.zeros((1, 3)))
    # c = sigmoid(1) * 1 + sigmoid(0) * tanh(0)
    np.testing.assert_allclose(c, jax.nn.sigmoid(1.0) * np.ones((1, 4)), rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "forget_bias"):
      Recurrent(cell="gru", width=4, forget_bias=1.0).init(jax.random.key(0), x)
