"""The tutorial's experiment (docs/protocol.md) runs end to end at its tiny size: registered
in a scratch registry, trained, measured, judged, recorded, its page generated."""

import os

from experiments.engine import catalog, page, records, registry, run, stats


def test_the_tutorial_experiment_runs_end_to_end(tmp_path):
  experiment = catalog.load("window_recall")
  reg, results = str(tmp_path / "registry.json"), str(tmp_path / "results")
  entry = registry.register(experiment, "tiny", "the tutorial", path=reg, log_dir=results)
  result = run.run(
    experiment, "tiny", str(tmp_path / "work"), registry_path=reg, log=lambda t: None
  )
  assert set(result["claims"]) == {"9.1"}
  assert result["claims"]["9.1"]["verdict"] in stats.VERDICTS
  assert result["seeds"]["confirmatory"] == entry["confirmatory"]
  assert "mqar:vocab_size=16" in result["tasks"]["*"]
  (fails,) = [c for c in result["criteria"] if c["name"] == "window_fails"]
  assert fails["positive"]["case"].startswith("self") and fails["falsification"]["case"] == "full"
  # every seed of every arm has its per-seed engine metrics
  for metric in ("accuracy", "adjusted", "over_chance", "steps_to"):
    assert {a: len(v["*"]) for a, v in result["metrics"][metric].items()} == {
      "full": 3, "window": 3, "self": 3}  # fmt: skip
  run.record(result, experiment, results_dir=results)
  folder = os.path.join(results, "window_recall")
  assert records.read(os.path.join(folder, "tiny.json"))["hash"] == entry["hash"]
  with open(os.path.join(folder, page.PAGE)) as f:
    assert f.read() == page.render(experiment, folder)
  with open(os.path.join(folder, "log.md")) as f:
    assert "tiny version 1 run at" in f.read()
