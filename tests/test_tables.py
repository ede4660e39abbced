"""The results tables of README.md and docs/experiments.md are generated from results/, and a
table that disagrees with its file fails here (experiments/tables.py)."""

import json

import pytest

from experiments import run_all, tables

DOC = "intro\n<!-- results table: quick -->\nstale text\n<!-- end results table -->\nafter\n"


def _entry(verdict="SUPPORTED", **fields):
  return {
    "experiment": "skips",
    "size": "quick",
    "verdict": verdict,
    "design": {"experiment": "skips", "version": 1, "hash": "ab" * 32, "size": "quick"},
    "commit": "0123456789ab",
    "date": "2026-12-01 21:00",
    "seeds": [0, 1, 2],
    "exploratory_seeds": [100],
    "controls": [],
    "falsification": [{"name": "residual_learns", "description": "d", "verdict": "REFUTED"}],
    "criteria": [
      {"name": "residual_learns", "description": "d", "verdict": verdict, "note": "n"},
    ],
    "plateau": [{"exploratory": "100:target", "confirmatory": "0:flat 1:target 2:learning"}],
    "seconds": 12.5,
  } | fields


def _file(tmp_path, entries):
  src = tmp_path / "results.json"
  src.write_text(json.dumps(entries))
  return tables.add(str(src), str(tmp_path / "results"))


@pytest.fixture
def stand_ins(monkeypatch):
  """The tables list run_all's old-protocol experiments; these tests file results under two
  names it once listed."""
  monkeypatch.setattr(run_all, "EXPERIMENTS", ("skips", "beyond"))


def test_the_committed_tables_agree_with_results():
  assert tables.drifted() == []


@pytest.mark.usefixtures("stand_ins")
def test_a_table_is_generated_from_its_file_and_drift_is_caught(tmp_path):
  results = str(tmp_path / "results")
  _file(tmp_path, [_entry("UNRESOLVED")])
  registry = {"skips": {"1": {"quick": "ab" * 32}}}
  text = tables.render(DOC, results, registry)
  assert text.startswith("intro\n<!-- results table: quick -->\n| experiment |")
  assert text.endswith("<!-- end results table -->\nafter\n") and "stale text" not in text
  row = next(line for line in text.splitlines() if line.startswith("| `skips`"))
  assert "**UNRESOLVED**" in row and "v1 `abababab`" in row and "3/4" in row
  assert "residual_learns: UNRESOLVED (n)" in row and "| 3 + 1 |" in row
  assert "| `beyond` | not run at this size | | | | | | | | |" in text
  assert "**UNRESOLVED** | rejected | v1" in row  # its falsification reading is REFUTED
  doc = tmp_path / "page.markdown"
  doc.write_text(text)
  assert tables.drifted([str(doc)], results, registry) == []
  _file(tmp_path, [_entry("SUPPORTED")])  # the file changes; the table does not
  assert tables.drifted([str(doc)], results, registry) == [str(doc)]
  stale = tables.render(DOC, results, {"skips": {"1": {"quick": "cd" * 32}}})
  assert "(not the registered design)" in stale
  newer = tables.render(DOC, results, {"skips": {"1": {"quick": "ab" * 32}, "2": {}}})
  assert "(the current design is v2)" in newer
  unchanged = {"skips": {"1": {"quick": "ab" * 32}, "2": {"quick": "ab" * 32, "full": "ef" * 32}}}
  assert "v1 `abababab` (= v2 at this size)" in tables.render(DOC, results, unchanged)


@pytest.mark.usefixtures("stand_ins")
@pytest.mark.parametrize(
  "verdicts, reads",
  [
    ((), "none declared"),
    (("REFUTED", "REFUTED"), "rejected"),
    (("REFUTED", "UNRESOLVED"), "unresolved"),
    (("UNRESOLVED", "SUPPORTED"), "**accepted**"),
  ],
)
def test_the_table_says_what_the_falsification_arm_read(tmp_path, verdicts, reads):
  falsification = [{"name": "f", "description": "d", "verdict": v} for v in verdicts]
  results = str(tmp_path / "results")
  _file(tmp_path, [_entry(falsification=falsification)])
  text = tables.render(DOC, results, {"skips": {"1": {"quick": "ab" * 32}}})
  row = next(line for line in text.splitlines() if line.startswith("| `skips`"))
  assert row.split(" | ")[2] == reads


def test_filing_refuses_an_entry_without_experiment_or_size(tmp_path):
  with pytest.raises(ValueError, match=r"\[0\]: no experiment or size"):
    _file(tmp_path, [_entry(size="")])
  written = _file(tmp_path, [_entry()])
  assert tables.load("skips", "quick", str(tmp_path / "results"))["verdict"] == "SUPPORTED"
  assert written[0].endswith("skips_quick.json.gz")


def _record(model, seed, plateau, curve, selected=True, **metrics):
  return {
    "model": model,
    "setting": "depth=2",
    "seed": seed,
    "metrics": {
      "plateau": plateau,
      "selected": selected,
      "budget": 400,
      "stop_reason": "completed",
      "val_accuracy_by_step": curve,
      **metrics,
    },
  }


@pytest.mark.usefixtures("stand_ins")
def test_the_learning_table_lists_the_arms_still_learning_with_their_gain(tmp_path):
  climbing = [[100, 0.2], [200, 0.4], [300, 0.5], [400, 0.7]]  # +0.3 over the last half
  runs = [
    _record("no_skip", 0, "learning", climbing),
    _record("no_skip", 1, "learning", climbing, plateau_gain=0.05),  # filed: read as filed
    _record("no_skip", 2, "flat", [[200, 0.5], [400, 0.51]]),
    _record("no_skip", 3, "learning", climbing, selected=False),  # another rate: not read
    _record("residual", 0, "target", [[100, 0.99]]),
  ]
  _file(tmp_path, [_entry(runs=runs)])
  doc = "<!-- results table: learning quick -->\nold\n<!-- end results table -->\n"
  text = tables.render(doc, str(tmp_path / "results"), {})
  rows = [line for line in text.splitlines() if line.startswith("| `")]
  assert rows == ["| `skips` | no_skip @ depth=2 | 400 | 2 of 3 | +0.050 to +0.300 |"]
  assert "(flat: < 0.02)" in text and "old" not in text
  doubled = _record("no_skip", 4, "learning", climbing, plateau_gain=0.04, best_before=0.66)
  doubled["metrics"]["plateau_reading"] = "doubling"  # its gain is over the budget before
  _file(tmp_path, [_entry(runs=[*runs, doubled])])
  rows = [x for x in tables.render(doc, str(tmp_path / "results"), {}).splitlines() if "| `" in x]
  assert rows == [
    "| `skips` | no_skip @ depth=2 | 400 | 3 of 4 | +0.040 to +0.300 (1 over the budget before) |"
  ]
  _file(tmp_path, [_entry(runs=runs[2:])])
  text = tables.render(doc, str(tmp_path / "results"), {})
  assert "| every arm finished learning | | | | |" in text
  # under confirm_below each seed is read at one of two rates ("read"), whatever is selected
  unread = _record("no_skip", 0, "learning", climbing)
  unread["metrics"]["read"] = False
  read = _record("no_skip", 0, "target", [[100, 0.99]], selected=False)
  read["metrics"]["read"] = True
  _file(tmp_path, [_entry(runs=[unread, read])])
  text = tables.render(doc, str(tmp_path / "results"), {})
  assert "| every arm finished learning | | | | |" in text
  unread["metrics"]["read"], read["metrics"]["read"] = True, False
  _file(tmp_path, [_entry(runs=[unread, read])])
  text = tables.render(doc, str(tmp_path / "results"), {})
  assert "| `skips` | no_skip @ depth=2 | 400 | 1 of 1 | +0.300 |" in text
  one_eval = [_record("no_skip", 0, "learning", [[400, 0.3]])]  # nothing before the window
  _file(tmp_path, [_entry(runs=one_eval)])
  text = tables.render(doc, str(tmp_path / "results"), {})
  assert "| `skips` | no_skip @ depth=2 | 400 | 1 of 1 | too few evaluations |" in text
