"""Attention maps and per-head circuits (Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits"), read straight from a rung's params and run_with_cache's cache.

Why: step 5 factors the bilinear form A_j = Wq_j^T Wk_j and step 7 factors the value
V_j = Wo_j Wv_j; these functions multiply the factors back and ask how much of the D x D
room each head actually uses.

Row-vector convention, as everywhere in jaxformer (x_D is a row, y = x W):
  QK circuit  qk_HDE[h] = Wq_h Wk_h^T     score_h(L, i) = x_L qk_h x_i^T (+ bias terms).
              It equals the column-vector W_Q^h^T W_K^h of the paper exactly.
  OV circuit  ov_HDE[h] = Wv_h Wo_h       head h writes sum_i a_hLi x_i ov_h (+ bias terms).
              It is the transpose of the column-vector W_O^h W_V^h (same singular values).
Rungs without factors use their full matrices: bilinear scorers (x_L^T A_h x_i) give
qk = A_h, summed heads (matrix_sum) give ov = V_h. Biases (GPT-2 has bq, bk, bv, bo) add
terms outside these D x D maps and are left out.

Effective rank (Roy & Vetterli 2007): erank(M) = exp(-sum_i p_i log p_i) with
p_i = sigma_i / sum_j sigma_j over M's singular values; 1 for a rank-one matrix, r for r
equal singular values, and between for a spread spectrum; 0 for the zero matrix.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from jaxformer.analysis.cache import layer_names


def attention_maps(cache):
  """{'layers_i': a_BHLM} for every layer of the cache that has attention weights."""
  return {
    name: cache[f"{name}/mixer/weights"]
    for name in layer_names(cache)
    if f"{name}/mixer/weights" in cache
  }


def plot_attention_maps(a_HLM, tokens=None, title=None, cols=4):
  """One heat map per head (rows: receivers L, columns: sources M). Returns a matplotlib
  Figure rendered by the Agg canvas (no pyplot, no display needed); `tokens` labels axes."""
  a_HLM = np.asarray(a_HLM)
  if a_HLM.ndim != 3:
    raise ValueError(f"a_HLM has shape {a_HLM.shape}: expected (heads, L, M); index the batch")
  heads = a_HLM.shape[0]
  cols = min(cols, heads)
  rows = -(-heads // cols)
  fig = Figure(figsize=(3 * cols, 3 * rows + (0.4 if title else 0)), layout="constrained")
  FigureCanvasAgg(fig)
  for h in range(heads):
    ax = fig.add_subplot(rows, cols, h + 1)
    ax.imshow(a_HLM[h], cmap="viridis", vmin=0.0, vmax=max(1e-9, float(a_HLM.max())))
    ax.set_title(f"head {h}", fontsize=9)
    if tokens is not None:
      labels = [str(t) for t in tokens]
      ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
      ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("source i", fontsize=8)
    ax.set_ylabel("receiver L", fontsize=8)
  if title:
    fig.suptitle(title)
  return fig


def qk_circuits(params, layer):
  """qk_HDE: the D x D bilinear form of each head's score at `layer` (int or 'layers_i')."""
  scorer = _layer(params, layer)["mixer"]["scorer"]
  if set(scorer) - {"bq", "bk"} == {"wq", "wk"} and jnp.ndim(scorer["wq"]) == 3:  # lowrank
    return jnp.einsum("DHK,EHK->HDE", scorer["wq"], scorer["wk"])
  if "a" in scorer:  # bilinear: score = x_L^T A_h x_i
    return jnp.asarray(scorer["a"])
  raise ValueError(f"{_name(layer)}: scorer {sorted(scorer)} has no query/key factors")


def ov_circuits(params, layer):
  """ov_HDE: the D x D map from a source x_i to what head h writes (row vectors)."""
  valuer = _layer(params, layer)["mixer"]["valuer"]
  if "wv" in valuer and "wo" in valuer:
    return jnp.einsum("DHK,HKE->HDE", valuer["wv"], valuer["wo"])
  if "v" in valuer:  # summed heads: Wo_h = I
    return jnp.asarray(valuer["v"])
  raise ValueError(f"{_name(layer)}: valuer {sorted(valuer)} has no per-head value matrices")


def effective_rank(m_XDE):
  """Roy & Vetterli effective rank over the last two axes (see the module docstring)."""
  s_XS = jnp.linalg.svd(jnp.asarray(m_XDE, jnp.float32), compute_uv=False)
  total_X = jnp.sum(s_XS, axis=-1, keepdims=True)
  p_XS = s_XS / jnp.where(total_X > 0, total_X, 1.0)
  entropy_X = -jnp.sum(jnp.where(p_XS > 0, p_XS * jnp.log(jnp.where(p_XS > 0, p_XS, 1.0)), 0.0), -1)
  return jnp.where(total_X[..., 0] > 0, jnp.exp(entropy_X), 0.0)


def circuit_ranks(params):
  """{'qk': erank_NH, 'ov': erank_NH} over every layer N and head H that has both circuits."""
  names = [k for k in sorted(_tree(params), key=_index) if k.startswith("layers_")]
  ranks = {"qk": [], "ov": []}
  for name in names:
    ranks["qk"].append(effective_rank(qk_circuits(params, name)))
    ranks["ov"].append(effective_rank(ov_circuits(params, name)))
  return {k: jnp.stack(v) for k, v in ranks.items()}


def _tree(params):
  params = nn.meta.unbox(params)
  return params["params"] if "params" in params else params


def _name(layer):
  return layer if isinstance(layer, str) else f"layers_{layer}"


def _index(name):
  return int(name.split("_")[1]) if name.startswith("layers_") else -1


def _layer(params, layer):
  tree = _tree(params)
  name = _name(layer)
  if name not in tree or "mixer" not in tree[name]:
    raise KeyError(f"{name}: no mixer params (layers: {sorted(k for k in tree if '_' in k)})")
  return tree[name]
