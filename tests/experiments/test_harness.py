import hashlib
import os

import pytest

from experiments import harness
from jaxformer import ladder
from jaxformer.data import text


def test_train_config_replaces_model_and_training_fields():
  config = harness.train_config(
    "rnn", "mqar:vocab_size=16,seq_len=8,num_kv_pairs=1", {"cell": "elman", "d_model": 8}, seed=3
  )
  assert (config.rung, config.model.cell, config.model.d_model, config.seed) == (
    "rnn",
    "elman",
    8,
    3,
  )
  assert config.task == "mqar:vocab_size=16,seq_len=8,num_kv_pairs=1"
  assert config.model.num_layers == ladder.default_config("rnn").num_layers  # untouched


def test_train_config_names_an_unknown_field():
  with pytest.raises(ladder.ConfigError, match="model.colour"):
    harness.train_config("rnn", "mqar", {"colour": 1})
  with pytest.raises(ladder.ConfigError, match="stepz"):
    harness.train_config("rnn", "mqar", stepz=1)


def test_the_pinned_source_corpus_is_the_registered_stream():
  data = text.read(os.path.join(harness.REPO_ROOT, harness.SOURCE_CORPUS))
  assert hashlib.sha256(data).hexdigest() == harness.SOURCE_CORPUS_SHA256
  assert len(data.decode("utf-8")) == 589_846
