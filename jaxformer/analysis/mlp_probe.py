"""The MLP as a key-value memory, probed (Geva et al. 2021, step 8 of the reconstruction).

  mlp(x) = sum_f sigma(x . k_f + b_f) v_f + b2,   k_f = W1[:, f] (key), v_f = W2[f] (value)

Two questions per unit f of one layer, answered from a model and some training text:
- What does its key match? `top_contexts`: the k (sequence, position) pairs of the given
  sequences with the largest memory coefficient m_f = sigma(x . k_f + b_f) (the cached
  `mlp_post`; `mlp_pre` on request), i.e. the contexts ending at that position.
- What does its value write? `value_tokens`: the k tokens whose logits v_f raises most,
  scores_FV = v_f W_U through the (tied or untied) unembedding, without the final layer
  norm, as Geva et al. project values onto the output embeddings.
Without W2 (mlp_w2=False) unit f writes coordinate f mod D only: v_f = e_(f mod D).
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.analysis.cache import run_with_cache
from jaxformer.math import mlp as mlp_math


def value_tokens(params, layer, k=5):
  """{'tokens': int (F, k), 'scores': (F, k)}: what each unit's value vector promotes."""
  tree = _tree(params)
  ffn = _layer(tree, layer)["ffn"]
  unembed_DV = tree["unembed"] if "unembed" in tree else jnp.transpose(tree["embed"])
  if "w2" in ffn:
    values_FD = ffn["w2"]
  else:
    values_FD = jnp.asarray(mlp_math.pooled_values(ffn["w1"].shape[1], unembed_DV.shape[0]))
  scores_FV = np.asarray(jnp.einsum("FD,DV->FV", values_FD, unembed_DV))
  top_Fk = np.argsort(-scores_FV, axis=1, kind="stable")[:, :k]
  return {"tokens": top_Fk, "scores": np.take_along_axis(scores_FV, top_Fk, axis=1)}


def top_contexts(model, params, sequences_NL, layer, k=5, batch_size=32, use="post"):
  """{'activations', 'sequence', 'position'}, each (F, k), best first: per unit, the k
  positions of `sequences_NL` (int [N, L]) where its coefficient is largest. Batches run
  through one jitted run_with_cache; only the running top-k is kept in memory."""
  if use not in ("post", "pre"):
    raise ValueError(f"use={use!r}: expected 'post' (sigma(x . k_f + b_f)) or 'pre'")
  sequences_NL = np.asarray(sequences_NL)
  if sequences_NL.ndim != 2 or len(sequences_NL) == 0:
    raise ValueError(f"sequences_NL has shape {sequences_NL.shape}: expected (N > 0, L)")
  name = f"{_name(layer)}/ffn/mlp_{use}"
  run = jax.jit(functools.partial(run_with_cache, model, names=[name]))
  length = sequences_NL.shape[1]
  best_kF = best_at_kF = None
  for start in range(0, len(sequences_NL), batch_size):
    batch = jnp.asarray(sequences_NL[start : start + batch_size], jnp.int32)
    _, cache = run(params, batch)
    if name not in cache:
      raise ValueError(f"{name}: this model has no MLP at {_name(layer)} (mlp='kv' needed)")
    act_XF = np.asarray(cache[name]).reshape(-1, cache[name].shape[-1])  # X = batch x L
    flat_X = start * length + np.arange(act_XF.shape[0])
    if best_kF is None:
      best_kF = np.full((0, act_XF.shape[1]), -np.inf, act_XF.dtype)
      best_at_kF = np.zeros((0, act_XF.shape[1]), np.int64)
    pool_kF = np.concatenate([best_kF, act_XF])
    at_kF = np.concatenate([best_at_kF, np.broadcast_to(flat_X[:, None], act_XF.shape)])
    order_kF = np.argsort(-pool_kF, axis=0, kind="stable")[:k]
    best_kF = np.take_along_axis(pool_kF, order_kF, axis=0)
    best_at_kF = np.take_along_axis(at_kF, order_kF, axis=0)
  return {
    "activations": best_kF.T,
    "sequence": best_at_kF.T // length,
    "position": best_at_kF.T % length,
  }


def probe(model, params, sequences_NL, layer, k=5, batch_size=32):
  """Both halves for every unit of `layer`: top_contexts(...) | value_tokens(...)."""
  report = top_contexts(model, params, sequences_NL, layer, k, batch_size)
  values = value_tokens(params, layer, k)
  return report | {"value_tokens": values["tokens"], "value_scores": values["scores"]}


def describe(report, sequences_NL, unit, decode=str, window=8):
  """Text for one unit: its top contexts (the last `window` tokens, [current] token marked)
  and the tokens its value promotes. `decode` maps a token id to a string."""
  lines = [f"unit {unit}: key matches"]
  for act, n, pos in zip(
    report["activations"][unit], report["sequence"][unit], report["position"][unit], strict=True
  ):
    before = " ".join(decode(int(t)) for t in sequences_NL[n][max(0, pos - window + 1) : pos])
    lines.append(f"  {act:8.3f}  seq {n} pos {pos}: {before} [{decode(int(sequences_NL[n][pos]))}]")
  if "value_tokens" in report:
    promoted = ", ".join(
      f"{decode(int(t))} ({s:.2f})"
      for t, s in zip(report["value_tokens"][unit], report["value_scores"][unit], strict=True)
    )
    lines.append(f"  value promotes: {promoted}")
  return "\n".join(lines)


def _tree(params):
  params = nn.meta.unbox(params)
  return params["params"] if "params" in params else params


def _name(layer):
  return layer if isinstance(layer, str) else f"layers_{layer}"


def _layer(tree, layer):
  name = _name(layer)
  if name not in tree or "ffn" not in tree[name] or "w1" not in tree[name]["ffn"]:
    raise KeyError(f"{name}: no MLP params (mlp='kv' needed)")
  return tree[name]
