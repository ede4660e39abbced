"""Every declared experiment: it validates, each size is its registered design, its page is
what its records generate, and the experiment layer keeps its shape (small modules, no
function-local imports, no import cycle)."""

import ast
import os

import pytest

from experiments import claims as claims_lib
from experiments import harness
from experiments.engine import catalog, declare, page, records, registry

ENGINE = os.path.join(harness.REPO_ROOT, "experiments", "engine")
NAMES = list(catalog.DECLARED)


def _module_path(name):
  return os.path.join(harness.REPO_ROOT, *catalog.DECLARED[name].split(".")) + ".py"


@pytest.mark.parametrize("name", NAMES)
def test_each_registered_or_recorded_size_is_its_registered_design(name):
  """A size registers once its exploratory sizing is done; from then on (and wherever a
  record exists) the declaration must be the registered design, and a record names its
  version's hash."""
  experiment = declare.validate(catalog.load(name))
  folder = os.path.join(registry.RESULTS, name)
  for size in experiment.sizes:
    recorded = os.path.join(folder, f"{size}.json")
    if not registry.versions(experiment, size) and not os.path.exists(recorded):
      continue  # being sized: nothing registered to drift from
    entry = registry.entry(experiment, size)  # Unregistered names the command to run
    if os.path.exists(recorded):
      record = records.read(recorded)
      assert (record["version"], record["hash"]) == (entry["version"], entry["hash"]), (
        f"{recorded}: the record of version {record['version']}, not the registered design"
      )


@pytest.mark.parametrize("name", NAMES)
def test_the_page_is_what_the_records_generate(name):
  folder = os.path.join(registry.RESULTS, name)
  path = os.path.join(folder, page.PAGE)
  if not os.path.exists(path):
    pytest.skip(f"{name}: no records yet")
  with open(path) as f:
    committed = f.read()
  assert committed == page.render(catalog.load(name), folder), (
    f"{path} drifted from its records: python -m experiments.engine page {name}"
  )


def _engine_files():
  return sorted(os.path.join(ENGINE, f) for f in os.listdir(ENGINE) if f.endswith(".py"))


def _lines(path):
  with open(path) as f:
    return len(f.read().splitlines())


def test_modules_stay_small():
  for path in _engine_files():
    assert _lines(path) <= 450, f"{path}: over 450 lines"
  for name in NAMES:
    assert _lines(_module_path(name)) <= 250, f"{name}'s declaration: over 250 lines"


def _imports(path):
  """(module-level imports of experiments.*, function-local imports) of one file."""
  with open(path) as f:
    tree = ast.parse(f.read())
  top, local = set(), []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
      if node.col_offset > 0:
        local.append((path, node.lineno))
      for n in names:
        if n and n.startswith("experiments"):
          extra = [f"{n}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
          top.update([n, *extra])
  return top, local


def test_no_function_local_imports_and_no_import_cycle():
  files = {f"experiments.engine.{os.path.basename(p)[:-3]}": p for p in _engine_files()}
  files |= {catalog.DECLARED[n]: _module_path(n) for n in NAMES}
  graph = {}
  for module, path in files.items():
    top, local = _imports(path)
    assert not local, f"function-local imports: {local}"
    graph[module] = {m for m in top if m in files and m != module}

  def visit(module, stack):
    assert module not in stack, f"import cycle: {' -> '.join([*stack, module])}"
    for nxt in graph[module]:
      visit(nxt, [*stack, module])

  for module in graph:
    visit(module, [])


def test_every_check_claim_names_a_test_that_exists():
  """A claim read as a check names the test that proves it: the file exists and so does the
  test it names after '::' (a renamed or retired test fails here, not silently)."""
  for claim in claims_lib.CLAIMS:
    if claim.kind != "check":
      continue
    first = claim.why.split(" ")[0].rstrip(":")
    path, _, test = first.partition("::")
    full = os.path.join(harness.REPO_ROOT, path)
    assert os.path.isfile(full), f"claim {claim.number}: {path} does not exist"
    if test:
      with open(full) as f:
        assert f"def {test}(" in f.read(), f"claim {claim.number}: {path} has no {test}"
  assert {c.kind for c in claims_lib.CLAIMS} <= set(claims_lib.KINDS)
