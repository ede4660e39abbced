"""Result files: plain JSON (gzipped when the name ends in .gz), no pickle."""

import glob
import gzip
import json
import os

import numpy as np


def write(result, path):
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "wt") as f:
    json.dump(result, f, indent=1, sort_keys=True)
    f.write("\n")


def read(path):
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as f:
    return json.load(f)


def in_folder(folder):
  """{file name: result} of every record (*.json) in `folder`, sorted by name."""
  paths = sorted(glob.glob(os.path.join(folder, "*.json")))
  return {os.path.basename(p): read(p) for p in paths}


def confirmatory(record, values):
  """The confirmatory seeds' values of one of `record`'s per-seed lists, as an array: a record
  names the seeds its lists hold, exploratory first (none for a confirm_only run). A list of
  another length (not per seed) comes back whole."""
  seeds = record["seeds"]
  everyone = list(dict.fromkeys([*seeds["exploratory"], *seeds["confirmatory"]]))
  if len(values) != len(everyone):
    return np.asarray(values, dtype=float)
  keep = set(seeds["confirmatory"])
  return np.asarray([v for s, v in zip(everyone, values, strict=True) if s in keep], dtype=float)
