"""Generator invariants: layouts, ranges, mask counts, determinism, disjoint splits."""

import numpy as np
import pytest

from jaxformer.data import parse_spec, tasks

SMALL = {
  "mqar": "mqar:vocab_size=64,seq_len=32,num_kv_pairs=4,num_examples=500,num_test_examples=500",
  "induction": "induction:vocab_size=32,seq_len=24,num_examples=500,num_test_examples=500",
  "copy": "copy:vocab_size=16,seq_len=20,copy_len=6,num_examples=500,num_test_examples=500",
  "selective_copy": "selective_copy:vocab_size=16,seq_len=24,num_tokens=5,num_examples=500,"
  "num_test_examples=500",
  "needle": "needle:vocab_size=64,seq_len=24,distance=9,num_examples=500,num_test_examples=500",
  "facts": "facts:num_subjects=8,num_relations=4,seq_len=20,num_examples=500,num_test_examples=500",
}
SCORED_PER_ROW = {
  "mqar": 4,
  "induction": 1,
  "copy": 6,
  "selective_copy": 5,
  "needle": 1,
  "facts": 6,
}


def gen(spec, split="train", **override):
  name, params = parse_spec(spec)
  return tasks.generate(name, {**params, **override}, split)


@pytest.mark.parametrize("name", list(SMALL))
def test_shapes_dtypes_ranges_and_mask_counts(name):
  _, p = parse_spec(SMALL[name])
  a = gen(SMALL[name])
  for k in ("inputs", "targets", "mask"):
    assert a[k].shape == (500, p["seq_len"]) and a[k].dtype == np.int32
  for k in ("inputs", "targets"):
    assert a[k].min() >= 0 and a[k].max() < p["vocab_size"]
  assert set(np.unique(a["mask"])) == {0, 1}
  np.testing.assert_array_equal(a["mask"].sum(1), SCORED_PER_ROW[name])


@pytest.mark.parametrize("name", list(SMALL))
def test_targets_are_next_tokens_where_unscored(name):
  a = gen(SMALL[name])
  off = a["mask"][:, :-1] == 0
  np.testing.assert_array_equal(a["targets"][:, :-1][off], a["inputs"][:, 1:][off])


@pytest.mark.parametrize("name", list(SMALL))
def test_deterministic_by_seed_and_splits_disjoint(name):
  a, b = gen(SMALL[name]), gen(SMALL[name])
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  other_seed = gen(SMALL[name], seed=1)
  assert not np.array_equal(a["inputs"], other_seed["inputs"])
  test = gen(SMALL[name], "test")
  train_rows = {r.tobytes() for r in a["inputs"]}
  assert not any(r.tobytes() in train_rows for r in test["inputs"])


def test_mqar_every_query_answers_the_value_paired_with_its_key():
  V, K = 64, 4
  a = gen(SMALL["mqar"])
  x, y, m = a["inputs"], a["targets"], a["mask"]
  keys, values = x[:, 0 : 2 * K : 2], x[:, 1 : 2 * K : 2]
  assert keys.min() >= 1 and keys.max() < V // 2
  assert values.min() >= V // 2 and values.max() < V
  assert all(len(set(r)) == K for r in keys) and all(len(set(r)) == K for r in values)
  for row in range(len(x)):
    pairs = dict(zip(keys[row], values[row], strict=True))
    (queries,) = np.nonzero(m[row])
    assert queries.min() >= 2 * K and np.all((queries - 2 * K) % 2 == 0)
    assert sorted(x[row, queries]) == sorted(pairs)  # every key queried exactly once
    for q in queries:
      assert y[row, q] == pairs[x[row, q]]


def test_mqar_blanks_are_zero_unless_random_non_queries():
  a = gen(SMALL["mqar"], random_non_queries=False)
  region = a["inputs"][:, 8:]
  scored = a["mask"][:, 8:] == 1
  assert np.all(region[~scored] == 0) and np.all(region[scored] > 0)
  noisy = gen(SMALL["mqar"])["inputs"][:, 8:][~scored]
  assert len(np.unique(noisy)) > 50  # uniform ids over the vocabulary


def test_mqar_query_gaps_follow_the_power_law():
  """With one pair, the query's gap g is drawn with p(g) ~ a (g+1)^(a-1) (Zoology)."""
  spec = "mqar:vocab_size=64,seq_len=34,num_kv_pairs=1,num_examples=20000"
  for a in (0.01, 1.0):
    gaps = (np.argmax(gen(spec, power_a=a)["mask"], axis=1) - 2) // 2
    g = np.arange(1, 17.0)
    p = a * g ** (a - 1)
    p /= p.sum()
    freq = np.bincount(gaps, minlength=16) / len(gaps)
    np.testing.assert_allclose(freq, p, atol=0.015)


def test_distinct_rows_have_no_repeats_and_weights_order_the_draws():
  rng = np.random.default_rng(0)
  for pool, k in ((1000, 5), (6, 6), (40, 30)):  # rejection branch, then clocks
    d = tasks.distinct(rng, 300, pool, k)
    assert d.shape == (300, k) and d.min() >= 0 and d.max() < pool
    assert all(len(set(r)) == k for r in d)
  p = np.array([0.7, 0.2, 0.1])
  d = tasks.distinct(rng, 20000, 3, 2, p=p)
  np.testing.assert_allclose(np.bincount(d[:, 0]) / 20000, p, atol=0.015)  # first draw ~ p
  # second draw given first=0 ~ p[1:] renormalized (successive sampling)
  second = d[d[:, 0] == 0, 1]
  np.testing.assert_allclose(np.mean(second == 1), 0.2 / 0.3, atol=0.02)


def test_induction_pattern():
  a = gen(SMALL["induction"])
  x, y = a["inputs"], a["targets"]
  for row in range(len(x)):
    (where,) = np.nonzero(x[row] == x[row, -1])
    assert len(where) == 2 and where[1] == x.shape[1] - 1 and where[0] <= x.shape[1] - 3
    assert y[row, -1] == x[row, where[0] + 1] != x[row, -1]


def test_copy_and_selective_copy_answer_the_data_in_order():
  a = gen(SMALL["copy"])
  x, y, m = a["inputs"], a["targets"], a["mask"] == 1
  np.testing.assert_array_equal(y[m].reshape(-1, 6), x[:, :6])
  assert np.all(x[:, :6] >= 2) and np.all(x[:, 6] == 1)
  a = gen(SMALL["selective_copy"])
  x, y, m = a["inputs"], a["targets"], a["mask"] == 1
  region = x[:, :19]  # seq_len 24 - 5 tokens
  assert np.all(x[:, 19] == 1) and np.all((region > 0).sum(1) == 5)
  np.testing.assert_array_equal(y[m].reshape(-1, 5), region[region > 0].reshape(-1, 5))
  starts = np.argmax(region > 0, axis=1)
  assert len(np.unique(starts)) > 5  # the data positions vary from example to example


def test_needle_fact_at_the_chosen_distance():
  a = gen(SMALL["needle"])
  x, y = a["inputs"], a["targets"]
  L, d = 24, 9
  np.testing.assert_array_equal(x[:, L - 1 - d], x[:, -1])
  np.testing.assert_array_equal(y[:, -1], x[:, L - d])
  assert np.all(x[:, -1] < 32) and np.all(x[:, L - d] >= 32)
  assert np.all((x == x[:, -1:]).sum(1) == 2)  # noise never repeats the key


def test_facts_answer_one_fixed_table_that_only_the_pair_determines():
  S, R = 8, 4
  train, test = gen(SMALL["facts"]), gen(SMALL["facts"], "test")
  table = tasks.fact_table(S, R, 0)
  for a in (train, test):  # both splits read the same table
    x, y, m = a["inputs"], a["targets"], a["mask"]
    s, r, o = x[:, 0:18:3], x[:, 1:18:3], x[:, 2:18:3]
    assert s.min() >= 1 and s.max() <= S and r.min() >= 1 + S and r.max() <= S + R
    np.testing.assert_array_equal(o, table[s - 1, r - 1 - S])
    np.testing.assert_array_equal(y[m == 1].reshape(-1, 6), o)  # scored at r: its object
    assert np.all(x[:, 18:] == 0)
    pairs = s * 100 + r
    assert all(len(set(row)) == 6 for row in pairs)  # no fact repeats within an example
  # each relation's column is a permutation of the S objects: r alone says nothing
  for col in table.T:
    np.testing.assert_array_equal(np.sort(col), np.arange(1 + S + R, 1 + 2 * S + R))
  assert not np.array_equal(table, tasks.fact_table(S, R, 1))
  assert tasks.chance("facts", parse_spec(SMALL["facts"])[1], 1 + 2 * S + R)[0] == 1 / S
