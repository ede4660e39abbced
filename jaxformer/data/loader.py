"""The loader: grain shuffles, batches and repeats indices; one read per batch.

grain's MapDataset gives the index pipeline: `range(n)`, a per-epoch `shuffle` by seed
(epoch e uses seed + e), `batch` into global batches within an epoch, `repeat`. Step s
is random access (`batches[s]`), so the iterator state is one step counter and a
resumed loader yields exactly the batch the interrupted one would have.

Each step's global batch is the same for any process count; process p takes its
contiguous slice of global_batch_size // process_count examples, which is the order
`jax.make_array_from_process_local_data` (see `to_global`) reassembles.

Records are read with one `source.__getitems__(indices)` per local batch: grain 0.2.18's
own batching reads one record at a time, ~5x slower here (experiments/bench_loader.py).

With drop_remainder=False the last batch of an epoch is padded to full size with
repeats of its own examples whose `mask` is 0: shapes stay static (no recompile) and
the padding adds nothing to a masked loss or accuracy.
"""

from typing import Any

import grain
import jax
import numpy as np

from jaxformer.data.spec import DataError


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
        process_index: int | None = None,
        process_count: int | None = None,
        drop_remainder: bool = True,
    ):
        self.source = getattr(dataset, "source", dataset)  # a Dataset or a bare source
        self.spec = getattr(dataset, "spec", None)
        n = len(self.source)
        count = jax.process_count() if process_count is None else process_count
        index = jax.process_index() if process_index is None else process_index
        G = global_batch_size
        if G < 1 or G % count:
            raise DataError(
                f"loader.global_batch_size={G}: must be a positive multiple of "
                f"process_count={count}"
            )
        if not 0 <= index < count:
            raise DataError(f"loader.process_index={index}: must be in [0, {count})")
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
        self.process_index, self.process_count = index, count
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
        self._batches = batches.repeat(num_epochs).map(self._read)
        self._step = 0

    def _read(self, global_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Global batch of indices -> this process's examples, read in one call."""
        G, B = self.global_batch_size, self.local_batch_size
        ids = np.asarray(global_ids, dtype=np.int64)
        valid = np.arange(G) < len(ids)
        ids = np.resize(ids, G)  # pads a short last batch with its own examples
        lo = self.process_index * B
        ids, valid = ids[lo : lo + B], valid[lo : lo + B]
        getitems = getattr(self.source, "__getitems__", None)
        records = getitems(ids.tolist()) if getitems else [self.source[i] for i in ids]
        batch = {k: np.stack([np.asarray(r[k]) for r in records]) for k in records[0]}
        batch["mask"] = (batch["mask"] * valid[:, None]).astype(np.int32)
        return batch

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.num_steps is not None and self._step >= self.num_steps:
            raise StopIteration
        batch = self._batches[self._step]
        self._step += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        """JSON-serializable; save it with the training checkpoint."""
        return {"step": self._step, **self._config, "spec": self.spec}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from `state`: the next batch is the one after the saved step.

        The state is only valid for the same data, seed and batch size; any other loader
        would silently yield a different stream, so a mismatch raises.
        """
        for key, mine in {**self._config, "spec": self.spec}.items():
            if state.get(key) != mine:
                raise DataError(f"loader state {key}={state.get(key)!r}: this loader has {mine!r}")
        self._step = int(state["step"])


def to_global(batch: dict[str, np.ndarray], sharding: jax.sharding.Sharding) -> dict:
    """Process-local numpy batch -> global jax.Arrays laid out by `sharding`.

    Every process passes its own slice (the Loader's); the global batch dimension is
    the concatenation over processes in process order.
    """
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), batch)
