"""GPT-2 weights in and out of the `transformer` rung.

  config, params = gpt2.load("gpt2_dir")            # config.json + model.safetensors
  config, params = gpt2.load("model.bin", num_heads=12)
  logits = ladder.build("transformer", config).apply(params, tokens)   # == GPT2LMHeadModel
  gpt2.save(config, params, "out_dir")               # loadable by GPT2LMHeadModel.from_pretrained

Why it fits: the transformer rung *is* GPT-2's decoder (pre-norm, split skip, learned
positions, biases, gelu tanh-approximation, tau = sqrt(K)); only the storage differs
(jaxformer.interop.gpt2_layout). Loading GPT-2 weights and getting PyTorch's logits back is
the check that the reconstruction arrived at the standard model, not a look-alike.

Sources: a Hugging Face GPT2LMHeadModel (or GPT2Model) state dict, with or without the
'transformer.' prefix, as a mapping of names to arrays, a .safetensors file, a torch .bin
file (read with `torch.load(weights_only=True)`, the loader that refuses arbitrary pickled
objects, and only when torch is installed) or a directory holding config.json and one of
model.safetensors, model.safetensors.index.json, pytorch_model.bin.
The head count cannot be read from tensor shapes: it comes from `num_heads=`, from the
`gpt2_config` mapping, from config.json beside the file, or from a file written by `save`.
"""

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from jaxformer import ladder
from jaxformer.interop import gpt2_layout as layout
from jaxformer.interop.gpt2_layout import GPT2FormatError

RUNG = "transformer"
PREFIX = "transformer."
CONFIG_KEY = "gpt2_config"  # safetensors metadata entry holding the GPT-2 config as JSON
LAYER_NORM_EPS = 1e-5  # jaxformer.nn.layers.LayerNorm's epsilon (not a config field)
# transformers' activation names -> jaxformer.math.mlp.ACTIVATIONS ('gelu' is the tanh form).
ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu", "tanh": "tanh"}
_EXPORT_ACTIVATION = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh"}

__all__ = ["GPT2FormatError", "load", "save", "from_state_dict", "to_state_dict", "to_gpt2_config"]


def load(source, *, num_heads=None, gpt2_config=None):
  """GPT-2 weights -> (ladder config for 'transformer', plain params {'params': ...})."""
  state, file_config = _read(source)
  hf = dict(file_config or {})
  if gpt2_config is not None:
    hf |= gpt2_config.to_dict() if hasattr(gpt2_config, "to_dict") else dict(gpt2_config)
  return from_state_dict(state, num_heads=num_heads, gpt2_config=hf)


def save(config, params, path):
  """Writes GPT-2 weights: `path` ending in .safetensors is one file (the config in its
  metadata); any other path is a directory with model.safetensors and config.json, the
  layout `GPT2LMHeadModel.from_pretrained(path)` reads. Returns the path written."""
  state = {
    PREFIX + k if k != layout.LM_HEAD else k: v for k, v in to_state_dict(config, params).items()
  }
  hf_json = json.dumps(to_gpt2_config(config), indent=2, sort_keys=True)
  path = os.fspath(path)
  file = path
  if not path.endswith(".safetensors"):
    os.makedirs(path, exist_ok=True)
    file = os.path.join(path, "model.safetensors")
    with open(os.path.join(path, "config.json"), "w") as f:
      f.write(hf_json + "\n")
  save_file(state, file, metadata={"format": "pt", CONFIG_KEY: hf_json})
  return path


def from_state_dict(state, *, num_heads=None, gpt2_config=None):
  """A GPT-2 state dict (name -> array) -> (config, {'params': ...}); shapes are checked."""
  state = _strip(state)
  hf = dict(gpt2_config or {})
  dims = layout.infer_dims(state)
  heads = _num_heads(num_heads, hf)
  tied = _tied(state, hf)
  layout.check_state(state, dims, tied)
  config = _ladder_config(dims, heads, tied, hf)
  tree = layout.state_to_params(state, dims, heads, tied)
  _check_tree(config, tree)
  return config, {"params": jax.tree_util.tree_map(jnp.asarray, tree)}


def to_state_dict(config, params):
  """(config, params) -> GPT-2 state dict without the 'transformer.' prefix (numpy float32);
  lm_head.weight only when the output layer is untied."""
  hf = to_gpt2_config(config)
  tree = _plain(params)
  _check_tree(config, tree)
  return layout.params_to_state(tree, hf["n_layer"])


def to_gpt2_config(config):
  """The transformers GPT2Config fields for a GPT-2-shaped ladder config; one error naming the
  first field GPT-2 cannot express."""
  c = ladder.validate(RUNG, config)
  fixed = {
    "skip": "split",
    "norm": "pre",
    "final_norm": True,
    "use_bias": True,
    "positions": "learned",
    "weights": "heads",
    "interaction": "lowrank",
    "normalizer": "softmax",
    "head_combine": "concat",
    "mlp": "kv",
    "mlp_w2": True,
    "mask": "causal",
    "window": None,
  }
  for field, want in fixed.items():
    if c[field] != want:
      raise GPT2FormatError(f"model.{field}={c[field]!r}: GPT-2 needs {want!r}")
  if ladder.value_rank(c) != ladder.head_rank(c):
    raise GPT2FormatError(
      f"model.value_rank={c.value_rank!r}: GPT-2's values are as wide as its keys "
      f"({ladder.head_rank(c)})"
    )
  if c.d_model % c.num_heads or ladder.head_rank(c) * c.num_heads != c.d_model:
    raise GPT2FormatError(
      f"model.rank={c.rank!r}: GPT-2 needs rank * num_heads == d_model ({c.d_model})"
    )
  if c.temperature not in (None, 1.0):
    raise GPT2FormatError(f"model.temperature={c.temperature!r}: GPT-2 scales by sqrt(K) or 1")
  if c.activation not in _EXPORT_ACTIVATION:
    raise GPT2FormatError(f"model.activation={c.activation!r}: no GPT-2 activation_function")
  special = 50256 if c.vocab_size > 50256 else None  # GPT-2's <|endoftext|>, if it exists
  return {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "vocab_size": c.vocab_size,
    "n_positions": c.max_len,
    "n_embd": c.d_model,
    "n_layer": c.num_layers,
    "n_head": c.num_heads,
    "n_inner": c.d_ff,
    "activation_function": _EXPORT_ACTIVATION[c.activation],
    "layer_norm_epsilon": LAYER_NORM_EPS,
    "scale_attn_weights": c.temperature is None,
    "tie_word_embeddings": bool(c.tie_embeddings),
    "bos_token_id": special,
    "eos_token_id": special,
  }


def _read(source):
  """-> (state dict of numpy arrays, GPT-2 config dict or None)."""
  if hasattr(source, "keys"):
    return {k: _to_numpy(v, k) for k, v in source.items()}, None
  path = os.fspath(source)
  if os.path.isdir(path):
    config = _read_json(os.path.join(path, "config.json"))
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
      if os.path.exists(os.path.join(path, name)):
        state, meta = _read_file(os.path.join(path, name))
        return state, config or meta
    raise FileNotFoundError(
      f"{path}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin"
    )
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no such GPT-2 weights file or directory")
  state, meta = _read_file(path)
  beside = _read_json(os.path.join(os.path.dirname(path), "config.json"))
  return state, meta or beside


def _read_file(path):
  if path.endswith(".safetensors"):
    try:
      with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        state = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # SafetensorError names no file: a truncated or damaged download
      raise GPT2FormatError(
        f"{path}: not a readable safetensors file ({_one_line(e)}); download it again"
      ) from None
    if CONFIG_KEY not in meta:
      return state, None
    try:
      return state, json.loads(meta[CONFIG_KEY])
    except json.JSONDecodeError as e:
      raise GPT2FormatError(f"{path}: metadata {CONFIG_KEY!r} is not JSON ({e})") from None
  if path.endswith(".index.json"):
    index = _read_json(path)
    if not index or "weight_map" not in index:
      raise GPT2FormatError(f"{path}: no 'weight_map' in the safetensors index")
    state = {}
    for file in sorted(set(index["weight_map"].values())):
      state |= _read_file(os.path.join(os.path.dirname(path), file))[0]
    return state, None
  if path.endswith((".bin", ".pt", ".pth")):
    try:
      import torch
    except ImportError as e:
      raise ImportError(
        f"{path}: a torch state dict needs torch (read with torch.load(weights_only=True)); "
        "install torch or convert the file to .safetensors"
      ) from e
    # weights_only=True: the safe loader, tensors and plain containers only (never pickle).
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: _to_numpy(v, k) for k, v in state.items()}, None
  raise GPT2FormatError(f"{path}: unknown weights format (expected .safetensors, .bin or a dir)")


def _read_json(path):
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      value = json.load(f)
  except json.JSONDecodeError as e:
    raise GPT2FormatError(f"{path}: not valid JSON ({e})") from None
  except UnicodeDecodeError as e:
    raise GPT2FormatError(f"{path}: not a text file ({e.reason})") from None
  if not isinstance(value, dict):
    raise GPT2FormatError(f"{path}: expected a JSON object, got {type(value).__name__}")
  return value


def _one_line(e):
  lines = str(e).strip().splitlines()
  return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _to_numpy(value, name):
  if hasattr(value, "detach"):  # a torch tensor; numpy has no torch bfloat16, so widen first
    value = value.detach().cpu().float().numpy()
  try:
    return np.asarray(value)
  except Exception as e:
    raise GPT2FormatError(
      f"tensor {name!r}: cannot convert {type(value).__name__} to an array"
    ) from e


def _strip(state):
  """Drops the 'transformer.' prefix of GPT2LMHeadModel and the causal-mask buffers."""
  out = {}
  for name, value in state.items():
    if name.endswith(layout.IGNORED_SUFFIXES):
      continue
    out[name[len(PREFIX) :] if name.startswith(PREFIX) else name] = value
  return out


def _num_heads(num_heads, hf):
  from_config = hf.get("n_head", hf.get("num_attention_heads"))
  if num_heads is not None and from_config is not None and num_heads != from_config:
    raise GPT2FormatError(f"num_heads={num_heads} but the GPT-2 config says n_head={from_config}")
  heads = num_heads if num_heads is not None else from_config
  if heads is None:
    raise GPT2FormatError(
      "num_heads: the head count cannot be inferred from tensor shapes; pass num_heads=, "
      "gpt2_config=, or put config.json beside the weights"
    )
  return heads


def _tied(state, hf):
  tie = hf.get("tie_word_embeddings", True)
  if layout.LM_HEAD not in state:
    if not tie:
      raise GPT2FormatError(f"missing tensor {layout.LM_HEAD!r} (tie_word_embeddings=False)")
    return True
  same = np.array_equal(np.asarray(state[layout.LM_HEAD]), np.asarray(state["wte.weight"]))
  if tie and not same:
    raise GPT2FormatError(
      f"tensor {layout.LM_HEAD!r} differs from 'wte.weight' but tie_word_embeddings=True"
    )
  return same and tie


def _ladder_config(dims, heads, tied, hf):
  """The GPT-2 config fields (checked against the tensors) -> ladder config."""
  given = {
    "vocab_size": "vocab",
    "n_positions": "positions",
    "n_embd": "width",
    "n_layer": "layers",
  }
  for field, dim in given.items():
    if hf.get(field) is not None and hf[field] != dims[dim]:
      raise GPT2FormatError(f"{field}={hf[field]} in the GPT-2 config, tensors say {dims[dim]}")
  if hf.get("n_inner") is not None and hf["n_inner"] != dims["mlp"]:
    raise GPT2FormatError(f"n_inner={hf['n_inner']} in the GPT-2 config, tensors say {dims['mlp']}")
  if not isinstance(heads, int) or heads <= 0 or dims["width"] % heads:
    raise GPT2FormatError(f"num_heads={heads!r} must divide n_embd={dims['width']}")
  act = hf.get("activation_function", "gelu_new")
  if act not in ACTIVATIONS:
    raise GPT2FormatError(
      f"activation_function={act!r}: supported are {', '.join(ACTIVATIONS)} "
      "(jaxformer's gelu is the tanh approximation, not the exact erf form)"
    )
  eps = hf.get("layer_norm_epsilon", LAYER_NORM_EPS)
  if eps != LAYER_NORM_EPS:
    raise GPT2FormatError(f"layer_norm_epsilon={eps}: jaxformer's LayerNorm uses {LAYER_NORM_EPS}")
  for field in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
    if hf.get(field):
      raise GPT2FormatError(f"{field}=True is not supported by the transformer rung")
  if hf.get("model_type", "gpt2") != "gpt2":
    raise GPT2FormatError(f"model_type={hf['model_type']!r}: expected 'gpt2'")
  c = ladder.default_config(RUNG)
  c.vocab_size, c.max_len, c.d_model = dims["vocab"], dims["positions"], dims["width"]
  c.num_layers, c.num_heads, c.d_ff, c.rank = dims["layers"], heads, dims["mlp"], None
  c.tie_embeddings, c.positions, c.use_bias, c.final_norm = tied, "learned", True, True
  c.activation = ACTIVATIONS[act]
  c.temperature = None if hf.get("scale_attn_weights", True) else 1.0
  return ladder.validate(RUNG, c)


def _plain(params):
  params = nn.meta.unbox(params)
  return params["params"] if "params" in params else params


def _check_tree(config, tree):
  """The tree must have exactly the structure and shapes `ladder.build(config).init` makes."""
  model = ladder.build(RUNG, config)
  tokens = jax.ShapeDtypeStruct((1, 1), jnp.int32)
  want = nn.meta.unbox(jax.eval_shape(model.init, jax.random.key(0), tokens))["params"]
  want_shapes = {jax.tree_util.keystr(p): v.shape for p, v in _leaves(want)}
  got_shapes = {jax.tree_util.keystr(p): np.shape(v) for p, v in _leaves(tree)}
  for name, shape in want_shapes.items():
    if name not in got_shapes:
      raise GPT2FormatError(f"params{name} is missing (expected shape {shape})")
    if tuple(got_shapes[name]) != tuple(shape):
      raise GPT2FormatError(f"params{name} has shape {got_shapes[name]}, expected {shape}")
  for name in got_shapes:
    if name not in want_shapes:
      raise GPT2FormatError(f"params{name} is not a parameter of the transformer rung")


def _leaves(tree):
  return jax.tree_util.tree_flatten_with_path(tree)[0]
