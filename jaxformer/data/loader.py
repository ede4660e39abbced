"""The loader: grain shuffles, batches and repeats indices; one read per batch.

grain's MapDataset gives the index pipeline: `range(n)`, a per-epoch `shuffle` by seed
(epoch e uses seed + e), `batch` into global batches within an epoch, `repeat`. Step s
is random access (`batches[s]`), so the iterator state is one step counter and a
resumed loader yields exactly the batch the interrupted one would have.

Each step's global batch is the same for any process count. It is read in `shard_count`
contiguous blocks of global_batch_size // shard_count examples; a process reads block
`shard_index`, the rows its devices hold (`jaxformer.train.sharding.process_batch_shard`
derives both from the mesh), which is the order `jax.make_array_from_process_local_data` (see
`to_global`) reassembles. Processes whose devices hold the same batch shard (a tensor axis that
spans processes) read the same block; `check_replicas` verifies that they fed the same data.
Without a mesh the default is one block per process.

Records are read with one `source.__getitems__(indices)` per local batch: grain 0.2.18's
own batching reads one record at a time, which is slower (experiments/bench_loader.py).
grain's thread prefetch (`to_iter_dataset(ReadOptions)`) reads the next batches while
the training step runs; its iterator state is the number of batches returned.

`in_memory(dataset)` holds a split's records as arrays, once per process: its batches are one
index each, with no per-record decode and no reader threads (what the experiments' sweeps read).

With drop_remainder=False the last batch of an epoch is padded to full size with
repeats of its own examples whose `mask` is 0: shapes stay static (no recompile) and
the padding adds nothing to a masked loss or accuracy.
"""

import collections
import dataclasses
import zlib
from typing import Any

import grain
import jax
import numpy as np
from grain.experimental import index_shuffle
from jax.experimental import multihost_utils

from jaxformer.data.spec import DataError

# in_memory: the largest split it holds, and what its process-wide cache keeps in all
IN_MEMORY_MAX_BYTES = 256 * 2**20
IN_MEMORY_CACHE_BYTES = 512 * 2**20
_IN_MEMORY = collections.OrderedDict()  # (prepared path, split) -> InMemory, oldest first


class InMemory:
  """A split's records as arrays [n, ...] by feature (the source `in_memory` gives a Dataset):
  `read_rows(ids)` is a batch in one fancy index per feature."""

  def __init__(self, arrays: dict[str, np.ndarray]):
    self.arrays = arrays
    self.nbytes = sum(v.nbytes for v in arrays.values())
    self._n = len(next(iter(arrays.values())))

  def __len__(self) -> int:
    return self._n

  def __getitem__(self, i) -> dict[str, np.ndarray]:
    return {k: v[i] for k, v in self.arrays.items()}

  def __getitems__(self, ids) -> list[dict[str, np.ndarray]]:
    return [self[i] for i in ids]

  def read_rows(self, ids) -> dict[str, np.ndarray]:
    return {k: v[ids] for k, v in self.arrays.items()}


def in_memory(dataset, max_bytes: int = IN_MEMORY_MAX_BYTES):
  """`dataset` (a prepared jaxformer.data.Dataset) with its records read into memory once per
  process (an InMemory source; the same records in the same order), or `dataset` itself when
  its split would take more than `max_bytes` (estimated from its first record). The cache
  keeps the most recent splits up to IN_MEMORY_CACHE_BYTES, keyed by the prepared directory,
  whose name hashes the spec."""
  source = dataset.source
  if isinstance(source, InMemory) or len(source) == 0:
    return dataset
  key = (dataset.path, dataset.split)
  held = _IN_MEMORY.get(key) if dataset.path else None
  if held is not None and held.nbytes > max_bytes:
    return dataset
  if held is None:
    first = source[0]
    if len(source) * sum(np.asarray(v).nbytes for v in first.values()) > max_bytes:
      return dataset
    records = source.__getitems__(list(range(len(source))))
    held = InMemory({k: np.stack([np.asarray(r[k]) for r in records]) for k in first})
    if dataset.path:
      _IN_MEMORY[key] = held
      while sum(h.nbytes for h in _IN_MEMORY.values()) > IN_MEMORY_CACHE_BYTES:
        _IN_MEMORY.popitem(last=False)
  else:
    _IN_MEMORY.move_to_end(key)
  return dataclasses.replace(dataset, source=held)


class Loader:
  """Iterates this process's share of global batches: dicts of [B_local, L] arrays."""

  def __init__(
    self,
    dataset,
    global_batch_size: int,
    *,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
    shard_index: int | None = None,
    shard_count: int | None = None,
    drop_remainder: bool = True,
    num_threads: int = 2,
    prefetch: int = 2,
  ):
    """num_threads reader threads keep up to `prefetch` batches ahead (0: no threads)."""
    self.source = getattr(dataset, "source", dataset)  # a Dataset or a bare source
    self.spec = getattr(dataset, "spec", None)
    n = len(self.source)
    count = jax.process_count() if shard_count is None else shard_count
    index = jax.process_index() if shard_index is None else shard_index
    G = global_batch_size
    if G < 1 or G % count:
      raise DataError(
        f"loader.global_batch_size={G}: must be a positive multiple of shard_count={count}"
      )
    if not 0 <= index < count:
      raise DataError(f"loader.shard_index={index}: must be in [0, {count})")
    if n == 0 or (drop_remainder and n < G):
      raise DataError(
        f"loader.global_batch_size={G}: the dataset has {n} examples, "
        f"fewer than one batch (drop_remainder={drop_remainder})"
      )
    if num_epochs is not None and num_epochs < 1:
      raise DataError(f"loader.num_epochs={num_epochs}: must be >= 1 or None")
    if not 0 <= seed < 2**32:
      raise DataError(f"loader.seed={seed}: must be in [0, 2**32)")
    self.global_batch_size, self.local_batch_size = G, G // count
    self.shard_index, self.shard_count = index, count
    self._config = {
      "seed": seed,
      "global_batch_size": G,
      "num_examples": n,
      "shuffle": shuffle,
      "drop_remainder": drop_remainder,
    }
    ids = grain.MapDataset.range(n)
    if shuffle:
      ids = ids.shuffle(seed=seed)
    batches = ids.batch(G, drop_remainder=drop_remainder)  # one epoch of global batches
    self.steps_per_epoch = len(batches)
    self.num_steps = None if num_epochs is None else num_epochs * len(batches)
    if isinstance(self.source, InMemory):  # an index per batch: no reader threads to feed
      self._iter = _IndexedBatches(
        n, G, seed, shuffle, self.steps_per_epoch, self.num_steps, self._read
      )
      return
    self._batches = batches.repeat(num_epochs).map(self._read)  # random access by step
    options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch)
    self._iter = self._batches.to_iter_dataset(options).__iter__()

  def _read(self, global_ids: np.ndarray) -> dict[str, np.ndarray]:
    """Global batch of indices -> this shard's examples, read in one call."""
    G, B = self.global_batch_size, self.local_batch_size
    ids = np.asarray(global_ids, dtype=np.int64)
    valid = np.arange(G) < len(ids)
    ids = np.resize(ids, G)  # pads a short last batch with its own examples
    lo = self.shard_index * B
    ids, valid = ids[lo : lo + B], valid[lo : lo + B]
    if isinstance(self.source, InMemory):
      batch = self.source.read_rows(ids)
    else:
      getitems = getattr(self.source, "__getitems__", None)
      records = getitems(ids.tolist()) if getitems else [self.source[i] for i in ids]
      batch = {k: np.stack([np.asarray(r[k]) for r in records]) for k in records[0]}
    batch["mask"] = (batch["mask"] * valid[:, None]).astype(np.int32)
    return batch

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    return next(self._iter)  # StopIteration after num_steps

  def get_state(self) -> dict[str, Any]:
    """JSON-serializable; save it with the training checkpoint."""
    step = self._iter.get_state()["next_index"]  # batches returned, not prefetched
    return {"step": step, **self._config, "spec": self.spec}

  def set_state(self, state: dict[str, Any]) -> None:
    """Continue from `state`: the next batch is the one after the saved step.

    The state is only valid for the same data, seed and batch size; any other loader
    would silently yield a different stream, so a mismatch raises.
    """
    for key, mine in {**self._config, "spec": self.spec}.items():
      if state.get(key) != mine:
        raise DataError(f"loader state {key}={state.get(key)!r}: this loader has {mine!r}")
    self._iter.set_state({"next_index": int(state["step"])})  # drops the prefetched


class _IndexedBatches:
  """The Loader's iterator over an InMemory source: step s's indices are those of grain's
  pipeline above (epoch e = s // steps_per_epoch shuffled by grain's index_shuffle at seed + e,
  4 rounds, as MapDataset.shuffle does; tests/data/test_loader.py compares them), computed
  for the batch's rows alone. grain's pipeline costs some 40 us of Python per example, about a
  quick sweep step's time per batch; this a few."""

  def __init__(self, n, G, seed, shuffle, steps_per_epoch, num_steps, read):
    self.n, self.G, self.seed, self.shuffle = n, G, seed, shuffle
    self.steps_per_epoch, self.num_steps = steps_per_epoch, num_steps
    self.read = read  # the Loader's _read: global indices -> this shard's batch
    self.next_index = 0

  def __iter__(self):
    return self

  def __next__(self):
    step = self.next_index
    if self.num_steps is not None and step >= self.num_steps:
      raise StopIteration
    epoch, batch = divmod(step, self.steps_per_epoch)
    ids = range(batch * self.G, min((batch + 1) * self.G, self.n))
    if self.shuffle:
      seed = (self.seed + epoch) % 2**32
      ids = [index_shuffle(i, max_index=self.n - 1, seed=seed, rounds=4) for i in ids]
    self.next_index += 1
    return self.read(np.asarray(ids, np.int64))

  def get_state(self):
    return {"next_index": self.next_index}

  def set_state(self, state):
    self.next_index = int(state["next_index"])


def to_global(batch: dict[str, np.ndarray], sharding: jax.sharding.Sharding, global_batch_size):
  """This process's block of the batch -> global jax.Arrays of `global_batch_size` rows laid
  out by `sharding` (each process passes the Loader's block for its devices' rows)."""
  return jax.tree.map(
    lambda x: jax.make_array_from_process_local_data(
      sharding, x, (global_batch_size, *x.shape[1:])
    ),
    batch,
  )


def checksum(arrays, crc=0) -> int:
  """CRC32 of numpy arrays in order (continuing `crc`), a 31-bit int that an int32 carries."""
  for x in arrays:
    crc = zlib.crc32(np.ascontiguousarray(x).tobytes(), crc)
  return crc & 0x7FFFFFFF


def check_replicas(batch: dict[str, jax.Array]) -> None:
  """DataError when devices of different processes hold the same batch rows with different
  values (a batch shard replicated across processes fed different data: jax does not notice,
  and the replicas then compute different things). Reads this process's device shards and
  all-gathers one (first row, checksum) pair per shard; nothing to compare with one process."""
  if jax.process_count() == 1:
    return
  shards = {}  # first row -> the shard's arrays, keys in order
  for key in sorted(batch):
    for shard in batch[key].addressable_shards:
      shards.setdefault(shard.index[0].start or 0, {})[key] = np.asarray(shard.data)
  mine = np.array([(row, checksum(arrays.values())) for row, arrays in sorted(shards.items())])
  gathered = np.asarray(multihost_utils.process_allgather(mine.astype(np.int32)))
  disagreeing_replicas(gathered.reshape(jax.process_count(), -1, 2).tolist())


def disagreeing_replicas(per_process):
  """per_process[p] = [(first row, checksum), ...] of process p's shards; raises DataError
  naming the first rows two processes hold with different checksums."""
  seen = {}
  for process, pairs in enumerate(per_process):
    for row, crc in pairs:
      first, first_crc = seen.setdefault(row, (process, crc))
      if crc != first_crc:
        raise DataError(
          f"loader: processes {first} and {process} hold the batch rows from {row} with "
          f"different data (checksums {first_crc:#x} != {crc:#x}): every process holding a "
          "batch shard must read the same rows of the same data and seed"
        )
