"""Result files: plain JSON (gzipped when the name ends in .gz), no pickle."""

import glob
import gzip
import json
import os


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
