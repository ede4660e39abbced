"""What `pip install jaxformer` installs: the library alone, under the Apache-2.0 license,
with version ranges that the exact lock (requirements*.txt) satisfies."""

import ast
import configparser
import os
import pathlib

import setuptools
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.train.train_helpers import REPO

ROOT = pathlib.Path(REPO)


def _setup_cfg():
  parser = configparser.ConfigParser()
  parser.read(ROOT / "setup.cfg")
  return parser


def _lines(text):
  return [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]


def _lock(name):
  """{package: Requirement} of a requirements file (every line an exact pin)."""
  return {canonicalize_name(r.name): r for r in map(Requirement, _lines((ROOT / name).read_text()))}


def test_only_the_library_is_installed():
  include = _lines(_setup_cfg()["options.packages.find"]["include"].replace(",", "\n"))
  found = setuptools.find_packages(str(ROOT), include=include)
  assert "jaxformer" in found and "jaxformer.train" in found and "jaxformer.data" in found
  assert all(p == "jaxformer" or p.startswith("jaxformer.") for p in found), found
  # every package directory of the library is found (none is left out of the wheel)
  on_disk = {
    str(p.parent.relative_to(ROOT)).replace(os.sep, ".")
    for p in (ROOT / "jaxformer").rglob("__init__.py")
  }
  assert on_disk == set(found)


def test_the_library_never_imports_experiments():
  for path in (ROOT / "jaxformer").rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        names = [node.module or ""]
      assert not any(n.split(".")[0] in ("experiments", "tests") for n in names), (path, names)


def test_install_requires_ranges_hold_the_exact_lock():
  options = _setup_cfg()["options"]
  ranges = [Requirement(line) for line in _lines(options["install_requires"])]
  tests = [Requirement(line) for line in _lines(_setup_cfg()["options.extras_require"]["test"])]
  for declared, lock_file in ((ranges, "requirements.txt"), (tests, "requirements-test.txt")):
    lock = _lock(lock_file)
    for r in lock.values():  # the lock is exact
      assert [s.operator for s in r.specifier] == ["=="], (lock_file, str(r))
    for r in declared:
      assert not any(s.operator in ("==", "===") for s in r.specifier), f"{r} is pinned"
      assert r.specifier, f"{r}: no version range"
      pinned = lock[canonicalize_name(r.name)]
      version = next(iter(pinned.specifier)).version
      assert r.specifier.contains(version), f"{lock_file} pins {pinned}, outside {r}"


def test_license_file_is_the_apache_2_license_setup_cfg_declares():
  text = (ROOT / "LICENSE").read_text()
  assert "Apache License" in text and "Version 2.0, January 2004" in text
  assert "END OF TERMS AND CONDITIONS" in text
  metadata = _setup_cfg()["metadata"]
  assert metadata["license"] == "Apache-2.0" and metadata["license_files"] == "LICENSE"
