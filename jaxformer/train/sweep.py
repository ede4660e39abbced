"""`train(config, replicas)`: N replicas of one model config trained by one jitted program.

A sweep is the unit of evidence of the experiments: the same model and task trained at
several seeds, peak learning rates and weight decays. Every replica is exactly what
`loop.train` would do for that config with `seed`, `learning_rate` and `weight_decay`
replaced (same init, same data order, same schedule), but all N run in one program:

  state_N  = vmap(init)(keys_N, hyper_N)                    one compile for all N
  state_N' = vmap(train_step)(state_N, batch_NBL, hyper_N)  where active_N, else unchanged

Each replica reads its own data order (the loader's seed is the replica's seed) and carries
its own hyperparameters as arrays (`optimizer.make` takes traced values), so one
compilation serves every replica, and a second sweep whose shapes and static fields match
compiles nothing (`compile_seconds` is 0 then).

Stops: a replica whose validation accuracy reaches `config.early_stop_accuracy` stops
changing (early stop), one with a non-finite loss or gradient stops and is reported as
diverged (its numbers are kept, flagged, and excluded by selection); the program ends when
every replica has stopped or `total_steps` are done.

Splits: the task's held-out split is cut in two halves by index: `validation` (first half:
early stop and hyperparameter selection, at every evaluation) and `eval` (second half: what
a report states, measured at each replica's last evaluation, when its run ends).

With several devices in one process and at least as many replicas, the replica axis is laid
along a 1-D mesh of the devices that share them equally (`replica_devices`), so each device
trains its own replicas; on a CPU the count is first padded to a multiple of the devices with
replicas stopped from the start (`padded_count`: 5 confirmatory seeds on 2 cores train 3 and
3, one of them idle, instead of 5 on one core).

Inside the programs a replica's params and AdamW state are two flat vectors (FlatParams:
the decayed weights, the norms and biases), which keeps the compiled step small; the
params a SweepResult returns are the model's pytree again. The init program runs once, so
it compiles without LLVM's optimizations (RUN_ONCE); short CPU sweeps compile all three with
cheaper options (`compiler_options`). Each device runs the train and eval steps over its
replicas in groups, one vmapped group after another: one at a time on a CPU; on an
accelerator all of a device's replicas in one group where those programs fit half its
memory, else groups of 3 (`grouped`; a caller may name its own, `replica_chunk`). A
replica's step is a branch on its `active` flag: one at a time, a stopped replica's step is
skipped (a sweep whose fast replicas stopped early pays only for the others); in a vmapped
group it is a select, computed and discarded. An evaluation is a branch the same way: the
validation half runs the replicas still training, the eval half those whose run ends.
`programs(config, n, ...)` builds the programs and times each compile
(jaxformer/bench/sweep.py reports them).
"""

import dataclasses
import functools
import itertools
import json
import math
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxformer import data, ladder
from jaxformer.train import optimizer, program, step, sweep_store

REPLICA_AXIS = "replica"


@dataclasses.dataclass(frozen=True)
class Replica:
  """The hyperparameters of one replica; None keeps the config's value."""

  seed: int
  learning_rate: float | None = None
  weight_decay: float | None = None


def grid(seeds, learning_rates=(None,), weight_decays=(None,)):
  """Every combination, seed fastest: [Replica(seed, lr, wd), ...]."""
  return [
    Replica(int(s), lr, wd) for lr, wd, s in itertools.product(learning_rates, weight_decays, seeds)
  ]


@dataclasses.dataclass
class Run:
  """What one replica did. `evals` rows: (step, val_loss, val_acc, eval_loss, eval_acc); the
  eval half (eval_loss, eval_acc) is measured at the last row only, where the run ended
  (`final` reads it): None in the rows before."""

  seed: int
  learning_rate: float
  weight_decay: float
  losses: list  # train loss per step taken
  evals: list
  final_step: int  # steps it took (then it stopped changing)
  stop_reason: str  # completed | early_stop | diverged

  @property
  def finite(self):
    return self.stop_reason != "diverged"

  def final(self):
    """{val_loss, val_accuracy, eval_loss, eval_accuracy} at the last evaluation."""
    if not self.evals:
      return {k: math.nan for k in ("val_loss", "val_accuracy", "eval_loss", "eval_accuracy")}
    _, vl, va, el, ea = self.evals[-1]
    return {"val_loss": vl, "val_accuracy": va, "eval_loss": el, "eval_accuracy": ea}


@dataclasses.dataclass
class SweepResult:
  config: object  # the training config as run (model sized from the task)
  runs: list  # one Run per replica, in the order given
  params: object  # the trained params, every leaf stacked [N, ...] (host numpy)
  chance: float  # the task's chance accuracy (jaxformer.data.chance)
  chance_rule: str
  compile_seconds: float
  train_seconds: float
  steps: int  # the last program step (the longest replica's)
  read_back: bool = False  # read from a store (sweep_store), not trained by this call
  first_step: int = 0  # where its training began: 0, or the step of the Continuation it resumed
  # the replicas where a longer run would pass through them (a "wsd" schedule), else None
  continuation: "Continuation | None" = None

  def replica_params(self, i):
    return jax.tree.map(lambda x: x[i], self.params)


def check_replicas(replicas):
  """Raises ConfigError naming the first bad replica field."""
  if not replicas:
    raise ladder.ConfigError("replicas: at least one replica is needed")
  for i, r in enumerate(replicas):
    if not isinstance(r.seed, int) or not 0 <= r.seed < 2**32:
      raise ladder.ConfigError(f"replicas[{i}].seed={r.seed!r}: must be an integer in [0, 2**32)")
    if r.learning_rate is not None and not (
      isinstance(r.learning_rate, int | float) and math.isfinite(r.learning_rate)
    ):
      raise ladder.ConfigError(f"replicas[{i}].learning_rate={r.learning_rate!r}: not finite")
    if r.learning_rate is not None and r.learning_rate <= 0:
      raise ladder.ConfigError(f"replicas[{i}].learning_rate={r.learning_rate!r}: must be > 0")
    if r.weight_decay is not None and not (
      isinstance(r.weight_decay, int | float)
      and math.isfinite(r.weight_decay)
      and r.weight_decay >= 0
    ):
      raise ladder.ConfigError(f"replicas[{i}].weight_decay={r.weight_decay!r}: must be >= 0")


def _hyper(config, replica):
  """(learning_rate, weight_decay) of a replica, the config's where it says None."""
  lr = config.learning_rate if replica.learning_rate is None else replica.learning_rate
  wd = config.weight_decay if replica.weight_decay is None else replica.weight_decay
  return float(lr), float(wd)


class FlatParams:
  """One replica's params as two flat float32 vectors: `decayed` (every weight decay
  applies to, jaxformer.train.optimizer.decay_mask) and `bias` (norms and biases).

  The optimizer then updates two arrays instead of one per parameter, so the compiled step
  holds a few large elementwise fusions where it held a few per leaf (AdamW, clipping, the
  finite and active selects): a smaller program to compile. Each element goes through the
  same arithmetic as in the pytree (AdamW is elementwise); only the global gradient norm
  sums in another order. The model reads the pytree back through `unflatten` (static
  slices), whose gradient concatenates the leaves' gradients.
  """

  def __init__(self, template):
    leaves, self.treedef = jax.tree.flatten(template)
    dtypes = {jnp.dtype(x.dtype) for x in leaves}
    if dtypes != {jnp.dtype(jnp.float32)}:
      raise ValueError(f"sweep: params must all be float32, got {sorted(map(str, dtypes))}")
    self.shapes = [tuple(x.shape) for x in leaves]
    # group names as decay_mask reads them: `bias` is one of its no-decay names
    decays = jax.tree.leaves(optimizer.decay_mask(template))
    self.index = {
      "decayed": [i for i, d in enumerate(decays) if d],
      "bias": [i for i, d in enumerate(decays) if not d],
    }
    self.index = {g: idx for g, idx in self.index.items() if idx}
    # the optimizer must see the groups as it would see their leaves
    assert optimizer.decay_mask({g: 0.0 for g in self.index}) == {
      g: g == "decayed" for g in self.index
    }
    self.unflatten = jax.custom_vjp(lambda flat: self._unflatten(flat))
    self.unflatten.defvjp(lambda flat: (self._unflatten(flat), None), self._flatten_vjp)

  def flatten(self, params):
    leaves = jax.tree.leaves(params)
    return {
      g: jnp.concatenate([jnp.ravel(leaves[i]) for i in idx]) for g, idx in self.index.items()
    }

  def _flatten_vjp(self, _, cotangent):
    return (self.flatten(cotangent),)

  def _unflatten(self, flat, lead=()):
    leaves = [None] * len(self.shapes)
    for g, idx in self.index.items():
      offset = 0
      for i in idx:
        size = math.prod(self.shapes[i])
        leaves[i] = flat[g][..., offset : offset + size].reshape((*lead, *self.shapes[i]))
        offset += size
    return jax.tree.unflatten(self.treedef, leaves)

  def unflatten_stacked(self, flat):
    """The pytree of host arrays [N, ...] from groups [N, size] (numpy, no tracing)."""
    n = next(iter(flat.values())).shape[0]
    return self._unflatten(flat, lead=(n,))


@dataclasses.dataclass(frozen=True)
class _FlatModel:
  """`model` applied to FlatParams groups (what jaxformer.train.step calls)."""

  model: object
  flat: FlatParams

  def apply(self, variables, *args, **kwargs):
    params = self.flat.unflatten(variables["params"])
    return self.model.apply({"params": params}, *args, **kwargs)


def _replica_step(state, batch, hyper, active, *, config, model):
  """One step of one replica; an inactive replica (stopped, diverged) keeps its state, and a
  non-finite step makes it inactive from then on. The step is a lax.cond on `active`: run
  one replica at a time (a CPU's lax.map) a stopped replica costs nothing, while under vmap
  (an accelerator's groups) the cond is a select of both branches, as before. The loss of a
  replica that did not run is 0 (the caller records only the replicas that ran)."""
  tx = optimizer.make(config, hyper["learning_rate"], hyper["weight_decay"])

  def ran(state):
    new, metrics = step.train_step(state, batch, model=model, tx=tx)
    return new, metrics["loss"], metrics["finite"]

  def kept(state):
    return state, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.bool_)

  new, loss, finite = jax.lax.cond(active, ran, kept, state)
  return new, loss, active & finite


def _replica_init(rng, hyper, *, config, model, batch_shape):
  """step.init_state's params (same draws), flattened, with the optimizer state of the groups."""
  tx = optimizer.make(config, hyper["learning_rate"], hyper["weight_decay"])
  state = nn.meta.unbox(step.init_state(model.model, optax.identity(), rng, batch_shape))
  state["params"] = model.flat.flatten(state["params"])
  state["opt_state"] = tx.init(state["params"])
  return state


def _sums(params, batch, needed, *, model):
  """One replica's masked sums over the batch, or zeros where `needed` is False (a replica
  whose run has ended, or one whose eval-half reading is not taken): a lax.cond, so one
  replica at a time (a CPU's lax.map) such a replica costs nothing; under vmap both branches
  run and the zeros are selected."""
  sums = functools.partial(step.eval_step, model=model)
  skipped = lambda params, batch: jax.tree.map(  # noqa: E731
    jnp.zeros_like, jax.eval_shape(sums, params, batch)
  )
  return jax.lax.cond(needed, sums, skipped, params, batch)


# XLA options of the program that runs once per sweep (init): LLVM's optimizations cost more
# compile time than they could save in one run.
RUN_ONCE = {"xla_backend_optimization_level": 0}
# On a CPU, also as one LLVM module instead of XLA's parallel codegen splits: the init programs
# of the bench's three quick arms compiled in 0.31 / 1.54 / 1.37 s against 0.45 / 1.74 / 1.78 s
# (medians of 3, CPU s; the same arrays), where the train and eval steps gained nothing beyond
# the noise (BENCHMARKS.md, "Where a quick arm's compile goes")
RUN_ONCE_CPU = RUN_ONCE | {"xla_cpu_parallel_codegen_split_count": 1}


def run_once(platform):
  """The XLA options of a program that runs once (an init) compiled for `platform`."""
  return RUN_ONCE_CPU if platform == "cpu" else RUN_ONCE


# On a CPU, a short sweep's train and eval steps compile with fewer LLVM passes and XLA's
# elemental fusion emitters instead of the MLIR ones, and its init without the MLIR ones too:
# at the quick sizes (jaxformer/bench/sweep.py, 3 replicas, CPU seconds) compiling the three
# programs takes 3.6 / 7.4 / 7.6 s by default (lstm / transformer / text LM) and 1.9 / 4.3 /
# 3.6 s so, while a train step costs up to ~8% more (BENCHMARKS.md). That pays below about
# 1,000 steps of a quick arm, and wherever a sweep's training is short next to its compile:
# a config's `fast_compile` says so (the experiments' tiny and quick sizes set it).
FAST_COMPILE = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False}
FAST_COMPILE_STEPS = 1000


# init_params' compiled programs by (model, batch shape, number of keys, platform)
_INITS = {}


def init_params(model, keys, batch_shape):
  """[model.init(key, zeros(batch_shape))["params"] for key in keys], unboxed: the draws of
  each key exactly as one init would make them, in one program compiled as a sweep's init
  is (RUN_ONCE: seconds less than XLA's defaults) and kept for the next call with the same
  model, shape and number of keys. What the analyses' untrained networks start from: pass
  jax.random.split(jax.random.key(seed))[0] for a sweep replica's own initial params (the
  params_rng of step.init_state)."""
  keys = jnp.stack(list(keys))
  platform = jax.default_backend()
  cache_key = (model, tuple(batch_shape), len(keys), platform)
  compiled = _INITS.get(cache_key)
  if compiled is None:
    tokens = jnp.zeros(tuple(batch_shape), jnp.int32)
    one = lambda key: nn.meta.unbox(model.init(key, tokens))["params"]  # noqa: E731
    compiled = jax.jit(jax.vmap(one)).lower(keys).compile(compiler_options=run_once(platform))
    compiled = program.remember(_INITS, cache_key, compiled, _MAX_COMPILED)
  stacked = jax.device_get(compiled(keys))
  return [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(len(keys))]


def compiler_options(config, platform):
  """{program: XLA options or None} of a sweep of `config` compiled for `platform`: on a CPU
  FAST_COMPILE where config.fast_compile says so, or (None) for at most FAST_COMPILE_STEPS."""
  fast = config.get("fast_compile")
  fast = config.total_steps <= FAST_COMPILE_STEPS if fast is None else fast
  if not (platform == "cpu" and fast):
    return {"init": run_once(platform), "train_step": None, "eval_step": None}
  return {
    "init": run_once(platform) | {"xla_cpu_use_fusion_emitters": False},
    "train_step": FAST_COMPILE,
    "eval_step": FAST_COMPILE,
  }


# Compiled programs by program.cache_key: rung, model, static training fields, replicas, batch
# shapes.
_COMPILED = {}
_MAX_COMPILED = 16
_STATIC_FIELDS = (
  "end_learning_rate_factor",
  "warmup_steps",
  "total_steps",
  "adam_b1",
  "adam_b2",
  "grad_clip_norm",
  "grad_accum_steps",
)


def replica_devices(n, devices):
  """The devices n replicas are laid over. At least as many replicas as devices: the first d
  of them, d the largest number that divides n (an equal share each: 28 replicas on 8 GPUs
  use 7, 4 each; before, 28 % 8 != 0 put all 28 on one GPU); the first alone when only d = 1
  does. Fewer replicas than devices: the first device alone (a small sweep; spreading 3
  replicas over 8 simulated CPU devices doubled the tests' sweep time)."""
  if n < len(devices):
    return list(devices[:1])
  count = max(d for d in range(1, len(devices) + 1) if n % d == 0)
  return list(devices[:count])


def padded_count(n, devices, platform):
  """How many replicas a sweep of n trains on `devices` of `platform`: on a CPU with several
  devices, n rounded up to a multiple of their count when n is at least that count (13 on 2
  devices train as 14, 7 each, instead of 13 on one), the added replicas stopped from the
  first step, so their steps are branches not taken (`_replica_step`); n otherwise (an
  accelerator's vmapped groups would compute them)."""
  d = len(devices)
  if platform != "cpu" or d < 2 or n < d or n % d == 0:
    return n
  return -(-n // d) * d


def _placement(n):
  """(replica sharding or None): a 1-D mesh over replica_devices(n, this process's devices),
  or None for one device."""
  devices = replica_devices(n, jax.local_devices())
  if len(devices) > 1:
    mesh = jax.sharding.Mesh(np.asarray(devices), (REPLICA_AXIS,))
    return NamedSharding(mesh, P(REPLICA_AXIS))
  return None


@dataclasses.dataclass(frozen=True)
class Programs:
  """The compiled programs of one sweep shape, and the seconds each took to compile."""

  init: object  # (keys_N, hyper_N) -> state_N
  train: object  # (state_N, batch_NBL, hyper_N, active_N) -> (state_N, loss_N, active_N)
  evaluate: object  # (params_N, batch_BL, needed_N) -> sums_N (zeros where not needed)
  sharding: object  # the replica axis' NamedSharding, or None (one device)
  state: object  # the state's ShapeDtypeStructs, leaves [N, ...] (params: FlatParams groups)
  flat: object  # FlatParams: the groups <-> the model's params
  step_fn: object  # the train step over N replicas before jit (for its jaxpr)
  seconds: dict  # {"init", "train", "eval"}: compile seconds (trace + lower + compile)
  cpu_seconds: dict  # the same in process CPU seconds (all threads)
  chunk: object = None  # replicas per vmapped group: a count, or ALL (one group a device)


# Replicas per vmapped group of the train and eval steps on an accelerator whose one group
# does not fit (`grouped`). The groups bound memory there: the eval sums of 28 replicas in one
# vmap were the largest program of 9 of the 11 training experiments' accel sizes
# (BENCHMARKS.md, compiled for 8 x H100 and v5e:2x4).
REPLICA_CHUNK = 3
# On a CPU one replica at a time (a loop over unbatched steps) costs least: a vmap's batched
# products and the moved batch axes cost more than they share. Quick arms, 4 replicas, 300
# steps, CPU s (BENCHMARKS.md): transformer 26.8 at 1 against 35.2 in groups of 3 (3 + 1),
# text LM 20-22 against 28, lstm 7-8 against 9; at 12 replicas (groups 3 + 3 + 3 + 3) the
# text LM 56 against 59. One replica's program is also the smallest to compile.
CPU_REPLICA_CHUNK = 1


ALL = "all"  # a chunk: every replica of a device in one vmapped group
# On an accelerator a device's replicas run in one vmapped group when its train and eval
# programs compiled so each fit GROUP_MEMORY_FRACTION of the device's memory, else in groups
# of REPLICA_CHUNK. On one H200 the quick arms' 24 replicas in one group cost 0.30-0.32 per
# replica-step of 3 in one, against 1.00-1.04 in groups of 3 (BENCHMARKS.md, GPU).
GROUP_MEMORY_FRACTION = 0.5


def peak_bytes(memory):
  """The device bytes a compiled program holds at its peak, from its memory analysis
  (`compiled.memory_analysis()`): arguments + outputs - aliased + temporaries + code."""
  return (
    memory.argument_size_in_bytes
    + memory.output_size_in_bytes
    - memory.alias_size_in_bytes
    + memory.temp_size_in_bytes
    + memory.generated_code_size_in_bytes
  )


def grouped(compile_group, fits, platform, chunk=None):
  """(the chunk, compile_group(chunk)): `chunk` when given, a CPU's one at a time; on an
  accelerator one group (ALL) when compile_group(ALL) compiled (None: it ran out of memory)
  and `fits` what it returned, else REPLICA_CHUNK (a second compile)."""
  if chunk is not None or platform == "cpu":
    return (chunk or CPU_REPLICA_CHUNK), compile_group(chunk)
  out = compile_group(ALL)
  if out is not None and fits(out):
    return ALL, out
  return REPLICA_CHUNK, compile_group(REPLICA_CHUNK)


def device_memory_bytes(device):
  """The bytes a device's allocator may hold (`memory_stats()['bytes_limit']`), or None
  where it does not say (a CPU)."""
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  return (stats or {}).get("bytes_limit")


def replica_chunk(platform, chunk=None):
  """Replicas per vmapped group of the train and eval steps on `platform` (None: all of a
  device's replicas in one vmap); `chunk` overrides the platform's: a positive count, or ALL."""
  if chunk is None:
    return CPU_REPLICA_CHUNK if platform == "cpu" else REPLICA_CHUNK
  if chunk == ALL:
    return None
  if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
    raise ValueError(f"chunk={chunk!r}: expected a positive replica count or {ALL!r}")
  return chunk


def _over_replicas(fn, sharded, shared=(), chunk=REPLICA_CHUNK):
  """fn (one replica's arguments) over the leading replica axis of every argument but those
  at positions `shared` (the same for all). A device runs its replicas in groups of
  `chunk`, one vmapped group after another (lax.map's batch_size; the remainder is one
  more group), so a step's working set is that of a few replicas. With a replica sharding
  each device does this over its own replicas (shard_map: no replica crosses devices)."""

  def local(*args):
    own = [a for i, a in enumerate(args) if i not in shared]
    if chunk is None or jax.tree.leaves(own)[0].shape[0] <= chunk:
      axes = tuple(None if i in shared else 0 for i in range(len(args)))
      return jax.vmap(fn, in_axes=axes)(*args)

    def one(xs):
      it = iter(xs)
      return fn(*(args[i] if i in shared else next(it) for i in range(len(args))))

    # groups of 1: a plain loop over unbatched replicas, so a branch on one replica's value
    # (the train step's lax.cond on `active`) stays a branch instead of a select
    return jax.lax.map(one, own, batch_size=None if chunk == 1 else chunk)

  if sharded is None:
    return local

  def placed(*args):
    specs = tuple(P() if i in shared else P(REPLICA_AXIS) for i in range(len(args)))
    # check_vma=False: a replica's body has no collectives, and a recurrent model's scan starts
    # from a carry that does not vary over the replica axis (its zeros), which the check would
    # refuse ("carry input and carry output must have equal types")
    mapped = jax.shard_map(
      local, mesh=sharded.mesh, in_specs=specs, out_specs=P(REPLICA_AXIS), check_vma=False
    )
    return mapped(*args)

  return placed


def jitted(
  config, n, batch_shape, eval_batch, placed=None, shared=None, platform="cpu", chunk=None
):
  """The three programs of an n-replica sweep, jitted, not compiled: (model, the train step
  before jit, {name: (jitted, abstract args, XLA options)} for "init", "train_step" and
  "eval_step"). `placed`: the sharding of the replica-leading arrays (None: the default
  device; a NamedSharding over REPLICA_AXIS lays the replicas along its mesh); `shared`: that
  of the eval batch, which every replica reads; `platform`: what they compile for (the XLA
  options: `compiler_options`); `chunk`: replicas per vmapped group (`replica_chunk`: None is
  the platform's). `programs` compiles them here, jaxformer.train.compile_only for a target."""
  module = ladder.build(config.rung, config.model)
  template = jax.eval_shape(
    lambda: nn.meta.unbox(module.init(jax.random.key(0), jnp.zeros(batch_shape, jnp.int32)))
  )["params"]
  model = _FlatModel(module, FlatParams(template))
  along = placed if isinstance(placed, NamedSharding) else None  # replicas over a mesh
  rep = lambda x: jax.ShapeDtypeStruct((n, *x.shape), x.dtype, sharding=placed)  # noqa: E731
  scalar = jax.ShapeDtypeStruct((), jnp.float32)
  hyper = {k: rep(scalar) for k in ("learning_rate", "weight_decay")}
  keys = rep(jax.eval_shape(lambda: jax.random.key(0)))
  out = {} if placed is None else {"out_shardings": placed}
  init = jax.jit(
    jax.vmap(functools.partial(_replica_init, config=config, model=model, batch_shape=batch_shape)),
    **out,
  )
  state = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=placed),
    jax.eval_shape(init, keys, hyper),
  )
  token = rep(jax.ShapeDtypeStruct(batch_shape, jnp.int32))
  batch = {"inputs": token, "targets": token, "mask": token}
  active = rep(jax.ShapeDtypeStruct((), jnp.bool_))
  chunk = replica_chunk(platform, chunk)
  step_fn = _over_replicas(
    functools.partial(_replica_step, config=config, model=model), along, chunk=chunk
  )
  train = jax.jit(step_fn, donate_argnums=0, **out)
  ev_token = jax.ShapeDtypeStruct(eval_batch, jnp.int32, sharding=shared)
  ev_batch = {"inputs": ev_token, "targets": ev_token, "mask": ev_token}
  sums = _over_replicas(functools.partial(_sums, model=model), along, shared=(1,), chunk=chunk)
  evaluate = jax.jit(sums)
  options = compiler_options(config, platform)
  return (
    model,
    step_fn,
    {
      "init": (init, (keys, hyper), options["init"]),
      "train_step": (train, (state, batch, hyper, active), options["train_step"]),
      "eval_step": (evaluate, (state["params"], ev_batch, active), options["eval_step"]),
    },
  )


def programs(config, n, batch_shape, eval_batch, chunk=None):
  """(Programs compiled for n replicas, seconds this call compiled: 0 when cached); `chunk`:
  replicas per vmapped group (`replica_chunk`; None: the platform's, on an accelerator one
  group where it fits the device, `grouped`). A fallback's first compile counts in the
  seconds."""
  key = program.cache_key(config, _STATIC_FIELDS, n, batch_shape, eval_batch, chunk)
  if key in _COMPILED:
    return _COMPILED[key], 0.0
  seconds, cpu_seconds = {}, {}
  clock, cpu_clock = time.perf_counter(), time.process_time()
  sharded = _placement(n)
  platform = jax.default_backend()

  def compile_group(group):
    nonlocal clock, cpu_clock
    model, step_fn, built = jitted(
      config, n, batch_shape, eval_batch, sharded, platform=platform, chunk=group
    )
    compiled = {}
    for name, (fn, args, options) in built.items():
      try:
        compiled[name] = fn.lower(*args).compile(compiler_options=options)
      except Exception as e:  # one group too large for the device: groups of REPLICA_CHUNK
        if group == ALL and chunk is None and "RESOURCE_EXHAUSTED" in str(e):
          return None
        raise
      part = {"train_step": "train", "eval_step": "eval"}.get(name, name)
      wall, cpu = time.perf_counter() - clock, time.process_time() - cpu_clock
      seconds[part], cpu_seconds[part] = (
        seconds.get(part, 0.0) + wall,
        cpu_seconds.get(part, 0.0) + cpu,
      )
      clock, cpu_clock = time.perf_counter(), time.process_time()
    return model, step_fn, built, compiled

  def fits(out):  # asked on an accelerator only
    device = sharded.mesh.devices.flat[0] if sharded is not None else jax.local_devices()[0]
    limit = device_memory_bytes(device)
    return limit is not None and all(
      peak_bytes(c.memory_analysis()) <= GROUP_MEMORY_FRACTION * limit for c in out[3].values()
    )

  group, (model, step_fn, built, compiled) = grouped(compile_group, fits, platform, chunk)
  result = Programs(
    compiled["init"],
    compiled["train_step"],
    compiled["eval_step"],
    sharded,
    built["train_step"][1][0],
    model.flat,
    step_fn,
    seconds,
    cpu_seconds,
    group,
  )
  return program.remember(_COMPILED, key, result, _MAX_COMPILED), sum(seconds.values())


def clear_compiled():
  """Forgets every compiled sweep program of this process, init_params' too (the next sweep
  compiles again)."""
  _COMPILED.clear()
  _INITS.clear()


@functools.lru_cache(maxsize=64)
def validation_targets(task, data_dir=None):
  """How many target positions (mask 1) the validation half of `task`'s held-out split holds:
  what one validation accuracy counts (selection, early stop, the plateau reading). A
  validation accuracy near p then has a standard error of sqrt(p (1 - p) / targets)."""
  test_ds = data.in_memory(data.get_dataset(task, "test", data_dir), max_bytes=math.inf)
  (lo, hi), _ = _halves(len(test_ds))
  return int(np.count_nonzero(test_ds.source.arrays["mask"][lo:hi]))


def _halves(n):
  """The (start, stop) of the held-out split's validation and eval halves, by index."""
  return (0, n // 2), (n // 2, n)


def _held_out(dataset, batch_size):
  """The held-out split in memory, cut in halves (validation, eval), each a list of batches
  padded to batch_size with mask 0 (static shapes: one eval program)."""
  n = len(dataset)
  if n < 2:
    raise data.DataError(f"{dataset.spec}: the held-out split needs >= 2 examples, has {n}")
  # every record is read whatever its size (no max_bytes), held once per process
  held = data.in_memory(dataset, max_bytes=math.inf).source.arrays
  arrays = {k: v.astype(np.int32) for k, v in held.items()}
  halves = []
  for lo, hi in _halves(n):
    batches = []
    for start in range(lo, hi, batch_size):
      stop = min(start + batch_size, hi)
      batch = {k: np.zeros((batch_size, v.shape[1]), np.int32) for k, v in arrays.items()}
      for k, v in arrays.items():
        batch[k][: stop - start] = v[start:stop]
      batches.append(batch)
    halves.append(batches)
  return halves


def _evaluate(evaluate, params, batches, needed):
  """(loss, accuracy) per replica over the batches: numpy [N] each; a replica not `needed`
  (a device array [N] of bools) is skipped and reads 0."""
  totals = None
  for batch in batches:
    sums = evaluate(params, batch, needed)
    totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
  totals = jax.tree.map(np.asarray, totals)
  weight = np.maximum(totals["weight_sum"], 1.0)
  return totals["loss_sum"] / weight, totals["correct_sum"] / weight


@dataclasses.dataclass
class Continuation:
  """Every replica of a sweep at train step `step`, where its run is the same as the first
  steps of any longer run of the same config (optimizer.continues_until: a "wsd" schedule's
  stable part ends there). `train(longer, replicas, resume=c)` continues from here, and its
  result equals that of training `longer` from step 0: only the steps after `step` run.

  `rows`: Replica -> its state (the leaves of the program's state, host arrays), losses,
  evals, stop reason and flags at `step`. `basis`: the resolved config as canonical JSON,
  total_steps removed (what a longer run must match). A store keeps it with its sweep
  (jaxformer/train/sweep_store.py), so a resumed run continues too."""

  step: int
  rows: dict
  basis: str

  def covers(self, config, replicas):
    """Why `train(config, replicas, resume=self)` cannot continue, or None when it can."""
    if _basis(config) != self.basis:
      return "its config differs in more than total_steps"
    if optimizer.continues_until(config) < self.step:
      return f"total_steps={config.total_steps} is not longer than the run it continues"
    missing = [r for r in replicas if r not in self.rows]
    if missing:
      return f"no state for {len(missing)} replicas (the first: {missing[0]})"
    return None

  def only(self, replicas):
    """This continuation of `replicas` alone, or None when it lacks one of them."""
    if any(r not in self.rows for r in replicas):
      return None
    return Continuation(self.step, {r: self.rows[r] for r in replicas}, self.basis)

  @staticmethod
  def stored(fields):
    """The Continuation of a sweep store's fields (sweep_store.load, load_partial)."""
    rows = {Replica(*replica): row for replica, row in fields["rows"]}
    return Continuation(fields["step"], rows, fields["basis"])

  @staticmethod
  def merge(parts):
    """One Continuation of the replicas of several (sweeps of one config at one step)."""
    parts = [p for p in parts if p is not None]
    if not parts or any(p.step != parts[0].step or p.basis != parts[0].basis for p in parts):
      return None
    return Continuation(
      parts[0].step, {k: v for p in parts for k, v in p.rows.items()}, parts[0].basis
    )


def _basis(config):
  values = json.loads(config.to_json_best_effort(sort_keys=True))
  values.pop("total_steps")
  return json.dumps(values, sort_keys=True)


def train(config, replicas, *, log=None, keep_params=True, store=None, resume=None):
  """Trains every replica of `config` in one program; returns a SweepResult.

  `config` is a training config (jaxformer/train/config.py); each Replica replaces its seed,
  learning rate and weight decay. `log(text)` receives progress lines (None: quiet).
  `store`: a directory of finished sweeps (jaxformer/train/sweep_store.py): a sweep with the
  same key there is read back instead of trained, and a finished one is written there.
  `resume`: a Continuation of a shorter run of the same config (a "wsd" schedule) holding
  every replica: only the steps after it run, and the result is the same.
  Raises ConfigError / DataError naming the field for a config that cannot run.
  """
  program.check_config(config)
  check_replicas(replicas)
  if jax.process_count() > 1:
    raise ladder.ConfigError("sweep: replicas train in one process; process_count must be 1")
  log = log or (lambda text: None)
  # in memory (once per process): a step's batches are then an index each, not a decode of
  # every record by grain's reader threads, which took about a quarter of a quick arm's time
  train_ds, test_ds = (
    data.in_memory(data.get_dataset(config.task, split, config.data_dir))
    for split in ("train", "test")
  )
  config = program.resolve(config, train_ds)  # model.vocab_size / max_len from the task
  if resume is not None:
    why = resume.covers(config, replicas)
    if why:
      raise ladder.ConfigError(f"resume: cannot continue this sweep: {why}")
  entry = sweep_store.key(config, replicas, (train_ds, test_ds), keep_params) if store else None
  stored = sweep_store.load(store, entry) if entry else None
  if stored is not None:
    log(f"read back from {os.path.join(store, entry)} (trained before with the same inputs)")
    runs = [Run(**r) for r in stored.pop("runs")]
    kept = stored.pop("continuation")
    if kept is not None:
      kept = Continuation.stored(kept)
    return SweepResult(config=config, runs=runs, read_back=True, continuation=kept, **stored)
  if resume is not None:
    log(f"continues from step {resume.step} (the same steps as a run of {config.total_steps})")
  checkpoint, before = None, {}
  if entry:
    partial = sweep_store.load_partial(store, entry)
    if partial is not None:  # this sweep's own checkpoint: the same run, later
      (kept, before), where = partial, os.path.join(store, entry + sweep_store.PARTIAL)
      resume = Continuation.stored(kept)
      log(f"resumes at step {resume.step} from its checkpoint {where}")

    def checkpoint(continuation, fields):
      why = sweep_store.save_partial(store, entry, continuation, fields)
      if why:
        log(f"checkpoint at step {continuation.step} not written ({why})")

  result = _train(config, replicas, train_ds, test_ds, log, keep_params, resume, checkpoint,
                  before)  # fmt: skip
  if entry:
    why = sweep_store.save(store, entry, result)
    if why:
      log(f"not stored in {store} ({why}): a resumed run trains this sweep again")
    else:
      sweep_store.drop_partial(store, entry)
  return result


# Seconds of training between a stored sweep's checkpoints (sweep_store.save_partial): a run
# stopped or crashed part-way loses at most this much of it
CHECKPOINT_SECONDS = 600.0


def _train(config, replicas, train_ds, test_ds, log, keep_params, resume=None, checkpoint=None,
           before=None):  # fmt: skip
  """sweep.train's training, on the resolved config and the in-memory splits. `checkpoint
  (continuation, fields)`: called every CHECKPOINT_SECONDS at an evaluation while replicas
  train (never once a longer run's continuation is taken: it would be lost); `before`: the
  fields of the checkpoint `resume` is (its first step, its training seconds before it)."""
  before = before or {}
  chance, chance_rule = data.chance(train_ds)
  real = len(replicas)  # the rest, copies of the last, never train (padded_count)
  replicas = [*replicas] + [replicas[-1]] * (
    padded_count(real, jax.local_devices(), jax.default_backend()) - real
  )
  n, B, L = len(replicas), config.batch_size, train_ds.seq_len
  validation, evaluation = _held_out(test_ds, B)

  compiled, compile_seconds = programs(config, n, (B, L), (B, L))
  init, train_step, evaluate, sharded = (
    compiled.init,
    compiled.train,
    compiled.evaluate,
    compiled.sharding,
  )
  put = (lambda x: jax.device_put(x, sharded)) if sharded is not None else jnp.asarray
  lrs, wds = zip(*(_hyper(config, r) for r in replicas), strict=True)
  hyper = {
    "learning_rate": put(np.asarray(lrs, np.float32)),
    "weight_decay": put(np.asarray(wds, np.float32)),
  }

  seeds = sorted({r.seed for r in replicas})
  loaders = {s: data.Loader(train_ds, B, seed=s, shard_index=0, shard_count=1) for s in seeds}
  row = [seeds.index(r.seed) for r in replicas]
  active = np.arange(n) < real  # host copy, exact at each host read
  stop_reason = ["completed"] * n
  losses = [[] for _ in range(n)]
  evals = [[] for _ in range(n)]
  s = 0
  if resume is None:
    keys = put(jax.vmap(jax.random.key)(jnp.asarray([r.seed for r in replicas], jnp.uint32)))
    state = init(keys, hyper)
    running = active.copy()
  else:  # every replica as it was at resume.step; the padding copies the last, stopped
    rows = [resume.rows[r] for r in replicas]
    treedef = init.out_tree
    if any(len(r["state"]) != treedef.num_leaves for r in rows):
      raise ladder.ConfigError("resume: its state does not fit this sweep's program")
    leaves = [put(np.stack([r["state"][j] for r in rows])) for j in range(treedef.num_leaves)]
    state = jax.tree.unflatten(treedef, leaves)
    running = np.asarray([r["running"] for r in rows]) & (np.arange(n) < real)
    for i, r in enumerate(rows[:real]):
      active[i], stop_reason[i] = r["active"], r["stop_reason"]
      losses[i], evals[i] = list(r["losses"]), list(r["evals"])
    s = resume.step
    for loader in loaders.values():
      loader.set_state(loader.get_state() | {"step": s})
  active_dev = put(running)
  # a longer run's step `until` is no final step: it evaluates only on the eval_every grid
  until = optimizer.continues_until(config)
  until = until if until < config.total_steps else 0
  continuation = None
  pending = []  # device metrics of the steps since the last host read
  target = config.early_stop_accuracy

  def flush():
    """The pending steps' losses onto each replica's list."""
    for loss_N, ran_N in jax.device_get(pending):
      for i in np.flatnonzero(ran_N):
        losses[i].append(float(loss_N[i]))
    pending.clear()

  def capture():
    flush()
    leaves = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(state))]
    flags = np.asarray(jax.device_get(active_dev))
    rows = {}
    for i, r in enumerate(replicas[:real]):
      rows[r] = {
        "state": [x[i] for x in leaves],
        "losses": list(losses[i]),
        "evals": list(evals[i]),
        "active": bool(active[i]),
        "running": bool(flags[i]),
        "stop_reason": stop_reason[i],
      }
    return Continuation(s, rows, _basis(config))

  start = last_checkpoint = time.perf_counter()
  earlier = before.get("train_seconds", 0.0)  # a checkpoint's training before this process
  while s < config.total_steps and active.any():
    batches = [next(loaders[seed]) for seed in seeds]
    batch = {k: put(np.stack([batches[i][k] for i in row])) for k in batches[0]}
    state, loss, still = train_step(state, batch, hyper, active_dev)
    pending.append((loss, active_dev))
    active_dev = still
    s += 1
    if s % config.eval_every == 0 or s == config.total_steps:
      # --- host read: losses, divergence -----------------------------------------------------
      was_active = active.copy()
      flush()
      diverged = was_active & ~np.asarray(jax.device_get(active_dev))
      for i in np.flatnonzero(diverged):
        active[i], stop_reason[i] = False, "diverged"
      # --- eval --------------------------------------------------------------------------------
      val = _evaluate(evaluate, state["params"], validation, put(was_active))
      stops = active & (val[1] >= target) if target is not None else np.zeros(n, bool)
      # the eval half is read at a replica's last evaluation only (Run.final): it runs when
      # some replica's run ends here, and the other rows hold None for it
      ends = was_active & (diverged | stops | (s == config.total_steps))
      ev = _evaluate(evaluate, state["params"], evaluation, put(ends)) if ends.any() else None
      for i in np.flatnonzero(was_active):
        el, ea = (float(ev[0][i]), float(ev[1][i])) if ends[i] else (None, None)
        evals[i].append((s, float(val[0][i]), float(val[1][i]), el, ea))
        if stops[i]:
          active[i], stop_reason[i] = False, "early_stop"
      active_dev = put(active)
      best = float(np.nanmax(val[1][was_active])) if was_active.any() else math.nan
      log(
        f"step {s}/{config.total_steps}: {int(active.sum())}/{real} replicas training, "
        f"best validation accuracy {best:.3f}"
      )
      now = time.perf_counter()
      if (
        checkpoint
        and continuation is None
        and active.any()
        and s < config.total_steps
        and (now - last_checkpoint >= CHECKPOINT_SECONDS)
      ):
        first = before.get("first_step", 0 if resume is None else resume.step)
        checkpoint(capture(), {"first_step": first, "train_seconds": earlier + now - start})
        last_checkpoint = now
    if s == until:
      continuation = capture()
  if continuation is None and s < until:  # every replica stopped before `until`: so would a
    continuation = capture()  # longer run's, at the same step
  jax.block_until_ready(state)
  train_seconds = earlier + time.perf_counter() - start

  runs = [
    Run(r.seed, lrs[i], wds[i], losses[i], evals[i], len(losses[i]), stop_reason[i])
    for i, r in enumerate(replicas[:real])
  ]
  params = None
  if keep_params:
    flat = {k: v[:real] for k, v in jax.device_get(state["params"]).items()}
    params = compiled.flat.unflatten_stacked(flat)
  return SweepResult(
    config=config,
    runs=runs,
    params=params,
    chance=chance,
    chance_rule=chance_rule,
    compile_seconds=compile_seconds,
    train_seconds=train_seconds,
    steps=s,
    first_step=before.get("first_step", 0 if resume is None else resume.step),
    continuation=continuation,
  )
