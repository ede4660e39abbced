"""The README's Python blocks run, in order, in one namespace, as a reader would paste them.

Every fenced block must name its language; every ```python block runs (nothing is skipped).
A block that is deliberately not runnable is fenced as ```text or ```sh instead.
"""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def blocks(text):
  """[(language, source, line number of the opening fence)] of every fenced block."""
  return [(m[1].strip(), m[2], text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def test_every_block_names_its_language():
  found = blocks(README.read_text(encoding="utf-8"))
  assert found, "no fenced blocks found in README.md"
  unnamed = [line for language, _, line in found if not language]
  assert not unnamed, f"README.md: fenced blocks without a language at lines {unnamed}"


def test_python_blocks_run(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
  python = [
    (src, line) for language, src, line in blocks(README.read_text()) if language == "python"
  ]
  assert len(python) >= 2, "README.md lost its runnable examples"
  namespace = {"__name__": "__readme__"}
  for src, line in python:
    exec(compile(src, f"README.md (block at line {line})", "exec"), namespace)
  # the ladder example really built, initialized and applied a model
  assert namespace["logits_BLV"].shape == (2, 16, namespace["config"].vocab_size)


def test_block_parser():
  text = "a\n```python\nx = 1\n```\n```\nraw\n```\n```sh\nmake run\n```\n"
  assert blocks(text) == [("python", "x = 1\n", 2), ("", "raw\n", 5), ("sh", "make run\n", 8)]
