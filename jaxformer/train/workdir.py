"""A run's workdir: what training writes into it, and reading a trained run back.

  WORKDIR/config.json      the config as run: model.vocab_size / max_len sized for the task
  WORKDIR/task.json        the task's spec, vocab_size, seq_len and (char level) alphabet
  WORKDIR/tokenizer.json   a BPE-level text task's tokenizer (jaxformer.data.bpe)
  WORKDIR/checkpoints/N/   verified Orbax checkpoints (jaxformer.train.checkpoint)
  WORKDIR/metrics.jsonl    and tensorboard/ (jaxformer.train.metrics)

  run = workdir.load("/tmp/jaxformer/text")     # params only: no optimizer state is read
  run.model.apply({"params": run.params}, tokens_BL)
  run.text.encode("ROMEO:") / run.text.decode(ids)   # for text tasks

A workdir may be a local path or any `etils.epath` URL (`gs://bucket/run`): every file here
goes through epath, checkpoints through Orbax. Reading a run needs only the workdir: the
alphabet of a char-level task is kept in task.json, so the text files need not be present.
"""

import dataclasses
import json
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from etils import epath

from jaxformer import data, ladder
from jaxformer.data import bpe
from jaxformer.train import config as config_lib
from jaxformer.train import program as program_lib
from jaxformer.train.checkpoint import Checkpointer, CheckpointError

CONFIG_FILE = "config.json"
TASK_FILE = "task.json"
CHECKPOINT_DIR = "checkpoints"


def checkpoint_dir(workdir):
  return epath.Path(workdir) / CHECKPOINT_DIR


def write_run(workdir, config, dataset):
  """Writes config.json (the resolved config) and task.json (what decoding needs)."""
  root = epath.Path(workdir)
  root.mkdir(parents=True, exist_ok=True)
  (root / CONFIG_FILE).write_text(config.to_json(indent=2, sort_keys=True) + "\n")
  task = {
    "spec": dataset.spec,
    "vocab_size": dataset.vocab_size,
    "seq_len": dataset.seq_len,
    "chars": dataset.chars,
  }
  if dataset.tokenizer is not None:  # a BPE: decoding the run needs only the workdir
    (root / bpe.FILE).write_text(dataset.tokenizer.to_str())
    task["tokenizer"] = bpe.FILE
  (root / TASK_FILE).write_text(json.dumps(task, indent=2, ensure_ascii=False) + "\n")


def read_config(workdir):
  """config.json as a locked ConfigDict with the training config's field types."""
  raw = _read_json(workdir, CONFIG_FILE)
  try:
    config = config_lib.get_config(raw["rung"])
    with config.unlocked():
      _merge(config, raw, "")
  except (KeyError, TypeError, ValueError) as e:
    if isinstance(e, ladder.ConfigError):
      raise
    raise CheckpointError(
      f"{epath.Path(workdir) / CONFIG_FILE}: not a training config ({type(e).__name__}: {e})"
    ) from None
  return config


def _merge(target, raw, prefix):
  for key, value in raw.items():
    if key not in target:
      raise KeyError(f"{prefix}{key}")
    if isinstance(target[key], ml_collections.ConfigDict):
      _merge(target[key], value, f"{prefix}{key}.")
    else:
      target[key] = tuple(value) if isinstance(value, list) else value


def read_task(workdir):
  """task.json as a Dataset with no examples: its encode / decode and sizes."""
  raw = _read_json(workdir, TASK_FILE)
  return data.Dataset(
    source=(),
    vocab_size=int(raw["vocab_size"]),
    seq_len=int(raw["seq_len"]),
    spec=raw["spec"],
    split="test",
    chars=raw.get("chars"),
    tokenizer=bpe.from_json((epath.Path(workdir) / raw["tokenizer"]).read_text())
    if raw.get("tokenizer")
    else None,
  )


def _read_json(workdir, name):
  path = epath.Path(workdir) / name
  if not path.exists():
    raise CheckpointError(
      f"--workdir={workdir}: no {name}; not a training run's workdir (or one from before "
      f"runs wrote {name}: train it again)"
    )
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{path}: not valid JSON ({e})") from None


@dataclasses.dataclass(frozen=True)
class Run:
  """A trained run read back from its workdir."""

  config: ml_collections.ConfigDict  # as trained (sizes resolved)
  text: data.Dataset  # the task's sizes, encode and decode (no examples)
  model: nn.Module
  params: Any
  step: int  # the checkpoint's step


def abstract_params(model, seq_len):
  """ShapeDtypeStructs of `model`'s unboxed params (nothing is computed)."""
  tokens = jax.ShapeDtypeStruct((1, seq_len), jnp.int32)
  shapes = jax.eval_shape(lambda t: model.init(jax.random.key(0), t)["params"], tokens)
  return nn.meta.unbox(shapes)


def restore_params(workdir, config, target):
  """(step, params) of the newest checkpoint that verifies, reading only the params.

  `target`: the params' ShapeDtypeStructs (with shardings, or none for the first device).
  The checkpoint must have been written for `config` (its fingerprint).
  """
  directory = checkpoint_dir(workdir)
  reader = Checkpointer(
    directory, read_only=True, fingerprint=program_lib.fingerprint(config), max_to_keep=None
  )
  try:
    restored = reader.restore_latest({"params": target})
  finally:
    reader.close()
  if restored is None:
    raise CheckpointError(f"--workdir={workdir}: no checkpoint in {directory}; train first")
  step, state, _ = restored
  return step, state["params"]


def load(workdir):
  """The trained run in `workdir`: config, task, model and the newest verified params."""
  config = read_config(workdir)
  text = read_task(workdir)
  model = ladder.build(config.rung, config.model)
  step, params = restore_params(workdir, config, abstract_params(model, text.seq_len))
  return Run(config=config, text=text, model=model, params=params, step=step)
