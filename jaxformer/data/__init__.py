"""Tasks as TFDS array_record datasets and a grain loader; see docs/data.md.

ds = get_dataset("mqar:vocab_size=64,seq_len=32,num_kv_pairs=4", "train")
for batch in Loader(ds, 64, seed=0):  # dicts of int32 inputs, targets, mask
    ...
"""

from jaxformer.data.dataset import Dataset, get_dataset
from jaxformer.data.loader import InMemory, Loader, check_replicas, in_memory, to_global
from jaxformer.data.spec import TASKS, DataError, check_tokens, format_spec, parse_spec
from jaxformer.data.tasks import chance as _chance


def chance(dataset: Dataset) -> tuple[float, str]:
  """(chance accuracy, its definition) of a prepared task; see jaxformer.data.tasks.CHANCE."""
  return _chance(*parse_spec(dataset.spec), dataset.vocab_size)


__all__ = [
  "TASKS",
  "DataError",
  "Dataset",
  "InMemory",
  "Loader",
  "chance",
  "check_replicas",
  "check_tokens",
  "format_spec",
  "get_dataset",
  "in_memory",
  "parse_spec",
  "to_global",
]
