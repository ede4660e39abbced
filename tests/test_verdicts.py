"""The notebooks' verdicts come from results/ (experiments/engine/verdicts.py), and every
notebook names the article it reconstructs where it first cites it."""

import json
import re
import shutil
from pathlib import Path

import pytest

from experiments import claims as claims_lib
from experiments.engine import records, stats, summary, verdicts

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO_ROOT / "colabs").glob("*.ipynb"))
CITED = re.compile(r"\bclaims?\s+(\d+\.\d+(?:(?:,\s*|\s+and\s+)\d+\.\d+)*)", re.IGNORECASE)
RENDERED = re.compile(r"verdicts\.markdown\(\s*\[([^\]]*)\]")
NUMBER = re.compile(r"\d+\.\d+")


def _cells(path, kind):
  cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
  return ["".join(c["source"]) for c in cells if c["cell_type"] == kind]


def _cited(path):
  """The claim numbers a notebook's prose cites ('claim 3.2', 'claims 3.2, 3.3 and 3.4')."""
  prose = "\n".join(_cells(path, "markdown"))
  return {n for group in CITED.findall(prose) for n in NUMBER.findall(group)}


def _rendered(path):
  """The claim numbers a notebook's code renders with verdicts.markdown([...])."""
  code = "\n".join(_cells(path, "code"))
  return {n for group in RENDERED.findall(code) for n in NUMBER.findall(group)}


def _committed_claims():
  """(claim, its record) for every claim a committed record holds."""
  found = summary.committed()
  return [(c, found[c.experiment]) for c in claims_lib.CLAIMS
          if c.experiment in found and c.number in found[c.experiment]["claims"]]  # fmt: skip


def test_the_verdict_is_the_records():
  held = _committed_claims()
  assert held, "no committed record holds a claim: nothing to compare"
  for c, record in held:
    expected = record["claims"][c.number]["verdict"]
    assert verdicts.verdict(c.number) == expected
    text = verdicts.markdown([c.number])
    assert f"Verdict of record: **{expected}** ({record['size']}" in text
    assert f"version {record['version']}, {record['date']}; {record['scale']})" in text
    assert f"[results/{c.experiment}/README.md](../results/{c.experiment}/README.md)" in text
    assert c.text in text


def test_each_claim_one_line_in_the_order_asked():
  numbers = ["9.1", "2.1", "3.2", "2.2"]
  lines = verdicts.markdown(numbers).splitlines()
  assert [line.split("**")[1] for line in lines] == numbers
  assert "A property test: tests/nn/test_s2_parallel.py" in lines[1]
  assert "Untested: a claim about parallel hardware" in lines[3]
  assert verdicts.markdown("3.2") == verdicts.markdown(["3.2"])
  with pytest.raises(KeyError, match="no such claim"):
    verdicts.markdown(["99.1"])


def test_no_record_yet(tmp_path):
  text = verdicts.markdown(["3.2", "1.1"], results_dir=str(tmp_path))
  assert text.count("Verdict of record: no record yet.") == 2
  assert verdicts.verdict("3.2", results_dir=str(tmp_path)) is None


def test_a_full_record_is_the_verdict_of_record(tmp_path):
  # a copy of a committed quick record, filed again as full with another verdict: full wins
  c, record = _committed_claims()[0]
  folder = tmp_path / c.experiment
  folder.mkdir()
  shutil.copy(REPO_ROOT / "results" / c.experiment / "quick.json", folder / "quick.json")
  other = next(
    v for v in (stats.REFUTED, stats.SUPPORTED) if v != record["claims"][c.number]["verdict"]
  )
  full = record | {"size": "full", "version": 7}
  full["claims"] = {n: v | {"verdict": other} for n, v in record["claims"].items()}
  records.write(full, str(folder / "full.json"))
  assert verdicts.verdict(c.number, results_dir=str(tmp_path)) == other
  text = verdicts.markdown([c.number], results_dir=str(tmp_path), link_from=str(tmp_path))
  assert f"Verdict of record: **{other}** (full; version 7, " in text
  assert "no full record yet" not in text
  assert "Every reading:" not in text  # no page beside the copied record: no link to one


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_first_markdown_cell_names_the_article(path):
  first = _cells(path, "markdown")[0]
  assert f'"{claims_lib.ARTICLE}"' in " ".join(first.split())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_claim_a_notebook_cites_is_rendered_from_results(path):
  # outcomes are never typed: no verdict word in the prose, and every claim the prose cites
  # has a cell that renders its verdict of record
  prose = "\n".join(_cells(path, "markdown"))
  typed = [v for v in stats.VERDICTS if v in prose]
  assert not typed, f"{path.name}: a verdict typed in its prose: {typed}"
  cited, rendered = _cited(path), _rendered(path)
  for number in rendered:
    claims_lib.claim(number)  # a KeyError where the notebook renders no such claim
  assert cited <= rendered, f"{path.name}: cites {sorted(cited - rendered)} without their verdict"


def test_the_scan_sees_citations_and_renders():
  # the notebooks' own text: 02 cites and renders the symmetry claims (a scan that found
  # nothing would pass the test above)
  symmetry = {"3.1", "3.2", "3.3", "3.4", "3.5"}
  notebook = REPO_ROOT / "colabs" / "02_dynamic_weights_and_symmetry.ipynb"
  assert _cited(notebook) == _rendered(notebook) == symmetry


def test_the_scan_reads_lists_of_numbers():
  assert CITED.findall("the article claims X (claims 3.2, 3.3 and\n3.4); Claim 9.1") == [
    "3.2, 3.3 and\n3.4",
    "9.1",
  ]
  assert RENDERED.findall('display(Markdown(verdicts.markdown(["9.2", "9.3"])))') == [
    '"9.2", "9.3"'
  ]
