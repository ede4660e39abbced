"""Every rung builds, is causal, trains, and keeps the properties its step claims."""

import functools

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from absl.testing import parameterized
from flax import linen as nn

from jaxformer import ladder

B, L = 2, 12


def _tokens(config, seed=0, batch=B):
  return jax.random.randint(jax.random.key(seed), (batch, L), 0, config.vocab_size)


def _build(name, **overrides):
  config = ladder.default_config(name)
  with config.unlocked():
    config.update(overrides)
  return config, ladder.build(name, config)


def _init(name, **overrides):
  config, model = _build(name, **overrides)
  params = nn.unbox(model.init(jax.random.key(1), _tokens(config)))
  return config, model, params


@pytest.mark.parametrize("name", ladder.RUNGS)
def test_rung_forward_shape_and_a_finite_gradient_step(name):
  config, model, params = _init(name)
  tokens = _tokens(config)
  chex.assert_shape(model.apply(params, tokens), (B, L, config.vocab_size))

  @jax.jit
  def step(params):
    def loss_fn(p):
      logits = model.apply(p, tokens)
      return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return loss, jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), grads

  loss, new_params, grads = step(params)
  assert np.isfinite(float(loss))
  chex.assert_tree_all_finite(grads)
  chex.assert_tree_all_finite(new_params)
  moved = jax.tree.leaves(
    jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), params, new_params)
  )
  assert max(moved) > 0.0
  loss2, _, _ = step(new_params)
  assert float(loss2) < float(loss)


# rnn carries normalizer='softmax' in its config but has no mixer to apply it
SOFTMAX_RUNGS = tuple(
  r for r in ladder.RUNGS if r != "rnn" and ladder.default_config(r).normalizer == "softmax"
)


class RungPropertyTest(chex.TestCase):
  """What each rung's step claims, on the built model, jitted and not."""

  def _intermediates(self, model, params, tokens):
    apply = functools.partial(model.apply, mutable=["intermediates"])
    return self.variant(apply)(params, tokens)[1]["intermediates"]

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*ladder.RUNGS)
  def test_rung_is_causal_per_row(self, name):
    """Row 1's token at t changes: rows 0 and 2 stay bit for bit, row 1 before t too."""
    config, model, params = _init(name)
    tokens = _tokens(config, batch=3)
    t = 6
    changed = tokens.at[1, t].set((tokens[1, t] + 1) % config.vocab_size)
    apply = self.variant(model.apply)
    before, after = np.asarray(apply(params, tokens)), np.asarray(apply(params, changed))
    for row in (0, 2):
      np.testing.assert_array_equal(after[row], before[row], err_msg=f"row {row}")
    np.testing.assert_array_equal(after[1, :t], before[1, :t], err_msg="row 1 before t")
    self.assertGreater(float(np.abs(after[1, t] - before[1, t]).max()), 1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*SOFTMAX_RUNGS)
  def test_softmax_rungs_weigh_the_query_own_position(self, name):
    """a_BHLM > 0 on the diagonal (i = L, what a strict mask would drop), 0 above it."""
    config, model, params = _init(name)
    layers = self._intermediates(model, params, _tokens(config))
    blocks = [v for k, v in layers.items() if k.startswith("layers_") and "mixer" in v]
    weights = [block["mixer"]["weights"][0] for block in blocks]
    self.assertNotEmpty(weights)
    for a_BHLM in weights:
      self.assertGreater(float(jnp.diagonal(a_BHLM, axis1=2, axis2=3).min()), 0.0)
      np.testing.assert_array_equal(np.triu(np.asarray(a_BHLM), k=1), 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_stateless_outputs_change_only_where_the_token_changed(self):
    config, model, params = _init("stateless")
    tokens = _tokens(config)
    changed = tokens.at[:, 5].set((tokens[:, 5] + 3) % config.vocab_size)
    apply = self.variant(model.apply)
    diff = jnp.abs(apply(params, tokens) - apply(params, changed)).max(axis=(0, 2))
    np.testing.assert_array_equal(np.asarray(diff) > 1e-6, np.arange(L) == 5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_source_only_sends_the_same_weight_to_every_receiver(self):
    config, model, params = _init("source_only")
    a_BHLM = self._intermediates(model, params, _tokens(config))["layers_0"]["mixer"]["weights"][0]
    # For each source i, every receiver L >= i gets the same coefficient (normalizer none).
    for i in range(L):
      column = a_BHLM[:, :, i:, i]
      chex.assert_trees_all_close(
        column, jnp.broadcast_to(column[:, :, :1], column.shape), atol=1e-6
      )
    self.assertGreater(float(jnp.abs(a_BHLM).max()), 1e-3)

  @chex.variants(with_jit=True, without_jit=True)
  def test_matrix_sum_is_not_symmetric(self):
    config, model, params = _init("matrix_sum")
    a_BHLM = self._intermediates(model, params, _tokens(config))["layers_0"]["mixer"]["weights"][0]
    column = a_BHLM[:, :, 3:, 3]
    spread = float(jnp.abs(column - column[:, :, :1]).max())
    self.assertGreater(spread, 0.05 * float(jnp.abs(column).max()))

  @chex.variants(with_jit=True, without_jit=True)
  def test_transformer_attention_equals_jax_dot_product_attention(self):
    config, model, params = _init("transformer", attention="generic")
    mixer = self._intermediates(model, params, _tokens(config))["layers_0"]["mixer"]
    q, k, v = mixer["queries"][0], mixer["keys"][0], mixer["values"][0]
    reference = jax.nn.dot_product_attention(
      q, k, v, scale=1.0 / np.sqrt(q.shape[-1]), is_causal=True, implementation="xla"
    )
    chex.assert_trees_all_close(mixer["head_outputs"][0], reference, atol=1e-5)


def _mixer_param_count(name, **overrides):
  config, model = _build(name, **overrides)  # shapes only: nothing to compute
  params = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.key(1), _tokens(config))))
  mixer = params["params"]["layers_0"]["mixer"]
  return sum(x.size for x in jax.tree.leaves(mixer))


@pytest.mark.parametrize("d", [4, 8, 12])
def test_parameter_counts_follow_the_closed_forms(d):
  k, h = 2, 3
  assert _mixer_param_count("full_dynamic", d_model=d, rank=k) == 2 * k * d**3
  assert _mixer_param_count("diagonal_dynamic", d_model=d, rank=k) == 2 * k * d**2
  assert (
    _mixer_param_count("matrix_sum", d_model=d, rank=k, num_heads=h) == 2 * h * k * d + h * d * d
  )


def test_forward_compiles_once():
  config, model, params = _init("transformer")

  @jax.jit
  @chex.assert_max_traces(n=1)
  def forward(params, tokens):
    return model.apply(params, tokens)

  for seed in range(3):
    forward(params, _tokens(config, seed))


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("d_model", 0, "model.d_model=0"),
    ("num_heads", 3, "not divisible by model.num_heads=3"),
    ("normalizer", "max", "model.normalizer='max'"),
    ("interaction", "cosine", "model.interaction='cosine'"),
    ("temperature", float("nan"), "model.temperature=nan"),
    ("attention", "sparse", "model.attention='sparse'"),
  ],
)
def test_bad_config_names_the_field(field, value, message):
  config = ladder.default_config("softmax")
  with config.unlocked():
    config[field] = value
  with pytest.raises(ladder.ConfigError, match=message.replace("(", r"\(")):
    ladder.build("softmax", config)


@pytest.mark.parametrize(
  "rung, fields, message",
  [
    ("concat_wo", {"value_rank": 0}, "model.value_rank=0: must be a positive integer"),
    ("softmax", {"value_rank": 8}, "model.value_rank=8: only concat \\+ Wo values"),
    ("transformer", {"value_rank": 8, "attention": "dot_product"}, "attention kernels take"),
  ],
)
def test_a_value_rank_is_checked(rung, fields, message):
  config = ladder.default_config(rung)
  config.update(fields)
  with pytest.raises(ladder.ConfigError, match=message):
    ladder.build(rung, config)
  config.update({"value_rank": None})
  ladder.build(rung, config)  # the default: values as wide as the scorer's rank


def test_a_default_value_rank_leaves_the_checkpoint_fingerprint_as_it_was():
  from jaxformer.train import config as config_lib
  from jaxformer.train import program

  c = config_lib.get_config("transformer")
  assert "value_rank" not in program.fingerprint(c)["model"]
  c.model.value_rank = 8
  assert program.fingerprint(c)["model"]["value_rank"] == 8


@pytest.mark.parametrize("rung", ["mlp_kv", "custom"])
@pytest.mark.parametrize(
  "fields, message",
  [
    ({"mlp_w2": False, "d_ff": 96}, "model.d_ff=96: without W2 .* a multiple of d_model=64"),
    ({"mlp_w2": False, "mlp_w2_trained": False}, "model.mlp_w2_trained=False: needs"),
  ],
)
def test_an_mlp_without_w2_is_checked_on_every_rung(rung, fields, message):
  config = ladder.default_config(rung)
  config.update({"d_model": 64, "d_ff": 64, "mlp": "kv"} | fields)
  if rung == "custom":
    config.mixer = "jaxformer.mixers.gated:GatedRecurrence"
  with pytest.raises(ladder.ConfigError, match=message):
    ladder.validate(rung, config)


def test_unknown_rung_lists_the_rungs():
  with pytest.raises(ladder.ConfigError, match="rung='gpt'.*transformer"):
    ladder.default_config("gpt")


def test_sequence_longer_than_max_len_is_an_error():
  config, model, params = _init("softmax")
  with pytest.raises(ValueError, match="max_len=64"):
    model.apply(params, jnp.zeros((1, 65), jnp.int32))


def test_unknown_or_missing_model_field_is_named():
  config = ladder.default_config("softmax")
  with config.unlocked():
    config.num_head = 2  # misspelt: would otherwise build the default num_heads silently
  with pytest.raises(ladder.ConfigError, match="model.num_head: unknown field; known fields: "):
    ladder.build("softmax", config)
  partial = ml_collections.ConfigDict(ladder.default_config("softmax").to_dict())
  del partial["window"]
  with pytest.raises(ladder.ConfigError, match="model.window: missing"):
    ladder.build("softmax", partial)
  with pytest.raises(ladder.ConfigError, match="model: expected an ml_collections.ConfigDict"):
    ladder.build("softmax", {"vocab_size": 64})


def test_token_ids_outside_the_vocabulary():
  """Concrete ids are checked; traced ids outside [0, V) give NaN, never another row."""
  config, model, params = _init("softmax")
  tokens = np.asarray(_tokens(config))
  for bad in (config.vocab_size, -1):
    wrong = tokens.copy()
    wrong[1, 3] = bad
    with pytest.raises(ValueError, match=f"tokens: id {bad} is outside \\[0, vocab_size=64\\)"):
      model.apply(params, wrong)
    logits = np.asarray(jax.jit(model.apply)(params, wrong))
    # the bad row turns NaN (0 * NaN leaks past the causal mask too); other rows are intact
    np.testing.assert_array_equal(np.isnan(logits[1, 3:]), True)
    assert np.isfinite(np.delete(logits, 1, axis=0)).all()
  with pytest.raises(ValueError, match="tokens: expected integer ids of shape \\[B, L\\]"):
    model.apply(params, tokens[0])
