import jax
import numpy as np
import pytest
from flax import linen as nn

from jaxformer import ladder
from jaxformer.analysis import mlp_controls
from jaxformer.analysis.cache import run_with_cache


def test_top_positions_finds_each_columns_largest_values_best_first():
  act_NLF = np.zeros((2, 3, 2))
  act_NLF[1, 2, 0], act_NLF[0, 1, 0] = 5.0, 4.0
  act_NLF[0, 0, 1], act_NLF[1, 0, 1] = 3.0, 7.0
  seq_FK, pos_FK = mlp_controls.top_positions(act_NLF, 2)
  np.testing.assert_array_equal(seq_FK, [[1, 0], [1, 0]])
  np.testing.assert_array_equal(pos_FK, [[2, 1], [0, 0]])
  with pytest.raises(ValueError, match="k=7"):
    mlp_controls.top_positions(act_NLF, 7)


def test_suffix_rate_counts_the_most_common_n_gram_ending_at_each_context():
  tokens_NL = np.array([[5, 5, 7, 5], [5, 9, 9, 9]])
  seq_FK = np.array([[0, 0, 0, 1], [1, 1, 0, 0]])
  pos_FK = np.array([[0, 1, 3, 0], [1, 2, 2, 3]])  # current tokens [5, 5, 5, 5], [9, 9, 7, 5]
  np.testing.assert_allclose(mlp_controls.suffix_rate(tokens_NL, seq_FK, pos_FK, 1), [1.0, 0.5])
  # bigrams: [start, (5, 5), (7, 5), start], [(5, 9), (9, 9), (5, 7), (7, 5)]
  np.testing.assert_allclose(mlp_controls.suffix_rate(tokens_NL, seq_FK, pos_FK, 2), [0.25, 0.25])
  same = mlp_controls.suffix_rate(tokens_NL, np.array([[1, 1]]), np.array([[2, 3]]), 2)
  np.testing.assert_allclose(same, [1.0])  # (9, 9) twice
  with pytest.raises(ValueError, match="n=0"):
    mlp_controls.suffix_rate(tokens_NL, seq_FK, pos_FK, 0)


def test_next_token_agreement_compares_the_promoted_token_with_each_context_target():
  targets_NL = np.array([[1, 2, 3], [4, 2, 6]])
  seq_FK, pos_FK = np.array([[0, 1], [1, 1]]), np.array([[1, 1], [0, 2]])  # [2, 2], [4, 6]
  agreement = mlp_controls.next_token_agreement(targets_NL, seq_FK, pos_FK, np.array([2, 6]))
  np.testing.assert_allclose(agreement, [1.0, 0.5])


def test_random_directions_are_unit_columns_from_the_generator():
  a = mlp_controls.random_directions(np.random.default_rng(0), 5, 3)
  assert a.shape == (5, 3)
  np.testing.assert_allclose(np.linalg.norm(a, axis=0), 1.0)
  np.testing.assert_array_equal(a, mlp_controls.random_directions(np.random.default_rng(0), 5, 3))


def _perturbed_cache(skip, norm):
  config = ladder.default_config("mlp_kv")
  with config.unlocked():
    config.update(d_model=16, num_heads=2, d_ff=32, max_len=32, use_bias=True)
    config.update(skip=skip, norm=norm, final_norm=False)
  model = ladder.build("mlp_kv", config)
  tokens = jax.random.randint(jax.random.key(1), (8, 32), 0, config.vocab_size)
  params = nn.unbox(model.init(jax.random.key(2), tokens))
  leaves, tree = jax.tree.flatten(params)  # non-zero biases, so the fold must carry them
  keys = jax.random.split(jax.random.key(3), len(leaves))
  noisy = [p + 0.1 * jax.random.normal(k, p.shape) for p, k in zip(leaves, keys, strict=True)]
  names = ["*/resid_pre", "*/mixer/head_outputs", "*/ffn/mlp_pre"]
  _, cache = run_with_cache(model, jax.tree.unflatten(tree, noisy), tokens, names=names)
  return mlp_controls.fold_residuals(cache)


@pytest.mark.parametrize(
  "skip, norm, mixer_exact, with_skip_exact",
  [
    ("single", "none", True, True),  # the MLP reads o Wo + bo
    ("single", "pre", True, True),  # the norm is on the mixer's input only
    ("split", "none", False, True),  # x + o Wo + bo: W1 must stay on the skip path
    ("split", "pre", False, False),  # LN(x + o Wo + bo): no linear fold
  ],
)
def test_fold_residuals_of_each_cell(skip, norm, mixer_exact, with_skip_exact):
  residuals = _perturbed_cache(skip, norm)
  assert list(residuals) == ["layers_0", "layers_1"]
  for layer in residuals.values():
    assert (layer["mixer"] <= 1e-5) == mixer_exact, layer
    assert (layer["mixer_and_skip"] <= 1e-5) == with_skip_exact, layer
    assert layer["mixer_and_skip"] <= layer["mixer"] + 1e-9  # more freedom never fits worse
    if not mixer_exact:
      assert layer["mixer"] > 0.05


def test_ablation_drop_is_the_units_direct_logit_contribution_in_the_last_layer():
  """Last layer, no final norm: zeroing unit f removes post_f W2[f] from the residual that the
  unembedding reads, so the logit of token t drops by post_f (W2[f] . U[:, t]) exactly; a unit
  whose value row is zero changes nothing."""
  config = ladder.default_config("mlp_kv")
  with config.unlocked():
    config.update(d_model=16, num_heads=2, d_ff=8, max_len=8, num_layers=1, final_norm=False)
  model = ladder.build("mlp_kv", config)
  tokens_NL = np.asarray(jax.random.randint(jax.random.key(1), (4, 8), 0, config.vocab_size))
  params = nn.unbox(model.init(jax.random.key(2), tokens_NL))["params"]
  params["layers_0"]["ffn"]["w2"] = params["layers_0"]["ffn"]["w2"].at[3].set(0.0)
  _, cache = run_with_cache(model, {"params": params}, tokens_NL, names=["*/ffn/mlp_post"])
  post_NLF = np.asarray(cache["layers_0/ffn/mlp_post"])
  seq_FK = np.array([[0, 1, 2], [3, 0, 1]])
  pos_FK = np.array([[7, 5, 2], [6, 1, 4]])
  tokens_F = np.array([5, 9])
  units = [1, 3]  # unit 3 writes nothing
  drops = mlp_controls.ablation_drops(model, params, tokens_NL, 0, seq_FK, pos_FK, tokens_F, units)
  unembed_DV = np.asarray(params["unembed"] if "unembed" in params else params["embed"].T)
  w2_FD = np.asarray(params["layers_0"]["ffn"]["w2"])
  direct = post_NLF[seq_FK[0], pos_FK[0], 1] * (w2_FD[1] @ unembed_DV[:, 5])
  np.testing.assert_allclose(drops[0], direct.mean(), rtol=1e-4, atol=1e-6)
  assert abs(drops[1]) < 1e-6 and abs(drops[0]) > 1e-4
