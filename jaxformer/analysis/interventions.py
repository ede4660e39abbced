"""Run a rung with named activations replaced: ablations and activation patching.

  logits_BLV = run_with_interventions(model, params, tokens_BL, {
    "layers_1/mixer/head_outputs": zero_head(3),      # ablate head 3 of layer 1
    "layers_0/ffn/mlp_post": zero_units(17),          # ablate MLP unit 17 of layer 0
  })
  _, cache_A = run_with_cache(model, params, tokens_A)
  patched = run_with_interventions(model, params, tokens_B, patch(cache_A, ["layers_0/mixer/out"]))

An intervention maps a name of `run_with_cache`'s cache (jaxformer.analysis.cache) to an array
of that activation's shape (put in its place) or to a function of the activation that returns
its replacement. Everything downstream of the replaced activation is recomputed by the same
modules that compute the logits; nothing upstream changes.

How: Flax's `nn.intercept_methods` sees every module method call of one `apply`. An activation
that is a method's output (a layer norm's, the mixer's, the MLP's, a block's, the scorer's
queries and keys, the valuer's values) is replaced on its way out; one that is a method's input
(`head_outputs`, what the valuer's `combine` reads; `resid_pre`, what a block reads, and
`embedded`, what the first block reads) is replaced on its way in. The MLP's hidden
activations (`mlp_pre`, `mlp_post`) are inside one method: the MLP's output is corrected by
the replacement's change pushed through W2, `out + (post' - post) W2`, which is exact in real
arithmetic (the output is affine in post) and within float rounding in float32.

The attention weights (`weights`, a_BHLM) are replaced inside the mixer's materialized form
(`model.attention='generic'`, the default; the kernels never form them, so there the name is
not found): its scores are normalized as the mixer does, replaced, then mixed with the values.
Not replaceable: `resid_mid` (a sum inside the block; replace `mixer/out` instead) and the
states of the recurrent rungs. A name the
model does not compute, or one of those, is an error naming it. Unrolled layers only
(`model.scan_layers=False`, the layout `run_with_cache` reads).
"""

from collections.abc import Callable, Iterable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.analysis.cache import COLLECTION
from jaxformer.math import mixing
from jaxformer.math import mlp as mlp_math
from jaxformer.math.contract import contract
from jaxformer.nn import block
from jaxformer.nn.layers import LayerNorm
from jaxformer.nn.mixer import Mixer

Intervention = jax.Array | np.ndarray | Callable[[jax.Array], jax.Array]
NOT_REPLACEABLE = ("resid_mid", "states")

__all__ = ["names", "patch", "run_with_interventions", "zero_head", "zero_units"]


def run_with_interventions(model, params, tokens_BL, interventions: dict[str, Intervention]):
  """Applies `model` with the named activations replaced; returns logits_BLV.

  Works under jit (the replacements are traced with the forward pass). Raises ValueError for a
  name the model does not compute or cannot replace, or an array of the wrong shape.
  """
  if getattr(model, "scan_layers", False):
    raise ValueError("interventions: scanned layers (model.scan_layers=True) are not supported")
  for name in interventions:
    if name.rsplit("/", 1)[-1] in NOT_REPLACEABLE:
      raise ValueError(
        f"intervention {name!r}: not replaceable (see jaxformer.analysis.interventions)"
      )
  seen = set()
  interceptor = _interceptor(dict(interventions), seen)
  with nn.intercept_methods(interceptor):
    logits_BLV, _ = model.apply(params, tokens_BL, mutable=[COLLECTION])
  missing = [n for n in interventions if n not in seen]
  if missing:
    known = names(model, params, tokens_BL)
    mixer = missing[0].removesuffix("/weights")
    if mixer != missing[0] and f"{mixer}/head_outputs" in known:
      raise ValueError(
        f"intervention {missing[0]!r}: attention weights are replaceable only where the mixer "
        "materializes them (model.attention='generic'); replace head_outputs instead"
      )
    raise ValueError(
      f"intervention {missing[0]!r}: no such replaceable activation in this model; "
      f"replaceable: {', '.join(known)}"
    )
  return logits_BLV


def names(model, params, tokens_BL) -> list[str]:
  """Every activation name this model's forward pass can replace, in the order computed
  (traced with jax.eval_shape: nothing is computed)."""
  found = []

  def record(next_fun, args, kwargs, context):
    module, listed = context.module, _input_names(context)
    out = next_fun(*args, **kwargs)
    if context.method_name == "_mix" and isinstance(module, Mixer):
      listed.append("/".join(module.path) + "/weights")
    if context.method_name == "__call__" and module.name == "ffn":
      hidden = ("mlp_pre", "mlp_post")
      listed += [f"{'/'.join(module.path)}/{k}" for k in hidden if _sown(module, k) is not None]
    for name in listed + _output_names(context):
      if name not in found:
        found.append(name)
    return out

  with nn.intercept_methods(record):
    jax.eval_shape(lambda p, t: model.apply(p, t, mutable=[COLLECTION]), params, tokens_BL)
  return found


def zero_head(*heads: int) -> Callable[[jax.Array], jax.Array]:
  """For `.../mixer/head_outputs` (o_BLHK): the given heads' outputs set to zero."""
  return lambda o_BLHK: o_BLHK.at[:, :, list(heads)].set(0)


def zero_units(*units: int) -> Callable[[jax.Array], jax.Array]:
  """For `.../ffn/mlp_post` (or mlp_pre, any _BL?F activation): the given units set to zero."""
  return lambda h_BLF: h_BLF.at[..., list(units)].set(0)


def patch(cache: dict, names: Iterable[str] | None = None) -> dict[str, jax.Array]:
  """Interventions that put `cache`'s activations (another input's run_with_cache) in place;
  names: which ones (default: every replaceable one the cache holds)."""
  if names is None:
    names = [n for n in cache if n.rsplit("/", 1)[-1] not in NOT_REPLACEABLE]
  names = list(names)
  unknown = [n for n in names if n not in cache]
  if unknown:
    raise ValueError(f"patch: {unknown[0]!r} is not in the cache")
  return {n: cache[n] for n in names}


def _parent(module):
  return "/".join(module.path[:-1])


def _input_names(context):
  """Names of the activation a method call reads as its first argument."""
  module, method = context.module, context.method_name
  path = "/".join(module.path)
  if method == "__call__" and isinstance(module, block.Block):
    return ["embedded", f"{path}/resid_pre"] if path == "layers_0" else [f"{path}/resid_pre"]
  if method == "combine" and _is_valuer(module):
    return [f"{_parent(module)}/head_outputs"]
  return []


def _output_names(context):
  """Names of the activation a method call returns."""
  module, method = context.module, context.method_name
  path = "/".join(module.path)
  if method == "__call__":
    if isinstance(module, block.Block):
      return [f"{path}/resid_post"]
    if isinstance(module, Mixer | LayerNorm) or module.name == "ffn":
      return [f"{path}/out"]
  if method in ("queries", "keys") and module.name == "scorer":
    return [f"{_parent(module)}/{method}"]
  if method == "values" and _is_valuer(module):
    return [f"{_parent(module)}/values"]
  return []


def _is_valuer(module):
  return module.name == "valuer" and len(module.path) >= 2


def _replace(name, value, intervention):
  new = intervention(value) if callable(intervention) else jnp.asarray(intervention)
  if new.shape != value.shape:
    raise ValueError(f"intervention {name!r}: shape {new.shape}, the activation is {value.shape}")
  return new.astype(value.dtype)


def _interceptor(interventions, seen):
  def intercept(next_fun, args, kwargs, context):
    if args:
      for name in _input_names(context):
        if name in interventions:
          seen.add(name)
          args = (_replace(name, args[0], interventions[name]), *args[1:])
    module = context.module
    weights = "/".join(module.path) + "/weights"
    if context.method_name == "_mix" and isinstance(module, Mixer) and weights in interventions:
      seen.add(weights)
      return _mix_with(module, *args, interventions[weights], weights)
    out = next_fun(*args, **kwargs)
    if context.method_name == "__call__" and module.name == "ffn":
      out = _hidden(module, out, interventions, seen)
    for name in _output_names(context):
      if name in interventions:
        seen.add(name)
        out = _replace(name, out, interventions[name])
    return out

  return intercept


def _mix_with(mixer, q, k, v_BMHK, mask_LM, intervention, name):
  """Mixer._mix with the normalized weights replaced: the same three steps, scores ->
  normalize -> mix (jaxformer.nn.mixer), the weights edited between the last two."""
  scores_BHLM = mixer.scorer.scores(q, k, mask_LM.shape[-2])
  a_BHLM = mixing.normalize(scores_BHLM, mask_LM, mixer.normalizer, mixer.tau)
  return mixing.mix(_replace(name, a_BHLM, intervention), v_BMHK)


def _sown(module, name):
  return module.get_variable(COLLECTION, name) if module.has_variable(COLLECTION, name) else None


def _hidden(module, out_BLD, interventions, seen):
  """The MLP's output with mlp_pre / mlp_post replaced: out + (post' - post) W2."""
  path = "/".join(module.path)
  wanted = [k for k in ("mlp_pre", "mlp_post") if f"{path}/{k}" in interventions]
  if not wanted:
    return out_BLD
  sown = {k: _sown(module, k) for k in ("mlp_pre", "mlp_post")}
  if any(v is None for v in sown.values()):
    return out_BLD  # not an MLP with hidden units (an elementwise sigma): the names stay unseen
  pre_BLF, post_BLF = sown["mlp_pre"][-1], sown["mlp_post"][-1]
  new_post_BLF = post_BLF
  if "mlp_pre" in wanted:
    seen.add(f"{path}/mlp_pre")
    new_pre_BLF = _replace(f"{path}/mlp_pre", pre_BLF, interventions[f"{path}/mlp_pre"])
    new_post_BLF = mlp_math.ACTIVATIONS[module.activation](new_pre_BLF)
  if "mlp_post" in wanted:
    seen.add(f"{path}/mlp_post")
    new_post_BLF = _replace(f"{path}/mlp_post", new_post_BLF, interventions[f"{path}/mlp_post"])
  delta_BLF = new_post_BLF - post_BLF
  if not module.w2:
    return out_BLD + delta_BLF
  w2_FD = nn.meta.unbox(module.get_variable("params", "w2")).astype(out_BLD.dtype)
  return out_BLD + contract("BLF,FD->BLD", delta_BLF, w2_FD)
