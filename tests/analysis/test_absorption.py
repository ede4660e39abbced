"""W1 folds into the mixing weights exactly where the algebra says so, and not across a norm.

Every parameter is perturbed (biases non-zero, norms not the identity), so the fold must
carry bo W1 + b1 and the norm its own scale and shift. B*L = 256 positions against
D + H*K + 1 = 33 unknowns per unit.
"""

import functools

import chex
import jax
import numpy as np
import pytest
from absl.testing import parameterized
from flax import linen as nn

from jaxformer import ladder
from jaxformer.analysis import absorption
from jaxformer.analysis.cache import run_with_cache
from jaxformer.math import mlp as mlp_math

B, L = 8, 32
LAYERS = ("layers_0", "layers_1")
EXACT, BROKEN = 1e-5, 1e-2


def _perturbed(rung, **overrides):
  config = ladder.default_config(rung)
  with config.unlocked():
    config.update(d_model=16, num_heads=2, d_ff=32, max_len=L, use_bias=True, **overrides)
  model = ladder.build(rung, config)
  tokens = jax.random.randint(jax.random.key(3), (B, L), 0, config.vocab_size)
  params = nn.unbox(model.init(jax.random.key(4), tokens))
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(5), len(leaves))
  noisy = [p + 0.1 * jax.random.normal(k, p.shape) for p, k in zip(leaves, keys, strict=True)]
  return config, model, jax.tree.unflatten(tree, noisy), tokens


def _activations(cache, layer):
  """x_BLD entering the block, its heads' o_BLHK and its MLP's pre_BLF."""
  return tuple(
    cache[f"{layer}/{name}"] for name in ("resid_pre", "mixer/head_outputs", "ffn/mlp_pre")
  )


class AbsorptionTest(chex.TestCase):
  def _cache(self, model, params, tokens):
    return self.variant(functools.partial(run_with_cache, model))(params, tokens)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(
    ("mlp_kv", "none"),  # single skip: the MLP reads o Wo + bo
    ("mlp_kv", "pre"),  # single skip, a norm before the mixer only: still o Wo + bo
    ("transformer", "none"),  # split skip, no norm: x + o Wo + bo, linear again
  )
  def test_w1_folds_exactly_without_a_norm_between(self, rung, norm):
    config, model, params, tokens = _perturbed(rung, norm=norm, final_norm=False)
    _, cache = self._cache(model, params, tokens)
    for layer in LAYERS:
      x, o, pre = _activations(cache, layer)
      closed = absorption.closed_form(params["params"][layer], config.skip)
      fold, residual = absorption.fit(x, o, pre)
      self.assertLessEqual(absorption.residual(closed, x, o, pre), EXACT, layer)
      self.assertLessEqual(residual, EXACT, layer)
      # the least-squares fold is the closed form: A = W1 or 0, C_j = Wo_j W1, c = bo W1 + b1
      chex.assert_trees_all_close(fold, closed, atol=1e-5, custom_message=layer)
    self.assertGreater(float(np.abs(closed.c_F).max()), 0.05)  # the biases do take part

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("pre", "post")
  def test_w1_does_not_fold_across_the_layer_norm_of_the_split_skip(self, norm):
    config, model, params, tokens = _perturbed("transformer", norm=norm)
    _, cache = self._cache(model, params, tokens)
    fits = {}
    for layer in LAYERS:
      x, o, pre = _activations(cache, layer)
      _, fits[layer] = absorption.fit(x, o, pre)
      self.assertGreater(fits[layer], BROKEN, layer)
      closed = absorption.closed_form(params["params"][layer], config.skip)
      self.assertGreaterEqual(absorption.residual(closed, x, o, pre), fits[layer], layer)
    # absorption.residuals runs eagerly, so it is checked against fits of an eager cache (the
    # jitted variant fuses and rounds differently: a fresh clone saw its fits 0.11 % apart)
    measured = absorption.residuals(model, params, tokens)
    _, eager = run_with_cache(model, params, tokens)
    self.assertEqual(measured.keys(), fits.keys())
    for layer, value in measured.items():
      _, expected = absorption.fit(*_activations(eager, layer))
      self.assertAlmostEqual(value, expected, delta=1e-3 * value)

  @chex.variants(with_jit=True, without_jit=True)
  def test_the_absorbed_single_skip_block_gives_the_block_output(self):
    """x + W2 sigma(o (Wo W1) + bo W1 + b1) + b2: the MLP's W1 gone into the mixer."""
    config, model, params, tokens = _perturbed("mlp_kv")
    _, cache = self._cache(model, params, tokens)
    for layer in LAYERS:
      x, o, _ = _activations(cache, layer)
      ffn = params["params"][layer]["ffn"]
      hidden = absorption.apply(absorption.closed_form(params["params"][layer], "single"), x, o)
      sigma = mlp_math.ACTIVATIONS[config.activation]
      absorbed = x + np.asarray(sigma(hidden.astype(np.float32))) @ ffn["w2"] + ffn["b2"]
      chex.assert_trees_all_close(absorbed, cache[f"{layer}/resid_post"], atol=1e-4, rtol=1e-4)


def test_fit_recovers_a_planted_fold_and_measures_a_nonlinear_one():
  rng = np.random.default_rng(0)
  x, o = rng.standard_normal((4, 20, 6)), rng.standard_normal((4, 20, 2, 3))
  planted = absorption.Fold(*(rng.standard_normal(s) for s in ((6, 5), (2, 3, 5), (5,))))
  pre = absorption.apply(planted, x, o)
  fold, residual = absorption.fit(x, o, pre)
  assert residual < 1e-10
  chex.assert_trees_all_close(fold, planted, atol=1e-8)
  _, bent = absorption.fit(x, o, np.tanh(pre))  # the same inputs through a nonlinearity
  assert 0.1 < bent < 1.0


def test_fit_refuses_too_few_positions_and_names_a_wrong_shape():
  x, o = np.ones((2, 6, 4)), np.ones((2, 6, 2, 2))
  with pytest.raises(ValueError, match=r"B\*L=8 positions for 9 unknowns"):
    absorption.fit(x[:, :4], o[:, :4], np.ones((2, 4, 3)))
  with pytest.raises(AssertionError, match=r"absorption.fit: pre_BLF with B=2, L=6"):
    absorption.fit(x, o, np.ones((2, 5, 3)))
  with pytest.raises(ValueError, match="skip='double'"):
    absorption.closed_form({}, "double")
