"""Plugging any sequence mixer into the ladder's block, and checking its contract first.

A mixer is named by a spec string, `package.module:Class` (importable, or a module already
loaded in this process such as `__main__`) or `path/to/file.py:Class` (a file anywhere: it
is imported under a private name, nothing in jaxformer changes). Only the module the spec
names is loaded. Loading runs the user's code, so it happens only for a spec the user gave
(a config, a flag): a run's workdir records the file's sha256 (`source`) and a reader of
someone else's workdir loads it only when trusted and unchanged (jaxformer.train.workdir).

`check(cls, fields, width)` runs the contract on a small random input before anything
trains, and raises MixerError with one line naming what broke:
  - `cls(width=D, **fields)` builds a flax.linen Module;
  - it maps x_BLD [B, L, D] to finite [B, L, D];
  - it is causal: changing the input at one position changes no output before it (every
    position is tried, in one vmapped call);
  - if its `__call__` takes `decode`, decoding a prompt and then one token at a time
    through the 'cache' collection equals the full pass.
It also reports (does not refuse) the parameters that carry no logical axis names
(`nn.with_logical_partitioning`, as jaxformer.nn.layers.param declares them): on a mesh of
more than one device those are replicated on every device, never sharded. `unnamed_note`
is the one line the scorecard and `experiments.main` print before training on such a mesh.
"""

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import threading

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

CHECK_LENGTH = 16  # L of the contract check
CHECK_BATCH = 2
CHECK_SECONDS = 300  # the whole contract check (it compiles a few small programs)
TOLERANCE = 1e-4  # |difference| <= TOLERANCE x (1 + max |output|) counts as equal
_FILE_PREFIX = "jaxformer_user_"
_FILES = {}  # private module name -> the file it was loaded from


class MixerError(ValueError):
  """A mixer that cannot be loaded, built or that breaks the contract; one line."""


def _split(spec):
  if not isinstance(spec, str) or ":" not in spec:
    raise MixerError(f"mixer {spec!r}: expected 'package.module:Class' or 'path/to/file.py:Class'")
  where, _, name = spec.rpartition(":")
  if not where or not name:
    raise MixerError(f"mixer {spec!r}: expected 'package.module:Class' or 'path/to/file.py:Class'")
  return where, name


def _is_file(where):
  return where.endswith(".py") or os.sep in where or "/" in where


def source(spec):
  """{'file': absolute path, 'sha256': hex} of the code a spec names, read without running it.

  A module spec's file is found the way `import` finds it (which imports its parent
  packages, not the module); a module with no file (built in, or defined in `__main__`
  without one) has file and sha256 None.
  """
  where, _ = _split(spec)
  if _is_file(where):
    path = os.path.abspath(where)
  else:
    module = sys.modules.get(where)
    path = getattr(module, "__file__", None) if module is not None else None
    if module is None:
      try:
        found = importlib.util.find_spec(where)
      except (ImportError, ValueError) as e:
        raise MixerError(f"mixer {spec!r}: cannot find {where}: {_one_line(e)}") from e
      path = found.origin if found is not None and found.has_location else None
  if path is None or not os.path.isfile(path):
    return {"file": path, "sha256": None}
  with open(path, "rb") as f:
    return {"file": path, "sha256": hashlib.sha256(f.read()).hexdigest()}


def load(spec):
  """The class a spec names: 'package.module:Class' or 'path/to/file.py:Class'."""
  where, name = _split(spec)
  if _is_file(where):
    module = _from_file(spec, where)
  else:
    module = sys.modules.get(where)
    if module is None:
      try:
        module = importlib.import_module(where)
      except SystemExit as e:
        raise MixerError(f"mixer {spec!r}: importing {where} called sys.exit({e.code!r})") from e
      except Exception as e:  # the user's import: any error is reported in one line
        raise MixerError(f"mixer {spec!r}: cannot import {where}: {_one_line(e)}") from e
  obj = module
  for part in name.split("."):
    if not hasattr(obj, part):
      raise MixerError(f"mixer {spec!r}: {where} has no attribute {name!r}")
    obj = getattr(obj, part)
  if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
    raise MixerError(f"mixer {spec!r}: {name} is not a flax.linen Module class")
  return obj


def _from_file(spec, path):
  path = os.path.abspath(path)
  if not os.path.isfile(path):
    raise MixerError(f"mixer {spec!r}: no such file {path}")
  stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
  name = f"{_FILE_PREFIX}{stem}_{hashlib.sha1(path.encode()).hexdigest()[:10]}"
  if name in sys.modules:
    return sys.modules[name]
  module_spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(module_spec)
  sys.modules[name] = module  # dataclasses (Linen modules) look their module up by name
  try:
    module_spec.loader.exec_module(module)
  except SystemExit as e:  # would end the caller, e.g. `main` exiting 0 having trained nothing
    del sys.modules[name]
    raise MixerError(f"mixer {spec!r}: importing {path} called sys.exit({e.code!r})") from e
  except Exception as e:
    del sys.modules[name]
    raise MixerError(f"mixer {spec!r}: cannot import {path}: {_one_line(e)}") from e
  _FILES[name] = path
  return module


def spec_of(cls):
  """The spec string that loads `cls` again ('path.py:Class' for a class loaded from a file)."""
  if "<locals>" in cls.__qualname__:
    raise MixerError(
      f"mixer {cls.__qualname__}: defined inside a function, so no spec can name it; "
      "define it at the top level of a module or file"
    )
  where = _FILES.get(cls.__module__, cls.__module__)
  return f"{where}:{cls.__qualname__}"


def field_names(cls):
  return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("parent", "name")]


def build(cls, width, fields):
  """cls(width=width, **fields), or MixerError naming the field that does not fit."""
  known = field_names(cls)
  if "width" not in known:
    raise MixerError(
      f"mixer {cls.__name__}: has no field `width` (the contract builds it from width)"
    )
  unknown = sorted(set(fields) - set(known))
  if unknown:
    raise MixerError(
      f"mixer {cls.__name__}: unknown field {unknown[0]!r}; its fields: {', '.join(known)}"
    )
  try:
    return cls(width=width, **fields)
  except Exception as e:
    raise MixerError(f"mixer {cls.__name__}: cannot be built: {_one_line(e)}") from e


def accepts_decode(cls):
  params = inspect.signature(cls.__call__).parameters
  return "decode" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class Plugged(nn.Module):
  """A mixer whose `__call__` takes no `decode`, in a block (which passes it): trains as is,
  refuses to decode."""

  module: nn.Module

  def __call__(self, x_BLD, decode=False):
    if decode:
      raise MixerError(f"mixer {type(self.module).__name__}: does not support decode=True")
    return self.module(x_BLD)


def in_block(module):
  """What a jaxformer.nn.block.Block takes as its mixer."""
  return module if accepts_decode(type(module)) else Plugged(module)


def unnamed_params(params):
  """Paths ('a/b/kernel') of the parameters in an `init`'s 'params' (boxed, or their
  shapes) declared without logical axis names (not boxed by `nn.with_logical_partitioning`;
  one declared with every axis None was replicated on purpose and is not listed)."""
  leaves = jax.tree_util.tree_leaves_with_path(
    params, is_leaf=lambda x: isinstance(x, nn.Partitioned)
  )
  out = []
  for path, leaf in leaves:
    if isinstance(leaf, nn.Partitioned):
      continue
    out.append("/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path))
  return out


def mixer_unnamed(cls, fields, width, length=CHECK_LENGTH):
  """`unnamed_params` of `cls(width, **fields)`, from shapes only (nothing is computed)."""
  module = build(cls, width, fields)
  x = jax.ShapeDtypeStruct((1, length, width), jnp.float32)
  return unnamed_params(jax.eval_shape(module.init, jax.random.key(0), x)["params"])


def unnamed_note(name, unnamed, num_devices):
  """The one line to print before training on `num_devices` devices, or None when there is
  nothing to say (one device, or every parameter named)."""
  if num_devices <= 1 or not unnamed:
    return None
  shown = ", ".join(unnamed[:3]) + (f", ... ({len(unnamed)} in all)" if len(unnamed) > 3 else "")
  return (
    f"mixer {name}: {len(unnamed)} parameter(s) without logical axis names ({shown}) are "
    f"replicated on all {num_devices} devices, not sharded; declare them with "
    "nn.with_logical_partitioning (jaxformer.nn.layers.param) to shard them"
  )


def check(cls, fields, width, length=CHECK_LENGTH, batch=CHECK_BATCH, seed=0, timeout=None):
  """Runs the contract; returns {'decode': bool, 'params': int, 'unnamed': [paths of the
  parameters without logical axis names]}; MixerError if broken.

  timeout: seconds (default CHECK_SECONDS) the whole check may take; a mixer whose build or
  `__call__` does not return by then is a MixerError (its thread is left behind, as Python
  cannot stop it, so the caller should exit soon).
  """
  timeout = CHECK_SECONDS if timeout is None else timeout
  outcome = {}

  def run():
    try:
      outcome["result"] = _check(cls, fields, width, length, batch, seed)
    except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
      outcome["error"] = e

  worker = threading.Thread(target=run, name=f"mixer-check-{cls.__name__}", daemon=True)
  worker.start()
  worker.join(timeout)
  if worker.is_alive():
    raise MixerError(
      f"mixer {cls.__name__}: the contract check did not finish within {timeout:g} s "
      "(does its __call__ return?)"
    )
  if "error" in outcome:
    raise outcome["error"]
  return outcome["result"]


def _check(cls, fields, width, length, batch, seed):
  module = build(cls, width, fields)
  name = cls.__name__
  x_BLD = jax.random.normal(jax.random.key(seed), (batch, length, width), jnp.float32)
  try:
    params = jax.jit(module.init)(jax.random.key(seed + 1), x_BLD)["params"]
    apply = jax.jit(lambda p, x: module.apply({"params": p}, x))
    out_BLD = apply(params, x_BLD)
  except MixerError:
    raise
  except Exception as e:
    raise MixerError(
      f"mixer {name}: fails on x of shape [B, L, D] = {x_BLD.shape}: {_one_line(e)}"
    ) from e
  if not hasattr(out_BLD, "shape") or tuple(out_BLD.shape) != x_BLD.shape:
    got = getattr(out_BLD, "shape", type(out_BLD).__name__)
    raise MixerError(
      f"mixer {name}: output shape {tuple(got)} != input shape {x_BLD.shape} [B, L, D]"
    )
  out_BLD = np.asarray(out_BLD)
  if not np.isfinite(out_BLD).all():
    raise MixerError(f"mixer {name}: output is not finite on a standard normal input")
  scale = 1.0 + float(np.abs(out_BLD).max())
  _check_causal(name, apply, params, x_BLD, out_BLD, scale, seed)
  decodes = accepts_decode(cls)
  if decodes:
    _check_decode(name, module, params, x_BLD, out_BLD, scale)
  count = sum(int(np.prod(np.shape(p))) for p in jax.tree.leaves(params))
  return {"decode": decodes, "params": count, "unnamed": unnamed_params(params)}


def _check_causal(name, apply, params, x_BLD, out_BLD, scale, seed):
  """Perturbs each position p in turn; outputs before p must not move."""
  batch, length, width = x_BLD.shape
  noise_BD = jax.random.normal(jax.random.key(seed + 2), (batch, width))
  perturbed_PBLD = jnp.stack([x_BLD.at[:, p].add(noise_BD) for p in range(length)])
  moved_PBLD = np.asarray(jax.vmap(apply, in_axes=(None, 0))(params, perturbed_PBLD))
  change_PL = np.abs(moved_PBLD - out_BLD[None]).max(axis=(1, 3))
  for p in range(length):
    before = change_PL[p, :p]
    if before.size and before.max() > TOLERANCE * scale:
      l = int(np.argmax(before))
      raise MixerError(
        f"mixer {name}: not causal: its output at position {l} changed (by {before.max():.3g}) "
        f"when only the input at the later position {p} changed"
      )


def _check_decode(name, module, params, x_BLD, out_BLD, scale):
  """A prompt of L/2 tokens, then one token at a time, through the 'cache' collection."""
  length = x_BLD.shape[1]
  try:
    shapes = jax.eval_shape(
      lambda x: module.init(jax.random.key(0), x, decode=True).get("cache", {}), x_BLD
    )
    cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    step = jax.jit(
      lambda p, c, x: module.apply({"params": p, "cache": c}, x, decode=True, mutable=["cache"])
    )
    prefill = length // 2
    outs = []
    out, variables = step(params, cache, x_BLD[:, :prefill])
    outs.append(out)
    for t in range(prefill, length):
      out, variables = step(params, variables["cache"], x_BLD[:, t : t + 1])
      outs.append(out)
    cached_BLD = np.asarray(jnp.concatenate(outs, axis=1))
  except Exception as e:
    raise MixerError(f"mixer {name}: decode=True fails: {_one_line(e)}") from e
  if cached_BLD.shape != out_BLD.shape:
    raise MixerError(
      f"mixer {name}: decode=True gives shape {cached_BLD.shape}, not {out_BLD.shape}"
    )
  diff_L = np.abs(cached_BLD - out_BLD).max(axis=(0, 2))
  wrong_L = ~(diff_L <= TOLERANCE * scale)  # NaN counts as wrong
  if wrong_L.any():
    l = int(np.argmax(wrong_L))  # the first position that disagrees
    raise MixerError(
      f"mixer {name}: decode=True disagrees with the full pass at position {l} "
      f"(by {diff_L[l]:.3g}): the cache does not hold what later tokens read"
    )


def _one_line(e):
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
