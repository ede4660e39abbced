"""Shape checks at the layers' boundaries: chex's error names the argument, jitted and not,
and the checks leave the traced program unchanged."""

import functools
from unittest import mock

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized
from flax import linen as nn

from jaxformer import ladder
from jaxformer.math import attention, recurrent, shapes
from jaxformer.math.contract import contract
from jaxformer.nn import lm
from jaxformer.nn.mixer import Mixer
from jaxformer.steps.s5_interaction import LowRank
from jaxformer.steps.s8_mlp import MlpKV

D = 8


class _Narrowing(nn.Module):
  """A layer that drops a coordinate: the language model must name it."""

  @nn.compact
  def __call__(self, x_BLD, decode=False, pad_B=None):
    return x_BLD[..., :-1]


class _TruncatingValuer(nn.Module):
  """One head reading x as its value; its combine drops a coordinate."""

  num_heads: int = 1

  def values(self, x_BMD):
    return x_BMD[:, :, None, :]

  def combine(self, o_BLHK):
    return o_BLHK[:, :, 0, :-1]


def _module(module, x):
  """module.apply on x with freshly initialised params (init and apply both checked)."""
  return module.apply(module.init(jax.random.key(0), x), x)


def _cell_params(width, inputs, gates, wh_gates=None):
  """Zero weights of a cell; wh_gates gives wh a different (wrong) gate width."""
  zeros = functools.partial(jnp.zeros, dtype=jnp.float32)
  wh = zeros((width, gates if wh_gates is None else wh_gates))
  return {"wx": zeros((inputs, gates)), "wh": wh, "b": zeros((gates,))}


def _q(length=7):
  return jnp.ones((2, length, 2, D))


# case: (function of no arguments, what the message must contain after the chex text)
WRONG = {
  "attend_v": (
    lambda: attention.attend(_q(), _q(9), _q(8)),
    "[attend: v_BMHK with B=2, M=9, H=2, K=8]",
  ),
  "attend_kv_mask": (
    lambda: attention.attend(_q(), _q(9), _q(9), kv_mask_BM=jnp.ones((2, 8), bool)),
    "[attend: kv_mask_BM with B=2, M=9]",
  ),
  "contract_w": (
    lambda: contract("BLD,DF->BLF", jnp.ones((2, 3, 4)), jnp.ones((5, 6))),
    "[contract 'BLD,DF->BLF': w with D=4]",
  ),
  "mixer_x": (
    lambda: _module(Mixer(LowRank(width=D, num_heads=1, rank=4), _TruncatingValuer()), _q()[0, 0]),
    "[Mixer: x_BLD]",
  ),
  "mixer_out": (
    lambda: _module(
      Mixer(LowRank(width=D, num_heads=1, rank=4), _TruncatingValuer()), jnp.ones((2, 5, D))
    ),
    "[Mixer: x_BLD, s_BLD]",
  ),
  "mlp_x": (lambda: _module(MlpKV(d_ff=16), jnp.ones((5, D))), "[MlpKV: x_BLD]"),
  "lm_layer": (
    lambda: _module(
      lm.LanguageModel(vocab_size=16, d_model=D, max_len=8, layers=(_Narrowing(),)),
      jnp.zeros((2, 4), jnp.int32),
    ),
    "[LanguageModel: layers_0 output x_BLD with B=2, L=4, D=8]",
  ),
  "lstm_wh": (
    lambda: recurrent.lstm(
      _cell_params(5, 3, 20, wh_gates=16), recurrent.initial_carry("lstm", 2, 5), jnp.ones((2, 3))
    ),
    "[lstm: wh_DG with D=5, G=20]",
  ),
  "gru_state": (
    lambda: recurrent.gru(_cell_params(5, 3, 15), (jnp.ones((2, 4)),), jnp.ones((2, 3))),
    "[gru: wx_EG with E=3, G=12]",
  ),
  "run_x": (
    lambda: recurrent.run("elman", _cell_params(5, 3, 5), jnp.ones((6, 3))),
    "[recurrent.run('elman'): x_BLE]",
  ),
}


class ShapeErrorTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*WRONG)
  def test_a_wrong_shape_gets_chex_error_naming_the_argument(self, case):
    fn, named = WRONG[case]
    with self.assertRaises(AssertionError) as info:
      self.variant(fn)()
    message = str(info.exception)
    self.assertTrue(message.startswith("[Chex] Assertion"), message)
    self.assertTrue(message.endswith(named), message)


def test_check_binds_letters_across_arrays_and_within_one():
  sizes = shapes.check("f", {"D": 3}, x_BLD=np.ones((2, 5, 3)), mask_LM=None, w_DD=np.eye(3))
  assert sizes == {"B": 2, "L": 5, "D": 3}
  try:
    shapes.check("f", a_KK=np.ones((2, 3)))
  except AssertionError as e:
    assert str(e).endswith("[f: a_KK]"), e
  else:
    raise AssertionError("a_KK of shape (2, 3) passed")


def _jaxpr(rung, **overrides):
  config = ladder.default_config(rung)
  with config.unlocked():
    config.update(overrides)
  model = ladder.build(rung, config)
  tokens = jnp.zeros((2, 8), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.key(0), tokens)
  return str(jax.make_jaxpr(model.apply)(params, tokens))


def test_the_checks_add_nothing_to_the_traced_program():
  """The same jaxpr with every shape check on, and with the checks (and chex) switched off:
  no run-time cost and no change of numerics under jit. Rungs cover Mixer (generic and a
  kernel through attend), MlpKV, contract, the language model and the LSTM cell."""
  cases = [("transformer", {}), ("transformer", {"attention": "blockwise"}), ("rnn_attention", {})]
  checked = [_jaxpr(rung, **kw) for rung, kw in cases]
  no_op = lambda *args, **kwargs: None  # noqa: E731
  with (
    mock.patch.object(shapes, "check_array", no_op),
    mock.patch.object(shapes, "check_same_shape", no_op),
  ):
    chex.disable_asserts()
    try:
      unchecked = [_jaxpr(rung, **kw) for rung, kw in cases]
    finally:
      chex.enable_asserts()
  for (rung, kw), a, b in zip(cases, checked, unchecked, strict=True):
    assert a == b, f"{rung} {kw}: the shape checks changed the traced program"
