import math
import os

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
  holding unless `adjusted` says otherwise."""
  values = {name: 0.05 for name in config.compared}
  values |= {param_explosion.matrix_sum_name(f): 1.0 for f in config.matched_to}
  values |= {k.replace("__", "@"): v for k, v in adjusted.items()}
  m = {"chance": {"mqar": CHANCE}, "accuracy": {}, "adjusted": {}}
  for name, value in values.items():
    per_seed = list(value) if isinstance(value, list) else [value] * SEEDS
    m["adjusted"][name] = {"mqar": per_seed}
    m["accuracy"][name] = {"mqar": [a * (1 - CHANCE) + CHANCE for a in per_seed]}
  return m


def _verdict(config, **adjusted):
  return judge(param_explosion, _metrics(config, **adjusted), config)[:2]


def test_quick_passes_when_the_matrix_sum_recalls_and_the_diagonal_does_not():
  # criteria: matrix_sum@diagonal recalls; it beats the diagonal
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
    ({"matrix_sum__diagonal": 0.5}, [False, True, True, True]),  # it does not recall
    ({"matrix_sum__full": 0.5}, [True, False, True, True]),
    ({"diagonal": 0.9}, [True, True, False, True]),  # the diagonal recalls as well
    ({"full": 0.9}, [True, True, True, False]),  # full recalls as well
  ],
)
def test_each_criterion_fails_alone(change, expected):
  assert _verdict(_config("full"), **change) == ([True] * 4, expected)


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
  assert result.verdict in report.VERDICTS and len(result.criteria) == 3  # recall, 2 beats
  names = list(param_explosion.models(config))
  assert len(result.runs) == len(names) * (
    len(config.exploratory_seeds) + len(config.confirmatory_seeds)
  ) * len(config.learning_rates)
  counted = result.metrics["mixing_params"]
  for row in result.tables[0][1]:  # the trained params count as the closed forms say
    assert row["mixing params/layer (counted)"] == row["closed form"]
  assert counted["matrix_sum@diagonal"] <= counted["diagonal"] < counted["full"]
  assert not any(math.isnan(a) for a in result.metrics["adjusted"]["full"]["mqar"])
  for plot in result.plots:
    assert os.path.getsize(tmp_path / plot) > 1000
