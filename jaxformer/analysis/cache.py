"""Run a rung and keep every named intermediate: the raw material of the analyses.

  logits_BLV, cache = run_with_cache(model, params, tokens_BL)
  cache["layers_0/mixer/weights"]     # a_BHLM, attention weights of layer 0
  jax.jit(functools.partial(run_with_cache, model))(params, tokens_BL)   # same, compiled

Why sow and capture instead of a second forward pass written for analysis: the cache
comes from the very modules that produce the logits, so an analysis cannot drift from
the model (tests recombine the cache into the logits to prove it).

Keys are Flax module paths joined by '/', then the sown name (jaxformer.nn.* docstrings):
  embedded                        x_BLD, token + position embedding
  layers_{i}/resid_pre            x_BLD entering block i (derived: the previous block's output)
  layers_{i}/norm1/out, norm2/out layer-norm outputs (pre/post-norm rungs; `norm/out` single skip)
  layers_{i}/mixer/queries        q_BLHK (keys k_BMHK, values v_BMHK alike; absent where a
                                  scorer has none, e.g. source_only has no queries)
  layers_{i}/mixer/weights        a_BHLM, normalized over the sources M
  layers_{i}/mixer/head_outputs   o_BLHK = sum_M a_BHLM v_BMHK, before the head combine
  layers_{i}/mixer/out            s_BLD, the mixer output (heads combined, + bo)
  layers_{i}/resid_mid            x + s (split skip only)
  layers_{i}/ffn/mlp_pre, mlp_post  MLP pre- and post-activations _BLF (mlp='kv')
  layers_{i}/ffn/out              the MLP (or elementwise sigma) output _BLD
  layers_{i}/resid_post           the block output _BLD
  layers_{i}/states               h_BLD of a recurrent layer (rnn rungs)
  final_norm/out                  the final layer norm's output (final_norm=True)

Attention weights are sown only by the 'generic' mixer implementation, which
materializes them. For the kernels of step 9 (model.attention != 'generic') this module
recomputes them from the cached queries and keys as softmax_M(q . k / tau + mask) with the
layer's own tau and mask (causal, sliding window), the definition those kernels compute
without materializing it.
"""

import fnmatch
import functools

import jax
import jax.numpy as jnp

from jaxformer.math import interaction, mixing
from jaxformer.nn import block
from jaxformer.nn.layers import LayerNorm
from jaxformer.nn.mixer import GENERIC, Mixer

COLLECTION = "intermediates"


def _capture(module, method_name):
  """Which module outputs capture_intermediates keeps: mixers, MLPs / sigmas, layer norms."""
  if method_name != "__call__":
    return False
  return isinstance(module, Mixer | LayerNorm) or module.name == "ffn"


def run_with_cache(model, params, tokens_BL, *, names=None):
  """Applies `model` (a ladder rung) and returns (logits_BLV, cache: dict name -> array).

  names: optional glob patterns (e.g. ['*/weights', 'embedded']) to keep only some entries;
  under jit the rest are then never materialized.
  """
  logits_BLV, state = model.apply(
    params, tokens_BL, mutable=[COLLECTION], capture_intermediates=_capture
  )
  cache = {}
  _flatten(state.get(COLLECTION, {}), "", cache)
  _derive(model, tokens_BL.shape[1], cache)
  if names is not None:
    cache = {k: v for k, v in cache.items() if any(fnmatch.fnmatchcase(k, p) for p in names)}
  return logits_BLV, cache


@functools.partial(jax.jit, static_argnames=("model", "names"))
def cached(model, variables, tokens_BL, names):
  """run_with_cache's entries matching the glob patterns `names` (a tuple), compiled once
  per model, names and shapes."""
  return run_with_cache(model, variables, tokens_BL, names=list(names))[1]


def layer_names(cache):
  """Layer prefixes present in the cache, in layer order: ['layers_0', 'layers_1', ...]."""
  found = {k.split("/")[0] for k in cache if k.startswith("layers_")}
  return sorted(found, key=lambda name: int(name.split("_")[1]))


def _flatten(tree, prefix, out):
  for key, value in tree.items():
    name = prefix + ("out" if key == "__call__" else key)
    if isinstance(value, dict):
      _flatten(value, name + "/", out)
    else:  # sow and capture_intermediates store a tuple, one entry per call
      out[name] = value[0] if len(value) == 1 else jnp.stack(value)


def _derive(model, length, cache):
  """resid_pre for every block, and attention weights that a kernel did not sow."""
  previous = cache.get("embedded")
  for i, layer in enumerate(getattr(model, "layers", ())):
    name = f"layers_{i}"
    if isinstance(layer, block.Block):
      if previous is not None:
        cache[f"{name}/resid_pre"] = previous
      _attention_weights(layer.mixer, name + "/mixer", length, cache)
    previous = cache.get(f"{name}/resid_post", cache.get(f"{name}/states"))


def _attention_weights(mixer, prefix, length, cache):
  if not isinstance(mixer, Mixer) or mixer.impl == GENERIC or f"{prefix}/weights" in cache:
    return
  q_BLHK, k_BMHK = cache.get(f"{prefix}/queries"), cache.get(f"{prefix}/keys")
  if q_BLHK is None or k_BMHK is None:
    return
  scores_BHLM = interaction.dot_scores(q_BLHK, k_BMHK)  # kernels need the lowrank scorer
  a_BHLM = mixing.normalize(scores_BHLM, mixer.mask_LM(length), "softmax", mixer.tau)
  cache[f"{prefix}/weights"] = a_BHLM
