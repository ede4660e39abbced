"""Safety: checkpoints and data never go through pickle; configs load only from named files.

Three kinds of evidence: the source of jaxformer/ and experiments/ (ast: no pickle-family
import, no allow_pickle, no torch.load without weights_only=True, no eval/exec); a real
training run that saves, restores and prepares its data while pickle raises on use, whose
files on disk hold no pickle stream; and main.py refusing config paths it would have to
search for.
"""

import ast
import os
import pathlib
import pickle

import numpy as np
import pytest

from jaxformer.train import loop
from jaxformer.train import program as program_lib
from tests.reliability import helpers as h
from tests.train.train_helpers import REPO, main_command, run, tiny_config

ROOTS = ("jaxformer", "experiments")
PICKLE_MODULES = {
  "pickle",
  "_pickle",
  "cPickle",
  "cloudpickle",
  "dill",
  "joblib",
  "shelve",
  "marshal",
}


def _dotted(node):
  """'np.load' for the function of a call, '' for anything but names and attributes."""
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    base = _dotted(node.value)
    return f"{base}.{node.attr}" if base else ""
  return ""


def _is_const(node, value):
  return isinstance(node, ast.Constant) and node.value is value


def unsafe_calls(source, filename="<snippet>"):
  """['file:line: what'] for every pickle-family import or unsafe load in `source`."""
  found = []
  for node in ast.walk(ast.parse(source, filename)):
    where = f"{filename}:{getattr(node, 'lineno', 0)}"
    if isinstance(node, ast.Import):
      found += [
        f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLE_MODULES
      ]
    elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLE_MODULES:
      found.append(f"{where}: from {node.module} import")
    elif isinstance(node, ast.Call):
      name, kwargs = _dotted(node.func), {k.arg: k.value for k in node.keywords}
      if name in ("eval", "exec"):
        found.append(f"{where}: {name}()")
      if "allow_pickle" in kwargs and not _is_const(kwargs["allow_pickle"], False):
        found.append(f"{where}: {name}(allow_pickle=...)")
      if name.split(".")[-1] == "load" and "torch" in name.split("."):
        if not _is_const(kwargs.get("weights_only"), True):
          found.append(f"{where}: {name}() without weights_only=True")
  return found


# Calls that import or run code named at run time. Each is allowed where it is audited: plug.py
# loads a mixer spec the user named (a workdir's spec only with trust_code and its recorded
# sha256, jaxformer/train/workdir.py); the engine's catalog imports the module its table
# names (or a Python caller's stand-in, never a command line's).
CODE_LOADERS = {
  "import_module",
  "__import__",
  "exec_module",
  "spec_from_file_location",
  "module_from_spec",
  "run_path",
  "run_module",
  "load_module",
}
ALLOWED_LOADERS = {
  "jaxformer/mixers/plug.py": ["exec_module", "import_module", "module_from_spec"]
  + ["spec_from_file_location"],
  "experiments/engine/catalog.py": ["import_module"],
}


def code_loading(source, filename="<snippet>"):
  """Sorted names of the code-loading calls (CODE_LOADERS, any receiver) in `source`, and
  `import runpy` / `importlib.machinery`, which exist only to run code."""
  found = []
  for node in ast.walk(ast.parse(source, filename)):
    if isinstance(node, ast.Call):
      name = _dotted(node.func).split(".")[-1] or getattr(node.func, "attr", "")
      if name in CODE_LOADERS:
        found.append(name)
    elif isinstance(node, ast.Import | ast.ImportFrom):
      names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
      found += [
        n for n in names if n and (n.split(".")[0] == "runpy" or n == "importlib.machinery")
      ]
  return sorted(found)


def test_code_is_loaded_only_where_audited():
  got = {}
  for f in _sources():
    found = code_loading(f.read_text(), str(f))
    if found:
      got[str(f.relative_to(REPO))] = found
  assert got == ALLOWED_LOADERS


@pytest.mark.parametrize(
  "snippet,found",
  [
    ("importlib.import_module(name)", ["import_module"]),
    ("from importlib import import_module\nimport_module(name)", ["import_module"]),
    ("__import__(name)", ["__import__"]),
    ("s = importlib.util.spec_from_file_location(n, p)", ["spec_from_file_location"]),
    ("spec.loader.exec_module(m)", ["exec_module"]),
    ("importlib.util.module_from_spec(s)", ["module_from_spec"]),
    ("import runpy", ["runpy"]),
    ("runpy.run_path(p)", ["run_path"]),
    ("importlib.util.find_spec(name)", []),
    ("importlib.metadata.version(name)", []),
  ],
)
def test_the_scan_catches_each_code_loader(snippet, found):
  assert code_loading(snippet) == found


def _sources():
  for root in ROOTS:
    yield from sorted(pathlib.Path(REPO, root).rglob("*.py"))


def test_source_has_no_pickle_and_no_unsafe_load():
  files = list(_sources())
  assert len(files) > 40, files  # the scan reaches the whole package
  found = [v for f in files for v in unsafe_calls(f.read_text(), str(f.relative_to(REPO)))]
  assert found == []
  # The one torch.load (GPT-2 .bin files) is seen by the scan, in its safe form.
  gpt2 = ast.parse(pathlib.Path(REPO, "jaxformer/interop/gpt2.py").read_text())
  loads = [n for n in ast.walk(gpt2) if isinstance(n, ast.Call) and _dotted(n.func) == "torch.load"]
  assert len(loads) == 1 and not unsafe_calls(ast.unparse(loads[0]))


@pytest.mark.parametrize(
  "snippet,bad",
  [
    ("import pickle", True),
    ("import cloudpickle as cp", True),
    ("from dill import loads", True),
    ("from pickle import Unpickler", True),
    ("np.load(path, allow_pickle=True)", True),
    ("numpy.load(path, allow_pickle=flag)", True),
    ("torch.load(path)", True),
    ("torch.load(path, weights_only=False)", True),
    ("eval(text)", True),
    ("np.load(path)", False),
    ("np.load(path, allow_pickle=False)", False),
    ("torch.load(path, map_location='cpu', weights_only=True)", False),
    ("ast.literal_eval(text)", False),
  ],
)
def test_the_scan_catches_each_unsafe_form(snippet, bad):
  assert bool(unsafe_calls(snippet)) == bad


# protocol 4/5 streams open with PROTO then FRAME and an 8-byte frame length
FRAMED_SIGNATURES = (b"\x80\x04\x95", b"\x80\x05\x95")
PICKLE_SIGNATURES = (
  b"cnumpy",  # protocol 0-1 global references to numpy / builtins
  b"numpy.core.multiarray",
  b"numpy._core.multiarray",
  b"c__builtin__",
  b"ccopy_reg",
  b"_reconstruct",
)


def holds_pickle(data: bytes) -> bool:
  """A pickle stream at the start of the file (PROTO 2-5) or a known pickle fragment in it. A
  PROTO + FRAME fragment counts only with a frame length that fits the file: its three bytes
  turn up by chance in about 1 in 100 compressed checkpoint chunks of 75 KB."""
  if len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5:
    return True
  for sig in FRAMED_SIGNATURES:
    at = data.find(sig)
    while at >= 0:
      size = int.from_bytes(data[at + 3 : at + 11], "little")
      if len(data) >= at + 11 and size <= len(data) - at - 11:
        return True
      at = data.find(sig, at + 1)
  return any(sig in data for sig in PICKLE_SIGNATURES)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_detector_sees_pickles(protocol):
  assert holds_pickle(pickle.dumps({"w": np.arange(3)}, protocol=protocol))
  assert holds_pickle(b"header" + pickle.dumps({"w": np.arange(3)}, protocol=protocol))


@pytest.fixture
def pickle_forbidden(monkeypatch):
  """Any pickle.dump(s) / load(s) / Pickler / Unpickler use raises during the test."""

  def forbidden(*args, **kwargs):
    raise AssertionError("pickle used on a checkpoint or data path")

  for name in ("dump", "dumps", "load", "loads", "Pickler", "Unpickler"):
    monkeypatch.setattr(pickle, name, forbidden)


# Files the run writes, by their first bytes: none of them is a Python object stream.
FORMATS = {
  b"{": "JSON",
  b"Checkpoint": "Orbax commit marker (text)",
  b"\x0c\xdb": "OCDBT (TensorStore, C++)",
  b"\x28\xb5\x2f\xfd": "zstd block of OCDBT array data",
  b"\x83\xaf\x70\xd1": "array_record (C++)",
  b"\x18\x00\x00\x00\x00\x00\x00\x00": "TensorBoard event record",
}


def test_checkpoints_and_data_on_disk_hold_no_pickle(pickle_forbidden, tmp_path):
  data_dir, workdir = tmp_path / "data", tmp_path / "run"
  config = tiny_config("softmax", data_dir=str(data_dir), total_steps=2, checkpoint_every=1)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(program_lib, "_PROGRAMS", {})  # compile here, under the pickle ban
    assert loop.train(config, str(workdir))["final_step"] == 2
    again = loop.train(config, str(workdir))  # restores the checkpoint of step 2
  assert again["first_step"] == 2 and again["steps"] == 0
  files = [p for root in (workdir, data_dir) for p in root.rglob("*") if p.is_file()]
  kinds = {}
  for path in files:
    data = path.read_bytes()
    assert not holds_pickle(data), path
    kind = next((k for magic, k in FORMATS.items() if data.startswith(magic)), None)
    if path.name == "metrics.jsonl":
      kind = "JSON lines"
    assert kind is not None, (path, data[:16])
    kinds[kind] = kinds.get(kind, 0) + 1
  assert {"JSON", "OCDBT (TensorStore, C++)", "array_record (C++)"} <= set(kinds), kinds


@pytest.mark.parametrize(
  "config_arg",
  ["experiments/configs/default.py", "experiments.configs.default", "default.py"],
)
def test_config_is_never_searched_for(config_arg, tmp_path):
  """From another directory, a path that exists only relative to the repository (which is
  on PYTHONPATH) or as a module name is refused, not found."""
  cmd = main_command(tmp_path / "run", rung="softmax")
  cmd[3] = f"--config={config_arg}"
  result = run(cmd, tmp_path / "data", timeout=h.TIMEOUT, cwd=tmp_path)
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip() == (
    f"error: --config={config_arg}: no such config file {config_arg.split(':')[0]!r}"
  )


def test_the_named_config_file_is_the_one_loaded(tmp_path):
  """A copy of the default config in the working directory is loaded from there (its bad
  keep_checkpoints is what the run reports)."""
  text = open(os.path.join(REPO, "experiments/configs/default.py")).read()
  # the copy's get_config sets one bad field on the default config's result
  text += (
    "\n\n_default_get_config = get_config\n\n\ndef get_config(arg=None):\n"
    "  c = _default_get_config(arg)\n  c.keep_checkpoints = -7\n  return c\n"
  )
  (tmp_path / "mine.py").write_text(text)
  cmd = main_command(tmp_path / "run", rung="softmax")
  cmd[3] = "--config=mine.py:rung=softmax"
  result = run(cmd, tmp_path / "data", timeout=h.TIMEOUT, cwd=tmp_path)
  assert result.returncode == 2 and result.stderr.strip() == (
    "error: keep_checkpoints=-7: must be a positive integer"
  ), result.stderr[-2000:]
