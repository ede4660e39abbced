"""Re-judging a record from its own measurements (experiments/engine/run.py `rejudge`)."""

import copy
import os

import pytest

from experiments.engine import catalog, declare, records, registry, run

CACHE = catalog.load("cache")
RECORD = records.read(os.path.join(registry.RESULTS, "cache", "quick.json"))


def test_a_record_judged_again_by_the_same_rules_reads_the_same():
  again = run.rejudge(copy.deepcopy(RECORD), CACHE)
  assert again["claims"] == RECORD["claims"]
  assert [c["verdict"] for c in again["criteria"]] == [c["verdict"] for c in RECORD["criteria"]]
  assert again["commit"] == RECORD["commit"] and again["rejudged"]
  assert again["metrics"] == RECORD["metrics"]  # nothing measured again


def test_a_replica_that_never_left_chance_is_marked_by_todays_rule():
  """A replica the plateau rule reads as learning (up 0.04 at its last evaluation) whose curve
  stays within the band above chance is re-read as `chance`, for every seed."""
  record = copy.deepcopy(RECORD)
  unit = record["units"][0]
  chosen = tuple(unit["selected"].values())
  for r in unit["replicas"]:
    if (r["learning_rate"], r["weight_decay"]) == chosen:
      r["stop_reason"] = "completed"
      steps = range(100, unit["budget"] + 1, 100)
      r["val_accuracy_by_step"] = [[s, unit["chance"] + (0.04 if s == steps[-1] else 0.0)]
                                   for s in steps]  # fmt: skip
  again = run.rejudge(record, CACHE)
  assert again["units"][0]["plateau"] == ["chance"] * len(unit["plateau"])


def test_a_record_of_an_older_version_is_refused(tmp_path):
  record = dict(RECORD, version=RECORD["version"] + 1)
  with pytest.raises(declare.DesignError, match="rerun it instead"):
    run.rejudge(record, CACHE)


def test_a_record_read_back_is_labelled_along_the_declarations_points():
  """JSON sorts a record's points ("hard:16" before "hard:2"); re-judged, the failure labels
  and the figure read them in the declaration's order."""
  fixed_memory = catalog.load("fixed_memory")
  again = run.rejudge(records.read(os.path.join(registry.RESULTS, "fixed_memory", "full.json")),
                      fixed_memory)  # fmt: skip
  hard = [p for p in again["metrics"]["adjusted"]["attention"] if p.startswith("hard:")]
  assert hard == ["hard:2", "hard:4", "hard:8", "hard:16"]
  assert (
    "(P=2: " in again["labels"]["rnn_128 @ hard"] and "P=16: " in again["labels"]["rnn_128 @ hard"]
  )
