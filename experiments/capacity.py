"""The capacity law of a fixed memory (docs/reconstruction.md sections 1 and 9), in one place.

A fixed-state model writes every key-value pair into a state of fixed size, so the state it
needs to recall K pairs must grow with K; attention keeps every past key and value (its state
grows with L) and recalls at every K from a small width. The law is read as: for each model
and each K, the smallest decode state S*(K), in floats counted from the model's real 'cache'
collection, whose chance-adjusted MQAR accuracy reaches REACHES; then the log-log slope of
S*(K) against K, with a bootstrap interval over seeds. Zoology (Arora et al. 2023, Fig. 2)
plots accuracy against state size; it fits no exponent and never checks saturation.

  families     name -> Family: one knob (the state's size) and, per knob, the mixer that sits
               in the same 2-block shell (ladder rung `custom`: pre-norm, split skip, MLP,
               learned positions), so only the mixer differs between models
  state_floats the decode state of one sequence, counted from model.init(decode=True)
  search       K grows; at each K the smallest reaching state is found by walking the knob
               from the last K's answer; it stops when even the largest state fails (the
               grid is then saturated), else the model is "not saturated" (UNRESOLVED)
  fit_slope    log2 S* against log2 K over the K where S* exists; bootstrap over seeds
  plot         S* vs K on log-log axes, each model's slope and interval, and the floor
               K log2(V) bits (in floats of 32 bits)

experiments.fixed_memory and experiments.beyond both judge their capacity claims through this
module, and the scorecard can read its table through `table` and `plot`.
"""

import dataclasses
import json
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxformer.nn import axes
from jaxformer.nn.layers import param
from jaxformer.steps.s1_fixed_memory import Recurrent

REACHES = 0.9  # chance-adjusted accuracy (mean over seeds) counted as recall
BOOTSTRAP = 2000  # bootstrap draws of the slope (over seeds)
FLOAT_BITS = 32  # a float32 state entry, for the information floor in floats

# The verdicts of one model's law (a string each, so results.json reads plainly).
SATURATED = "saturated"  # the largest state failed at some K of the grid
NOT_SATURATED = "not saturated"  # the largest state reached REACHES at every K tried
NOT_LEARNING = "not learning"  # not even the largest state reached REACHES at the smallest K


class RecurrentMixer(nn.Module):
  """A recurrent cell as a sequence mixer: x_BLD -> cell states h_BLN -> h Wo [B, L, D].

  The cell's hidden size N is its own knob, apart from the shell's width D, so the LSTM and
  Elman models sit in the same block as attention with the same D; decoding keeps the carry
  (LSTM: h and c, 2N numbers; Elman: h, N) in the 'cache' collection."""

  width: int
  cell: str = "lstm"
  hidden: int = 64  # N

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    h_BLN = Recurrent(cell=self.cell, width=self.hidden, name="cell")(x_BLD, decode=decode)
    wo_ND = param(self, "wo", (self.hidden, self.width), (axes.MLP, axes.EMBED))
    return jnp.einsum("BLN,ND->BLD", h_BLN, wo_ND.astype(h_BLN.dtype))


@dataclasses.dataclass(frozen=True)
class Family:
  """One model: a mixer spec whose knob sets its state's size, in the shared shell."""

  name: str
  mixer: str  # 'package.module:Class' (jaxformer.mixers.plug)
  knob: str  # the mixer field that sets the state (or "d_model": the shell's width)
  fields: tuple = ()  # ((field, value), ...): the mixer's other fields
  fixed: bool = True  # the state is fixed in L (False: attention, it grows with L)


FAMILIES = {
  "lstm": Family("lstm", "experiments.capacity:RecurrentMixer", "hidden", (("cell", "lstm"),)),
  "elman": Family("elman", "experiments.capacity:RecurrentMixer", "hidden", (("cell", "elman"),)),
  "linear_attention": Family(
    "linear_attention", "jaxformer.mixers.linear:LinearAttention", "head_dim"
  ),
  "attention": Family(
    "attention", "jaxformer.mixers.attention:SoftmaxAttention", "d_model", fixed=False
  ),
}


def model_fields(family, knob, width, vocab_size, max_len, num_layers=2):
  """The `custom` rung's model fields of `family` at `knob` in the shell of width `width`."""
  family = FAMILIES[family] if isinstance(family, str) else family
  mixer = dict(family.fields)
  if family.knob == "d_model":
    width = knob
  else:
    mixer[family.knob] = knob
  return {
    "mixer": family.mixer,
    "mixer_fields": json.dumps(mixer, sort_keys=True),
    "vocab_size": vocab_size,
    "max_len": max_len,
    "d_model": width,
    "d_ff": 4 * width,
    "num_layers": num_layers,
  }


def build(fields):
  """The Linen model of `model_fields(...)` (the `custom` rung)."""
  from jaxformer import ladder

  config = ladder.default_config("custom")
  for key, value in fields.items():
    config[key] = value
  return ladder.build("custom", config)


def state_floats(model, length):
  """Numbers one sequence's decode state holds after `length` tokens: every array of the
  model's 'cache' collection from model.init(decode=True) (0-d position counters are
  bookkeeping, left out). Shapes only: nothing is allocated."""
  tokens_BL = jax.ShapeDtypeStruct((1, length), jnp.int32)
  cache = jax.eval_shape(
    lambda t: model.init(jax.random.key(0), t, decode=True).get("cache", {}), tokens_BL
  )
  return int(sum(x.size for x in jax.tree.leaves(cache) if x.ndim > 0))


def floor_floats(pairs, vocab_size):
  """The information floor: K log2(V) bits, in floats of FLOAT_BITS bits."""
  return pairs * math.log2(vocab_size) / FLOAT_BITS


# --- the search: the smallest reaching state at each K ------------------------------------


def reaches(per_seed):
  """The rule of "reaches": the mean over seeds of the adjusted accuracy >= REACHES (a NaN,
  a diverged or missing seed, never reaches)."""
  values = [float(v) for v in per_seed]
  return bool(values) and all(math.isfinite(v) for v in values) and np.mean(values) >= REACHES


@dataclasses.dataclass
class Law:
  """One model's search: what was trained and what it says.

  `points[(knob, K)]` holds the per-seed adjusted accuracies of every trained point;
  `needed[K]` the smallest reaching knob (None: even the largest failed) for each K tried, in
  order; `status` SATURATED, NOT_SATURATED or NOT_LEARNING."""

  knobs: tuple
  pairs: tuple  # the K grid (the search may stop before its end)
  points: dict = dataclasses.field(default_factory=dict)
  needed: dict = dataclasses.field(default_factory=dict)
  status: str = NOT_SATURATED

  @property
  def tried(self):
    return list(self.needed)


def search(knobs, pairs, evaluate):
  """Walks the knob grid at each K, in order of K.

  `evaluate(knob, K)` trains that point and returns its per-seed adjusted accuracies. At
  each K the walk starts at the last K's answer (the smallest knob at the first K): if that
  knob reaches, it steps down while the next smaller one reaches too; if not, it steps up
  until one reaches. A larger state is taken to recall at least what a smaller one does at
  the same K (the walk trains no knob above a reaching one, nor below a failing one). The
  first K at which even the largest knob fails saturates the grid and ends the search; if
  that is the first K, the model is NOT_LEARNING.
  """
  knobs, pairs = tuple(sorted(knobs)), tuple(sorted(pairs))
  if not knobs or not pairs:
    raise ValueError("search: knobs and pairs must be non-empty")
  law = Law(knobs, pairs)

  def ok(i, k):
    if (knobs[i], k) not in law.points:
      law.points[(knobs[i], k)] = [float(v) for v in evaluate(knobs[i], k)]
    return reaches(law.points[(knobs[i], k)])

  i = 0
  for n, k in enumerate(pairs):
    if ok(i, k):
      while i > 0 and ok(i - 1, k):
        i -= 1
      law.needed[k] = knobs[i]
      continue
    while i + 1 < len(knobs) and not ok(i + 1, k):
      i += 1
    if i + 1 == len(knobs):  # the largest failed
      law.needed[k] = None
      law.status = NOT_LEARNING if n == 0 else SATURATED
      return law
    i += 1
    law.needed[k] = knobs[i]
  return law


# --- the slope: how the needed state grows with K -----------------------------------------


def slope(pairs, states):
  """Least-squares slope of log2 state against log2 K (NaN with fewer than 2 distinct K)."""
  x, y = np.log2(np.asarray(pairs, float)), np.log2(np.asarray(states, float))
  if len(x) < 2 or np.ptp(x) == 0:
    return math.nan
  return float(np.polyfit(x, y, 1)[0])


def needed_states(law, state_of, seeds=None):
  """{K: state floats of the smallest reaching knob} over the K where one was found.

  With `seeds` (indices into each point's per-seed list) the rule is applied to those seeds
  only (a bootstrap resample): a K's answer is then its smallest trained knob that reaches;
  if none of its trained knobs reaches, the next knob above them (assumed to reach, as the
  walk assumes), or no answer if there is none."""
  out = {}
  for k in law.tried:
    if seeds is None:
      knob = law.needed[k]
    else:
      trained = sorted(kn for kn, kk in law.points if kk == k)
      hits = [kn for kn in trained if reaches(np.asarray(law.points[(kn, k)])[seeds])]
      above = [kn for kn in law.knobs if kn > trained[-1]]
      knob = hits[0] if hits else (above[0] if above else None)
    if knob is not None:
      out[k] = state_of(knob, k)
  return out


def fit(law, state_of, level=0.95, draws=BOOTSTRAP, seed=0):
  """{slope, interval, pairs, states}: the fitted log-log slope of the needed state against
  K and its percentile bootstrap interval over seeds (each draw resamples the seeds with
  replacement and redoes the reading of every K)."""
  found = needed_states(law, state_of)
  point = slope(list(found), list(found.values()))
  num_seeds = min((len(v) for v in law.points.values()), default=0)
  rng = np.random.default_rng(seed)
  samples = []
  for _ in range(draws if num_seeds and math.isfinite(point) else 0):
    pick = rng.integers(0, num_seeds, num_seeds)
    found_b = needed_states(law, state_of, pick)
    samples.append(slope(list(found_b), list(found_b.values())))
  samples = [s for s in samples if math.isfinite(s)]
  tail = (1 - level) / 2 * 100
  interval = (
    tuple(float(q) for q in np.percentile(samples, [tail, 100 - tail]))
    if samples
    else (math.nan, math.nan)
  )
  return {
    "slope": point,
    "interval": list(interval),
    "pairs": list(found),
    "states": list(found.values()),
  }


def summary(law, state_of):
  """What results.json keeps of one law: every trained point, the answers, the fit."""
  return {
    "status": law.status,
    "knobs": list(law.knobs),
    "pairs": list(law.pairs),
    "tried": law.tried,
    "needed_knob": {str(k): v for k, v in law.needed.items()},
    "needed_state": {
      str(k): (state_of(v, k) if v is not None else None) for k, v in law.needed.items()
    },
    "largest_state": {str(k): state_of(law.knobs[-1], k) for k in law.tried},
    "points": [
      {"knob": kn, "K": k, "state": state_of(kn, k), "adjusted": v}
      for (kn, k), v in sorted(law.points.items(), key=lambda p: (p[0][1], p[0][0]))
    ],
    "fit": fit(law, state_of),
  }


# --- the table and the plot ------------------------------------------------------------------


def table(laws):
  """One row per model: status, the fitted slope and its interval, S* at each K tried."""
  pairs = sorted({int(k) for s in laws.values() for k in s["tried"]})
  rows = []
  for name, s in laws.items():
    row = {
      "model": name,
      "status": s["status"],
      "slope": s["fit"]["slope"],
      "slope 95%": s["fit"]["interval"],
    }
    for k in pairs:
      value = s["needed_state"].get(str(k), "")
      row[f"S* (K={k})"] = "> largest" if value is None else value
    rows.append(row)
  return rows


def plot(ax, laws, vocab_size, pairs):
  """Needed state floats against K on log-log axes: each model's points, its fitted line
  with slope and interval in the legend, a saturated K as an upward arrow at the largest
  state, and the floor K log2(V) bits."""
  for name, s in laws.items():
    f = s["fit"]
    low, high = f["interval"]
    label = f"{name}: slope {f['slope']:.2f} [{low:.2f}, {high:.2f}]" if f["states"] else name
    label += "" if s["status"] == SATURATED else f" ({s['status']})"
    (line,) = ax.plot(f["pairs"], f["states"], marker="o", label=label)
    if len(f["pairs"]) >= 2 and math.isfinite(f["slope"]):
      x = np.asarray(f["pairs"], float)
      c = np.mean(np.log2(f["states"])) - f["slope"] * np.mean(np.log2(x))
      ax.plot(x, 2 ** (c + f["slope"] * np.log2(x)), ":", color=line.get_color())
    for k, v in s["needed_state"].items():
      if v is None:  # saturated: the need lies above the largest state
        ax.scatter([int(k)], [s["largest_state"][k]], marker="^", s=60, color=line.get_color())
  ks = np.asarray(sorted(pairs), float)
  ax.plot(ks, [floor_floats(k, vocab_size) for k in ks], "--", color="gray",
          label=f"floor K log2({vocab_size}) bits")  # fmt: skip
  ax.set_xscale("log", base=2)
  ax.set_yscale("log", base=2)
  ax.set_xticks(list(ks), [str(int(k)) for k in ks])
  ax.minorticks_off()
  ax.set_xlabel("pairs K")
  ax.set_ylabel(f"smallest decode state reaching {REACHES} adjusted (floats)")
  ax.legend(fontsize="x-small")
