"""Step 6 (jaxformer.steps.s6_softmax): the weights slot, its two forms, and the rung using it."""

import math

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from jaxformer import ladder
from jaxformer.math import interaction
from jaxformer.nn.mixer import Mixer
from jaxformer.steps import s6_softmax

B, L, H, K = 2, 7, 3, 4
TAU = math.sqrt(K)  # the Transformer's temperature, the Mixer's default


def _qkv(seed=0):
  kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
  shape = (B, L, H, K)
  return (jax.random.normal(kq, shape), jax.random.normal(kk, shape), jax.random.normal(kv, shape))


def _weights(scores_BHLM, normalizer, tau=TAU):
  return s6_softmax.normalize(
    scores_BHLM, s6_softmax.causal_mask(scores_BHLM.shape[-2]), normalizer, tau
  )


class FormsTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*s6_softmax.NORMALIZERS)
  def test_per_position_loop_equals_masked_matrix_form(self, normalizer):
    q, k, v = _qkv()
    loop = s6_softmax.attention_loop(q, k, v, normalizer, TAU)
    matrix = self.variant(s6_softmax.attention_matrix, static_argnums=(3, 4))(
      q, k, v, normalizer, TAU
    )
    chex.assert_shape(matrix, (B, L, H, K))
    chex.assert_trees_all_close(matrix, loop, atol=1e-5, rtol=1e-5)
    self.assertGreater(float(jnp.abs(loop).max()), 0.1)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*s6_softmax.NORMALIZERS)
  def test_no_normalizer_reads_the_future(self, normalizer):
    scores = jax.random.normal(jax.random.key(1), (B, H, L, L))
    a = self.variant(_weights, static_argnums=1)(scores, normalizer)
    np.testing.assert_array_equal(np.triu(np.asarray(a), k=1), 0.0)


class NormalizersDifferTest(chex.TestCase):
  """The three weights of the docstring: none grows, sum is signed, softmax is a distribution."""

  def setUp(self):
    super().setUp()
    self.scores = jax.random.normal(jax.random.key(2), (B, H, L, L))
    self.visible = np.tril(np.ones((L, L), bool))

  def test_softmax_rows_are_distributions_sharpened_by_a_small_tau(self):
    a = _weights(self.scores, "softmax")
    chex.assert_trees_all_close(a.sum(-1), jnp.ones((B, H, L)), atol=1e-6)
    self.assertTrue(bool(jnp.all(a[..., self.visible] > 0)))
    sharp = _weights(self.scores, "softmax", tau=0.1)
    self.assertTrue(bool(jnp.all(sharp.max(-1) >= a.max(-1) - 1e-6)))
    self.assertGreater(float((sharp.max(-1) - a.max(-1)).max()), 0.1)

  def test_none_is_the_raw_scores_over_tau(self):
    a = _weights(self.scores, "none")
    raw = jnp.where(self.visible, self.scores / TAU, 0.0)
    chex.assert_trees_all_close(a, raw, atol=1e-6)
    self.assertFalse(bool(jnp.allclose(a, _weights(self.scores, "softmax"), atol=1e-2)))
    self.assertTrue(bool(jnp.any(a < 0)))  # not a distribution: signed, rows not 1

  def test_none_sums_grow_with_length_where_softmax_stays_put(self):
    # The pressure itself: equal positive scores and values, s_L = L raw, 1 under softmax.
    length = 64
    ones = jnp.ones((1, length, 1, 1))
    raw = s6_softmax.attention_matrix(ones, ones, ones, "none", 1.0)[0, :, 0, 0]
    soft = s6_softmax.attention_matrix(ones, ones, ones, "softmax", 1.0)[0, :, 0, 0]
    np.testing.assert_allclose(raw, np.arange(1, length + 1), rtol=1e-6)
    np.testing.assert_allclose(soft, np.ones(length), rtol=1e-6)

  def test_sum_is_l1_normalized_signed_and_ignores_tau(self):
    a = _weights(self.scores, "sum")
    # atol: the 1e-6 guard in the denominator, against a first row of one small score
    chex.assert_trees_all_close(jnp.abs(a).sum(-1), jnp.ones((B, H, L)), atol=1e-4)
    self.assertTrue(bool(jnp.any(a < 0)))  # softmax weights never are
    chex.assert_trees_all_close(a, _weights(self.scores, "sum", tau=0.1), atol=1e-4)
    self.assertFalse(bool(jnp.allclose(a, _weights(self.scores, "softmax"), atol=1e-2)))


@parameterized.parameters(*s6_softmax.NORMALIZERS)
class RungTest(chex.TestCase):
  """The ladder's mixer sows exactly the step's weights for the scores its scorer makes."""

  def test_mixer_weights_are_the_step_piece(self, normalizer):
    config = ladder.default_config("softmax")
    config.num_layers, config.normalizer = 1, normalizer
    model = ladder.build("softmax", config)
    tokens = jax.random.randint(jax.random.key(3), (B, L), 0, config.vocab_size)
    params = model.init(jax.random.key(4), tokens)
    mixers = []

    def keep(next_fun, args, kwargs, context):
      if isinstance(context.module, Mixer) and context.method_name == "__call__":
        mixers.append(context.module)
      return next_fun(*args, **kwargs)

    with nn.intercept_methods(keep):
      _, state = model.apply(params, tokens, mutable=["intermediates"])
    self.assertEqual([m.normalizer for m in mixers], [normalizer])
    self.assertEqual(mixers[0].tau, math.sqrt(ladder.head_rank(config)))
    sown = [
      {name: leaf for name, (leaf,) in found.items()}
      for found in _find(state["intermediates"], "weights")
    ]
    self.assertLen(sown, 1)
    q, k, a = sown[0]["queries"], sown[0]["keys"], sown[0]["weights"]
    want = _weights(interaction.dot_scores(q, k), normalizer, mixers[0].tau)
    chex.assert_trees_all_close(a, want, atol=1e-6)

  def test_validate_names_the_step_normalizers(self, normalizer):
    config = ladder.default_config("softmax")
    config.normalizer = normalizer
    ladder.validate("softmax", config)
    config.normalizer = f"{normalizer}_typo"
    with self.assertRaisesRegex(ladder.ConfigError, "model.normalizer"):
      ladder.validate("softmax", config)


def _find(tree, name):
  """Every dict of sown intermediates that holds `name`."""
  if not isinstance(tree, dict):
    return []
  here = [tree] if name in tree else []
  return here + [found for child in tree.values() for found in _find(child, name)]
