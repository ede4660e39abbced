"""experiments/configs/default.py: every rung at both sizes is a config the loop accepts."""

import pytest

from experiments.configs import default, text
from jaxformer import data, ladder
from jaxformer.train import optimizer, sharding
from jaxformer.train import program as program_lib

TOP_LEVEL = (
  "rung",
  "model",
  "task",
  "seed",
  "batch_size",
  "total_steps",
  "learning_rate",
  "warmup_steps",
  "eval_every",
  "checkpoint_every",
  "mesh_shape",
)


@pytest.mark.parametrize("size", default.SIZES)
@pytest.mark.parametrize("rung", ladder.RUNGS)
def test_every_rung_and_size_is_a_valid_config(rung, size):
  config = default.get_config(f"rung={rung},size={size}")
  assert set(TOP_LEVEL) <= set(config.keys())
  assert config.rung == rung
  program_lib.check_config(config)
  optimizer.make(config)
  data.parse_spec(config.task)
  # the model's vocabulary and length come from the task (program.resolve)
  assert config.model.vocab_size is None and config.model.max_len is None
  if size == "cpu":
    sized = {"vocab_size": None, "max_len": None}
    assert config.model.to_dict() == ladder.default_config(rung).to_dict() | sized


@pytest.mark.parametrize("rung", ladder.RUNGS)
def test_accel_batch_fits_any_power_of_two_devices_up_to_512(rung):
  config = default.get_config(f"rung={rung},size=accel")
  for devices in (2**k for k in range(10)):
    data, fsdp, _ = sharding.resolve_mesh_shape(config.mesh_shape, devices)
    assert config.batch_size % (data * fsdp) == 0, (devices, config.batch_size)


def test_default_arg_is_the_transformer_on_cpu():
  assert default.get_config().rung == "transformer"
  assert default.get_config().task == default.CPU_TASK


@pytest.mark.parametrize(
  "arg,match",
  [("rung=nope", "rung='nope'"), ("size=huge", "size='huge'"), ("width=3", "'width=3'")],
)
def test_bad_argument_names_itself(arg, match):
  with pytest.raises(ladder.ConfigError, match=match):
    default.get_config(arg)


def test_docstring_gives_the_command_and_expected_results():
  doc = default.__doc__
  assert "python -m experiments.main --config=experiments/configs/default.py:rung=" in doc
  assert "Expected" in doc


@pytest.mark.parametrize("size", text.config_lib.SIZES)
def test_text_preset_is_a_valid_config_sized_by_its_task(size):
  config = text.get_config(f"path=corpus/*.txt,size={size}")
  program_lib.check_config(config)
  optimizer.make(config)
  name, task = data.parse_spec(config.task)
  assert (name, task["path"], task["level"]) == ("text", "corpus/*.txt", "char")
  assert config.model.vocab_size is None and config.model.max_len is None


@pytest.mark.parametrize(
  "arg,match",
  [
    (None, "config argument path: required"),
    ("size=cpu", "config argument path: required"),
    ("path=a.txt,size=huge", "size='huge'"),
    ("path=a.txt,rung=rnn", "'rung=rnn'"),
  ],
)
def test_text_preset_bad_argument_names_itself(arg, match):
  with pytest.raises(ladder.ConfigError, match=match):
    text.get_config(arg)


def test_text_preset_docstring_gives_the_commands_and_a_measured_result():
  doc = text.__doc__
  assert "python -m experiments.main --config=experiments/configs/text.py:path=" in doc
  assert "python -m experiments.sample --workdir=" in doc
  assert "Expected (seed 0" in doc and "eval_loss=" in doc


def test_accel_size_computes_in_bfloat16_with_float32_params():
  """size=accel: bfloat16 activations and matmuls, float32 parameters (what the optimizer
  updates), attention through jax.nn.dot_product_attention for the concat-head rungs."""
  import jax
  import jax.numpy as jnp

  config = default.get_config("rung=transformer,size=accel")
  assert config.model.dtype == "bfloat16" and config.model.attention == "dot_product"
  assert default.get_config("rung=softmax,size=accel").model.attention == "generic"
  model_config = config.model
  with model_config.unlocked():  # the same model, small enough for a test
    model_config.vocab_size, model_config.max_len, model_config.d_model = 32, 16, 32
    model_config.num_heads, model_config.d_ff, model_config.num_layers = 2, 64, 1
  model = ladder.build("transformer", model_config)
  tokens = jnp.zeros((2, 16), jnp.int32)
  params = model.init(jax.random.key(0), tokens)["params"]
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  _, state = model.apply({"params": params}, tokens, mutable="intermediates")
  intermediates = state["intermediates"]
  assert intermediates["layers_0"]["resid_post"][0].dtype == jnp.bfloat16
