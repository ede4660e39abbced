import json

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


def test_verdict_is_pass_only_when_every_criterion_holds():
  assert _result([True, True]).verdict == "PASS"
  assert _result([True, False]).verdict == "FAIL"
  assert _result([]).verdict == "FAIL"  # a claim with nothing checked is not a pass


def test_write_produces_json_and_markdown(tmp_path):
  path = report.write([_result([True]), _result([False])], str(tmp_path))
  data = json.loads((tmp_path / "results.json").read_text())
  assert [d["verdict"] for d in data] == ["PASS", "FAIL"]
  assert data[0]["metrics"] == {"acc": [0.5, 0.95]}
  text = open(path).read()
  assert "1 of 2 experiments PASS" in text
  assert "| rnn | 0.5 |" in text
  assert "- [x] acc >= 0.9 (acc=0.95)" in text and "- [ ] acc >= 0.9 (acc=0.5)" in text
