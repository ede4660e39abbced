"""MQAR over a set of pair counts (`num_kv_pairs=4+8+16`): the spec, the draws, the layout."""

import hashlib

import numpy as np
import pytest

from jaxformer import data
from jaxformer.data import DataError, format_spec, get_dataset, parse_spec, tasks

MIXED = "mqar:vocab_size=64,seq_len=64,num_kv_pairs=16+4+8,num_examples=600,num_test_examples=300"


def gen(spec, split="train", **override):
  name, params = parse_spec(spec)
  return tasks.generate(name, {**params, **override}, split)


def test_a_set_parses_to_a_sorted_tuple_and_the_canonical_form_round_trips():
  name, params = parse_spec(MIXED)
  assert params["num_kv_pairs"] == (4, 8, 16)
  canonical = format_spec(name, params)
  assert "num_kv_pairs=4+8+16," in canonical
  assert parse_spec(canonical) == (name, params)
  assert format_spec(*parse_spec(canonical)) == canonical
  # one value stays a plain int, printed as before
  _, one = parse_spec("mqar:seq_len=32,num_kv_pairs=4")
  assert one["num_kv_pairs"] == 4 and type(one["num_kv_pairs"]) is int
  assert "num_kv_pairs=4," in format_spec("mqar", one)


@pytest.mark.parametrize(
  "value, starts",
  [
    ("", "mqar.num_kv_pairs=: expected int or distinct ints joined by '+'"),
    ("+", "mqar.num_kv_pairs=+: expected distinct ints"),
    ("4+", "mqar.num_kv_pairs=4+: expected distinct ints"),
    ("4+x", "mqar.num_kv_pairs=4+x: expected distinct ints"),
    ("4+2.5", "mqar.num_kv_pairs=4+2.5: expected distinct ints"),
    ("4+4", "mqar.num_kv_pairs=4+4: a value is given twice"),
    ("0+4", "mqar.num_kv_pairs=0+4: must be >= 1"),
    ("4+20", "mqar.num_kv_pairs=4+20: needs 2*num_kv_pairs"),  # 4*20 > seq_len=64
  ],
)
def test_bad_sets_raise_one_error_naming_the_field(value, starts):
  with pytest.raises(DataError) as info:
    parse_spec(f"mqar:vocab_size=64,seq_len=64,num_kv_pairs={value}")
  assert str(info.value).startswith(starts), str(info.value)


def test_a_set_whose_largest_count_outgrows_the_vocabulary_is_rejected():
  # 15 distinct keys in [1, 16): 16 pairs do not fit, whatever the smaller counts
  with pytest.raises(DataError, match=r"num_kv_pairs=4\+16 \(for its largest, 16\)"):
    parse_spec("mqar:vocab_size=32,seq_len=64,num_kv_pairs=4+16")


def test_mixed_examples_are_laid_out_like_single_count_ones():
  a = gen(MIXED)
  x, y, m = a["inputs"], a["targets"], a["mask"]
  for k in a:
    assert a[k].shape == (600, 64) and a[k].dtype == np.int32
  P_N = m.sum(1)
  assert set(np.unique(P_N)) == {4, 8, 16}  # every example's P is in the set, and each occurs
  assert np.all(np.bincount(P_N)[[4, 8, 16]] > 150)  # uniform: ~200 each
  for row in range(len(x)):
    P = P_N[row]
    keys, values = x[row, 0 : 2 * P : 2], x[row, 1 : 2 * P : 2]
    assert keys.min() >= 1 and keys.max() < 32 and len(set(keys)) == P
    assert values.min() >= 32 and len(set(values)) == P
    (queries,) = np.nonzero(m[row])
    assert queries.min() >= 2 * P and np.all((queries - 2 * P) % 2 == 0)
    pairs = dict(zip(keys, values, strict=True))
    assert sorted(x[row, queries]) == sorted(pairs)  # every key queried once
    assert all(y[row, q] == pairs[x[row, q]] for q in queries)
  off = m[:, :-1] == 0
  np.testing.assert_array_equal(y[:, :-1][off], x[:, 1:][off])


def test_mixed_draws_are_deterministic_by_seed_and_splits_disjoint():
  a, b = gen(MIXED), gen(MIXED)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  assert not np.array_equal(a["mask"], gen(MIXED, seed=1)["mask"])
  train_rows = {r.tobytes() for r in a["inputs"]}
  assert not any(r.tobytes() in train_rows for r in gen(MIXED, "test")["inputs"])


# sha256 of train then test (inputs, mask, targets) as the generator drew them before mixed
# pair counts existed: a single count must keep drawing exactly these arrays.
BEFORE = {
  "mqar:vocab_size=64,seq_len=32,num_kv_pairs=4,num_examples=500,num_test_examples=500": (
    "3326a029ced95752"
  ),
  "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2,num_examples=256,num_test_examples=32": (
    "91f0c3aaa317fb88"
  ),
  "mqar:vocab_size=64,seq_len=34,num_kv_pairs=1,num_examples=2000,power_a=1.0,"
  "random_non_queries=false": "7bd706e2a1b3de23",
}


@pytest.mark.parametrize("spec", list(BEFORE))
def test_one_pair_count_draws_the_same_arrays_as_before(spec):
  h = hashlib.sha256()
  for split in ("train", "test"):
    a = gen(spec, split)
    for k in sorted(a):
      h.update(a[k].tobytes())
  assert h.hexdigest()[:16] == BEFORE[spec]


def test_chance_pools_the_queries():
  # accuracy is correct / scored over all queries: one right guess per example in
  # expectation, over mean(P) queries per example
  level, how = tasks.chance(*parse_spec(MIXED), 64)
  assert level == pytest.approx(3 / 28) and "1/mean(P)" in how and "{4, 8, 16}" in how
  m = gen(MIXED, num_examples=20000)["mask"]
  guessed = (m.sum(1) * (1 / m.sum(1))).sum() / m.sum()  # expected correct / scored
  assert guessed == pytest.approx(level, rel=0.02)
  assert tasks.chance(*parse_spec("mqar:seq_len=32,num_kv_pairs=4"), 64) == (
    0.25,
    "a guess among the K values in context",
  )


def test_a_mixed_spec_prepares_and_reads_back(tmp_path):
  ds = get_dataset(MIXED, "test", data_dir=str(tmp_path))
  assert ds.spec == format_spec(*parse_spec(MIXED))
  expected = tasks.generate(*parse_spec(MIXED), "test")
  records = ds.source.__getitems__(list(range(len(ds))))
  for k, v in expected.items():
    np.testing.assert_array_equal(np.stack([r[k] for r in records]), v)
  assert data.chance(ds)[0] == pytest.approx(3 / 28)
