"""Residual wiring of one layer (steps 2 and 8).

  single skip (step 2): O = x + ffn(mixer(x))        ffn = sigma, or an MLP (step 8)
  split skip  (step 8): h = x + mixer(x);  O = h + ffn(h)
  no skip:              h = mixer(x);      O = ffn(h)   (the control of the skips experiment:
                                                        nothing adds x back, He et al. 2016)
with layer norm placed `pre` (inside each branch, GPT-2) or `post` (after each sum,
the original Transformer), or `none`. `decode` (and a decoding batch's left padding
`pad_B`) reaches the mixer only: the rest is position-wise and needs no cache. The split
skip with a norm between mixer and MLP is what stops W1 from being absorbed into Wo.
"""

import flax.linen as nn

from jaxformer.math import mlp as mlp_math
from jaxformer.nn.layers import LayerNorm

SKIPS = ("single", "split", "none")
NORMS = ("none", "pre", "post")


class Activation(nn.Module):
  """The elementwise sigma of O_L = x_L + sigma(s_L), before the MLP exists."""

  activation: str = "gelu"

  def __call__(self, x):
    return mlp_math.ACTIVATIONS[self.activation](x)


class Block(nn.Module):
  mixer: nn.Module
  ffn: nn.Module
  skip: str = "single"
  norm: str = "none"

  @nn.compact
  def __call__(self, x_BLD, decode=False, pad_B=None):
    # left padding reaches the mixer only when there is some: a plugged-in mixer
    # (jaxformer.mixers.plug) need not know about it unless prompts of different lengths decode
    padding = {} if pad_B is None else {"pad_B": pad_B}
    pre = (lambda name: LayerNorm(name=name)) if self.norm == "pre" else (lambda name: _identity)
    post = (lambda name: LayerNorm(name=name)) if self.norm == "post" else (lambda name: _identity)
    if self.skip == "single":
      mixed_BLD = self.mixer(pre("norm")(x_BLD), decode=decode, **padding)
      out_BLD = post("norm")(x_BLD + self.ffn(mixed_BLD))
    else:
      # the split layout; skip='none' keeps its norms and adds nothing back
      residual = self.skip == "split"
      s_BLD = self.mixer(pre("norm1")(x_BLD), decode=decode, **padding)
      h_BLD = post("norm1")(x_BLD + s_BLD if residual else s_BLD)
      if residual:
        self.sow("intermediates", "resid_mid", h_BLD)
      f_BLD = self.ffn(pre("norm2")(h_BLD))
      out_BLD = post("norm2")(h_BLD + f_BLD if residual else f_BLD)
    self.sow("intermediates", "resid_post", out_BLD)
    return out_BLD


def _identity(x):
  return x
