"""Fine-tuning from GPT-2: `config.init_from=DIR` starts training from a GPT-2 checkpoint.

  python -m experiments.main --config=experiments/configs/text.py:path=input.txt \
    --config.init_from=gpt2_dir --workdir=/tmp/jaxformer/ft
  python -m experiments.sample --workdir=/tmp/jaxformer/ft --prompt="ROMEO:"

DIR is what `jaxformer.interop.gpt2.load` reads: a Hugging Face GPT-2 directory (config.json
plus model.safetensors, its index, or pytorch_model.bin) or one weights file. `resolve` turns
the config into the one the loop trains:

- the rung is `transformer` (another rung is an error naming it), built at the checkpoint's
  sizes: every architecture field of model.* comes from the checkpoint; only model.dtype and
  model.attention (how it computes, not what) are kept from the config;
- a `text` task without its own `tokenizer=` is read with the checkpoint's tokenizer when DIR
  holds its files (vocab.json + merges.txt, or tokenizer.json): the spec becomes
  `level=bpe,tokenizer=DIR`, which config.json records, so `experiments.sample` and
  `experiments.evaluate` encode and decode as training did. Without tokenizer files the task
  keeps its ids, and they must fit the checkpoint's vocabulary (jaxformer.train.program).

`initial_params` puts the checkpoint's weights in place of the freshly initialised ones at step
0; a resumed run reads its own checkpoint instead. The optimizer state starts from zero.
"""

import os

import jax
import numpy as np

from jaxformer import data, ladder
from jaxformer.data import bpe
from jaxformer.data.spec import NO_TOKENIZER
from jaxformer.interop import gpt2

KEPT_MODEL_FIELDS = ("dtype", "attention")  # compute choices, not architecture

__all__ = ["initial_params", "resolve"]


def resolve(config):
  """The config with `init_from` applied (see the module docstring); unchanged without it.

  Returns a new locked ConfigDict; raises ConfigError naming init_from for a directory or file
  that is not a readable GPT-2 checkpoint, or for a rung other than `transformer`.
  """
  path = config.get("init_from")
  if path is None:
    return config
  if config.rung != gpt2.RUNG:
    raise ladder.ConfigError(
      f"init_from={path}: a GPT-2 checkpoint builds the {gpt2.RUNG!r} rung, not rung={config.rung!r}"
    )
  model, _ = _load(path)
  resolved = config.copy_and_resolve_references()
  with resolved.unlocked():
    for field in KEPT_MODEL_FIELDS:
      model[field] = resolved.model[field]
    resolved.model = ladder.validate(gpt2.RUNG, model)
    resolved.task = _task(resolved.task, path)
  resolved.lock()
  return resolved


def initial_params(config, abstract_params):
  """The checkpoint's params, placed like `abstract_params` (ShapeDtypeStructs with
  shardings: the program's state['params']), cast to their dtypes."""
  _, params = _load(config.init_from)
  tree = params["params"]
  want = jax.tree_util.tree_structure(abstract_params)
  if jax.tree_util.tree_structure(tree) != want:
    raise ladder.ConfigError(
      f"init_from={config.init_from}: its params do not match the model being trained"
    )

  def place(value, target):
    value = np.asarray(value, dtype=target.dtype)
    if value.shape != target.shape:
      raise ladder.ConfigError(
        f"init_from={config.init_from}: a tensor of shape {value.shape}, expected {target.shape}"
      )
    return jax.make_array_from_callback(value.shape, target.sharding, lambda index: value[index])

  return jax.tree_util.tree_map(place, tree, abstract_params)


def _task(spec, path):
  """A text task without a tokenizer of its own reads with DIR's, when DIR has one."""
  name, params = data.parse_spec(spec)
  if name != "text" or params["tokenizer"] != NO_TOKENIZER:
    return spec
  if not os.path.isdir(path) or bpe.source_files(path) is None:
    return spec
  params = {**params, "level": "bpe", "tokenizer": os.path.abspath(path), "vocab_size": 0}
  return data.format_spec(name, params)


_LOADED = {}  # (path, mtimes) -> (config, params): resolve and initial_params read it once


def _load(path):
  expanded = os.path.abspath(os.path.expanduser(path))
  if not os.path.exists(expanded):
    raise ladder.ConfigError(f"init_from={path}: no such GPT-2 directory or weights file")
  names = sorted(os.listdir(expanded)) if os.path.isdir(expanded) else [""]
  key = (expanded, tuple(os.stat(os.path.join(expanded, n)).st_mtime_ns for n in names))
  if key not in _LOADED:
    try:
      loaded = gpt2.load(expanded)
    except (gpt2.GPT2FormatError, FileNotFoundError, OSError) as e:
      raise ladder.ConfigError(f"init_from={path}: {e}") from None
    _LOADED.clear()  # one checkpoint at a time: GPT-2 weights are large
    _LOADED[key] = loaded
  config, params = _LOADED[key]
  return config.copy_and_resolve_references(), params
