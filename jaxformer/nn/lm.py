"""The language-model shell every rung shares: tokens_BL -> logits_BLV.

  x_BLD = embed[tokens] + positions[:L];  x = layer(x) for each layer;  logits = x W_out
Positions are learned, sinusoidal, or none (the recurrent rungs know order already).
The output layer is untied by default: tied embeddings stalled recall training in
jaxformer's measurements; GPT-2 weights (jaxformer.interop) use the tied form.
`decode=True` continues from the 'cache' collection (jaxformer.decode): positions start
at the number of tokens already seen, and every layer reads and extends its own cache.
A batch of prompts of different lengths is left-padded: `pad_B[b]` padding tokens start row
b, its positions count from its first real token, and no layer reads the padding.
Token ids outside [0, vocab_size) are an error when the ids are concrete; under jit they
embed as NaN (never as some other token's row), so a training step sees a non-finite loss.
Every layer must return x_BLD's shape [B, L, d_model]: checked with chex from static
shapes (jaxformer.math.shapes), naming the layer, as are the embedding and the logits.

Parameter layout. Unrolled (the default) every layer owns a subtree `layers_0`, `layers_1`,
...; with `scan_layers=True` the (identical) layers run as one `nn.scan` and their
parameters, caches and sown intermediates are stacked in one subtree `layers` whose leaves
have a leading axis of length num_layers (logical name `axes.LAYERS`). `stack_layers` and
`unstack_layers` convert a params tree between the two layouts; GPT-2 import and
`jaxformer.analysis` read the unrolled one. A scanned stack compiles one layer whatever the
depth. `remat` (scanned only) recomputes each layer's activations in the backward pass:
'none' saves them all, 'dots' saves the matmul outputs only, 'full' saves the layer inputs.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxformer.math import layers as layers_math
from jaxformer.math import shapes
from jaxformer.math.contract import contract, transpose_narrower
from jaxformer.nn import axes
from jaxformer.nn.layers import LayerNorm, param

POSITIONS = ("none", "learned", "sinusoidal")
REMAT = {
  "none": None,
  "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
  "full": jax.checkpoint_policies.nothing_saveable,
}
SCANNED = "layers"  # the subtree of scanned layers


class LanguageModel(nn.Module):
  vocab_size: int
  d_model: int
  max_len: int
  layers: Sequence[nn.Module]
  positions: str = "learned"
  final_norm: bool = False
  tie_embeddings: bool = False
  dtype: str = "float32"
  scan_layers: bool = False  # one nn.scan over identical layers (see the docstring)
  remat: str = "none"  # scanned layers: none | dots | full (see REMAT)

  @nn.compact
  def __call__(self, tokens_BL, decode=False, pad_B=None):
    length = _check_tokens(tokens_BL, self.vocab_size)
    if length > self.max_len:
      raise ValueError(f"sequence length {length} > max_len={self.max_len}")
    if pad_B is not None and not decode:
      raise ValueError("pad_B: left padding is read when decoding (decode=True) only")
    start = self._decode_start(length) if decode else 0
    embed_VD = param(
      self,
      "embed",
      (self.vocab_size, self.d_model),
      (axes.VOCAB, axes.EMBED),
      # Unit-scale token vectors (as nn.Embed): with GPT-2's 0.02 no rung got past guessing
      # among the values in context on the CPU recall task in 600 steps; with 1.0 the
      # transformer reached 0.999 (measured through experiments/configs/default.py).
      nn.initializers.normal(stddev=1.0),
    )
    # jnp.take wraps negative ids (-1 is the last row); map them past the table so that
    # every id outside [0, V) reads the NaN fill.
    ids_BL = jnp.where(tokens_BL < 0, self.vocab_size, tokens_BL)
    # The table gathered over fsdp before the lookup (as every weight is before its matmul):
    # with embed split over fsdp and the batch too, the SPMD partitioner otherwise gathers the
    # whole global batch of embeddings [B, L, D] and slices it back.
    embed_VD = nn.with_logical_constraint(embed_VD, (axes.VOCAB, None))
    x_BLD = jnp.take(embed_VD, ids_BL, axis=0, mode="fill", fill_value=jnp.nan)
    x_BLD = x_BLD.astype(self.dtype)
    if self.positions == "learned":
      pos_LD = param(
        self,
        "pos_embed",
        (self.max_len, self.d_model),
        (None, axes.EMBED),
        nn.initializers.normal(stddev=0.02),
      )
      x_BLD = x_BLD + _rows(pos_LD, start, length, decode, pad_B).astype(self.dtype)
    elif self.positions == "sinusoidal":
      table_LD = layers_math.sinusoidal_positions(self.max_len if decode else length, self.d_model)
      x_BLD = x_BLD + _rows(table_LD, start, length, decode, pad_B).astype(self.dtype)
    x_BLD = nn.with_logical_constraint(x_BLD, (axes.BATCH, axes.LENGTH, axes.EMBED))
    sizes = {"B": tokens_BL.shape[0], "L": length, "D": self.d_model, "V": self.vocab_size}
    shapes.check("LanguageModel", sizes, embedded_BLD=x_BLD)
    self.sow("intermediates", "embedded", x_BLD)
    if self.scan_layers:
      x_BLD = self._scanned(x_BLD, decode, pad_B)
      shapes.check("LanguageModel", sizes, **{"scanned layers output x_BLD": x_BLD})
    else:
      for i, layer in enumerate(self.layers):
        x_BLD = layer(x_BLD, decode=decode, pad_B=pad_B)
        shapes.check("LanguageModel", sizes, **{f"layers_{i} output x_BLD": x_BLD})
        x_BLD = nn.with_logical_constraint(x_BLD, (axes.BATCH, axes.LENGTH, axes.EMBED))
    if self.final_norm:
      x_BLD = LayerNorm(name="final_norm")(x_BLD)
    if self.tie_embeddings:
      logits_BLV = contract("BLD,VD->BLV", x_BLD, embed_VD.astype(self.dtype))
    else:
      w_out_DV = param(self, "unembed", (self.d_model, self.vocab_size), (axes.EMBED, axes.VOCAB))
      logits_BLV = contract("BLD,DV->BLV", x_BLD, w_out_DV.astype(self.dtype))
    logits_BLV = nn.with_logical_constraint(logits_BLV, (axes.BATCH, axes.LENGTH, axes.VOCAB))
    shapes.check("LanguageModel", sizes, logits_BLV=logits_BLV)
    return logits_BLV.astype(jnp.float32)

  def _scanned(self, x_BLD, decode, pad_B):
    """The layers as one scan of layers[0] (they are identical: jaxformer.ladder builds them)."""
    if self.remat not in REMAT:
      raise ValueError(f"remat={self.remat!r}: expected one of {', '.join(REMAT)}")

    def body(layer, x_BLD, pad_B):
      # a layer's cotangents are loop carries here: weight gradients may transpose the
      # smaller operand (jaxformer.math.contract)
      with transpose_narrower():
        x_BLD = layer(x_BLD, decode=decode, pad_B=pad_B)
      return nn.with_logical_constraint(x_BLD, (axes.BATCH, axes.LENGTH, axes.EMBED)), None

    if REMAT[self.remat] is not None:
      body = nn.checkpoint(body, policy=REMAT[self.remat], prevent_cse=False)
    scan = nn.scan(
      body,
      variable_axes={"params": 0, "cache": 0, "intermediates": 0},
      split_rngs={"params": True, "dropout": True},
      in_axes=nn.broadcast,  # every layer reads the same left padding
      length=len(self.layers),
      metadata_params={nn.PARTITION_NAME: axes.LAYERS},
    )
    template = self.layers[0].clone(parent=self, name=SCANNED, _deep_clone=True, _reset_names=True)
    return scan(template, x_BLD, pad_B)[0]

  def _decode_start(self, length):
    """Position of the first token of this call; the layers keep their own caches."""
    index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
    start = index.value
    index.value = start + length
    return start


def _rows(table_LD, start, length, decode, pad_B=None):
  """Position rows start .. start+length-1 (a static slice when not decoding); with left
  padding, row b's positions are shifted back by pad_B[b] (its padding reads row 0)."""
  if not decode:
    return table_LD[:length]
  if pad_B is None:
    return lax.dynamic_slice_in_dim(table_LD, start, length, axis=0)
  pos_BL = jnp.maximum(start + jnp.arange(length)[None, :] - pad_B[:, None], 0)
  return jnp.take(table_LD, pos_BL, axis=0)  # [B, L, D]


def _check_tokens(tokens_BL, vocab_size):
  """Returns L; raises ValueError for ids that are not int [B, L] or, when concrete (not
  traced), lie outside [0, vocab_size): the gather would read the wrong row silently."""
  if tokens_BL.ndim != 2 or not jnp.issubdtype(tokens_BL.dtype, jnp.integer):
    raise ValueError(
      f"tokens: expected integer ids of shape [B, L], got {tokens_BL.dtype} {tokens_BL.shape}"
    )
  concrete = not isinstance(tokens_BL, jax.core.Tracer)
  if concrete and tokens_BL.size and getattr(tokens_BL, "is_fully_addressable", True):
    ids_BL = np.asarray(tokens_BL)  # on the host: jnp ops would be staged inside a jit trace
    lo, hi = int(ids_BL.min()), int(ids_BL.max())
    if lo < 0 or hi >= vocab_size:
      bad = lo if lo < 0 else hi
      raise ValueError(f"tokens: id {bad} is outside [0, vocab_size={vocab_size})")
  return tokens_BL.shape[1]


def stack_layers(params, num_layers):
  """Unrolled params (`layers_0` .. `layers_{n-1}`) -> the scanned layout (`layers`), as
  plain arrays (logical-name boxes are dropped: `nn.meta.unbox`)."""
  params = nn.meta.unbox(params)
  names = [f"layers_{i}" for i in range(num_layers)]
  missing = [n for n in names if n not in params]
  if missing or SCANNED in params:
    raise ValueError(f"stack_layers: expected unrolled params with {names[0]}..{names[-1]}")
  out = {k: v for k, v in params.items() if k not in names}
  out[SCANNED] = jax.tree.map(lambda *xs: jnp.stack(xs), *(params[n] for n in names))
  return out


def unstack_layers(params):
  """Scanned params (`layers`, leading axis = layer) -> the unrolled layout (`layers_i`), as
  plain arrays."""
  params = nn.meta.unbox(params)
  if SCANNED not in params:
    raise ValueError(f"unstack_layers: expected scanned params with a {SCANNED!r} subtree")
  stacked = params[SCANNED]
  out = {k: v for k, v in params.items() if k != SCANNED}
  for i in range(jax.tree.leaves(stacked)[0].shape[0]):
    out[f"layers_{i}"] = jax.tree.map(lambda x, i=i: x[i], stacked)
  return out
