import os

import jax
import numpy as np
import pytest

from experiments import cache, harness
from jaxformer import decode, ladder


def _metrics(config, acc_bilinear=0.99, acc_quarter=0.97, measured_off=0, article_scale=1):
  d = config.d_model
  names = ["bilinear", *(f"lowrank r={r}" for r in config.ranks)]
  key_rank = {"bilinear": d, **{f"lowrank r={r}": r for r in config.ranks}}
  formula = {
    n: {"keys": 100 * k, "values": 100 * d, "total": 100 * (k + d)} for n, k in key_rank.items()
  }
  measured = {n: dict(v) for n, v in formula.items()}
  measured[names[-1]]["total"] += measured_off
  accuracy = {n: 0.5 for n in names}
  accuracy["bilinear"], accuracy[f"lowrank r={d // 4}"] = acc_bilinear, acc_quarter
  return {
    "article": {
      "bilinear_key_bytes": 10 * cache.GB * article_scale,
      "lowrank_key_bytes": 2 * cache.GB,
      "ratio": 5.0 * article_scale,
    },
    "measured_bytes": measured,
    "formula_bytes": formula,
    "key_rank": key_rank,
    "key_ratio_vs_bilinear": {
      n: measured[n]["keys"] / measured["bilinear"]["keys"] for n in names[1:]
    },
    "accuracy": accuracy,
  }


def test_criteria_pass_on_exact_bytes_and_kept_recall():
  config = cache.get_config("quick")
  assert [c.passed for c in cache.criteria(_metrics(config), config)] == [True] * 4


def test_criteria_fail_on_wrong_arithmetic_bytes_or_lost_recall():
  config = cache.get_config("quick")
  wrong_article = cache.criteria(_metrics(config, article_scale=2), config)
  assert [c.passed for c in wrong_article] == [False, True, True, True]
  off = cache.criteria(_metrics(config, measured_off=4), config)
  assert [c.passed for c in off] == [True, False, True, True]
  lost = cache.criteria(_metrics(config, acc_quarter=0.4), config)
  assert [c.passed for c in lost] == [True, True, True, False]


def test_article_arithmetic_is_exact():
  art = cache.article_arithmetic()
  assert art["bilinear_key_bytes"] == 10_000_000_000 == art["by_hand"]["bilinear"]
  assert art["lowrank_key_bytes"] == 2_000_000_000 == art["by_hand"]["lowrank"]
  assert art["ratio"] == 5.0


@pytest.mark.parametrize(
  "overrides", [{"interaction": "bilinear"}, {"interaction": "lowrank", "rank": 4}]
)
def test_measured_cache_matches_formula_on_an_untrained_model(overrides):
  config = cache.get_config("tiny")
  model_config = ladder.default_config("matrix_sum")
  with model_config.unlocked():
    for key, value in cache.model_overrides(config, overrides).items():
      model_config[key] = value
  model = ladder.build("matrix_sum", model_config)
  prompts = np.random.default_rng(0).integers(0, config.vocab_size, (3, config.seq_len))
  params = harness.init_params(model, prompts)
  measured = cache.measure_cache(model, params, prompts)
  total = decode.cache_bytes_formula(model_config, config.seq_len, batch=3)
  keys = cache.key_cache_bytes(model_config, config.seq_len, batch=3)
  assert measured == {"total": total, "keys": keys, "values": total - keys}
  assert keys == 3 * config.seq_len * config.num_layers * decode.cache_dims(model_config)[0] * 4
  assert jax.tree.leaves(params)  # a real model was built


def test_tiny_run_measures_every_scorer(tmp_path):
  config = cache.get_config("tiny")
  result = cache.run(config, str(tmp_path))
  assert result.experiment == cache.NAME and len(result.criteria) == 4
  assert [c.passed for c in result.criteria[:3]] == [True, True, True]  # exact at any size
  assert set(result.metrics["accuracy"]) == {"bilinear", "lowrank r=2", "lowrank r=4"}
  assert harness.finite(result.metrics)
  for plot in result.plots:
    assert plot.startswith(cache.NAME) and os.path.getsize(tmp_path / plot) > 1000
