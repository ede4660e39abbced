"""The notebooks' install cell, run in a fresh virtual environment the way a Colab runtime
would: jax and jaxlib are there (at another version than jaxformer pins), jaxformer is not.
It installs the library from a clone (a local path, or a git URL it clones) and works from
the clone, where the experiments and the notebooks' helpers live (they are not installed).

The environment is offline by construction: every package except jaxformer is taken from the
project's own environment through a site directory of links, jax's and jaxlib's metadata say
0.10.1 (jaxformer pins 0.10.2), and pip runs with no index. A cell that let pip satisfy
jaxformer's pins would need to download jax 0.10.2 and fail; the cell under test installs
jaxformer from a local path and leaves jax and jaxlib as they are.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from jaxformer import ladder

REPO_ROOT = Path(__file__).resolve().parents[1]
COLABS = REPO_ROOT / "colabs"
KEPT_VERSION = "0.10.1"  # what the fresh environment's jax and jaxlib claim to be
SOURCE_FILES = ("setup.cfg", "pyproject.toml", "README.md", "jaxformer", "experiments")


def install_cell():
  """The install cell's source; every notebook carries the same one."""
  cells = {}
  for path in sorted(COLABS.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    cells[path.stem] = next(c.source for c in nb.cells if "pip" in c.source)
  assert len(set(cells.values())) == 1, f"install cells differ between notebooks: {sorted(cells)}"
  return next(iter(cells.values()))


def _site_packages(prefix):
  (found,) = Path(prefix).glob("lib/python3*/site-packages")
  return found


def _offline_env(tmp_path, version=KEPT_VERSION):
  """A venv whose imports resolve to the project's packages, minus jaxformer, with jax and
  jaxlib relabelled `version`. Returns the venv's python."""
  ours = Path(importlib.util.find_spec("jax").origin).parents[1]  # the project's site-packages
  shadow = tmp_path / "shadow"
  shadow.mkdir()
  for entry in ours.iterdir():
    name = entry.name
    if name.startswith(("jaxformer", "__editable__")):
      continue
    if name.startswith(("jax-", "jaxlib-")) and name.endswith(".dist-info"):
      package, real = name.removesuffix(".dist-info").split("-")
      relabelled = shadow / f"{package}-{version}.dist-info"
      shutil.copytree(entry, relabelled)
      metadata = relabelled / "METADATA"
      metadata.write_text(
        metadata.read_text().replace(f"\nVersion: {real}\n", f"\nVersion: {version}\n")
      )
      continue
    (shadow / name).symlink_to(entry)
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
  (_site_packages(venv) / "_project.pth").write_text(
    f"import site; site.addsitedir({str(shadow)!r})\n"
  )
  return venv / "bin" / "python"


def _run(python, code, cwd, **env):
  clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
  clean.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
  return subprocess.run(
    [str(python), "-c", code], cwd=cwd, env=clean, capture_output=True, text=True, timeout=300
  )


def _source(tmp_path):
  """A copy of what pip needs to build jaxformer: a clone, as far as pip can tell."""
  source = tmp_path / "jaxformer-src"
  source.mkdir()
  for name in SOURCE_FILES:
    copy = shutil.copytree if (REPO_ROOT / name).is_dir() else shutil.copy
    copy(REPO_ROOT / name, source / name)
  return source


PROBE = (
  "import importlib.metadata as m, importlib.util as u, json;"
  "print(json.dumps({'jaxformer': u.find_spec('jaxformer') and u.find_spec('jaxformer').origin,"
  " 'jax': m.version('jax'), 'jaxlib': m.version('jaxlib')}))"
)


FROM_CLONE = "\nimport experiments.protocol, os; print('experiments at', os.getcwd())"


@pytest.mark.slow  # a pip install into a new virtual environment: `make test-slow`
def test_install_cell_installs_from_a_local_path_and_keeps_jax(tmp_path):
  cell = install_cell() + FROM_CLONE
  python = _offline_env(tmp_path)
  source = _source(tmp_path)
  work = tmp_path / "work"
  work.mkdir()
  before = json.loads(_run(python, PROBE, work).stdout)
  assert before == {"jaxformer": None, "jax": KEPT_VERSION, "jaxlib": KEPT_VERSION}

  # the source as a local path; no build isolation, since that would fetch setuptools
  done = _run(python, cell, work, JAXFORMER_SOURCE=str(source), PIP_NO_BUILD_ISOLATION="0")
  assert done.returncode == 0, done.stderr[-3000:]
  assert f"jaxformer installed from {source}" in done.stdout
  assert f"experiments at {source}" in done.stdout  # the clone is where the notebook works

  site = _site_packages(python.parents[1])
  after = json.loads(_run(python, PROBE, work).stdout)
  assert after["jaxformer"] == str(site / "jaxformer" / "__init__.py")
  assert after["jax"] == after["jaxlib"] == KEPT_VERSION  # the existing jax was left alone
  installed = sorted(p.name for p in site.iterdir())
  assert not [n for n in installed if n.startswith(("jax-", "jax_", "jaxlib"))], installed
  assert "jaxformer" in installed and "experiments" not in installed  # the library alone
  imported = _run(python, "from jaxformer import ladder; print(len(ladder.RUNGS))", work)
  assert imported.stdout.strip() == str(len(ladder.RUNGS)), imported.stderr[-2000:]

  # after a restart jaxformer is installed: the cell only returns to the clone
  again = _run(python, cell, work, JAXFORMER_SOURCE=str(source))
  assert again.returncode == 0, again.stderr[-2000:]
  assert "installed" not in again.stdout and f"experiments at {source}" in again.stdout
  # inside a checkout (experiments importable) the cell does nothing at all
  inside = _run(python, install_cell(), source, JAXFORMER_SOURCE="")
  assert inside.returncode == 0 and inside.stdout == "", inside.stderr[-2000:]


@pytest.mark.slow  # a git clone and a pip install: `make test-slow`
def test_install_cell_clones_a_git_url(tmp_path):
  python = _offline_env(tmp_path)
  source = _source(tmp_path)
  git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(source)]
  for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone me"]):
    subprocess.run([*git, *args], check=True)
  work = tmp_path / "content"
  work.mkdir()
  url = f"git+file://{source}"
  done = _run(
    python, install_cell() + FROM_CLONE, work, JAXFORMER_SOURCE=url, PIP_NO_BUILD_ISOLATION="0"
  )
  assert done.returncode == 0, done.stderr[-3000:]
  clone = work / "jaxformer-src"
  assert (clone / ".git").is_dir() and f"experiments at {clone}" in done.stdout
  after = json.loads(_run(python, PROBE, work).stdout)
  assert after["jax"] == KEPT_VERSION and after["jaxformer"] is not None


def test_install_cell_undoes_itself_when_jax_is_too_old(tmp_path):
  # flax, optax, chex and orbax need jax >= 0.10 / 0.7 / 0.5: 0.9.0 cannot stay under flax
  python = _offline_env(tmp_path, version="0.9.0")
  env = {"JAXFORMER_SOURCE": str(_source(tmp_path)), "PIP_NO_BUILD_ISOLATION": "0"}
  failed = _run(python, install_cell(), tmp_path, **env)
  assert failed.returncode != 0
  assert "jaxformer's requirements do not fit the installed" in failed.stderr
  after = json.loads(_run(python, PROBE, tmp_path).stdout)
  # not left half-installed (a rerun of the cell would skip it), and jax untouched
  assert after == {"jaxformer": None, "jax": "0.9.0", "jaxlib": "0.9.0"}


def test_install_cell_names_the_missing_source(tmp_path):
  python = _offline_env(tmp_path)
  failed = _run(python, install_cell(), tmp_path, JAXFORMER_SOURCE="")
  assert failed.returncode != 0
  assert "JAXFORMER_SOURCE is empty" in failed.stderr


@pytest.mark.parametrize("name", sorted(p.stem for p in COLABS.glob("*.ipynb")))
def test_install_cell_comes_before_any_jaxformer_import(name):
  nb = nbformat.read(COLABS / f"{name}.ipynb", as_version=4)
  code = [c.source for c in nb.cells if c.cell_type == "code"]
  first_import = next(
    i for i, src in enumerate(code) if "from jaxformer" in src or "from experiments" in src
  )
  assert any("pip" in src for src in code[:first_import]), name
