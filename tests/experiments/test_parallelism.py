import math
import os

import pytest

from experiments import parallelism, protocol, report
from jaxformer.steps.s2_parallel import critical_path


def _config():
  c = parallelism.get_config("quick")
  c.lengths = (32, 512, 4096)
  return c


def _depths(config, rnn=None, flat=None, kernel=None):
  """Depth rows: recurrent rungs c + 40 L, the others 400 at every L; parallelism: FLOPs
  proportional to L (L^2 for attention) over the depth. Overrides replace one row."""
  out = {}
  for rung in config.rungs:
    if rung in ("rnn", "rnn_attention"):
      d = [60 + 40 * n for n in config.lengths]
      flops = [1e6 * n for n in config.lengths]
    else:
      d = [400] * len(config.lengths)
      flops = [1e3 * n * n for n in config.lengths]
    out[rung] = {"depth": d, "parallelism": [f / x for f, x in zip(flops, d, strict=True)]}
  for k in config.kernels:
    d = [400 + 100 * n // 128 for n in config.lengths] if parallelism.KERNEL_LOOPS[k] else [400] * 3
    if k == "linear_recurrent":
      d = [400 + 40 * n for n in config.lengths]
    out[f"transformer+{k}"] = {"depth": d, "parallelism": [1.0] * 3}
  for name, d in (rnn or {}).items():
    out[name]["depth"] = d
  for name, d in (flat or {}).items():
    out[name]["depth"] = d
  for name, d in (kernel or {}).items():
    out[f"transformer+{name}"]["depth"] = d
  return out


def _metrics(config, **kwargs):
  return {
    "depth": _depths(config, **kwargs),
    "instrument": {"scan_3_ops": [3 * n for n in config.lengths], "elementwise": [1, 1, 1]},
    "time_slope": {"lstm": 2e-5, "transformer": 1e-5},
  }


def _passed(config, metrics):
  return [c.passed for c in parallelism.criteria(metrics, config)]


def test_the_claim_passes_with_its_control():
  config = _config()
  metrics = _metrics(config)
  assert [c.passed for c in parallelism.controls(metrics, config)] == [True]
  assert _passed(config, metrics) == [True, True, True, True]


def test_a_miscounting_instrument_makes_it_inconclusive():
  config = _config()
  metrics = _metrics(config)
  metrics["instrument"]["scan_3_ops"] = [4 * n for n in config.lengths]
  assert [c.passed for c in parallelism.controls(metrics, config)] == [False]
  metrics = _metrics(config)
  metrics["instrument"]["elementwise"] = [1, 1, 2]
  assert [c.passed for c in parallelism.controls(metrics, config)] == [False]


@pytest.mark.parametrize("exponent, passes", [(0.9, True), (0.89, False)])
def test_the_recurrent_slope_threshold_sides(exponent, passes):
  config = _config()
  d = [100 * (n / 32) ** exponent for n in config.lengths]
  d[1] = d[2] / (4096 / 512) ** exponent
  assert parallelism.last_slope(config.lengths, d) == pytest.approx(exponent)
  metrics = _metrics(config, rnn={"rnn": d})
  assert _passed(config, metrics) == [passes, True, True, True]


@pytest.mark.parametrize("largest, passes", [(420, True), (421, False)])
def test_the_constant_factor_sides(largest, passes):
  config = _config()
  metrics = _metrics(config, flat={"softmax": [400, 400, largest]})
  assert _passed(config, metrics) == [True, passes, True, True]


@pytest.mark.parametrize(
  "kernel, depths, passes",
  [
    ("blockwise", [400, 400, 400], False),  # loops over blocks, yet flat: FAIL
    ("linear", [400, 800, 6400], False),  # no loop, yet grows: FAIL
    ("sliding_window", [400, 400, 420], True),
    ("sliding_window", [400, 400, 421], False),
  ],
)
def test_a_kernel_is_reported_as_what_it_is(kernel, depths, passes):
  config = _config()
  assert _passed(config, _metrics(config, kernel={kernel: depths}))[2] is passes


def test_the_kernel_growth_threshold_sides():
  config = _config()
  grows = [400, 1000, 1000 * 8**0.5]  # slope exactly 0.5
  assert _passed(config, _metrics(config, kernel={"blockwise": grows}))[2]
  assert not _passed(config, _metrics(config, kernel={"blockwise": [400, 1000, 2800]}))[2]


@pytest.mark.parametrize("rnn_slope, passes", [(0.099, True), (0.101, False), (-0.099, True)])
def test_the_parallelism_criterion_sides(rnn_slope, passes):
  config = _config()
  metrics = _metrics(config)
  metrics["depth"]["rnn"]["parallelism"] = [1.0, 1.0, 8.0**rnn_slope]
  assert _passed(config, metrics) == [True, True, True, passes]
  metrics = _metrics(config)
  metrics["depth"]["transformer"]["parallelism"] = [1.0, 1.0, 8.0**0.89]
  assert _passed(config, metrics) == [True, True, True, False]


@pytest.mark.parametrize("ratio, passes", [(2.0, True), (1.99, False)])
def test_the_time_verdict_applies_at_accel_only_with_its_threshold(ratio, passes):
  config = _config()
  metrics = _metrics(config)
  metrics["time_slope"] = {"lstm": ratio * 1e-5, "transformer": 1e-5}
  assert len(parallelism.criteria(metrics, config)) == 4  # quick: measured, no verdict
  config.time_verdict = True
  assert _passed(config, metrics) == [True, True, True, True, passes]
  metrics["time_slope"]["transformer"] = 0.0  # a flat parallel step time
  assert _passed(config, metrics)[-1]


def test_the_spec_example_stays_an_illustration():
  assert critical_path(4, 2, recurrent=True) == 5 and critical_path(4, 2, recurrent=False) == 2


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_measures_the_real_programs(tmp_path):
  config = parallelism.get_config("tiny")
  result = protocol.run(parallelism, config, str(tmp_path), "tiny", log=lambda text: None)
  assert result.verdict in report.VERDICTS and result.runs == []
  assert [c.passed for c in result.controls] == [True]
  depths = result.metrics["depth"]
  assert depths["transformer"]["depth"][0] == depths["transformer"]["depth"][1]
  assert depths["rnn"]["depth"][1] > 6 * depths["rnn"]["depth"][0]
  assert all(math.isfinite(s) and s > 0 for s in result.metrics["step_seconds"]["lstm"])
  assert len(result.criteria) == 4 and result.criteria[0].passed and result.criteria[1].passed
  for plot in result.plots:
    assert plot.startswith(parallelism.NAME) and os.path.getsize(tmp_path / plot) > 1000
