"""mask='bidirectional' (an encoder): every position reads every other, so a later token
changes an earlier position's output, unlike the causal mask; it refuses to decode."""

import jax
import numpy as np
import pytest

from jaxformer import decode, ladder


def _logits(mask, tokens_BL):
  c = ladder.default_config("transformer")
  c.vocab_size, c.max_len, c.num_layers, c.d_model, c.d_ff, c.mask = 16, 8, 1, 8, 16, mask
  model = ladder.build("transformer", c)
  params = model.init(jax.random.key(0), tokens_BL)["params"]
  return model, params, np.asarray(model.apply({"params": params}, tokens_BL))


@pytest.mark.parametrize("mask, later_changes_first", [("causal", False), ("bidirectional", True)])
def test_a_later_token_reaches_the_first_position_only_in_an_encoder(mask, later_changes_first):
  tokens_BL = np.array([[1, 2, 3, 4, 5, 6]], np.int32)
  changed_BL = tokens_BL.copy()
  changed_BL[0, -1] = 9
  _, _, a = _logits(mask, tokens_BL)
  _, _, b = _logits(mask, changed_BL)
  assert (np.abs(a[0, 0] - b[0, 0]).max() > 1e-6) == later_changes_first


def test_an_encoder_refuses_to_decode_and_a_window():
  tokens_BL = np.array([[1, 2, 3]], np.int32)
  model, params, _ = _logits("bidirectional", tokens_BL)
  with pytest.raises(ValueError, match="cannot decode"):
    decode.cached_logits(model, params, tokens_BL, 2)
  c = ladder.default_config("transformer")
  c.mask, c.window = "bidirectional", 4
  with pytest.raises(ladder.ConfigError, match="model.window=4"):
    ladder.validate("transformer", c)
