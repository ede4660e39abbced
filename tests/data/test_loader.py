"""The grain loader: sharding, determinism, resume, padding, global arrays."""

import itertools
import json

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jaxformer.data import DataError, InMemory, Loader, get_dataset, in_memory, to_global
from jaxformer.data import loader as loader_lib
from jaxformer.data.loader import checksum, disagreeing_replicas

L = 3


class IndexSource:
  """Example i holds i everywhere, so a batch shows which examples it read."""

  def __init__(self, n):
    self.n, self.batch_reads = n, []

  def __len__(self):
    return self.n

  def __getitem__(self, i):
    raise AssertionError("the loader must read whole batches")

  def __getitems__(self, ids):
    self.batch_reads.append(len(ids))
    full = lambda i: np.full(L, i, np.int32)  # noqa: E731
    return [{"inputs": full(i), "targets": full(i), "mask": full(1)} for i in ids]


def ids(batch):
  return batch["inputs"][:, 0].tolist()


def take(loader, n):
  return [next(loader) for _ in range(n)]


def upto(loader, n):
  """The first n batches, fewer where the loader stops first."""
  return list(itertools.islice(loader, n))


def test_two_processes_cover_each_example_once_per_epoch():
  n, G = 64, 16
  loaders = [
    Loader(IndexSource(n), G, seed=3, num_epochs=2, shard_index=p, shard_count=2) for p in (0, 1)
  ]
  assert loaders[0].steps_per_epoch == 4 and loaders[0].num_steps == 8
  batches = [list(loader) for loader in loaders]  # stops after num_epochs
  assert [len(b) for b in batches] == [8, 8]
  assert batches[0][0]["inputs"].shape == (8, L)
  epochs = []
  for e in range(2):
    seen = [i for p in (0, 1) for b in batches[p][4 * e : 4 * e + 4] for i in ids(b)]
    assert sorted(seen) == list(range(n))
    epochs.append(seen)
  assert epochs[0] != epochs[1]  # reshuffled each epoch
  assert ids(batches[0][0]) != list(range(8))  # shuffled at all


def test_global_batch_does_not_depend_on_the_process_count():
  single = take(Loader(IndexSource(40), 8, seed=1, shard_index=0, shard_count=1), 7)
  halves = [
    take(Loader(IndexSource(40), 8, seed=1, shard_index=p, shard_count=2), 7) for p in (0, 1)
  ]
  for s, a, b in zip(single, *halves, strict=True):
    assert ids(s) == ids(a) + ids(b)


def test_seed_and_shuffle_control_the_order():
  def first(**kw):
    return ids(next(Loader(IndexSource(50), 10, shard_index=0, shard_count=1, **kw)))

  assert first(seed=0) == first(seed=0) != first(seed=1)
  assert first(seed=0, shuffle=False) == list(range(10))


def test_one_read_per_local_batch():
  source = IndexSource(100)
  take(Loader(source, 20, seed=0, shard_index=1, shard_count=2, num_threads=0), 3)
  assert source.batch_reads == [10, 10, 10]


def test_resumed_loader_yields_exactly_the_next_batches():
  make = lambda: Loader(IndexSource(30), 6, seed=7, shard_index=1, shard_count=2)  # noqa: E731
  original = make()
  take(original, 7)  # past the first epoch boundary (5 steps per epoch)
  state = json.loads(json.dumps(original.get_state()))
  expected = take(original, 6)
  resumed = make()
  resumed.set_state(state)
  assert [ids(b) for b in take(resumed, 6)] == [ids(b) for b in expected]


def test_state_from_another_stream_is_refused():
  state = Loader(IndexSource(30), 6, seed=7, shard_index=0, shard_count=1).get_state()
  other = Loader(IndexSource(30), 6, seed=8, shard_index=0, shard_count=1)
  with pytest.raises(DataError, match=r"^loader state seed=7: this loader has 8"):
    other.set_state(state)


def test_last_partial_batch_is_padded_with_masked_repeats():
  n, G = 20, 8
  per_process = [
        list(
            Loader(IndexSource(n), G, seed=0, num_epochs=1, drop_remainder=False,
                   shard_index=p, shard_count=2)
        )
        for p in (0, 1)
    ]  # fmt: skip
  assert [len(b) for b in per_process] == [3, 3]
  last = [b[-1] for b in per_process]
  assert [int(b["mask"][:, 0].sum()) for b in last] == [4, 0]  # 4 real, 4 padding
  real = [
        i for b in per_process for batch in b
        for i, m in zip(ids(batch), batch["mask"][:, 0], strict=True) if m
    ]  # fmt: skip
  assert sorted(real) == list(range(n))


@pytest.mark.parametrize(
  "kwargs, starts",
  [
    ({"global_batch_size": 9, "shard_count": 2}, "loader.global_batch_size=9: must be"),
    ({"global_batch_size": 64, "shard_count": 1}, "loader.global_batch_size=64: the dataset"),
    ({"global_batch_size": 8, "shard_count": 2, "shard_index": 2}, "loader.shard_index"),
    ({"global_batch_size": 8, "shard_count": 1, "num_epochs": 0}, "loader.num_epochs=0"),
  ],
)
def test_bad_loader_arguments(kwargs, starts):
  kwargs = {"shard_index": 0, **kwargs}
  with pytest.raises(DataError, match="^" + starts):
    Loader(IndexSource(40), seed=0, **kwargs)


def test_tfds_dataset_through_the_loader_onto_the_mesh(tmp_path):
  ds = get_dataset(
    "mqar:vocab_size=64,seq_len=16,num_kv_pairs=4,num_examples=64,num_test_examples=8",
    "train",
    data_dir=str(tmp_path),
  )
  loader = Loader(ds, 16, seed=0)  # shard index and count default to the process: 0 of 1
  batch = next(loader)
  assert loader.get_state()["spec"] == ds.spec
  rows = {ds.source[i]["inputs"].tobytes(): i for i in range(len(ds))}
  picked = [rows[r.tobytes()] for r in batch["inputs"]]
  for j, i in enumerate(picked):
    for k in ("inputs", "targets", "mask"):
      np.testing.assert_array_equal(batch[k][j], ds.source[i][k])
  mesh = jax.make_mesh((8,), ("data",))
  arrays = to_global(batch, NamedSharding(mesh, PartitionSpec("data")), 16)
  assert arrays["inputs"].shape == (16, 16) and len(arrays["inputs"].sharding.device_set) == 8
  np.testing.assert_array_equal(np.asarray(arrays["targets"]), batch["targets"])


def held(n):
  """IndexSource(n)'s records as an InMemory source."""
  full = lambda v: np.repeat(np.arange(n, dtype=np.int32)[:, None] * v, L, axis=1)  # noqa: E731
  return InMemory({"inputs": full(1), "targets": full(1), "mask": full(0) + 1})


@pytest.mark.parametrize(
  "n, G, shuffle, drop_remainder, seed, shards",
  [(30, 6, True, True, 7, 2), (10, 4, True, False, 3, 1), (13, 5, False, False, 1, 1),
   (64, 8, True, True, 2**32 - 2, 2)],
)  # fmt: skip
def test_in_memory_source_yields_grains_batches(n, G, shuffle, drop_remainder, seed, shards):
  """Its own index path (no grain pipeline) gives the same batches over several epochs (seed
  + epoch), the same padding, the same stop after num_epochs and the same resume."""
  for p in range(shards):
    for epochs in (None, 3):
      kw = dict(seed=seed, shuffle=shuffle, drop_remainder=drop_remainder, num_epochs=epochs,
                shard_index=p, shard_count=shards)  # fmt: skip
      grain_batches = upto(Loader(IndexSource(n), G, **kw), 12)
      mine = Loader(held(n), G, **kw)
      assert isinstance(mine._iter, loader_lib._IndexedBatches)
      for a, b in zip(grain_batches, upto(mine, 12), strict=True):
        for k in a:
          np.testing.assert_array_equal(a[k], b[k])
          assert a[k].dtype == b[k].dtype
      if epochs is not None:
        steps = epochs * mine.steps_per_epoch
        assert len(list(Loader(held(n), G, **kw))) == steps
  original = Loader(held(30), 6, seed=7, shard_index=0, shard_count=1)
  take(original, 7)
  state = json.loads(json.dumps(original.get_state()))
  expected = take(original, 6)
  resumed = Loader(held(30), 6, seed=7, shard_index=0, shard_count=1)
  resumed.set_state(state)
  assert [ids(b) for b in take(resumed, 6)] == [ids(b) for b in expected]


def test_in_memory_holds_the_split_once_per_process(tmp_path):
  spec = "mqar:vocab_size=64,seq_len=16,num_kv_pairs=4,num_examples=64,num_test_examples=8"
  ds = get_dataset(spec, "train", data_dir=str(tmp_path))
  held_ds = in_memory(ds)
  assert isinstance(held_ds.source, InMemory) and len(held_ds) == len(ds) == 64
  for i in (0, 17, 63):
    for k, v in ds.source[i].items():
      np.testing.assert_array_equal(held_ds.source[i][k], v)
  assert in_memory(get_dataset(spec, "train", data_dir=str(tmp_path))).source is held_ds.source
  assert in_memory(held_ds) is held_ds
  test_split = in_memory(get_dataset(spec, "test", data_dir=str(tmp_path)))
  assert len(test_split) == 8 and test_split.source is not held_ds.source
  # a split over max_bytes stays where it is: 64 records of 3 x 16 int32 are 12,288 bytes
  assert in_memory(ds, max_bytes=12_287) is ds
  assert isinstance(in_memory(ds, max_bytes=12_288).source, InMemory)


def test_checksum_sees_any_changed_value():
  batch = next(Loader(IndexSource(40), 8, seed=1))
  other = {k: v.copy() for k, v in batch.items()}
  other["targets"][3, 1] += 1
  assert checksum(batch.values()) == checksum([v.copy() for v in batch.values()])
  assert checksum(batch.values()) != checksum(other.values())
  assert 0 <= checksum(batch.values()) < 2**31  # fits the int32 the processes all-gather


def test_replicas_of_batch_rows_must_agree():
  # 2 processes holding rows 0.. and 4.. each (a tensor axis across them), and disjoint rows
  disagreeing_replicas([[(0, 5), (4, 7)], [(0, 5), (4, 7)]])
  disagreeing_replicas([[(0, 5)], [(4, 5)]])
  with pytest.raises(DataError, match=r"^loader: processes 0 and 1 hold the batch rows from 4"):
    disagreeing_replicas([[(0, 5), (4, 7)], [(0, 5), (4, 8)]])
