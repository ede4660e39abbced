"""The sum notation and the matrix notation of the dynamic-weight layer agree."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from jaxformer.math import heads, interaction, mixing


def _qkv(seed=0, b=2, length=7, h=3, k=4):
  kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
  shape = (b, length, h, k)
  return (jax.random.normal(kq, shape), jax.random.normal(kk, shape), jax.random.normal(kv, shape))


class MixingTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("none", "sum", "softmax")
  def test_sum_form_equals_masked_matrix_form(self, normalizer):
    q, k, v = _qkv()
    matrix = self.variant(mixing.attention_matrix, static_argnums=(3, 4))
    loop = mixing.attention_loop(q, k, v, normalizer, 2.0)
    out = matrix(q, k, v, normalizer, 2.0)
    chex.assert_shape(out, q.shape)
    chex.assert_trees_all_close(out, loop, atol=1e-5, rtol=1e-5)

  def test_softmax_rows_are_distributions_over_visible_sources(self):
    scores = jax.random.normal(jax.random.key(1), (2, 3, 5, 5))
    a = mixing.normalize(scores, mixing.causal_mask(5), "softmax", 1.0)
    chex.assert_trees_all_close(a.sum(-1), jnp.ones((2, 3, 5)), atol=1e-6)
    np.testing.assert_array_equal(np.triu(np.asarray(a[0, 0]), k=1), 0.0)

  def test_sum_normalizer_is_l1_normalized(self):
    scores = jax.random.normal(jax.random.key(2), (1, 2, 6, 6))
    a = mixing.normalize(scores, mixing.causal_mask(6), "sum", 3.0)
    chex.assert_trees_all_close(jnp.abs(a).sum(-1), jnp.ones((1, 2, 6)), atol=1e-5)

  def test_unnormalized_sums_grow_with_length(self):
    # The step-6 pressure in miniature: with positive scores the raw sum scales with L.
    v = jnp.ones((1, 64, 1, 1))
    q = k = jnp.ones((1, 64, 1, 1))
    raw = mixing.attention_matrix(q, k, v, "none", 1.0)[0, :, 0, 0]
    soft = mixing.attention_matrix(q, k, v, "softmax", 1.0)[0, :, 0, 0]
    np.testing.assert_allclose(raw, np.arange(1, 65), rtol=1e-6)
    np.testing.assert_allclose(soft, np.ones(64), rtol=1e-6)

  def test_window_mask_keeps_the_last_w_sources(self):
    mask = np.asarray(mixing.causal_mask(6, window=2))
    expected = np.tril(np.ones((6, 6), bool)) & ~np.tril(np.ones((6, 6), bool), k=-2)
    np.testing.assert_array_equal(mask, expected)

  def test_offset_mask_for_a_decoding_query(self):
    mask = np.asarray(mixing.causal_mask(1, 5, offset=3))
    np.testing.assert_array_equal(mask, [[True, True, True, True, False]])


class WeightFormTest(chex.TestCase):
  """Each step-4 weight form equals the literal sum s_L = sum_i W_iL x_i."""

  def setUp(self):
    super().setUp()
    self.x = jax.random.normal(jax.random.key(3), (2, 5, 3))  # B L D
    self.mask = mixing.causal_mask(5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_full_entries_as_heads(self):
    d = 3
    a_BHLM = jax.random.normal(jax.random.key(4), (2, d * d, 5, 5))
    a_BHLM = jnp.where(self.mask, a_BHLM, 0.0)
    v = jnp.broadcast_to(self.x[:, :, None, :], (2, 5, d, d)).reshape(2, 5, d * d, 1)
    out = self.variant(lambda a, v: heads.combine_entries(mixing.mix(a, v), d))(a_BHLM, v)
    w_BLMDE = jnp.transpose(a_BHLM.reshape(2, d, d, 5, 5), (0, 3, 4, 1, 2))
    chex.assert_trees_all_close(out, mixing.dynamic_sum(w_BLMDE, self.x, self.mask), atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_matrix_sum_of_values(self):
    h = 2
    a_BHLM = jnp.where(self.mask, jax.random.normal(jax.random.key(5), (2, h, 5, 5)), 0.0)
    v_HDE = jax.random.normal(jax.random.key(6), (h, 3, 3))
    v_BMHE = jnp.einsum("BMD,HDE->BMHE", self.x, v_HDE)
    out = self.variant(lambda a, v: heads.combine_sum(mixing.mix(a, v)))(a_BHLM, v_BMHE)
    # W_iL = sum_j a_j V_j, acting on x_i as a D x D matrix (output index first).
    w_BLMED = jnp.einsum("BHLM,HDE->BLMED", a_BHLM, v_HDE)
    chex.assert_trees_all_close(out, mixing.dynamic_sum(w_BLMED, self.x, self.mask), atol=1e-5)


class InteractionTest(chex.TestCase):
  def setUp(self):
    super().setUp()
    keys = jax.random.split(jax.random.key(7), 4)
    self.x = jax.random.normal(keys[0], (2, 6, 8))
    self.wq = jax.random.normal(keys[1], (8, 3, 4))
    self.wk = jax.random.normal(keys[2], (8, 3, 4))
    self.a = jax.random.normal(keys[3], (3, 8, 8))

  @chex.variants(with_jit=True, without_jit=True)
  def test_bilinear_with_identity_is_the_dot_product(self):
    scores = self.variant(interaction.bilinear_scores)(self.x, self.x, jnp.eye(8)[None])
    chex.assert_trees_all_close(scores[:, 0], jnp.einsum("BLD,BMD->BLM", self.x, self.x), atol=1e-4)

  @chex.variants(with_jit=True, without_jit=True)
  def test_lowrank_is_bilinear_with_a_equal_wq_wk(self):
    q = jnp.einsum("BLD,DHK->BLHK", self.x, self.wq)
    k = jnp.einsum("BLD,DHK->BLHK", self.x, self.wk)
    lowrank = self.variant(interaction.dot_scores)(q, k)
    a_HDE = jnp.einsum("DHK,EHK->HDE", self.wq, self.wk)  # A_j = Wq_j^T Wk_j
    chex.assert_trees_all_close(
      lowrank, interaction.bilinear_scores(self.x, self.x, a_HDE), atol=1e-3, rtol=1e-4
    )

  @chex.variants(with_jit=True, without_jit=True)
  def test_bilinear_cached_keys_give_the_same_scores(self):
    keys = self.variant(interaction.bilinear_keys)(self.x, self.a)
    cached = self.variant(interaction.dot_scores)(jnp.repeat(self.x[:, :, None], 3, axis=2), keys)
    chex.assert_trees_all_close(
      cached, interaction.bilinear_scores(self.x, self.x, self.a), atol=1e-3, rtol=1e-4
    )

  @chex.variants(with_jit=True, without_jit=True)
  def test_tanh_scores_match_the_formula_entry_by_entry(self):
    q = jnp.einsum("BLD,DHK->BLHK", self.x, self.wq)
    k = jnp.einsum("BLD,DHK->BLHK", self.x, self.wk)
    w = jax.random.normal(jax.random.key(8), (3, 4))
    scores = self.variant(interaction.tanh_scores)(q, k, w)
    b, h, l, m = 1, 2, 4, 1
    expected = jnp.dot(w[h], jnp.tanh(q[b, l, h] + k[b, m, h]))
    np.testing.assert_allclose(scores[b, h, l, m], expected, rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_additive_scores_are_a_sum_of_one_argument_terms(self):
    q = jax.random.normal(jax.random.key(9), (1, 4, 2))
    k = jax.random.normal(jax.random.key(10), (1, 4, 2))
    scores = self.variant(interaction.additive_scores)(q, k)
    # No interaction: the mixed second difference vanishes.
    second_diff = (
      scores[:, :, 1:, 1:] - scores[:, :, 1:, :-1] - scores[:, :, :-1, 1:] + scores[:, :, :-1, :-1]
    )
    chex.assert_trees_all_close(second_diff, jnp.zeros_like(second_diff), atol=1e-6)
    self.assertGreater(float(jnp.abs(scores).max()), 0.1)


class HeadsTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  def test_concat_with_identity_blocks_equals_summed_heads(self):
    o = jax.random.normal(jax.random.key(11), (2, 5, 3, 8))
    wo = jnp.broadcast_to(jnp.eye(8), (3, 8, 8))
    concat = self.variant(heads.combine_concat)(o, wo)
    chex.assert_trees_all_close(concat, heads.combine_sum(o), atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_concat_with_other_blocks_differs(self):
    o = jax.random.normal(jax.random.key(12), (2, 5, 3, 8))
    wo = jax.random.normal(jax.random.key(13), (3, 8, 8))
    concat = self.variant(heads.combine_concat)(o, wo)
    self.assertGreater(float(jnp.abs(concat - heads.combine_sum(o)).max()), 0.1)
