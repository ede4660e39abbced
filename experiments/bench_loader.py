"""Loader throughput: one batched read per step vs grain's one-record-at-a-time reads.

    python -m experiments.bench_loader [--batch_size=256 --steps=40 --specs=SPEC;SPEC...]

grain 0.2.18's MapDataset.batch reads records one by one (`source[i]`), so our Loader
keeps grain for the index pipeline (shuffle, shard, batch) and reads each batch with a
single `source.__getitems__(indices)`. Reported, in examples/s, all in one thread
unless named:
  per_record  grain MapDataset.source(...).shuffle().batch(), indexed step by step
  batched     the Loader with num_threads=0: one __getitems__ per batch
  loader      the Loader as trainers use it (2 grain prefetch threads)
A benchmark, not a test: numbers depend on the machine and its load (docs/data.md).
"""

import time

import grain

from experiments import cli
from jaxformer.data import DataError, Loader, get_dataset, parse_spec

DEFAULT_SPEC = "mqar:vocab_size=8192,seq_len=128,num_kv_pairs=8,num_examples=20000"


def _rate(next_batch, steps: int, batch_size: int) -> float:
  next_batch()  # warm-up: the first read opens files and builds grain's pipeline
  start = time.perf_counter()
  for _ in range(steps):
    next_batch()
  return steps * batch_size / (time.perf_counter() - start)


def run(spec: str = DEFAULT_SPEC, batch_size: int = 256, steps: int = 40, data_dir=None) -> dict:
  """Examples/s of grain's per-record batching, batched reads, and the threaded Loader."""
  for field, value in (("batch_size", batch_size), ("steps", steps)):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
      raise ValueError(f"bench_loader.{field}={value!r}: must be a positive integer")
  ds = get_dataset(spec, "train", data_dir=data_dir)
  per_record = grain.MapDataset.source(ds.source).shuffle(seed=0).repeat().batch(batch_size)
  steps_done = iter(range(steps + 1))
  rates = {"per_record": _rate(lambda: per_record[next(steps_done)], steps, batch_size)}
  for name, threads in (("batched", 0), ("loader", 2)):
    loader = Loader(ds, batch_size, seed=0, shard_index=0, shard_count=1,
                        num_threads=threads)  # fmt: skip
    rates[name] = _rate(lambda loader=loader: next(loader), steps, batch_size)
  return {
    "spec": ds.spec,
    "batch_size": batch_size,
    "steps": steps,
    **{f"{name}_examples_per_s": rate for name, rate in rates.items()},
    "speedup": rates["batched"] / rates["per_record"],
  }


SPECS = (
  "mqar:vocab_size=256,seq_len=64,num_kv_pairs=8,num_examples=20000",
  DEFAULT_SPEC,
  "mqar:vocab_size=8192,seq_len=512,num_kv_pairs=32,num_examples=20000",
)


def _define(values, argv):
  define = cli.definer(values)
  define("integer", "batch_size", 256, "Examples per batch.", lower_bound=1)
  define("integer", "steps", 40, "Timed batches per reader.", lower_bound=1)
  define("string", "specs", ";".join(SPECS), "Task specs to read, separated by ';'.")


def main(argv=None):
  """argv: the arguments after the program name (None: sys.argv's)."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  specs, batch = [s for s in values.specs.split(";") if s], values.batch_size
  try:
    for spec in specs:
      parse_spec(spec)
  except DataError as e:
    cli.usage_error(f"--specs: {cli.first_line(e)}")
  print(f"{f'spec (batch {batch})':<70} {'per_record':>11} {'batched':>9} {'loader':>9}  ex/s")
  for spec in specs:
    r = run(spec, batch, values.steps)
    print(
      f"{spec:<70} {r['per_record_examples_per_s']:>11,.0f} "
      f"{r['batched_examples_per_s']:>9,.0f} {r['loader_examples_per_s']:>9,.0f}"
    )


if __name__ == "__main__":
  main()
