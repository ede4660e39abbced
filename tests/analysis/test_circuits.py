"""Circuits: the D x D maps reproduce the model's own scores and head writes."""

import io

import flax.linen as nn
import jax
import numpy as np
import pytest
from matplotlib.figure import Figure

from jaxformer import ladder
from jaxformer.analysis import circuits
from jaxformer.analysis.cache import run_with_cache

LENGTH = 6


def _setup(rung, **fields):
  config = ladder.default_config(rung)
  config.num_layers, config.d_model, config.num_heads = 1, 16, 2
  for key, value in fields.items():
    config[key] = value
  model = ladder.build(rung, config)
  tokens = jax.random.randint(jax.random.key(1), (2, LENGTH), 0, config.vocab_size)
  params = model.init(jax.random.key(0), tokens)  # boxed on purpose: circuits unbox
  leaves, tree = jax.tree_util.tree_flatten(nn.meta.unbox(params))
  rng = np.random.default_rng(0)
  leaves = [x + 0.3 * rng.standard_normal(x.shape, np.float32) for x in leaves]
  plain = jax.tree_util.tree_unflatten(tree, leaves)
  _, cache = run_with_cache(model, plain, tokens)
  return config, plain, {k: np.asarray(v) for k, v in cache.items()}


def test_qk_and_ov_circuits_reproduce_scores_and_head_writes():
  config, params, cache = _setup("transformer")
  p = params["params"]["layers_0"]["mixer"]
  x_BLD = cache["layers_0/norm1/out"]  # what the mixer reads (pre-norm)
  qk = np.asarray(circuits.qk_circuits(params, 0))
  ov = np.asarray(circuits.ov_circuits(params, "layers_0"))
  assert qk.shape == ov.shape == (2, 16, 16)
  # score = (x_L Wq + bq) . (x_i Wk + bk) = x_L qk x_i^T + the bias terms
  wq, wk = (np.asarray(p["scorer"][n]) for n in ("wq", "wk"))
  bq, bk = (np.asarray(p["scorer"][n]) for n in ("bq", "bk"))
  scores = np.einsum("BLD,HDE,BME->BHLM", x_BLD, qk, x_BLD)
  scores += np.einsum("BLD,DHK,HK->BHL", x_BLD, wq, bk)[..., None]
  scores += np.einsum("HK,DHK,BMD->BHM", bq, wk, x_BLD)[:, :, None, :]
  scores += np.einsum("HK,HK->H", bq, bk)[None, :, None, None]
  q, k = cache["layers_0/mixer/queries"], cache["layers_0/mixer/keys"]
  np.testing.assert_allclose(scores, np.einsum("BLHK,BMHK->BHLM", q, k), atol=1e-4, rtol=1e-4)
  # head h writes sum_i a_hLi x_i ov_h + bv_h Wo_h (weights sum to 1); + bo once
  a = cache["layers_0/mixer/weights"]
  bias_HD = np.einsum("HK,HKD->HD", np.asarray(p["valuer"]["bv"]), np.asarray(p["valuer"]["wo"]))
  writes = np.einsum("BHLM,BMD,HDE->BLE", a, x_BLD, ov) + bias_HD.sum(0) + p["valuer"]["bo"]
  np.testing.assert_allclose(writes, cache["layers_0/mixer/out"], atol=1e-4, rtol=1e-4)


def test_unfactored_rungs_use_their_full_matrices():
  _, params, cache = _setup("matrix_sum", interaction="bilinear")
  mixer = params["params"]["layers_0"]["mixer"]
  np.testing.assert_array_equal(circuits.qk_circuits(params, 0), mixer["scorer"]["a"])
  np.testing.assert_array_equal(circuits.ov_circuits(params, 0), mixer["valuer"]["v"])
  _, params, _ = _setup("matrix_sum", interaction="tanh")
  with pytest.raises(ValueError, match="layers_0: scorer"):
    circuits.qk_circuits(params, 0)
  with pytest.raises(KeyError, match="layers_7"):
    circuits.ov_circuits(params, 7)


def test_effective_rank_of_known_spectra():
  rng = np.random.default_rng(1)
  u, _ = np.linalg.qr(rng.standard_normal((8, 8)))
  v, _ = np.linalg.qr(rng.standard_normal((8, 8)))
  spectra = np.array([[3, 3, 3, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0, 0, 0], [4, 2, 1, 1, 0, 0, 0, 0]])
  m = np.einsum("DS,XS,ES->XDE", u, spectra, v)
  p = spectra[2] / spectra[2].sum()
  want = [3.0, 1.0, np.exp(-np.sum(p[p > 0] * np.log(p[p > 0])))]
  np.testing.assert_allclose(circuits.effective_rank(m), want, rtol=1e-4)
  assert float(circuits.effective_rank(np.zeros((4, 4)))) == 0.0


def test_circuit_ranks_are_bounded_by_the_head_dimension():
  config, params, _ = _setup("transformer", num_layers=2, rank=3)
  ranks = circuits.circuit_ranks(params)
  assert ranks["qk"].shape == ranks["ov"].shape == (2, 2)
  assert np.all(ranks["ov"] <= 3 + 1e-4) and np.all(ranks["ov"] > 1.5)
  assert np.linalg.matrix_rank(np.asarray(circuits.ov_circuits(params, 1))[0]) == 3


def test_attention_maps_and_plot():
  _, _, cache = _setup("transformer", num_layers=2)
  maps = circuits.attention_maps(cache)
  assert list(maps) == ["layers_0", "layers_1"]
  np.testing.assert_array_equal(maps["layers_1"], cache["layers_1/mixer/weights"])
  fig = circuits.plot_attention_maps(maps["layers_0"][0], tokens=list("abcdef"), title="layer 0")
  assert isinstance(fig, Figure) and len(fig.axes) == 2
  np.testing.assert_array_equal(fig.axes[1].images[0].get_array(), maps["layers_0"][0, 1])
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png")
  assert buffer.getvalue()[:4] == b"\x89PNG"
  with pytest.raises(ValueError, match="index the batch"):
    circuits.plot_attention_maps(maps["layers_0"])
