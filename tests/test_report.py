import json
import math

from experiments import report


def _result(passes):
  return report.Result(
    experiment="demo",
    claim="attention recalls",
    setup="tiny",
    criteria=[report.Criterion("acc >= 0.9", p, {"acc": 0.95 if p else 0.5}) for p in passes],
    metrics={"acc": [0.5, 0.95]},
    table=[{"rung": "rnn", "acc": 0.5}],
  )


def test_verdict_is_supported_only_when_every_criterion_holds():
  assert _result([True, True]).verdict == "SUPPORTED"
  assert _result([True, False]).verdict == "REFUTED"
  assert _result([]).verdict == "UNRESOLVED"  # a claim with nothing checked is not supported


def test_write_produces_json_and_markdown(tmp_path):
  path = report.write([_result([True]), _result([False])], str(tmp_path))
  data = json.loads((tmp_path / "results.json").read_text())
  assert [d["verdict"] for d in data] == ["SUPPORTED", "REFUTED"]
  assert data[0]["metrics"] == {"acc": [0.5, 0.95]}
  text = open(path).read()
  assert "1 of 2 experiments SUPPORTED, 1 REFUTED" in text
  assert "| rnn | 0.5 |" in text
  assert "- **SUPPORTED** acc >= 0.9 (acc=0.95)" in text
  assert "- **REFUTED** acc >= 0.9 (acc=0.5)" in text


def test_a_failed_control_is_inconclusive_whatever_the_criteria_say():
  result = _result([True, True])
  result.controls = [report.Criterion("the RNN learns at small K", False)]
  assert result.verdict == "INCONCLUSIVE"
  result.controls[0].passed = True
  assert result.verdict == "SUPPORTED"
  result.crashed = True  # a crash decides nothing, whatever the controls
  result.criteria = [report.Criterion("ran", False)]
  assert result.verdict == "UNRESOLVED"


def test_every_seed_needs_every_seed_and_a_nan_never_passes():
  assert report.every_seed("acc >= 0.9", [0.95, 0.91, 0.9], lambda a: a >= 0.9).passed
  one_short = report.every_seed("acc >= 0.9", [0.95, 0.89, 0.99], lambda a: a >= 0.9)
  assert not one_short.passed and one_short.values["per_seed"] == [0.95, 0.89, 0.99]
  assert one_short.verdict == "UNRESOLVED"  # the seeds split
  assert one_short.rule == report.EVERY_SEED
  assert not report.every_seed("acc <= 0.5", [0.1, math.nan], lambda a: a <= 0.5).passed
  assert not report.every_seed("acc <= 0.5", [], lambda a: a <= 0.5).passed


def test_mean_criteria_use_the_bootstrap_interval():
  tight = [0.05, 0.06, 0.055, 0.052]
  assert report.mean_above("gain > 0", tight, 0.0).passed
  assert not report.mean_below("gain < 0", tight, 0.0).passed
  straddles = [-0.2, 0.3, -0.1, 0.25]  # mean 0.0625 > 0, but the interval holds 0
  criterion = report.mean_above("gain > 0", straddles, 0.0)
  assert not criterion.passed
  low, high = criterion.values["ci95"]
  assert low < 0 < high and math.isclose(criterion.values["mean"], 0.0625)
  assert report.bootstrap_interval(straddles) == report.bootstrap_interval(straddles)  # seeded
  assert all(math.isnan(x) for x in report.bootstrap_interval([1.0, math.nan]))


def test_the_report_states_each_rule_and_the_controls(tmp_path):
  result = _result([True])
  result.criteria = [report.every_seed("acc >= 0.9", [0.95, 0.97], lambda a: a >= 0.9)]
  result.controls = [report.Criterion("the control learns", True, {"acc": 0.8})]
  text = open(report.write([result], str(tmp_path))).read()
  assert "**Controls** (if one fails, the verdict is INCONCLUSIVE):" in text
  assert "- **SUPPORTED** the control learns (acc=0.8)" in text
  assert "- **SUPPORTED** acc >= 0.9 _[holds for every seed]_ (per_seed=[0.95, 0.97])" in text
