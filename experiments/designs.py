"""The registry of experiment designs: results/designs.json, each registered experiment's
version with its design hash at every size.

  python -m experiments.designs              # check every design against the registry
  python -m experiments.designs --register   # record the current versions not yet registered

A registered (experiment, version) is never rewritten: a design whose content changed while
its version did not is an error, whichever command runs (bump the module's VERSION and add
its entry to the design log in docs/experiments.md). tests/experiments/test_designs.py runs
the check.
"""

import json
import os
import sys

from absl import flags

from experiments import cli, harness, protocol, run_all

REGISTRY = os.path.join(harness.REPO_ROOT, "results", "designs.json")


def load(path=REGISTRY):
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def hashes(module):
  """{size: design hash} of a registered module at every size."""
  return {size: protocol.design(module, size).hash for size in protocol.SIZES}


def problems(module, registry):
  """What is wrong between `module`'s design and the registry ([] when nothing is)."""
  name, version = module.NAME, str(module.VERSION)
  registered = registry.get(name, {})
  if version not in registered:
    return [
      f"{name}: version {version} is not registered (run `python -m experiments.designs "
      "--register` and add it to the design log in docs/experiments.md)"
    ]
  out = []
  for size, h in hashes(module).items():
    if registered[version].get(size) != h:
      out.append(
        f"{name} size={size}: the design changed but its version ({version}) did not: bump "
        f"{name}.VERSION and add an entry to the design log (registered "
        f"{registered[version].get(size, 'nothing')[:12]}, now {h[:12]})"
      )
  return out


def register(module, registry):
  """Adds the module's current version to `registry` (in place). Raises ValueError when that
  version is registered with other content."""
  bad = [p for p in problems(module, registry) if "is not registered" not in p]
  if bad:
    raise ValueError("; ".join(bad))
  registry.setdefault(module.NAME, {}).setdefault(str(module.VERSION), hashes(module))
  return registry


def modules():
  """The registered experiment modules of run_all, in its order."""
  out = [run_all.experiment(n) for n in run_all.EXPERIMENTS]
  return [m for m in out if protocol.registered(m)]


def _define(values, argv):
  flags.DEFINE_bool("register", False, "Record the unregistered versions.", flag_values=values)


def main(argv=None):
  """argv: the arguments after the program name (None: sys.argv's); returns the exit code."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  registry = load()
  if values.register:
    try:
      for m in modules():
        register(m, registry)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return cli.USAGE
    os.makedirs(os.path.dirname(REGISTRY), exist_ok=True)
    with open(REGISTRY, "w") as f:
      json.dump(registry, f, indent=1, sort_keys=True)
      f.write("\n")
    print(f"registry: {REGISTRY}")
  found = [p for m in modules() for p in problems(m, registry)]
  for p in found:
    print(p)
  return 1 if found else 0


if __name__ == "__main__":
  sys.exit(main())
