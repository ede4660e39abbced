"""The summary figure (one panel per trained claim) and the report, on synthetic records: what
each panel draws, read back from matplotlib's Agg artists. And the committed figure,
docs/img/claims.png, is drawn from today's records (its sidecar's hash). Nothing trains."""

import json
import os

import numpy as np
import pytest

from experiments import claims as claims_lib
from experiments.engine import catalog, cli, figures, registry, summary
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size

EXPLORE, CONFIRM = [100], [1, 2, 3]
ARMS = (Arm("strong", "softmax"), Arm("weak", "source_only"), Arm("pos", "softmax"),
        Arm("fal", "stateless"))  # fmt: skip
CASES = dict(positive=Case(arm="pos"), falsification=Case(arm="fal"))


def _experiment(*criteria, axis=None, panel=None):
  size = Size(task={}, model={}, steps=1, step_cap=1, learning_rates=(1e-3,),
              exploratory_seeds=tuple(EXPLORE), confirmatory=3, points=(2, 4, 8) if axis else ())  # fmt: skip
  return Experiment(name="interaction", section=5, claims=("5.1",), summary="a toy", arms=ARMS,
                    criteria=criteria, sizes={"quick": size}, task=lambda s, p: "", axis=axis,
                    metrics=(Metric("share", 0.0, 1.0, untrained="share0"),
                             Metric("share0", 0.0, 1.0)), panel=panel)  # fmt: skip


def _reading(mean, verdict):
  return {"mean": mean, "interval": [mean - 0.01, mean + 0.01], "verdict": verdict, "note": "",
          "values": [mean] * 3}  # fmt: skip


def _judged(name, verdict, tests="5.1", why=""):
  return {"name": name, "tests": tests, "statement": f"{name} holds: ...", "verdict": verdict,
          "why": why, "confirmatory": _reading(0.95, verdict), "exploratory": _reading(0.9, verdict),
          "positive": None, "falsification": None}  # fmt: skip


def _record(metrics, *judged, claim="SUPPORTED"):
  """metrics: {metric: {arm: {point: confirmatory values}}}; the exploratory seed reads -9,
  so a panel that drew it would be far off."""
  metrics = {m: {a: {p: [-9.0, *v] for p, v in by_p.items()} for a, by_p in by_a.items()}
             for m, by_a in metrics.items()}  # fmt: skip
  return {"experiment": "interaction", "size": "quick", "version": 2, "date": "2026-12-07",
          "scale": "V=16 L=16", "seeds": {"exploratory": EXPLORE, "confirmatory": CONFIRM},
          "claims": {"5.1": {"text": "", "verdict": claim}}, "criteria": list(judged),
          "metrics": metrics}  # fmt: skip


def _ax():
  return figures.new().add_subplot(1, 1, 1)


def _line(ax, key):
  """The one line labelled or tagged `key` (an arm, or gid 'threshold', 'chance', 'read')."""
  found = [ln for ln in ax.lines if key in (ln.get_label(), ln.get_gid())]
  assert found, f"no line {key!r}: {[(ln.get_label(), ln.get_gid()) for ln in ax.lines]}"
  return found[0]


def _titles(ax):
  return ax.get_title(loc="left"), ax.get_title(loc="right")


def test_a_panel_along_the_axis_draws_the_arms_the_threshold_chance_and_the_point_read():
  c = Criterion("recalls", "5.1", "strong recalls", "adjusted", "strong", threshold=0.9,
                at="last", **CASES)  # fmt: skip
  e = _experiment(c, axis=Axis("P"))
  values = {"strong": [0.9, 1.0, 0.95], "pos": [0.8, 0.9, 1.0], "fal": [0.0, 0.1, -0.1]}
  adjusted = {arm: {p: [v - i * 0.1 for v in vs] for i, p in enumerate(("2", "4", "8"))}
              for arm, vs in values.items()}  # fmt: skip
  ax = _ax()
  summary.panel(ax, "5.1", _record({"adjusted": adjusted}, _judged("recalls", "SUPPORTED")), e)
  np.testing.assert_allclose(_line(ax, "strong").get_ydata(), [0.95, 0.85, 0.75])
  np.testing.assert_allclose(_line(ax, "fal").get_ydata(), [0.0, -0.1, -0.2], atol=1e-12)
  assert _line(ax, "strong").get_color() == summary.STYLE["strong"]["color"]
  assert _line(ax, "pos").get_color() == summary.STYLE["positive"]["color"]
  np.testing.assert_allclose(_line(ax, "threshold").get_ydata(), [0.9] * 3)
  np.testing.assert_allclose(_line(ax, "chance").get_ydata(), [0.0] * 3)
  assert list(_line(ax, "read").get_xdata()) == [2, 2]  # "last": P = 8, the third point
  assert _titles(ax) == ("5.1 SUPPORTED", "quick v2")
  assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8"]
  assert "recalls" in ax.get_xlabel() and "\u2265 0.9" in ax.get_xlabel()


@pytest.mark.parametrize(
  "statistic, metric, bar",
  [("difference", "adjusted", lambda weak: weak - 0.05), ("ratio", "steps_to", lambda w: w * 1.5)],
)
def test_a_paired_statistic_across_the_arms_sets_its_threshold_against_the_weak_arm(
  statistic, metric, bar
):
  threshold = -0.05 if statistic == "difference" else 1.5
  c = Criterion("holds", "5.1", "strong keeps up", metric, "strong", threshold=threshold,
                statistic=statistic, against="weak", **CASES)  # fmt: skip
  values = {"strong": [3.0, 4.0, 5.0], "weak": [2.0, 2.0, 2.0], "pos": [1.0] * 3, "fal": [0.0] * 3}
  record = _record({metric: {a: {"*": v} for a, v in values.items()}}, _judged("holds", "REFUTED"),
                   claim="REFUTED")  # fmt: skip
  ax = _ax()
  summary.panel(ax, "5.1", record, _experiment(c))
  np.testing.assert_allclose(_line(ax, "threshold").get_ydata(), [bar(2.0)] * 2)
  assert [t.get_text() for t in ax.get_xticklabels()] == ["strong", "weak", "pos", "fal"]
  means = {ln.get_xdata()[0]: ln.get_ydata()[0] for ln in ax.lines if ln.get_marker() == "_"}
  assert means == {0: 4.0, 1: 2.0, 2: 1.0, 3: 0.0}
  assert _titles(ax)[0] == "5.1 REFUTED"


def test_a_gain_draws_the_untrained_reading_and_the_threshold_above_it():
  c = Criterion("rises", "5.1", "training raises the share", "share", "strong", threshold=0.1,
                statistic="gain", **CASES)  # fmt: skip
  metrics = {"share": {a: {"*": [0.8] * 3} for a in ("strong", "pos", "fal")},
             "share0": {"strong": {"*": [0.5, 0.6, 0.7]}}}  # fmt: skip
  ax = _ax()
  summary.panel(ax, "5.1", _record(metrics, _judged("rises", "SUPPORTED")), _experiment(c))
  np.testing.assert_allclose(_line(ax, "strong untrained").get_ydata(), [0.6])
  np.testing.assert_allclose(_line(ax, "threshold").get_ydata(), [0.7, 0.7])


def test_the_panel_draws_the_criterion_that_decides_the_claim_and_says_why():
  holds = Criterion("holds", "5.1", "strong recalls", "adjusted", "strong", threshold=0.9, **CASES)
  fails = Criterion("fails", "5.1", "weak fails", "adjusted", "weak", compare="<=", threshold=0.3,
                    **CASES)  # fmt: skip
  e = _experiment(holds, fails)
  adjusted = {a: {"*": [0.5] * 3} for a in ("strong", "weak", "pos", "fal")}
  why = "weak still learning at its step cap (800 steps)"
  record = _record({"adjusted": adjusted}, _judged("holds", "SUPPORTED"),
                   _judged("fails", "UNRESOLVED", why=why), claim="UNRESOLVED")  # fmt: skip
  assert summary.deciding(record, "5.1", e)["name"] == "fails"
  ax = _ax()
  summary.panel(ax, "5.1", record, e)
  assert _titles(ax)[0] == "5.1 UNRESOLVED"
  assert "fails" in ax.get_xlabel() and "still learning" in ax.get_xlabel()
  np.testing.assert_allclose(_line(ax, "threshold").get_ydata(), [0.3, 0.3])


def test_a_declarations_panel_hook_replaces_the_generic_panel():
  drawn = []
  c = Criterion("holds", "5.1", "strong recalls", "adjusted", "strong", threshold=0.9, **CASES)
  e = _experiment(c, panel=lambda ax, record, number: drawn.append((record["size"], number)))
  ax = _ax()
  summary.panel(ax, "5.1", _record({}, _judged("holds", "SUPPORTED")), e)
  assert drawn == [("quick", "5.1")] and _titles(ax)[0] == "5.1 SUPPORTED"


def test_the_grid_has_one_panel_per_trained_claim_in_order_and_says_no_record(
  tmp_path, monkeypatch
):
  monkeypatch.delitem(catalog.DECLARED, "fixed_memory")  # as if not yet ported
  fig = summary.figure({}, str(tmp_path / "claims.png"))
  titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
  trained = [c.number for c in claims_lib.CLAIMS if c.kind == "trained"]
  assert titles == [f"{n} no record" for n in trained]
  texts = {
    ax.get_title(loc="left").split()[0]: ax.texts[0].get_text() for ax in fig.axes if ax.texts
  }
  assert texts["1.1"] == "fixed_memory:\nnot yet ported to the engine"
  assert texts["3.2"] == "symmetry:\nno record"
  assert (tmp_path / "claims.png").stat().st_size > 0


def test_the_report_opens_with_the_claims_table_then_the_figure_the_claims_and_the_numbers(
  tmp_path,
):
  c = Criterion("recalls", "5.1", "strong recalls", "adjusted", "strong", threshold=0.9, **CASES)
  e = _experiment(c)
  adjusted = {a: {"*": [0.95] * 3} for a in ("strong", "pos", "fal")}
  quick = _record({"adjusted": adjusted}, _judged("recalls", "SUPPORTED"))
  full = dict(_record({"adjusted": adjusted}, _judged("recalls", "REFUTED"), claim="REFUTED"),
              size="full", version=1)  # fmt: skip
  path = tmp_path / "claims.md"
  summary.report({"interaction": quick}, {"interaction": full}, str(path), {"interaction": e})
  text = path.read_text()
  first_table = text.index("| claim |")
  assert f'"{claims_lib.ARTICLE}"' in text[:first_table]
  assert text.index("![one panel per trained claim](claims.png)") > first_table
  assert (tmp_path / "claims.png").exists()
  row = next(line for line in text.splitlines() if line.startswith("| 5.1 |"))
  assert "**REFUTED** (full v1, 2026-12-07, seeds 1, 2, 3; V=16 L=16)" in row
  assert row.endswith("| SUPPORTED | DISAGREE |")
  section = text[text.index("### 5.1") : text.index("### 5.2")]
  assert "> Only the interaction term" in section and "reads **SUPPORTED**" in section
  assert "The record (full v1" in section and "results/interaction" in section
  assert "pending" in next(ln for ln in text.splitlines() if ln.startswith("| 1.1 |"))
  assert text.index("## Appendix") > text.index("### 9.3")
  assert "| recalls | 5.1 |" in text[text.index("## Appendix") :]


def test_summary_command_writes_the_figure_and_the_hash_of_what_it_drew(tmp_path, monkeypatch):
  monkeypatch.setattr(registry, "RESULTS", str(tmp_path / "results"))
  monkeypatch.setattr(summary, "FIGURE", str(tmp_path / "claims.png"))
  monkeypatch.setattr(summary, "SIDECAR", str(tmp_path / "claims.json"))
  assert cli.main(["summary"]) == 0
  sidecar = json.loads((tmp_path / "claims.json").read_text())
  assert sidecar["hash"] == summary.records_hash({}) and sidecar["records"] == {}
  assert (tmp_path / "claims.png").exists()


def test_the_committed_figure_is_drawn_from_todays_records():
  assert os.path.exists(summary.FIGURE), (
    f"{summary.FIGURE}: run python -m experiments.engine summary"
  )
  with open(summary.SIDECAR) as f:
    drawn = json.load(f)
  assert drawn["hash"] == summary.records_hash(summary.committed(registry.RESULTS)), (
    "docs/img/claims.png was drawn from other records: run python -m experiments.engine summary"
  )
