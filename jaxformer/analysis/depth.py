"""Sequential depth of a real program: how many operations must run one after another.

Step 2's pressure (recurrence serializes training) is a property of the program a model
compiles to, so it is measured on that program's jaxpr (lowering only, nothing runs):

  depth   the longest chain of dependent operations from the program's inputs to its
          outputs. Every primitive counts one step; a sequential loop (`scan`, a `while`
          or `fori_loop`, a `lax.map`) runs its body once per trip, so it counts
          trips x (its body's depth) and its outputs wait for all of it; a `cond` counts
          its deepest branch; a nested `jit`, `remat` or custom-derivative call is walked
          inside, as XLA inlines it.
  loops   every sequential loop with its trip count (nested loops multiply).
  flops   multiply-adds x 2 of every `dot_general` plus one per output element of every
          other primitive, loops multiplied by their trips: the work the depth spreads.

  d = depth.measure(fn, *abstract_args)       # jax.ShapeDtypeStruct args: nothing runs
  d.depth, d.flops, d.parallelism, d.loops

A `while` whose trip count is a traced value (a `fori_loop` with traced bounds) cannot be
counted statically: it counts one trip and `dynamic_loops` says how many there were, so the
depth is then a lower bound. A loop with a static trip count is exact: `fori_loop` with
Python-int bounds lowers to `scan`.

Depth in operations is not time: each operation may itself be wide (a matmul over L is
one step). It is what bounds the time on hardware with enough parallel units, which is the
claim of section 2 (a recurrent rung's depth grows as L, a parallel one's does not) and of
parallel scans (`jax.lax.associative_scan`: ~log L).
"""

import dataclasses
import functools
import math

import jax
from jax.extend import core

# Primitives whose sub-jaxpr is inlined by XLA: walked inside with the operands' depths.
_INLINED = ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint", "custom_jvp_call")
_INLINED += ("custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin", "shard_map")


@dataclasses.dataclass(frozen=True)
class Depth:
  depth: int  # longest chain of dependent operations (loops: trips x body depth)
  flops: float  # 2 x multiply-adds of dot_general + one per output element elsewhere
  loops: tuple  # ((primitive, trips), ...) of every sequential loop, in program order
  dynamic_loops: int  # while loops of traced trip count (counted once: depth is a lower bound)

  @property
  def parallelism(self):
    """FLOPs per dependent step: the work available to run at once."""
    return self.flops / max(self.depth, 1)

  @property
  def loop_trips(self):
    """Total trips of the sequential loops (nested loops multiplied)."""
    return sum(trips for _, trips in self.loops)


def measure(fn, *args, **kwargs):
  """Depth of `fn(*args, **kwargs)` from its jaxpr; args may be abstract (ShapeDtypeStruct)."""
  return of_jaxpr(jax.make_jaxpr(fn)(*args, **kwargs))


def of_jaxpr(closed):
  """Depth of a ClosedJaxpr (or Jaxpr)."""
  walker = _Walker()
  jaxpr = closed.jaxpr if isinstance(closed, core.ClosedJaxpr) else closed
  outs, flops = walker.walk(jaxpr, [0] * len(jaxpr.invars))
  return Depth(
    depth=int(max(outs, default=0)),
    flops=float(flops),
    loops=tuple(walker.loops),
    dynamic_loops=walker.dynamic,
  )


def _size(aval):
  return math.prod(getattr(aval, "shape", ()) or (1,))


def _dot_flops(eqn):
  (lhs, _), _ = eqn.params["dimension_numbers"]
  contracted = math.prod(eqn.invars[0].aval.shape[d] for d in lhs)
  return 2.0 * _size(eqn.outvars[0].aval) * contracted


def _inner(jaxpr):
  return jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr


class _Walker:
  def __init__(self):
    self.loops = []
    self.dynamic = 0
    self._body = {}  # id(jaxpr) -> (depth, flops, loops, dynamic) of a loop body

  def walk(self, jaxpr, in_depths):
    """(depth of each output, flops) of `jaxpr` given the depths of its inputs."""
    depth = {}

    def read(atom):
      return 0 if isinstance(atom, core.Literal) else depth.get(atom, 0)

    for var, d in zip(jaxpr.invars, in_depths, strict=True):
      depth[var] = d
    for var in jaxpr.constvars:
      depth[var] = 0
    flops = 0.0
    for eqn in jaxpr.eqns:
      ins = [read(v) for v in eqn.invars]
      start = max(ins, default=0)
      outs, eqn_flops = self._eqn(eqn, ins, start)
      flops += eqn_flops
      for var, d in zip(eqn.outvars, outs, strict=True):
        depth[var] = d
    return [read(v) for v in jaxpr.outvars], flops

  def _eqn(self, eqn, ins, start):
    name = eqn.primitive.name
    n_out = len(eqn.outvars)
    if name == "scan":
      return self._loop(eqn, eqn.params["jaxpr"], int(eqn.params["length"]), start)
    if name == "while":
      trips = _while_trips(eqn)
      if trips is None:
        self.dynamic += 1
        trips = 1
      body = _inner(eqn.params["body_jaxpr"])
      cond = _inner(eqn.params["cond_jaxpr"])
      outs, flops = self._loop(eqn, body, trips, start)
      cond_depth, cond_flops, _, _ = self._body_of(cond)
      return [d + trips * cond_depth for d in outs], flops + trips * cond_flops
    if name == "cond":
      branches = [self.walk(_inner(b), ins[1:]) for b in eqn.params["branches"]]
      outs = [max(b[0][i] for b in branches) + 1 for i in range(n_out)]
      return outs, max(b[1] for b in branches)
    subs = list(core.jaxprs_in_params(eqn.params))
    if name in _INLINED and len(subs) >= 1:
      sub = _inner(subs[0])
      if len(sub.invars) == len(ins):
        return self.walk(sub, ins)
    if subs:  # an unknown higher-order primitive: one block, as deep as its deepest part
      parts = [self._body_of(_inner(s)) for s in subs]
      cost = max(p[0] for p in parts)
      return [start + cost] * n_out, sum(p[1] for p in parts)
    if name == "dot_general":
      flops = _dot_flops(eqn)
    else:
      flops = float(sum(_size(v.aval) for v in eqn.outvars))
    return [start + 1] * n_out, flops

  def _loop(self, eqn, body, trips, start):
    body_depth, body_flops, body_loops, body_dynamic = self._body_of(_inner(body))
    self.loops.append((eqn.primitive.name, trips))
    self.loops.extend((p, trips * t) for p, t in body_loops)
    self.dynamic += body_dynamic
    return [start + trips * body_depth] * len(eqn.outvars), trips * body_flops

  def _body_of(self, jaxpr):
    """(depth, flops, loops inside, dynamic loops inside) of a loop body, memoized."""
    key = id(jaxpr)
    if key not in self._body:
      inner = _Walker()
      inner._body = self._body
      outs, flops = inner.walk(jaxpr, [0] * len(jaxpr.invars))
      self._body[key] = (max(outs, default=0), flops, inner.loops, inner.dynamic)
    return self._body[key]


def _while_trips(eqn):
  """The trip count of a counting while loop (carried i from a literal start, `i < n` with a
  literal n, i + 1 per trip: what `fori_loop` and `while_loop` over a range produce), or
  None when the count is a traced value."""
  p = eqn.params
  cond, body = _inner(p["cond_jaxpr"]), _inner(p["body_jaxpr"])
  if len(cond.eqns) != 1 or cond.eqns[0].primitive.name != "lt":
    return None
  carried_in = eqn.invars[p["cond_nconsts"] + p["body_nconsts"] :]
  cond_carry = cond.invars[p["cond_nconsts"] :]
  body_carry = body.invars[p["body_nconsts"] :]

  def start(atom):  # the literal a carried value starts from, if it is one
    if isinstance(atom, core.Literal):
      return atom.val
    if atom in cond_carry:
      init = carried_in[cond_carry.index(atom)]
      return init.val if isinstance(init, core.Literal) else None
    return None

  lhs, rhs = cond.eqns[0].invars
  if lhs not in cond_carry:
    return None
  lo, hi = start(lhs), start(rhs)
  if lo is None or hi is None:
    return None
  i = cond_carry.index(lhs)
  if not isinstance(rhs, core.Literal):  # the bound is carried: it must come back unchanged
    j = cond_carry.index(rhs)
    if body.outvars[j] is not body_carry[j]:
      return None
  producer = {v: e for e in body.eqns for v in e.outvars}.get(body.outvars[i])
  one = [x for x in getattr(producer, "invars", ()) if isinstance(x, core.Literal)]
  counts = (
    producer is not None
    and producer.primitive.name == "add"
    and body_carry[i] in producer.invars
    and len(one) == 1
    and one[0].val == 1
  )
  return max(int(hi) - int(lo), 0) if counts else None


def abstract_train_step(config, batch_shape):
  """(train_step(state, batch), abstract state, abstract batch) of a training config
  (jaxformer.train.config): the loop's own step (forward, backward, AdamW) for `config.rung`
  and `config.model`, with shapes only."""
  import flax.linen as nn
  import jax.numpy as jnp

  from jaxformer import ladder
  from jaxformer.train import optimizer, step

  model = ladder.build(config.rung, config.model)
  tx = optimizer.make(config)
  state = jax.eval_shape(
    lambda rng: nn.meta.unbox(step.init_state(model, tx, rng, batch_shape)), jax.random.key(0)
  )
  token = jax.ShapeDtypeStruct(tuple(batch_shape), jnp.int32)
  batch = {"inputs": token, "targets": token, "mask": token}
  return functools.partial(step.train_step, model=model, tx=tx), state, batch


def train_step(config, batch_shape):
  """Depth of the train step of a training config at batch_shape (B, L), lowered only."""
  fn, state, batch = abstract_train_step(config, batch_shape)
  return measure(fn, state, batch)
