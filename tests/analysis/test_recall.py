"""recall: per-replica MQAR accuracy at each pair count P equals a direct, one-replica count."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxformer import data, ladder
from jaxformer.analysis import recall

V, L = 16, 16
TEMPLATE = "mqar:vocab_size=16,seq_len=16,num_kv_pairs={P},num_examples=8,num_test_examples=40"


@pytest.fixture(scope="module")
def replicas():
  """A tiny transformer and 2 replicas' params (two inits), stacked [2, ...] per leaf."""
  config = ladder.default_config("transformer")
  config.vocab_size, config.max_len, config.d_model, config.d_ff = V, L, 16, 32
  config.num_layers = 1
  model = ladder.build("transformer", config)
  each = [
    nn.meta.unbox(model.init(jax.random.key(seed), np.zeros((1, L), np.int32)))["params"]
    for seed in (0, 1)
  ]
  return model, each, jax.tree.map(lambda *x: np.stack(x), *each)


def reference(model, params, spec, data_dir):
  """One replica, the whole split in one call, no vmap, no padding."""
  test = data.get_dataset(spec, "test", data_dir=data_dir)
  rows = test.source.__getitems__(list(range(len(test))))
  x, y, m = (np.stack([r[k] for r in rows]) for k in ("inputs", "targets", "mask"))
  logits = np.asarray(model.apply({"params": params}, x))
  return float(((np.argmax(logits, -1) == y) * m).sum() / m.sum())


def test_by_pairs_equals_a_direct_count_per_replica(replicas, tmp_path):
  model, each, stacked = replicas
  # batch 16 on 40 examples: the last batch is padded (mask 0), which must not count
  got = recall.by_pairs(
    model, stacked, TEMPLATE, pairs=(1, 2, 4), batch_size=16, data_dir=str(tmp_path)
  )
  assert list(got) == [1, 2, 4]
  for P, acc in got.items():
    assert acc.shape == (2,) and acc.dtype == np.float64
    assert np.all((acc >= 0) & (acc <= 1))
    spec = TEMPLATE.format(P=P)
    want = [reference(model, params, spec, str(tmp_path)) for params in each]
    np.testing.assert_allclose(acc, want, rtol=0, atol=1e-12)
  assert not np.array_equal(got[1], got[4])  # each P read its own split


def test_spec_for_pairs_may_be_a_function_or_the_mixed_training_spec(replicas, tmp_path):
  model, _, stacked = replicas
  d = str(tmp_path)
  by_template = recall.by_pairs(model, stacked, TEMPLATE, pairs=(2, 4), data_dir=d)
  by_function = recall.by_pairs(
    model, stacked, lambda P: TEMPLATE.format(P=P), pairs=(2, 4), data_dir=d
  )
  mixed = TEMPLATE.replace("{P}", "1+2+4")  # P replaces the set: the same spec per P
  by_mixed = recall.by_pairs(model, stacked, mixed, pairs=(2, 4), data_dir=d)
  for P in (2, 4):
    np.testing.assert_array_equal(by_template[P], by_function[P])
    np.testing.assert_array_equal(by_template[P], by_mixed[P])
  np.testing.assert_array_equal(
    recall.accuracy(model, stacked, TEMPLATE.format(P=2), data_dir=d), by_template[2]
  )


def test_a_spec_that_is_not_mqar_of_p_pairs_is_refused(replicas, tmp_path):
  model, _, stacked = replicas
  with pytest.raises(data.DataError, match=r"spec_for_pairs\(4\)"):
    recall.by_pairs(model, stacked, lambda P: TEMPLATE.format(P=2), pairs=(4,))
  with pytest.raises(data.DataError, match="num_kv_pairs=8"):  # 4*8 > seq_len=16
    recall.by_pairs(model, stacked, TEMPLATE, pairs=(8,), data_dir=str(tmp_path))
  too_wide = "mqar:vocab_size=64,seq_len=16,num_kv_pairs=2,num_test_examples=8"
  with pytest.raises(data.DataError, match="token id"):  # ids the model's vocab lacks
    recall.accuracy(model, stacked, too_wide, data_dir=str(tmp_path))
