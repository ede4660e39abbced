"""Every registered experiment design against the committed registry (results/designs.json)
and the design log (docs/experiments.md): a design whose content changed without a version
bump fails here."""

import os

import pytest

from experiments import designs, harness

MODULES = designs.modules()


@pytest.mark.parametrize("module", MODULES, ids=[m.NAME for m in MODULES])
def test_the_design_matches_its_registered_version(module):
  assert designs.problems(module, designs.load()) == []


@pytest.mark.parametrize("module", MODULES, ids=[m.NAME for m in MODULES])
def test_the_design_log_has_an_entry_for_the_current_version(module):
  with open(os.path.join(harness.REPO_ROOT, "docs", "experiments.md")) as f:
    log = f.read()
  assert f"#### {module.NAME} v{module.VERSION}" in log
