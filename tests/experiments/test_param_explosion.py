import math
import os
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import param_explosion, protocol, report
from jaxformer import ladder
from tests.experiments.judge import judge

SEEDS = 3
CHANCE = 0.25  # MQAR, K = 4


def _config(size="quick"):
  return param_explosion.get_config(size)


def _metrics(config, **adjusted):
  """Adjusted accuracy per model (every seed alike; a list for per-seed values): the claim
  holding unless `adjusted` says otherwise; the falsification's second matrix sum recalls."""
  values = {name: 0.05 for name in config.compared}
  values |= {param_explosion.matrix_sum_name(f): 1.0 for f in config.matched_to}
  values |= {param_explosion.falsification_arm(config): 1.0}
  values |= {k.replace("__", "@"): v for k, v in adjusted.items()}
  m = {"chance": {"mqar": CHANCE}, "accuracy": {}, "adjusted": {}}
  for key, value in values.items():
    name, setting = key if isinstance(key, tuple) else (key, "mqar")
    per_seed = list(value) if isinstance(value, list) else [value] * SEEDS
    m["adjusted"].setdefault(name, {})[setting] = per_seed
    m["accuracy"].setdefault(name, {})[setting] = [a * (1 - CHANCE) + CHANCE for a in per_seed]
  return m


def _verdict(config, **adjusted):
  return judge(param_explosion, _metrics(config, **adjusted), config)[:2]


def test_quick_passes_when_the_matrix_sum_recalls_and_the_diagonal_does_not():
  # controls: each form learns; criteria: matrix_sum@diagonal recalls, it beats the diagonal
  assert _verdict(_config()) == ([True] * 2, [True] * 2)


def test_full_size_judges_full_against_the_matrix_sum_of_its_own_count():
  config = _config("full")
  # criteria: matrix_sum@diagonal and matrix_sum@full recall; each beats its form
  assert _verdict(config) == ([True] * 4, [True] * 4)
  assert param_explosion.opponent("full", config) == "matrix_sum@full"
  assert param_explosion.opponent("full", _config("tiny")) == "matrix_sum@diagonal"


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"matrix_sum__diagonal": 0.5}, [False, True, True, True]),  # no recall
    ({"matrix_sum__full": 0.5}, [True, False, True, True]),
    ({"diagonal": 0.9}, [True, True, False, True]),  # the diagonal as good
    ({"full": 0.9}, [True, True, True, False]),  # full recalls as well
  ],
)
def test_each_criterion_fails_alone(change, expected):
  assert _verdict(_config("full"), **change) == ([True] * 4, expected)


@pytest.mark.parametrize("size, setting", [("quick", "mqar"), ("full", "D=12"), ("tiny", "D=4")])
def test_the_second_matrix_sum_is_rejected_by_the_margin_criterion(size, setting):
  """The falsification arm: a second matrix sum at the matched width and task (the cost grid's
  where it has that width on that task, else its own arm) recalls as the matched sum does."""
  config = _config(size)
  arm = param_explosion.falsification_arm(config)
  assert arm == (param_explosion.sum_name(config.falsification_heads), setting)
  assert arm in {(a.model, a.setting) for a in param_explosion.arms(config)}  # a trained arm
  (reading,) = param_explosion.falsification(_metrics(config), config)
  assert reading.name == "sum_beats_form" and reading.verdict == report.REFUTED
  assert list(reading.reads) == [
    (param_explosion.opponent(config.compared[0], config), "mqar"),
    arm,
  ]
  # a second sum that failed to recall would be beaten: the criterion can tell
  beaten = _metrics(config)
  beaten["adjusted"][arm[0]][arm[1]] = [0.05] * SEEDS
  assert param_explosion.falsification(beaten, config)[0].verdict == report.SUPPORTED


def test_the_cost_per_token_of_full_grows_faster():
  """The check cost_per_token_grows_faster: XLA's FLOPs per token of one replica's train step,
  lowered at the full size's cost widths, grow faster in D for full than for a fixed-H sum
  (by more than COST_MARGIN in fitted exponent), and a sum of twice the heads does not."""
  config = _config("full")
  arms = {(a.model, a.setting): a for a in param_explosion.arms(config)}
  widths = list(config.cost_widths)

  def per_token(name):
    values = []
    for width in widths:
      tc = protocol.arm_config(config, arms[param_explosion.cost_arm(config, name, width)])
      flops = param_explosion.flops_per_step(types.SimpleNamespace(config=tc))
      values.append(flops / (tc.batch_size * tc.model.max_len))
    return param_explosion.exponent(widths, values)

  sums = [param_explosion.sum_name(h) for h in (config.cost_heads, config.falsification_heads)]
  full, fixed, twice = per_token("full"), *map(per_token, sums)
  assert full - fixed > param_explosion.COST_MARGIN
  assert twice - fixed <= param_explosion.COST_MARGIN


def test_exponents_are_fitted_in_log_log():
  assert param_explosion.exponent([8, 16, 32], [2 * 8**3, 2 * 16**3, 2 * 32**3]) == pytest.approx(
    3.0
  )
  assert math.isnan(param_explosion.exponent([8, 16], [1.0, math.nan]))
  assert math.isnan(param_explosion.exponent([8], [1.0]))


@pytest.mark.parametrize(
  "change, expected",
  [
    ({"matrix_sum__diagonal": param_explosion.RECALLS, "diagonal": 0.0}, [True, True]),
    ({"matrix_sum__diagonal": param_explosion.RECALLS - 0.001, "diagonal": 0.0}, [False, True]),
    ({"diagonal": 1.0 - param_explosion.MARGIN}, [True, True]),
    ({"diagonal": 1.0 - param_explosion.MARGIN + 0.001}, [True, False]),
    ({"diagonal": [0.0, 1.0 - param_explosion.MARGIN + 0.001, 0.0]}, [True, False]),  # 1 seed
  ],
)
def test_each_threshold_from_both_sides(change, expected):
  assert _verdict(_config(), **change)[1] == expected


@pytest.mark.parametrize("raw, passes", [(0.8 * CHANCE, True), (0.8 * CHANCE - 0.001, False)])
def test_a_form_that_trained_nothing_makes_it_inconclusive(raw, passes):
  config = _config("full")
  metrics = _metrics(config)
  metrics["accuracy"]["full"]["mqar"] = [raw] * SEEDS
  controls = param_explosion.controls(metrics, config)
  # diagonal, full, matrix_sum@diagonal, matrix_sum@full
  assert [c.passed for c in controls] == [True, passes, True, True]
  result = report.Result("", "", "", param_explosion.criteria(metrics, config), metrics)
  result.controls = controls
  assert result.verdict == ("SUPPORTED" if passes else "INCONCLUSIVE")


def _counted(form, width, rank, heads=1):
  """Mixing parameters per layer of the real module, from jax.eval_shape (nothing allocated)."""
  model_config = ladder.default_config(param_explosion.RUNGS[form])
  model_config.d_model, model_config.rank, model_config.num_heads = width, rank, heads
  model = ladder.build(param_explosion.RUNGS[form], model_config)
  tokens = jax.ShapeDtypeStruct((1, 2), jnp.int32)
  shapes = jax.eval_shape(lambda t: nn.meta.unbox(model.init(jax.random.key(0), t)), tokens)
  mixer = shapes["params"]["layers_0"]["mixer"]
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(mixer)), mixer["scorer"]["wq"].shape[1]


@pytest.mark.parametrize("form", list(param_explosion.RUNGS))
def test_counts_of_the_real_modules_equal_the_closed_forms(form):
  for width, rank, heads in ((4, 4, 1), (12, 3, 5), (32, 4, 2)):
    params, functions = _counted(form, width, rank, heads)
    assert params == param_explosion.closed_form(form, width, rank, heads)
    assert functions == param_explosion.functions(form, width, heads)


def test_full_form_at_width_512_is_counted_without_allocating():
  params, functions = _counted("full", 512, 4)  # 1.07e9 parameters
  assert params == 2 * 4 * 512**3 and functions == 512**2 > param_explosion.MANY_FUNCTIONS


def test_matched_heads_are_the_most_that_fit():
  config = _config()  # D = 16, K = 4: one head is 2 * 4 * 16 + 16^2 = 384 parameters
  assert param_explosion.matched_heads("diagonal", config) == 2048 // 384 == 5
  assert param_explosion.matched_heads("full", config) == 32768 // 384 == 85
  for form in ("diagonal", "full"):
    heads = param_explosion.matched_heads(form, config)
    budget = param_explosion.closed_form(form, 16, 4)
    assert param_explosion.closed_form("matrix_sum", 16, 4, heads) <= budget
    assert param_explosion.closed_form("matrix_sum", 16, 4, heads + 1) > budget


@pytest.mark.slow  # a tiny end-to-end run of the experiment: `make test-slow`
def test_tiny_run_trains_every_form_at_matched_counts(tmp_path):
  config = _config("tiny")
  result = protocol.run(param_explosion, config, str(tmp_path), "tiny", log=lambda text: None)
  # recall, 2 beats (the cost: a reported table)
  assert result.verdict in report.VERDICTS and len(result.criteria) == 3
  # the matched arms, and the cost grid's at D = 8 (at D = 4 = d_model full reads its matched arm)
  names = list(param_explosion.models(config)) + list(param_explosion.cost_models(config))
  names += [n for n in param_explosion.cost_models(config) if n not in config.compared]
  assert len(result.runs) == len(names) * (
    len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  ) * len(config.learning_rates)
  counted = result.metrics["mixing_params"]
  for row in result.tables[0][1]:  # the trained params count as the closed forms say
    assert row["mixing params/layer (counted)"] == row["closed form"]
  assert counted["matrix_sum@diagonal"] <= counted["diagonal"] < counted["full"]
  assert not any(math.isnan(a) for a in result.metrics["adjusted"]["full"]["mqar"])
  cost = result.metrics["cost"]
  assert set(cost) == {"full", "matrix_sum H=1", "matrix_sum H=2"}
  for c in cost.values():  # XLA's FLOPs grow with D; steps: NaN (still learning) or <= the cap
    assert c["per_width"][0]["flops_per_step"] < c["per_width"][1]["flops_per_step"]
    assert all(math.isnan(s) or s <= config.step_cap for r in c["per_width"] for s in r["steps"])
  assert cost["full"]["closed_form_exponent"] == pytest.approx(3.0)
  assert cost["full"]["exponent_params"] == pytest.approx(3.0)  # counted: 2 K D^3
  assert result.tables[1][0].startswith("cost of reaching the target")
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000


def test_the_cost_plot_is_drawn_when_no_cost_was_measured(tmp_path):
  # every seed still learning at every width: no FLOPs to plot on the log axis (a quick run of
  # v6 crashed on it before the plot knew)
  config = _config()
  widths = list(config.cost_widths)
  unmeasured = {"steps": [math.nan] * SEEDS, "flops_per_step": 1e6}
  cost = {"full": {"widths": widths, "per_width": [dict(unmeasured) for _ in widths]}}
  name = param_explosion._cost_plot(config, cost, str(tmp_path))
  assert os.path.getsize(tmp_path / name) > 0
