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


def test_a_design_hashes_the_same_wherever_the_checkout_lives(monkeypatch):
  # mlp_memory's task names a corpus inside the repository by its absolute path; the hash
  # must not change with the checkout's location (a clean clone elsewhere is checked too)
  from experiments import protocol

  inside = os.path.join(harness.REPO_ROOT, "jaxformer", "math", "x.py")
  here = protocol._canonical({"task": f"text:path={inside},level=char"})
  monkeypatch.setattr(harness, "REPO_ROOT", "/elsewhere/jaxformer")
  there = protocol._canonical(
    {"task": "text:path=/elsewhere/jaxformer/jaxformer/math/x.py,level=char"}
  )
  assert here == there == {"task": "text:path=<repo>/jaxformer/math/x.py,level=char"}
