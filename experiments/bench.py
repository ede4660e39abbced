"""Run a benchmark suite and print a table (or one JSON object).

  python -m experiments.bench attention --size small
  python -m experiments.bench attention --lengths 1024,4096,16384 --impls dense,blockwise --json
  python -m experiments.bench decode --size tiny --json
  python -m experiments.bench train --set attention=blockwise
  python -m experiments.bench all              # every suite at its default size

A suite is a `jaxformer.bench.Suite`; add one by adding an entry to SUITES.
"""

import argparse
import ast
import json
import sys

from jaxformer.bench import attention, decode, format_table, machine, train

SUITES = {
  "attention": attention.SUITE,
  "decode": decode.SUITE,
  "train": train.SUITE,
}


def _ints(text):
  return tuple(int(x) for x in text.split(",") if x)


def _names(text):
  return tuple(x for x in text.split(",") if x)


def _value(text):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def run_suite(name, size=None, overrides=None):
  """(size name, run kwargs, rows) of suite `name` at `size` with `overrides` on top."""
  suite = SUITES[name]
  size = size or next(iter(suite.sizes))
  if size not in suite.sizes:
    raise SystemExit(f"suite {name!r} has no size {size!r}; sizes: {', '.join(suite.sizes)}")
  kwargs = {**suite.sizes[size], **(overrides or {})}
  return size, kwargs, suite.run(**kwargs)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("suite", choices=[*SUITES, "all"])
  parser.add_argument("--size", help="a preset of the suite (default: its first)")
  parser.add_argument("--lengths", type=_ints, help="comma-separated sequence lengths")
  parser.add_argument("--impls", type=_names, help="comma-separated implementations")
  parser.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="KEY=VALUE",
    help="any other run() keyword, e.g. --set block_size=256 --set dtype=bfloat16",
  )
  parser.add_argument("--json", action="store_true", help="print one JSON object")
  args = parser.parse_args(argv)

  overrides = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
  if args.lengths:
    overrides["lengths"] = args.lengths
  if args.impls:
    overrides["impls"] = args.impls
  names = list(SUITES) if args.suite == "all" else [args.suite]
  results = {}
  for name in names:
    size, kwargs, rows = run_suite(name, args.size if args.suite != "all" else None, overrides)
    results[name] = dict(size=size, config=kwargs, rows=rows)
    if not args.json:
      print(f"# {name} ({size}): {SUITES[name].description}")
      print(format_table(rows, SUITES[name].columns), flush=True)
  if args.json:
    json.dump(dict(machine=machine(), suites=results), sys.stdout, default=str)
    print()
  else:
    print("# machine: " + ", ".join(f"{k}={v}" for k, v in machine().items()))


if __name__ == "__main__":
  main()
