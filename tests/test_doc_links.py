"""Every document the repository cites is in the repository.

Two kinds of citation are checked in the README, docs/, BENCHMARKS.md, the code, the tests,
the build files and the notebooks (markdown and code cells alike):
- a relative Markdown link `[text](target)` resolves from the file that holds it;
- a mention of a Markdown file by name (`docs/reconstruction.md`, or bare `jax-notes.md` as in
  "docs: jax-notes.md") names a file at the repository root or in docs/.
Files that jaxformer writes at run time (a run's report.md, scorecard.md, ...) are the only
exceptions.
"""

import json
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "runs", "build", "__pycache__", ".pytest_cache", ".ruff_cache"}
SUFFIXES = {".md", ".py", ".ipynb", ".sh", ".cfg", ".toml", ".txt"}
NAMES = {"Makefile"}
# Written by the code, not stored: experiments/report.py, experiments/gpu_bench.sh and the
# engine's per-experiment log (experiments/engine/registry.py).
WRITTEN_AT_RUN_TIME = {"report.md", "claims.md", "benchmarks_gpu.md", "scorecard.md", "log.md"}

MARKDOWN_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MD_MENTION = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)\b")


def _files():
  for path in sorted(REPO_ROOT.rglob("*")):
    rel = path.relative_to(REPO_ROOT)
    if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
      continue
    if path == Path(__file__).resolve():
      continue  # its examples of broken citations are broken on purpose
    if path.is_file() and (path.suffix in SUFFIXES or path.name in NAMES):
      yield path


def _texts(path):
  """(text, is_markdown) pieces of a file: a notebook's cells one by one."""
  if path.suffix != ".ipynb":
    return [(path.read_text(encoding="utf-8"), path.suffix == ".md")]
  cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
  return [("".join(c["source"]), c["cell_type"] == "markdown") for c in cells]


def broken_citations(path, root=REPO_ROOT):
  """['file: what is cited'] for each citation in `path` that names no file under `root`."""
  rel = path.relative_to(root)
  broken = []
  for text, is_markdown in _texts(path):
    if is_markdown:
      for target in MARKDOWN_LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
          continue  # a URL (http:, mailto:, ...) or an anchor in the same file
        if not (path.parent / target.split("#")[0]).exists():
          broken.append(f"{rel}: link ({target})")
    for name in MD_MENTION.findall(text):
      if Path(name).name in WRITTEN_AT_RUN_TIME or name.startswith("runs/"):
        continue
      candidates = [root / name] if "/" in name else [root / name, root / "docs" / name]
      if not any(c.is_file() for c in candidates):
        broken.append(f"{rel}: {name}")
  return broken


def test_every_cited_document_exists():
  files = list(_files())
  # the scan reaches every kind of file that cites documents (a wrong root would scan nothing)
  found = {p.relative_to(REPO_ROOT).as_posix() for p in files}
  assert {"README.md", "docs/experiments.md", "jaxformer/ladder.py"} <= found
  assert any(p.suffix == ".ipynb" for p in files)
  broken = [b for p in files for b in broken_citations(p)]
  assert not broken, "cited but not in the repository:\n" + "\n".join(broken)


@pytest.mark.parametrize(
  "text, broken",
  [
    ("see docs/reconstruction.md section 3", []),
    ("(docs: jax-notes.md)", []),
    ("[the derivation](docs/reconstruction.md#notation)", []),
    ("written to runs/ladder/report.md", []),
    ("https://github.com/example/project/blob/main/NOTES.md", []),
    ("see docs/missing-notes.md", ["docs/missing-notes.md"]),
    ("see missing-notes.md", ["missing-notes.md"]),
    ("[gone](docs/gone.md)", ["link (docs/gone.md)", "docs/gone.md"]),
    ("![plot](docs/img/none.png)", ["link (docs/img/none.png)"]),
  ],
)
def test_the_check_flags_what_is_missing(tmp_path, text, broken):
  # the same check on a one-line README in a repository that holds two documents
  (tmp_path / "docs").mkdir()
  for name in ("reconstruction.md", "jax-notes.md"):
    (tmp_path / "docs" / name).write_text("x")
  readme = tmp_path / "README.md"
  readme.write_text(text)
  got = [b.split(": ", 1)[1] for b in broken_citations(readme, tmp_path)]
  assert got == broken
