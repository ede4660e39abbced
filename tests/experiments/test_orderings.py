"""The published-ordering checks on synthetic scorecard metrics: each on both sides of 0, and
UNRESOLVED where its rows were not trained or the reference did not learn."""

import pytest

from experiments import orderings, report

EASY, HARD = "recall K=2 L=16", "recall K=8 L=32"
SWEEPS = {
  "linear": ("head_dim", (4, 8)),
  "retnet": ("head_dim", (4, 8)),
  "deltanet": ("head_dim", (4, 8)),
  "mamba2": ("state", (4, 32)),
}
# decode-state bytes at the largest L, per row; the softmax reference grows with L
STATE = {
  "softmax": (4096, 1.0),
  "linear head_dim=4": (160, 0.0),
  "linear head_dim=8": (576, 0.0),
  "retnet head_dim=4": (512, 0.0),
  "retnet head_dim=8": (2048, 0.0),
  "deltanet head_dim=4": (1664, 0.0),
  "deltanet head_dim=8": (4352, 0.0),
  "mamba2 state=4": (3776, 0.0),
  "mamba2 state=32": (19456, 0.0),
}
# what the papers report: attention recalls everything; the delta rule beats linear / RetNet;
# a larger state recalls more; every gap is larger on the hard task
HOLDS = {
  "softmax": (1.0, 1.0),
  "linear head_dim=4": (0.9, 0.3),
  "linear head_dim=8": (0.95, 0.4),
  "retnet head_dim=4": (0.9, 0.35),
  "retnet head_dim=8": (0.95, 0.45),
  "deltanet head_dim=4": (0.98, 0.6),
  "deltanet head_dim=8": (1.0, 0.8),
  "mamba2 state=4": (0.9, 0.3),
  "mamba2 state=32": (0.98, 0.7),
}
SEED_NOISE = (0.0, 0.01, -0.01)


def _metrics(changes=None):
  accuracy = {}
  for row, (easy, hard) in (HOLDS | (changes or {})).items():
    accuracy[row] = {s: [v + n for n in SEED_NOISE] for s, v in ((EASY, easy), (HARD, hard))}
  return {
    "tasks": {EASY: "", HARD: "", "needle d=4 L=32": ""},
    "accuracy": accuracy,
    "state_bytes": {r: {"bytes": [b], "slope": slope} for r, (b, slope) in STATE.items()},
  }


def _check(changes=None, controls=None):
  return orderings.check(_metrics(changes), SWEEPS, "softmax", 0.1, controls)


def _verdicts(changes=None, controls=None):
  return {k: orderings.verdict(v) for k, v in _check(changes, controls).items()}


def test_what_the_papers_report_is_supported():
  assert set(_verdicts().values()) == {report.SUPPORTED}


def test_the_delta_rule_is_compared_with_no_less_state():
  readings = _check()["delta_rule_recalls_more"]
  # deltanet head_dim=4 (1664 B) meets retnet head_dim=8 (2048 B); no linear row, and no row
  # for deltanet head_dim=8's 4352 B, holds as much, so those pairs are not read
  assert [c.description for c in readings] == [
    f"deltanet head_dim=4 (1664 B) recalls more than retnet head_dim=8 (2048 B) on {HARD}"
  ]
  small = {r: v for r, v in STATE.items() if not r.startswith("retnet head_dim=8")}
  metrics = _metrics()
  metrics["state_bytes"] = {r: {"bytes": [b], "slope": s} for r, (b, s) in small.items()}
  (reading,) = orderings.check(metrics, SWEEPS, "softmax", 0.1)["delta_rule_recalls_more"]
  assert reading.verdict == report.UNRESOLVED
  assert reading.note.startswith("no compared row holds as much state: deltanet head_dim=4")


@pytest.mark.parametrize(
  "changes, refuted",
  [
    ({"deltanet head_dim=4": (0.98, 0.4)}, {"delta_rule_recalls_more"}),  # below retnet's 0.45
    # a larger state recalling less: also a gap that grows with state
    ({"mamba2 state=32": (0.98, 0.25)}, {"mamba2_state_helps", "gap_shrinks_with_state"}),
    ({"linear head_dim=8": (0.3, 0.4)}, {"fixed_state_falls_behind"}),  # easy worse than hard
    ({"retnet head_dim=8": (0.95, 0.3)}, {"gap_shrinks_with_state"}),  # larger state, more gap
  ],
)
def test_each_ordering_refuted_by_its_own_numbers(changes, refuted):
  verdicts = _verdicts(changes)
  assert {k for k, v in verdicts.items() if v != report.SUPPORTED} == refuted
  assert {verdicts[k] for k in refuted} == {report.REFUTED}


@pytest.mark.parametrize("diff, verdict", [(0.02, report.SUPPORTED), (-0.001, report.REFUTED)])
def test_a_larger_mamba2_state_on_each_side_of_zero(diff, verdict):
  small = HOLDS["mamba2 state=4"][1]
  reading = _check({"mamba2 state=32": (0.98, small + diff)})["mamba2_state_helps"]
  assert [c.verdict for c in reading] == [verdict]


def test_seeds_that_disagree_leave_it_unresolved():
  metrics = _metrics()
  metrics["accuracy"]["mamba2 state=32"][HARD] = [0.2, 0.4, 0.5]  # the small state: 0.3 +- 0.01
  reading = orderings.check(metrics, SWEEPS, "softmax", 0.1)["mamba2_state_helps"]
  assert [c.verdict for c in reading] == [report.UNRESOLVED]


def test_without_a_state_sweep_or_a_learned_reference_nothing_is_supported():
  plain = _metrics()
  plain["accuracy"] = {"softmax": plain["accuracy"]["softmax"]} | {
    name: plain["accuracy"][f"{name} head_dim=8"] for name in ("linear", "retnet", "deltanet")
  }
  plain["state_bytes"] |= {name: {"bytes": [2048], "slope": 0.0} for name in ("linear", "retnet")}
  plain["state_bytes"]["deltanet"] = {"bytes": [1664], "slope": 0.0}
  verdicts = {
    k: orderings.verdict(v) for k, v in orderings.check(plain, SWEEPS, "softmax", 0.1).items()
  }
  assert verdicts["mamba2_state_helps"] == verdicts["gap_shrinks_with_state"] == report.UNRESOLVED
  assert verdicts["delta_rule_recalls_more"] == report.SUPPORTED  # plain rows, compared by state
  unlearned = {HARD: report.Criterion("the reference learns", False)}
  assert _verdicts(controls=unlearned)["fixed_state_falls_behind"] == report.UNRESOLVED


def test_rows_of_several_widths_are_read_at_one():
  metrics = _metrics()
  metrics["accuracy"] = {f"{r} D={w}": v for r, v in metrics["accuracy"].items() for w in (16, 32)}
  view = orderings.at_width(metrics, 32, (16, 32))
  assert set(view["accuracy"]) == set(HOLDS)
  assert orderings.at_width(metrics, 32, (32,)) is metrics
