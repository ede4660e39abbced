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

A suite is a `jaxformer.bench.Suite`; add one by adding an entry to SUITES. `--set KEY=VALUE`
(repeatable) sets any keyword of the suite's run() on top of its size's preset: VALUE is a
Python literal, else a string.
A usage error (unknown suite, size or parameter, a bad value) prints one line naming it and
exits 2 before anything is measured; `--debug` shows the traceback instead.
"""

import ast
import inspect
import json
import sys

from experiments import cli
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


USAGE = cli.USAGE


def _ints(name, items):
  try:
    return tuple(int(x) for x in items)
  except ValueError:
    raise cli.UsageError(f"--{name}={','.join(items)}: expected comma-separated integers") from None


def _setting(text):
  key, eq, value = text.partition("=")
  if not eq or not key:
    raise cli.UsageError(f"--set={text}: expected KEY=VALUE")
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


def _define(values, argv):
  define = cli.definer(values)

  define("string", "size", None, "A preset of the suite (default: its first).")
  define("list", "lengths", None, "Comma-separated sequence lengths.")
  define("list", "impls", None, "Comma-separated implementations.")
  define(
    "multi_string",
    "set",
    [],
    "KEY=VALUE: any other run() keyword, e.g. --set block_size=256 --set dtype=bfloat16.",
  )
  define(
    "integer",
    "cpu-devices",
    0,
    "CPU only: N devices sharing the cores instead of XLA's one; the train suite then runs "
    "data parallel over them.",
  )
  define(
    "enum",
    "compare",
    None,
    "train suite: time a PyTorch eager model of the same shape in alternating windows; "
    "matmul suite: time torch.matmul on the same operands.",
    ["torch"],
  )
  define("bool", "json", False, "Print one JSON object.")
  define("bool", "debug", False, "Show tracebacks of usage errors.")


def main(argv=None):
  """`python -m experiments.bench SUITE [flags]`; argv: the arguments after the program name
  (None: sys.argv's)."""
  values, rest = cli.command_line(__doc__, _define, argv)
  choices = [*SUITES, "all"]
  if len(rest) != 1 or rest[0] not in choices:
    given = f"suite={rest[0]!r}" if len(rest) == 1 else f"suites {rest}" if rest else "no suite"
    cli.usage_error(f"{given}: expected one of {', '.join(choices)}")
  try:
    overrides = dict(_setting(text) for text in values.set)
    for name in ("lengths", "impls"):
      if values[name].value is not None:
        items = values[name].value
        overrides[name] = _ints(name, items) if name == "lengths" else tuple(items)
  except cli.UsageError as e:
    cli.fail(str(e), USAGE, values.debug)
  if values["cpu-devices"].value:
    cli.cpu_devices(values["cpu-devices"].value, "--cpu-devices")
  compile_cache.enable()
  try:
    _run(rest[0], values, overrides)
  except (BenchError, ladder.ConfigError) as e:
    cli.fail(cli.first_line(e), USAGE, values.debug)


def _run(suite, values, overrides):
  names = list(SUITES) if suite == "all" else [suite]
  size = values.size if suite != "all" else None
  devices, compare = values["cpu-devices"].value, values.compare
  plans = {}  # every suite is checked before anything is measured
  for name in names:
    mine = dict(overrides)
    params = inspect.signature(SUITES[name].run).parameters
    if devices and "devices" in params:
      mine.setdefault("devices", devices)
    if compare and "compare" in params:
      mine.setdefault("compare", compare)
    plans[name] = resolve(name, size, mine)
  results = {}
  for name, (size, kwargs) in plans.items():
    rows = SUITES[name].run(**kwargs)
    results[name] = dict(size=size, config=kwargs, rows=rows)
    if not values.json:
      print(f"# {name} ({size}): {SUITES[name].description}")
      print(format_table(rows, SUITES[name].columns), flush=True)
  if values.json:
    json.dump(dict(machine=machine(), suites=results), sys.stdout, default=str)
    print()
  else:
    print("# machine: " + ", ".join(f"{k}={v}" for k, v in machine().items()))


if __name__ == "__main__":
  main()
