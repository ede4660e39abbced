import math
import os

import numpy as np
import pytest

from experiments import capacity, harness, report

KNOBS = (4, 8, 16, 32)
PAIRS = (2, 4, 8, 16)


def _evaluator(capacity_of, seeds=3, calls=None):
  """A synthetic model: knob n recalls K pairs (adjusted 1.0) when K <= capacity_of(n), else
  0.3; `calls` collects what the search trained."""

  def evaluate(knob, pairs):
    if calls is not None:
      calls.append((knob, pairs))
    return [1.0 if pairs <= capacity_of(knob) else 0.3] * seeds

  return evaluate


def test_a_state_that_must_grow_saturates_the_grid():
  calls = []
  law = capacity.search(KNOBS, PAIRS, _evaluator(lambda n: n / 2, calls=calls))
  # knob n holds n / 2 pairs: K=2 needs 4, K=4 needs 8, K=8 needs 16, K=16 needs 32
  assert law.needed == {2: 4, 4: 8, 8: 16, 16: 32} and law.status == capacity.NOT_SATURATED
  law = capacity.search(KNOBS, (*PAIRS, 32), _evaluator(lambda n: n / 2))
  assert law.needed[32] is None and law.status == capacity.SATURATED
  # the walk trains each K from the last answer up: never a knob below a failing one
  assert calls == [(4, 2), (4, 4), (8, 4), (8, 8), (16, 8), (16, 16), (32, 16)]


def test_the_walk_steps_down_when_a_smaller_state_reaches():
  # a model whose need does not grow: knob 8 recalls every K (and 4 none)
  law = capacity.search(KNOBS, PAIRS, _evaluator(lambda n: math.inf if n >= 8 else 0))
  assert law.needed == {k: 8 for k in PAIRS} and law.status == capacity.NOT_SATURATED
  # a need that shrinks (noise): the walk goes down again at the next K
  need = {2: 16, 4: 8, 8: 8, 16: 8}
  law = capacity.search(KNOBS, PAIRS, lambda n, k: [1.0 if n >= need[k] else 0.0] * 3)
  assert law.needed == need


def test_a_model_that_never_learns_is_not_learning():
  law = capacity.search(KNOBS, PAIRS, _evaluator(lambda n: 0))
  assert law.needed == {2: None} and law.status == capacity.NOT_LEARNING
  assert sorted(law.points) == [(n, 2) for n in KNOBS]


@pytest.mark.parametrize("mean, hit", [(0.9, True), (0.899, False)])
def test_reaches_is_the_mean_over_seeds(mean, hit):
  assert capacity.reaches([mean - 0.05, mean, mean + 0.05]) == hit
  assert not capacity.reaches([1.0, float("nan"), 1.0])
  assert not capacity.reaches([])


def test_the_fitted_slope_recovers_the_exponent():
  assert capacity.slope([2, 4, 8], [8, 32, 128]) == pytest.approx(2.0)
  assert capacity.slope([2, 4, 8], [5, 5, 5]) == pytest.approx(0.0)
  assert math.isnan(capacity.slope([4], [16]))
  # a state that doubles with K (state = knob): slope 1, and every seed agrees: no spread
  law = capacity.search(KNOBS, (*PAIRS, 32), _evaluator(lambda n: n / 2))
  fit = capacity.fit(law, lambda knob, k: knob)
  assert fit["slope"] == pytest.approx(1.0) and fit["interval"] == pytest.approx([1.0, 1.0])
  assert fit["pairs"] == [2, 4, 8, 16]


def test_the_slope_interval_widens_when_seeds_disagree():
  """Seed 0 needs knob 8 at K=8 where seeds 1 and 2 need 16 (mean 0.77: not reached)."""

  def evaluate(knob, k):
    base = [1.0 if k <= knob / 2 else 0.3] * 3
    if (knob, k) == (8, 8):
      base[0] = 1.0
    return base

  law = capacity.search(KNOBS, (2, 4, 8), evaluate)
  fit = capacity.fit(law, lambda knob, k: knob)
  assert law.needed[8] == 16 and fit["slope"] == pytest.approx(1.0)
  low, high = fit["interval"]
  assert low < 1.0 and high == pytest.approx(1.0)  # seed 0 alone reads 8 at K=8: slope 0.5
  assert low == pytest.approx(0.5)


def test_state_floats_are_counted_from_the_real_cache():
  width, vocab, length = 16, 32, 24
  counts = {
    (fam, knob): capacity.state_floats(
      capacity.build(capacity.model_fields(fam, knob, width, vocab, length)), length
    )
    for fam, knob in (("lstm", 8), ("elman", 8), ("linear_attention", 4), ("attention", 16))
  }
  layers = 2
  assert counts[("lstm", 8)] == layers * 2 * 8  # h and c
  assert counts[("elman", 8)] == layers * 8
  assert counts[("linear_attention", 4)] == layers * 4 * (4 + 1)  # S and z of one head
  assert counts[("attention", 16)] == layers * 2 * 16 * length  # keys and values of every token


def test_every_family_sits_in_the_same_shell():
  a = capacity.model_fields("lstm", 64, 32, 64, 64)
  b = capacity.model_fields("linear_attention", 8, 32, 64, 64)
  same = ("vocab_size", "max_len", "d_model", "d_ff", "num_layers")
  assert {k: a[k] for k in same} == {k: b[k] for k in same} and a["mixer"] != b["mixer"]
  assert capacity.model_fields("attention", 16, 32, 64, 64)["d_model"] == 16  # its knob


def test_the_recurrent_mixer_keeps_the_plug_contract():
  from jaxformer.mixers import plug

  assert plug.check(capacity.RecurrentMixer, {"cell": "lstm", "hidden": 8}, 16)["decode"]


def test_the_floor_is_k_log2_v_bits_in_floats():
  assert capacity.floor_floats(16, 256) == pytest.approx(16 * 8 / 32)


def test_the_table_and_the_plot(tmp_path):
  def state_of(knob, k):
    return knob * knob

  laws = {
    "lstm": capacity.summary(
      capacity.search(KNOBS, (*PAIRS, 32), _evaluator(lambda n: n / 2)), state_of
    ),
    "linear": capacity.summary(
      capacity.search(KNOBS, PAIRS, _evaluator(lambda n: math.inf)), state_of
    ),
  }
  rows = capacity.table(laws)
  assert rows[0]["S* (K=32)"] == "> largest" and rows[0]["slope"] == pytest.approx(2.0)
  assert rows[1]["status"] == capacity.NOT_SATURATED and rows[1]["S* (K=2)"] == 16
  fig = harness.figure()
  capacity.plot(fig.add_subplot(1, 1, 1), laws, 64, (*PAIRS, 32))
  name = harness.save(fig, str(tmp_path), "capacity.png")
  assert os.path.getsize(tmp_path / name) > 1000
  assert np.isfinite(laws["lstm"]["fit"]["interval"]).all()


def test_read_from_trained_points_and_a_missing_point():
  points = {(n, k): [1.0 if k <= n / 2 else 0.3] * 3 for n in KNOBS for k in (*PAIRS, 32)}
  reading = capacity.read(points, KNOBS, (*PAIRS, 32), lambda n, k: 4 * n)
  assert reading["status"] == capacity.SATURATED and reading["needed_knob"]["16"] == 32
  assert reading["fit"]["slope"] == pytest.approx(1.0) and reading["growth_share"] == 1.0
  del points[(8, 4)]
  missing = capacity.read(points, KNOBS, PAIRS, lambda n, k: 4 * n)
  assert missing["status"] == capacity.LEFT_DESIGN and missing["missing"] == "(8, 4)"
  assert missing["needed_knob"] == {"2": 4}  # what the walk found before it left
  assert capacity.table({"m": missing})[0]["status"] == "left the design at (8, 4)"


class _View:
  """A stand-in for protocol.Trained of one seed set: the adjusted accuracies of its points."""

  def __init__(self, adjusted):
    self.adjusted = adjusted

  def metrics(self):
    return {"adjusted": self.adjusted}


def _walked_law():
  law = capacity.default_law()
  law.vocab_size, law.seq_len, law.pairs = 64, 64, PAIRS
  law.knobs, law.claimed = {"linear_attention": KNOBS}, ("linear_attention",)
  law.walk = True
  return law


def test_a_walked_law_trains_only_the_points_its_walk_visits():
  law = _walked_law()
  family, holds = "linear_attention", {4: 2, 8: 4, 16: 8, 32: 8}  # knob -> largest K it recalls
  first = [a.setting for a in capacity.arms(law) if a.model == family]
  assert first == [capacity.setting(law, family, 4, 2)]  # the smallest knob at the smallest K
  trained = {}  # setting -> per-seed adjusted, "trained" as each arm is named

  def train(arms):
    for a in arms:
      knob, k = next(
        (n, k) for n in KNOBS for k in PAIRS if capacity.setting(law, family, n, k) == a.setting
      )
      trained[a.setting] = [1.0 if k <= holds[knob] else 0.3] * 3

  train([a for a in capacity.arms(law) if a.model == family])
  rounds = 0
  while more := capacity.next_arms(law, [_View({family: dict(trained)})]):
    assert len(more) == 1 and more[0].setting not in trained  # one new point at a time
    train(more)
    rounds += 1
  calls = []
  direct = capacity.search(KNOBS, PAIRS, _evaluator(lambda n: holds[n], calls=calls))
  assert sorted(trained) == sorted(capacity.setting(law, family, n, k) for n, k in calls)
  assert rounds == len(calls) - 1 and direct.status == capacity.SATURATED  # 32 fails K = 16
  reading = capacity.readings({"adjusted": {family: trained}, "state_floats": {family: {
    str(n): 4 * n for n in KNOBS}}}, law)[family]  # fmt: skip
  assert reading["status"] == capacity.SATURATED and len(reading["points"]) == len(calls)


def test_each_seed_set_walks_on_its_own_readings():
  law, family = _walked_law(), "linear_attention"
  at = lambda n, k: capacity.setting(law, family, n, k)  # noqa: E731
  # the confirmatory seeds reach K = 2 at knob 4; the exploratory seeds do not
  confirm, explore = _View({family: {at(4, 2): [1.0] * 5}}), _View({family: {at(4, 2): [0.2]}})
  names = [a.setting for a in capacity.next_arms(law, [confirm, explore])]
  assert names == [at(4, 4), at(8, 2)]
  law.walk = False  # the whole grid from the start, nothing next
  assert capacity.next_arms(law, [confirm, explore]) == []
  assert len([a for a in capacity.arms(law) if a.model == family]) == len(KNOBS) * len(PAIRS)


def _bounded_growth(points, learning):
  """The growth criterion of linear attention on a whole 2 x 2 grid (knobs 4, 8; K 2, 4):
  `points[(knob, K)]` per-seed adjusted, `learning[(knob, K)]` the replicas still learning."""
  law = capacity.default_law()
  law.pairs, law.knobs = (2, 4), {"linear_attention": (4, 8)}
  law.claimed, family = ("linear_attention",), "linear_attention"
  at = lambda n, k: capacity.setting(law, family, n, k)  # noqa: E731

  def status(point, values):
    return ["learning" if i in learning.get(point, ()) else "flat" for i in range(len(values))]

  metrics = {
    "adjusted": {family: {at(*p): v for p, v in points.items()}},
    "plateau": {family: {at(*p): status(p, v) for p, v in points.items()}},
    "state_floats": {family: {"4": 40, "8": 144}},
  }
  reading = capacity.readings(metrics, law)[family]
  return capacity.growth(reading, law, family, capacity.corners(metrics, law, family))


def test_a_growth_reading_is_bounded_when_no_replica_still_learning_could_change_it():
  """The largest state fails at K = 4 even were its replica still learning to reach perfect
  recall (a mean of 0.28, and 0.9 in no seed resample but all five draws of it), and a
  replica still learning at K = 2 can only lower S*(2): SUPPORTED at all four corners, so the
  criterion is bounded."""
  ok = [1.0] * 5
  points = {(4, 2): [1.0, 1.0, 0.5, 0.5, 1.0], (8, 2): ok, (4, 4): [0.1] * 5,
            (8, 4): [0.1, 0.1, 0.1, 0.1, 0.2]}  # fmt: skip
  c = _bounded_growth(points, {(8, 4): {4}, (4, 2): {2}})
  assert c.verdict == report.SUPPORTED and "4 corners" in c.bounded
  assert c.values["corners"] == {k: report.SUPPORTED for k in ("K=2 raised", "K=4 raised",
                                                               "K=2,4 raised")}  # fmt: skip
  # the same numbers, every replica finished: nothing to bound
  finished = _bounded_growth(points, {})
  assert finished.bounded == "" and "corners" not in finished.values


def test_a_growth_reading_a_still_learning_replica_could_undo_is_not_bounded():
  """Raised to 1, the replica still learning at (8, 4) lifts the largest state's mean to
  0.9 at K = 4: that corner is not saturated, so the reading must wait on the plateau."""
  ok = [1.0, 1.0, 1.0]
  points = {(4, 2): ok, (8, 2): ok, (4, 4): [0.1] * 3, (8, 4): [0.8, 0.9, 0.5]}
  c = _bounded_growth(points, {(8, 4): {2}})
  assert c.verdict == report.SUPPORTED and c.bounded == ""
  assert c.values["corners"] == {"K=4 raised": report.UNRESOLVED}


def test_a_corner_reads_a_point_its_walk_did_not_train_by_the_walk_s_premise():
  """Raised, knob 4 reaches K = 2, so the corner's walk asks for (4, 4), never trained: a
  larger state failing at K = 4 (8) says it fails (the walk's premise), so the corner reads
  the law saturated instead of leaving the design; with nothing trained at K = 4 it stays
  missing."""
  law = capacity.default_law()
  law.pairs, law.knobs, family = (2, 4), {"linear_attention": (4, 8)}, "linear_attention"
  at = lambda n, k: capacity.setting(law, family, n, k)  # noqa: E731
  adjusted = {at(4, 2): [1.0], at(8, 2): [1.0], at(8, 4): [0.1]}
  metrics = {"adjusted": {family: adjusted}}
  assert capacity.law_of(metrics, law, family).status == capacity.LEFT_DESIGN
  inferred = capacity.law_of(metrics, law, family, infer=True)
  assert inferred.status == capacity.SATURATED and inferred.points[(4, 4)] == [0.0]
  del adjusted[at(8, 4)]
  assert capacity.law_of(metrics, law, family, infer=True).status == capacity.LEFT_DESIGN
