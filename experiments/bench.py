"""Run a benchmark suite and print a table (or one JSON object).

  python -m experiments.bench attention --size small
  python -m experiments.bench attention --lengths 1024,4096,16384 --impls dense,blockwise --json
  python -m experiments.bench decode --size tiny --json
  python -m experiments.bench train --set attention=blockwise
  python -m experiments.bench all              # every suite at its default size
  python -m experiments.bench train --cpu-devices 2   # data parallel over 2 CPU devices
  python -m experiments.bench train --compare torch   # beside PyTorch eager, same process
  python -m experiments.bench matmul --compare torch  # each matrix product, XLA beside torch
  python -m experiments.bench sweep --size tiny       # the sweep engine: compile and replicas

A suite is a `jaxformer.bench.Suite`; add one by adding an entry to SUITES.
A usage error (unknown suite, size or parameter, a bad value) prints one line naming it and
exits 2 before anything is measured; `--debug` shows the traceback instead.
"""

import argparse
import ast
import inspect
import json
import os
import sys

from jaxformer import compile_cache, ladder
from jaxformer.bench import (
  BenchError,
  attention,
  decode,
  format_table,
  machine,
  matmul,
  sweep,
  train,
)

SUITES = {
  "attention": attention.SUITE,
  "decode": decode.SUITE,
  "matmul": matmul.SUITE,
  "train": train.SUITE,
  "sweep": sweep.SUITE,
}


USAGE = 2  # exit code of a usage error


class _Parser(argparse.ArgumentParser):
  """argparse that reports a bad command line in one line (its default adds the usage)."""

  def error(self, message):
    self.exit(USAGE, f"error: {message}\n")


def _ints(text):
  try:
    return tuple(int(x) for x in text.split(",") if x)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _names(text):
  return tuple(x for x in text.split(",") if x)


def _setting(text):
  key, eq, value = text.partition("=")
  if not eq or not key:
    raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
  return key, _value(value)


def _value(text):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def run_suite(name, size=None, overrides=None):
  """(size name, run kwargs, rows) of suite `name` at `size` with `overrides` on top."""
  size, kwargs = resolve(name, size, overrides)
  return size, kwargs, SUITES[name].run(**kwargs)


def resolve(name, size=None, overrides=None):
  """(size name, run kwargs); BenchError names an unknown suite, size or parameter."""
  if name not in SUITES:
    raise BenchError(f"suite={name!r}: expected one of {', '.join(SUITES)}")
  suite = SUITES[name]
  size = size or next(iter(suite.sizes))
  if size not in suite.sizes:
    raise BenchError(f"size={size!r}: suite {name!r} has sizes {', '.join(suite.sizes)}")
  params = inspect.signature(suite.run).parameters
  unknown = sorted(set(overrides or {}) - set(params))
  if unknown:
    raise BenchError(
      f"{unknown[0]}: not a parameter of suite {name!r}; parameters: {', '.join(params)}"
    )
  return size, {**suite.sizes[size], **(overrides or {})}


def main(argv=None):
  parser = _Parser(description=__doc__.splitlines()[0])
  parser.add_argument("suite", choices=[*SUITES, "all"])
  parser.add_argument("--size", help="a preset of the suite (default: its first)")
  parser.add_argument("--lengths", type=_ints, help="comma-separated sequence lengths")
  parser.add_argument("--impls", type=_names, help="comma-separated implementations")
  parser.add_argument(
    "--set",
    action="append",
    default=[],
    type=_setting,
    metavar="KEY=VALUE",
    help="any other run() keyword, e.g. --set block_size=256 --set dtype=bfloat16",
  )
  parser.add_argument(
    "--cpu-devices",
    type=int,
    default=0,
    metavar="N",
    help="CPU only: N devices sharing the cores instead of XLA's one; the train suite "
    "then runs data parallel over them",
  )
  parser.add_argument(
    "--compare",
    choices=["torch"],
    help="train suite: time a PyTorch eager model of the same shape in alternating windows; "
    "matmul suite: time torch.matmul on the same operands",
  )
  parser.add_argument("--json", action="store_true", help="print one JSON object")
  parser.add_argument("--debug", action="store_true", help="show tracebacks of usage errors")
  args = parser.parse_args(argv)
  if args.cpu_devices:
    cpu_devices(args.cpu_devices)
  compile_cache.enable()
  try:
    _run(args)
  except (BenchError, ladder.ConfigError) as e:
    if args.debug:
      raise
    print(f"error: {str(e).strip().splitlines()[0]}", file=sys.stderr)
    sys.exit(USAGE)


def cpu_devices(count):
  """XLA flags for `count` CPU devices; must run before jax starts its backend (nothing has
  been computed yet when main() parses its flags). They share the machine's cores."""
  if count < 1:
    _Parser().exit(USAGE, f"error: --cpu-devices={count}: expected a positive integer\n")
  if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
    _Parser().exit(USAGE, "error: --cpu-devices: XLA_FLAGS already sets a device count\n")
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def _run(args):
  overrides = dict(args.set)
  if args.lengths:
    overrides["lengths"] = args.lengths
  if args.impls:
    overrides["impls"] = args.impls
  names = list(SUITES) if args.suite == "all" else [args.suite]
  size = args.size if args.suite != "all" else None
  plans = {}  # every suite is checked before anything is measured
  for name in names:
    mine = dict(overrides)
    params = inspect.signature(SUITES[name].run).parameters
    if args.cpu_devices and "devices" in params:
      mine.setdefault("devices", args.cpu_devices)
    if args.compare and "compare" in params:
      mine.setdefault("compare", args.compare)
    plans[name] = resolve(name, size, mine)
  results = {}
  for name, (size, kwargs) in plans.items():
    rows = SUITES[name].run(**kwargs)
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
