"""The ladder: every rung of the reconstruction, by name, as a composition of pieces.

  from jaxformer import ladder
  config = ladder.default_config("softmax")      # ml_collections.ConfigDict
  model = ladder.build("softmax", config)        # Linen module: int32 [B, L] -> [B, L, V]

Each rung changes one slot relative to the one before it (see README's ladder table):

  rung              pressure (docs/reconstruction.md)   what changes
  rnn               1 fixed memory                      recurrent cell, fixed state
  rnn_attention     1 attention over the history        + a softmax read over all states
  source_only       2-3 no recurrence, dynamic weights  W_iL = f(x_i)
  stateless         3 symmetry breaking, no talking     W_iL = 0 for i != L
  full_dynamic      4 matrix-valued f explodes          D^2 scalar functions
  diagonal_dynamic  4                                   D scalar functions
  matrix_sum        4-5 values and heads                sum_j a_j(x_i, x_L) V_j
  softmax           6 sums blow up                      softmax over i, tau = sqrt(r)
  concat_wo         7 value cache too large             rank-r values, concat + Wo
  mlp_kv            8 MLP as key-value memory           W2 sigma(W1 .) in the single skip
  transformer       8 split skip + layer norm           the standard decoder block

Knobs of the spec are config fields, not classes: `interaction`, `normalizer`,
`head_combine`, `cell`, `mlp_w2`, `norm`, `attention`, `window`, ...

One more name is not a rung of the reconstruction: `custom` puts any sequence mixer (a
Linen module named by `mixer`, 'package.module:Class' or 'path/to/file.py:Class', built
from `width` plus the JSON `mixer_fields`; see jaxformer.mixers) in the transformer's block,
so a candidate trains, decodes and is measured exactly as a rung is.
"""

import json
import math

import ml_collections

from jaxformer.math import heads, interaction, mixing, recurrent
from jaxformer.math import mlp as mlp_math
from jaxformer.nn import block, lm
from jaxformer.nn.mixer import GENERIC, Mixer
from jaxformer.steps import s4_values_heads, s5_interaction, s6_softmax
from jaxformer.steps.s1_fixed_memory import Recurrent
from jaxformer.steps.s3_dynamic_weights import SourceOnly
from jaxformer.steps.s7_concat_wo import ConcatWo
from jaxformer.steps.s8_mlp import MlpKV

RUNGS = (
  "rnn",
  "rnn_attention",
  "source_only",
  "stateless",
  "full_dynamic",
  "diagonal_dynamic",
  "matrix_sum",
  "softmax",
  "concat_wo",
  "mlp_kv",
  "transformer",
)
RECURRENT_RUNGS = ("rnn", "rnn_attention")
CUSTOM = "custom"  # any sequence mixer in the transformer's block (jaxformer.mixers)
BUILDABLE = (*RUNGS, CUSTOM)

WEIGHTS = ("full", "diagonal", "heads")
MLPS = ("none", "kv")
DTYPES = ("float32", "bfloat16")


def attention_impls():
  """'generic' (materialized scores, any scorer) plus the kernels of step 9."""
  from jaxformer.math import attention

  return (GENERIC, *attention.IMPLEMENTATIONS)


class ConfigError(ValueError):
  """A model config field holds a value the ladder cannot build; the message names it."""


def default_config(name):
  """A small CPU-sized config for rung `name`; every field is commented."""
  _check_rung(name)
  if name == CUSTOM:
    return _custom_config()
  c = ml_collections.ConfigDict()
  c.vocab_size = 64  # V: token ids are in [0, vocab_size)
  c.max_len = 64  # longest sequence the positions table covers
  c.d_model = 64  # D: model width
  c.num_layers = 2  # number of blocks (or stacked recurrent layers)
  c.num_heads = 2  # H: scalar coefficient functions a_j (ignored by full / diagonal weights)
  c.rank = ml_collections.FieldReference(None, field_type=int)  # K = r; None: d_model // num_heads
  # concat + Wo: each head's value width (Wv_j is r_v x D); None: the scorer's rank
  c.value_rank = ml_collections.FieldReference(None, field_type=int)
  c.d_ff = 256  # F: MLP width (mlp='kv')
  c.positions = "learned"  # none | learned | sinusoidal
  c.tie_embeddings = False  # share the token embedding with the output layer
  c.use_bias = False  # biases on q, k, v, Wo and MLP
  c.final_norm = False  # layer norm before the output layer
  c.dtype = "float32"  # activation dtype: float32 | bfloat16 (params stay float32)
  c.scan_layers = False  # one nn.scan over the layers: params stacked under 'layers' (lm.py)
  c.remat = "none"  # scanned layers: none | dots | full (recompute activations backward)
  c.cell = "lstm"  # recurrent rungs: elman | gru | lstm
  c.interaction = "lowrank"  # source | additive | tanh | bilinear | lowrank
  c.weights = "heads"  # full (D^2 functions) | diagonal (D) | heads (sum_j a_j V_j)
  c.head_combine = "sum"  # sum (V_j is D x D) | concat (rank-r values, then Wo)
  c.normalizer = "none"  # none | sum | softmax, over the sources i <= L
  c.temperature = ml_collections.FieldReference(None, field_type=float)  # tau; None: sqrt(K)
  c.mask = "causal"  # causal | self (stateless: W_iL = 0 for i != L) | bidirectional (encoder)
  c.window = ml_collections.FieldReference(None, field_type=int)  # sliding window; None: all
  c.attention = GENERIC  # generic | dense | dot_product | blockwise | sliding_window | ...
  c.mlp = "none"  # none (elementwise sigma) | kv (W2 sigma(W1 .))
  c.mlp_w2 = True  # mlp='kv' without W2 needs d_ff a multiple of d_model
  c.mlp_w2_trained = True  # False: W2 is a fixed orthonormal matrix, not learned
  c.activation = "gelu"  # sigma: gelu | relu | tanh
  c.skip = "single"  # single: x + ffn(mix(x)) | split: x + mix, then + ffn | none: ffn(mix(x))
  c.norm = "none"  # none | pre | post (layer norm placement)

  if name in RECURRENT_RUNGS:
    c.positions = "none"
    c.interaction, c.normalizer, c.head_combine = "lowrank", "softmax", "concat"
  if name == "source_only":
    c.interaction = "source"
  if name == "stateless":
    c.mask = "self"
  if name in ("full_dynamic", "diagonal_dynamic"):
    c.weights = "full" if name == "full_dynamic" else "diagonal"
    c.d_model = 16 if name == "full_dynamic" else 32
    c.rank = 4
  if RUNGS.index(name) >= RUNGS.index("softmax"):
    c.normalizer = "softmax"
  if RUNGS.index(name) >= RUNGS.index("concat_wo"):
    c.head_combine = "concat"
  if RUNGS.index(name) >= RUNGS.index("mlp_kv"):
    c.mlp = "kv"
  if name == "transformer":
    c.skip, c.norm, c.final_norm, c.use_bias = "split", "pre", True, True
  c.lock()
  return c


def _custom_config():
  """The transformer's block and shell around a mixer named by `mixer`."""
  c = ml_collections.ConfigDict()
  c.mixer = ""  # 'package.module:Class' or 'path/to/file.py:Class' (jaxformer.mixers)
  c.mixer_fields = "{}"  # JSON object: the mixer's own fields (it gets width = d_model)
  c.vocab_size = 64  # V
  c.max_len = 64  # longest sequence the positions table covers
  c.d_model = 64  # D: model width, the mixer's `width`
  c.num_layers = 2  # blocks
  c.d_ff = 256  # F: MLP width
  c.positions = "learned"  # none | learned | sinusoidal
  c.tie_embeddings = False  # share the token embedding with the output layer
  c.use_bias = True  # biases of the MLP
  c.final_norm = True  # layer norm before the output layer
  c.dtype = "float32"  # activation dtype: float32 | bfloat16 (params stay float32)
  c.scan_layers = False  # one nn.scan over the layers: params stacked under 'layers' (lm.py)
  c.remat = "none"  # scanned layers: none | dots | full (recompute activations backward)
  c.mlp = "kv"  # none (elementwise sigma) | kv (W2 sigma(W1 .))
  c.mlp_w2 = True  # mlp='kv' without W2 needs d_ff a multiple of d_model
  c.mlp_w2_trained = True  # False: W2 is a fixed orthonormal matrix, not learned
  c.activation = "gelu"  # sigma: gelu | relu | tanh
  c.skip = "split"  # single: x + ffn(mix(x)) | split: x + mix, then + ffn
  c.norm = "pre"  # none | pre | post (layer norm placement)
  c.lock()
  return c


def mixer_fields(config):
  """The custom rung's `mixer_fields` as a dict; ConfigError naming the field if not JSON."""
  try:
    fields = json.loads(config.mixer_fields)
  except (TypeError, ValueError) as e:
    raise ConfigError(f"model.mixer_fields={config.mixer_fields!r}: not JSON ({e})") from e
  if not isinstance(fields, dict):
    raise ConfigError(f"model.mixer_fields={config.mixer_fields!r}: must be a JSON object")
  return fields


def custom_mixer(config):
  """(the mixer class, its fields) of a custom config; ConfigError naming the field."""
  from jaxformer import mixers

  try:
    cls = mixers.load(config.mixer)
  except mixers.MixerError as e:
    raise ConfigError(f"model.mixer: {e}") from e
  return cls, mixer_fields(config)


def head_rank(config):
  return config.rank if config.rank is not None else config.d_model // config.num_heads


def value_rank(config):
  """Each head's value width under concat + Wo: model.value_rank, else the scorer's rank."""
  rank = config.get("value_rank")
  return rank if rank is not None else head_rank(config)


def build(name, config=None):
  """The Linen module of rung `name`: int32 tokens [B, L] -> float32 logits [B, L, V]."""
  config = default_config(name) if config is None else config
  validate(name, config)
  c = config
  if name == CUSTOM:
    from jaxformer.mixers import plug

    cls, fields = custom_mixer(c)
    layers = [
      block.Block(
        mixer=plug.in_block(plug.build(cls, c.d_model, fields)),
        ffn=_ffn(c),
        skip=c.skip,
        norm=c.norm,
      )
      for _ in range(c.num_layers)
    ]
  elif name in RECURRENT_RUNGS:
    layers = [Recurrent(cell=c.cell, width=c.d_model) for _ in range(c.num_layers)]
    if name == "rnn_attention":
      layers.append(block.Block(mixer=_mixer(c), ffn=block.Activation("identity")))
  else:
    layers = [
      block.Block(mixer=_mixer(c), ffn=_ffn(c), skip=c.skip, norm=c.norm)
      for _ in range(c.num_layers)
    ]
  return lm.LanguageModel(
    vocab_size=c.vocab_size,
    d_model=c.d_model,
    max_len=c.max_len,
    layers=tuple(layers),  # a tuple keeps the module hashable (a static jit argument)
    positions=c.positions,
    final_norm=c.final_norm,
    tie_embeddings=c.tie_embeddings,
    dtype=c.dtype,
    scan_layers=c.scan_layers,
    remat=c.remat,
  )


def _valuer(c):
  if c.weights == "full":
    return s4_values_heads.FullEntries(width=c.d_model)
  if c.weights == "diagonal":
    return s4_values_heads.Diagonal(width=c.d_model)
  if c.head_combine == "sum":
    return s4_values_heads.MatrixSum(width=c.d_model, num_heads=c.num_heads)
  return ConcatWo(width=c.d_model, num_heads=c.num_heads, rank=value_rank(c), use_bias=c.use_bias)


def _scorer(c, num_heads):
  width, rank = c.d_model, head_rank(c)
  return {
    "source": lambda: SourceOnly(width=width, num_heads=num_heads),
    "additive": lambda: s5_interaction.Additive(width=width, num_heads=num_heads),
    "tanh": lambda: s5_interaction.Tanh(width=width, num_heads=num_heads, rank=rank),
    "bilinear": lambda: s5_interaction.Bilinear(width=width, num_heads=num_heads),
    "lowrank": lambda: s5_interaction.LowRank(
      width=width, num_heads=num_heads, rank=rank, use_bias=c.use_bias
    ),
  }[c.interaction]()


def _mixer(c):
  valuer = _valuer(c)
  return Mixer(
    scorer=_scorer(c, valuer.num_heads),
    valuer=valuer,
    # the weights slot of step 6 (jaxformer.steps.s6_softmax): normalize(scores / tau | mask)
    normalizer=c.normalizer,
    temperature=c.temperature,
    mask=c.mask,
    window=c.window,
    impl=c.attention,
  )


def _ffn(c):
  if c.mlp == "kv":
    return MlpKV(
      d_ff=c.d_ff,
      activation=c.activation,
      w2=c.mlp_w2,
      w2_trained=c.mlp_w2_trained,
      use_bias=c.use_bias,
    )
  return block.Activation(c.activation)


def _check_rung(name):
  if name not in BUILDABLE:
    raise ConfigError(f"rung={name!r}: expected one of {', '.join(BUILDABLE)}")


def _choice(config, field, allowed):
  value = config[field]
  if value not in allowed:
    raise ConfigError(f"model.{field}={value!r}: expected one of {', '.join(map(str, allowed))}")


def _check_fields(name, config):
  """The model config must hold exactly default_config's fields: a misspelt field would
  otherwise be ignored silently and the model built from the default."""
  if not isinstance(config, ml_collections.ConfigDict):
    raise ConfigError(
      f"model: expected an ml_collections.ConfigDict from ladder.default_config({name!r}), "
      f"got {type(config).__name__}"
    )
  known = default_config(name).keys()
  unknown = sorted(set(config.keys()) - set(known))
  if unknown:
    raise ConfigError(f"model.{unknown[0]}: unknown field; known fields: {', '.join(known)}")
  missing = [k for k in known if k not in config]
  if missing:
    raise ConfigError(f"model.{missing[0]}: missing; start from ladder.default_config({name!r})")


def validate(name, config):
  """Raises ConfigError naming the first bad field; returns the config otherwise."""
  _check_rung(name)
  _check_fields(name, config)
  if name == CUSTOM:
    return _validate_custom(config)
  c = config
  _positive_ints(c, ("vocab_size", "max_len", "d_model", "num_layers", "num_heads", "d_ff"))
  for field, allowed in (
    ("cell", recurrent.CELLS),
    ("interaction", interaction.INTERACTIONS),
    ("weights", WEIGHTS),
    ("head_combine", heads.HEAD_COMBINES),
    ("normalizer", s6_softmax.NORMALIZERS),
    ("mask", mixing.MASKS),
    *_block_choices(),
    ("attention", attention_impls()),
  ):
    _choice(c, field, allowed)
  if c.mask == "bidirectional" and c.window is not None:
    raise ConfigError(
      f"model.window={c.window}: a sliding window is causal; model.mask='bidirectional' has none"
    )
  if c.scan_layers and name in RECURRENT_RUNGS:
    raise ConfigError(f"model.scan_layers=True: rung {name!r} has no stack of identical blocks")
  if c.remat != "none" and not c.scan_layers:
    raise ConfigError(f"model.remat={c.remat!r}: needs model.scan_layers=True")
  if c.rank is None and c.d_model % c.num_heads:
    raise ConfigError(
      f"model.d_model={c.d_model} is not divisible by model.num_heads={c.num_heads}; "
      "set model.rank to choose the head dimension explicitly"
    )
  if c.rank is not None and c.rank <= 0:
    raise ConfigError(f"model.rank={c.rank!r}: must be a positive integer or None")
  if c.value_rank is not None and c.value_rank <= 0:
    raise ConfigError(f"model.value_rank={c.value_rank!r}: must be a positive integer or None")
  if c.value_rank is not None and (c.weights != "heads" or c.head_combine != "concat"):
    raise ConfigError(
      f"model.value_rank={c.value_rank}: only concat + Wo values have a rank of their own "
      f"(weights='heads', head_combine='concat'; got {c.weights!r}, {c.head_combine!r})"
    )
  if c.temperature is not None and not (math.isfinite(c.temperature) and c.temperature > 0):
    raise ConfigError(f"model.temperature={c.temperature!r}: must be a finite number > 0")
  if c.window is not None and c.window <= 0:
    raise ConfigError(f"model.window={c.window!r}: must be a positive integer or None")
  _check_mlp(c)
  if c.attention != GENERIC and (c.interaction != "lowrank" or c.normalizer != "softmax"):
    raise ConfigError(
      f"model.attention={c.attention!r} needs interaction='lowrank' and normalizer='softmax' "
      f"(got {c.interaction!r}, {c.normalizer!r}); use attention='generic'"
    )
  if c.attention != GENERIC and value_rank(c) != head_rank(c):
    raise ConfigError(
      f"model.value_rank={c.value_rank}: attention kernels take values as wide as the keys "
      f"({head_rank(c)}); use attention='generic'"
    )
  if c.attention != GENERIC and c.mask != "causal":
    raise ConfigError(
      f"model.mask={c.mask!r}: attention kernels are causal; use attention='generic'"
    )
  return config


def _positive_ints(c, fields):
  for field in fields:
    value = c[field]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
      raise ConfigError(f"model.{field}={value!r}: must be a positive integer")


def _block_choices():
  """(field, allowed) of the block and shell around any mixer."""
  return (
    ("mlp", MLPS),
    ("activation", tuple(k for k in mlp_math.ACTIVATIONS if k != "identity")),
    ("skip", block.SKIPS),
    ("norm", block.NORMS),
    ("positions", lm.POSITIONS),
    ("dtype", DTYPES),
    ("scan_layers", (False, True)),
    ("remat", tuple(lm.REMAT)),
  )


def _check_mlp(c):
  if c.mlp != "kv" or c.mlp_w2:
    return
  if c.d_ff % c.d_model:
    raise ConfigError(
      f"model.d_ff={c.d_ff}: without W2 each hidden unit writes one coordinate, "
      f"so d_ff must be a multiple of d_model={c.d_model}"
    )
  if not c.mlp_w2_trained:
    raise ConfigError("model.mlp_w2_trained=False: needs model.mlp_w2=True (a W2 to fix)")


def _validate_custom(c):
  _positive_ints(c, ("vocab_size", "max_len", "d_model", "num_layers", "d_ff"))
  for field, allowed in _block_choices():
    _choice(c, field, allowed)
  if not c.mixer:
    raise ConfigError(
      "model.mixer: empty; name a mixer class, 'package.module:Class' or 'path/to/file.py:Class'"
    )
  _check_mlp(c)
  from jaxformer.mixers import plug

  cls, fields = custom_mixer(c)
  try:
    plug.build(cls, c.d_model, fields)
  except plug.MixerError as e:
    raise ConfigError(f"model.mixer_fields: {e}") from e
  return c
