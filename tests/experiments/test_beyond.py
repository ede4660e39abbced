import os

import pytest

from experiments import beyond, harness, protocol, report

SEEDS = 3


def _config(capacity=True):
  """Quick: distances (6, 12, 28), window 8: reach 8 (x1), 15 (x2); MQAR K in (2, 8)."""
  config = beyond.get_config("quick")
  config.capacity = capacity
  return config


def _recall(name, distance, config):
  reach = {"full": float("inf"), **{beyond.window_name(config, n): n * 7 + 1 for n in (1, 2)}}
  return 1.0 if distance <= reach[name] else 1 / 32


def _metrics(config, needle=None, mqar=None, dense_memory=2.0, dense_time=1.9, window_time=1.0):
  """Synthetic metrics where the claim holds; `needle(name, d)` / `mqar(name, K)` override
  raw accuracies (the same for every seed)."""
  m = {
    "memory_slope": {"dense": dense_memory, "blockwise": 1.0, "sliding_window": 1.0, "linear": 1.0},
    "cpu_time_slope": {"dense": dense_time, "blockwise": 1.7, "sliding_window": window_time},
    "reach": {name: reach for name, (_, reach) in beyond.needle_models(config).items()},
    "time_over_dense": {"dense": 1.0, "blockwise": 0.5, "block_sparse": 1.2},
    "accuracy": {},
    "adjusted": {},
  }
  for name in beyond.needle_models(config):
    for d in config.distances:
      a = needle(name, d) if needle else _recall(name, d, config)
      key = beyond.needle_setting(d)
      m["accuracy"].setdefault(name, {})[key] = [a] * SEEDS
      m["adjusted"].setdefault(name, {})[key] = [protocol.adjust(a, 1 / 32)] * SEEDS
  for name in beyond.mqar_models(config):
    for k in config.pairs:
      default = 1.0 if name == "softmax" or k == config.pairs[0] else 0.4
      a = mqar(name, k) if mqar else default
      key = beyond.mqar_setting(k)
      m["accuracy"].setdefault(name, {})[key] = [a] * SEEDS
      m["adjusted"].setdefault(name, {})[key] = [protocol.adjust(a, 1 / k)] * SEEDS
  return m


def _verdicts(config, metrics):
  return (
    [c.passed for c in beyond.controls(metrics, config)],
    [c.passed for c in beyond.criteria(metrics, config)],
  )


ALL = [True] * 7  # memory, time, (within, beyond) x 2 window models, linear drop


def test_the_claim_passes_with_its_controls():
  config = _config()
  assert _verdicts(config, _metrics(config)) == ([True, True, True], ALL)


def test_the_reach_grows_by_w_minus_1_per_layer():
  config = _config()
  assert beyond.needle_models(config)[beyond.window_name(config, 1)][1] == 8
  assert beyond.needle_models(config)[beyond.window_name(config, 2)][1] == 15


@pytest.mark.parametrize("slope, passes", [(1.8, True), (1.79, False)])
def test_the_memory_threshold_sides(slope, passes):
  config = _config()
  assert _verdicts(config, _metrics(config, dense_memory=slope))[1] == [passes, *ALL[1:]]


@pytest.mark.parametrize(
  "kwargs, passes", [({"dense_time": 1.5}, True), ({"dense_time": 1.49}, False),
                     ({"window_time": 1.2}, True), ({"window_time": 1.21}, False)]
)  # fmt: skip
def test_the_time_threshold_sides(kwargs, passes):
  config = _config()
  assert _verdicts(config, _metrics(config, **kwargs))[1] == [True, passes, *ALL[2:]]


@pytest.mark.parametrize("accuracy, passes", [(0.9, True), (0.89, False)])
def test_a_window_must_recall_within_its_reach(accuracy, passes):
  """The two-layer window at distance 12: beyond one layer's reach, within two layers'."""
  config = _config()
  two = beyond.window_name(config, 2)

  def needle(name, d):
    return accuracy if (name, d) == (two, 12) else _recall(name, d, config)

  assert _verdicts(config, _metrics(config, needle))[1] == [True] * 4 + [passes, True, True]


@pytest.mark.parametrize("adjusted, passes", [(0.1, True), (0.11, False)])
def test_a_window_must_be_at_chance_beyond_its_reach(adjusted, passes):
  config = _config()
  one = beyond.window_name(config, 1)
  raw = adjusted * (1 - 1 / 32) + 1 / 32

  def needle(name, d):
    return raw if (name, d) == (one, 12) else _recall(name, d, config)

  assert _verdicts(config, _metrics(config, needle))[1] == [True] * 3 + [passes, True, True, True]


def test_a_window_that_sees_past_its_reach_fails():
  config = _config()

  def needle(name, d):  # the one-layer window still recalls at 28
    return 1.0 if name != "full" and d <= 28 else _recall(name, d, config)

  assert _verdicts(config, _metrics(config, needle))[1] == [
    True,
    True,
    True,
    False,
    True,
    False,
    True,
  ]


@pytest.mark.parametrize("large_k, passes", [(0.824, True), (0.826, False)])
def test_the_linear_drop_threshold_sides(large_k, passes):
  """K = 2 -> 8 from raw 1.0: adjusted 1.0 -> (a - 1/8) / (7/8); a drop of 0.2 is a = 0.825."""
  config = _config()

  def mqar(name, k):
    return large_k if (name, k) == ("linear", 8) else (1.0 if name == "softmax" or k == 2 else 0.4)

  assert _verdicts(config, _metrics(config, mqar=mqar))[1] == [*ALL[:-1], passes]


@pytest.mark.parametrize(
  "broken, index",
  [
    (lambda name, d: 0.5 if (name, d) == ("full", 28) else None, 0),
    ("softmax", 1),
    ("linear", 2),
  ],
)
def test_each_control_makes_it_inconclusive(broken, index):
  config = _config()
  if callable(broken):
    metrics = _metrics(config, needle=lambda n, d: broken(n, d) or _recall(n, d, config))
  elif broken == "softmax":  # softmax fails at the largest K
    metrics = _metrics(
      config,
      mqar=lambda n, k: (
        0.5 if (n, k) == ("softmax", 8) else (1.0 if n == "softmax" or k == 2 else 0.4)
      ),
    )
  else:  # linear never learns even the smallest K (chance 1/2)
    metrics = _metrics(config, mqar=lambda n, k: 0.5 if n == "linear" else 1.0)
  controls = _verdicts(config, metrics)[0]
  assert controls == [i != index for i in range(3)]


def test_the_accel_time_verdict_sides():
  config = _config()
  config.time_verdict = True
  metrics = _metrics(config)
  assert _verdicts(config, metrics)[1] == [*ALL, True]
  metrics["time_over_dense"]["blockwise"] = 1.0
  assert _verdicts(config, metrics)[1] == [*ALL, False]


def test_last_slope_is_the_growth_exponent():
  assert beyond.last_slope([512, 1024, 2048], [1.0, 4.0, 16.0]) == pytest.approx(2.0)
  assert beyond.last_slope([512, 1024, 2048], [3.0, 5.0, 10.0]) == pytest.approx(1.0)


def test_tiny_run_benchmarks_and_trains_over_seeds(tmp_path):
  """The needle part for real (the capacity part's arms, verdict and plot are tested above
  on synthetic numbers: two more 2-layer models would double this test's cost)."""
  config = beyond.get_config("tiny")
  result = protocol.run(beyond, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.experiment == beyond.NAME and result.verdict in report.VERDICTS
  assert len(result.controls) == 1 and len(result.criteria) == 2 + 2 * len(config.window_layers)
  for kernel in config.kernels:
    cost = result.metrics["cost"][kernel]
    assert cost["L"] == list(config.lengths) and cost["all_ran"]
  arms = (1 + len(config.window_layers)) * len(config.distances)
  assert len(result.table) == arms
  assert len(result.runs) == arms * len(config.seeds)
  assert harness.finite(result.metrics["accuracy"])
  for plot in result.plots:
    assert plot.startswith(beyond.NAME) and os.path.getsize(tmp_path / plot) > 1000


def test_without_the_capacity_part_only_the_needle_control_and_no_linear_claim():
  config = _config(capacity=False)
  metrics = _metrics(config)
  assert _verdicts(config, metrics) == ([True], ALL[:-1])
  assert {arm.setting.split()[0] for arm in beyond.arms(config)} == {"needle"}
  assert len(beyond.arms(_config())) == 3 * 3 + 2 * 2


def test_the_recall_plot_draws_both_parts(tmp_path):
  config = _config()
  metrics = _metrics(config)
  metrics["chance"] = {beyond.needle_setting(d): 1 / 32 for d in config.distances}
  name = beyond._plot_recall(config, metrics, str(tmp_path))
  assert os.path.getsize(tmp_path / name) > 1000
