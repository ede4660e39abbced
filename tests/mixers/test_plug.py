"""Plugging a user's mixer: loading it by file or module path, and the contract check that
stops a broken one (wrong shape, not causal, non-finite, wrong decode) with one line."""

import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from jaxformer import decode, ladder
from jaxformer.mixers import plug

MIXERS = '''
import flax.linen as nn
import jax.numpy as jnp


def previous(x):
  return jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1]


class Shift(nn.Module):
  """Causal: each position plus the one before it."""
  width: int
  scale: float = 1.0

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.width)(x + self.scale * previous(x))


class PeeksAtLast(nn.Module):
  """Every position reads the last one, the earliest the most (so that the largest change,
  the one the check names, is at position 0 however the compiler rounds)."""
  width: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.width)(x + x[:, -1:] * jnp.arange(x.shape[1], 0, -1)[None, :, None])


class Narrow(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.width // 2)(x)


class Blows(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.width)(x) / 0.0


class ForgetsDecode(nn.Module):
  """Takes decode but keeps no cache, so a token decoded alone misses its predecessor."""
  width: int

  @nn.compact
  def __call__(self, x, decode=False):
    return nn.Dense(self.width)(x + previous(x))


class NoWidth(nn.Module):
  size: int = 4

  def __call__(self, x):
    return x
'''


@pytest.fixture
def user_file(tmp_path):
  path = tmp_path / "user_mixers.py"
  path.write_text(textwrap.dedent(MIXERS))
  return str(path)


def test_a_class_loads_from_a_file_outside_the_repository_and_round_trips(user_file):
  cls = plug.load(f"{user_file}:Shift")
  assert cls.__name__ == "Shift" and plug.load(plug.spec_of(cls)) is cls
  assert plug.check(cls, {"scale": 0.5}, width=8) == {
    "decode": False,
    "params": 72,
    "unnamed": ["Dense_0/bias", "Dense_0/kernel"],  # nn.Dense declares no logical names
  }


def test_an_importable_class_loads_by_module_path():
  cls = plug.load("jaxformer.mixers.gated:GatedRecurrence")
  assert plug.spec_of(cls) == "jaxformer.mixers.gated:GatedRecurrence"


@pytest.mark.parametrize(
  "spec, message",
  [
    ("no_colon", "expected 'package.module:Class'"),
    ("jaxformer.mixers.gated:Nope", "has no attribute 'Nope'"),
    ("jaxformer.no_such_module:X", "cannot import jaxformer.no_such_module"),
    ("jaxformer.mixers.gated:gated", "is not a flax.linen Module class"),
    ("/no/such/file.py:X", "no such file"),
  ],
)
def test_a_spec_that_names_nothing_loadable_is_one_line(spec, message):
  with pytest.raises(plug.MixerError, match=message) as e:
    plug.load(spec)
  assert "\n" not in str(e.value)


def test_a_file_that_fails_to_import_is_one_line(tmp_path):
  path = tmp_path / "broken.py"
  path.write_text("import no_such_package_anywhere\n")
  with pytest.raises(plug.MixerError, match="cannot import .*ModuleNotFoundError"):
    plug.load(f"{path}:X")


@pytest.mark.parametrize(
  "name, fields, message",
  [
    ("Narrow", {}, r"output shape \(2, 16, 4\) != input shape \(2, 16, 8\)"),
    ("PeeksAtLast", {}, "not causal: its output at position 0 changed .* later position 15"),
    ("Blows", {}, "output is not finite"),
    ("ForgetsDecode", {}, "decode=True disagrees with the full pass at position 8"),
    ("Shift", {"scael": 2}, "unknown field 'scael'; its fields: width, scale"),
    ("NoWidth", {}, "has no field `width`"),
  ],
)
def test_a_mixer_that_breaks_the_contract_is_named_in_one_line(user_file, name, fields, message):
  with pytest.raises(plug.MixerError, match=message) as e:
    plug.check(plug.load(f"{user_file}:{name}"), fields, width=8)
  assert "\n" not in str(e.value)


def test_a_class_defined_in_a_function_cannot_be_named():
  class Local(nn.Module):
    width: int

  with pytest.raises(plug.MixerError, match="defined inside a function"):
    plug.spec_of(Local)


def test_a_mixer_without_decode_trains_in_the_custom_rung_and_refuses_to_decode(user_file):
  c = ladder.default_config("custom")
  c.mixer, c.mixer_fields, c.d_model, c.d_ff, c.vocab_size, c.max_len = (
    f"{user_file}:Shift",
    '{"scale": 2.0}',
    8,
    16,
    16,
    16,
  )
  model = ladder.build("custom", c)
  tokens_BL = jnp.zeros((2, 8), jnp.int32)
  params = model.init(jax.random.key(0), tokens_BL)["params"]
  assert model.apply({"params": params}, tokens_BL).shape == (2, 8, 16)
  with pytest.raises(plug.MixerError, match="does not support decode=True"):
    decode.init_cache(model, 1, 8)


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("mixer", "", "model.mixer: empty"),
    ("mixer", "nowhere:X", "model.mixer: mixer 'nowhere:X': cannot import nowhere"),
    ("mixer_fields", "{not json", "model.mixer_fields='{not json': not JSON"),
    ("mixer_fields", "[1]", "must be a JSON object"),
    ("mixer_fields", '{"heads": 2}', "model.mixer_fields: mixer GatedRecurrence: unknown field"),
    ("norm", "middle", "model.norm='middle'"),
  ],
)
def test_the_custom_rung_names_a_bad_field(field, value, message):
  c = ladder.default_config("custom")
  c.mixer = "jaxformer.mixers.gated:GatedRecurrence"
  c[field] = value
  with pytest.raises(ladder.ConfigError, match=message):
    ladder.validate("custom", c)


def test_parameters_without_logical_names_are_reported_before_a_multi_device_run(user_file):
  cls = plug.load(f"{user_file}:Shift")
  unnamed = plug.mixer_unnamed(cls, {}, width=8)
  assert unnamed == ["Dense_0/bias", "Dense_0/kernel"]
  note = plug.unnamed_note("Shift", unnamed, num_devices=8)
  assert "Shift: 2 parameter(s) without logical axis names (Dense_0/bias, Dense_0/kernel)" in note
  assert "replicated on all 8 devices" in note and "\n" not in note
  assert plug.unnamed_note("Shift", unnamed, num_devices=1) is None  # nothing to shard
  named = plug.load("jaxformer.mixers.gated:GatedRecurrence")
  assert plug.mixer_unnamed(named, {}, width=8) == []
  assert plug.unnamed_note("gated", [], num_devices=8) is None
  many = plug.unnamed_note("X", [f"p{i}" for i in range(5)], num_devices=2)
  assert "(p0, p1, p2, ... (5 in all))" in many


def test_experiments_main_says_so_for_a_custom_rung_on_several_devices(user_file):
  from experiments import main as main_lib
  from jaxformer.train import config as train_config

  assert jax.device_count() > 1  # tests/conftest.py: 8 simulated devices
  config = train_config.get_config(ladder.CUSTOM)
  config.model.mixer, config.model.d_model = f"{user_file}:Shift", 8
  lines = []
  note = main_lib.note_unnamed_params(config, log=lines.append)
  assert lines == [note] and "Dense_0/kernel" in note
  config.model.mixer = "jaxformer.mixers.gated:GatedRecurrence"
  assert main_lib.note_unnamed_params(config, log=lines.append) is None and len(lines) == 1
