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
  next_arms    a walked law (`law.walk`) trains a family's points as its walk asks for them,
               not its whole grid: each trained point names the next (protocol.run asks)
  fit_slope    log2 S* against log2 K over the K where S* exists; bootstrap over seeds
  plot         S* vs K on log-log axes, each model's slope and interval, and the floor
               K log2(V) bits (in floats of 32 bits)

experiments.fixed_memory judges its capacity claims through this
module (`default_law`, `arms`, `controls`, `criteria`, `falsification`, `section`); a caller
with its own trained grid (the scorecard's widths per mixer) reads the same law with
`read(points, knobs, pairs, state_of)` and shows it with `table` and `plot`.
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
LEFT_DESIGN = "left the design"  # the walk needed a point the design does not train


class RecurrentMixer(nn.Module):
  """A recurrent cell as a sequence mixer: x_BLD -> cell states h_BLK -> h Wo [B, L, D].

  The cell's hidden size N is its own knob, apart from the shell's width D, so the LSTM and
  Elman models sit in the same block as attention with the same D; decoding keeps the carry
  (LSTM: h and c, 2N numbers; Elman: h, N) in the 'cache' collection."""

  width: int
  cell: str = "lstm"
  hidden: int = 64  # N
  forget_bias: float = 0.0  # the LSTM forget gate's initial bias (steps.s1_fixed_memory)

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    # K: the cell's N hidden units (the inner width, as a head's rank is attention's)
    cell = Recurrent(cell=self.cell, width=self.hidden, forget_bias=self.forget_bias, name="cell")
    h_BLK = cell(x_BLD, decode=decode)
    wo_KD = param(self, "wo", (self.hidden, self.width), (axes.MLP, axes.EMBED))
    return jnp.einsum("BLK,KD->BLD", h_BLK, wo_KD.astype(h_BLK.dtype))


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


def model_fields(family, knob, width, vocab_size, max_len, num_layers=2, mixer_fields=None):
  """The `custom` rung's model fields of `family` at `knob` in the shell of width `width`;
  `mixer_fields` ({field: value}) set the mixer's other fields beyond the family's own."""
  family = FAMILIES[family] if isinstance(family, str) else family
  mixer = dict(family.fields) | dict(mixer_fields or {})
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
  missing: str = ""  # status LEFT_DESIGN: the point the walk needed next
  missing_point: tuple | None = None  # and that point, (knob, K)

  @property
  def tried(self):
    return list(self.needed)


class Missing(LookupError):
  """Raised by an `evaluate` that has no trained point for (knob, K): the walk stops there,
  its answers so far kept, with status LEFT_DESIGN. `point` is that (knob, K)."""

  def __init__(self, message, point=None):
    super().__init__(message)
    self.point = point


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

  try:
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
  except Missing as e:
    law.status, law.missing, law.missing_point = LEFT_DESIGN, str(e), e.point
  return law


# --- the slope: how the needed state grows with K -----------------------------------------


def slope(pairs, states):
  """Least-squares slope of log2 state against log2 K (NaN with fewer than 2 distinct K)."""
  x, y = np.log2(np.asarray(pairs, float)), np.log2(np.asarray(states, float))
  if len(x) < 2 or np.ptp(x) == 0:
    return math.nan
  return float(np.polyfit(x, y, 1)[0])


def needed_states(law, state_of, seeds=None, censored=False):
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
    elif censored:  # more than the largest state: above every state of the grid
      out[k] = math.inf
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


def growth_share(law, state_of, draws=BOOTSTRAP, seed=0):
  """The share of seed resamples in which the needed state at the largest K tried exceeds
  the one at the smallest K (a K where no state reaches counts as above every state: the
  saturated K is censored, not dropped). NaN with fewer than 2 K tried."""
  if len(law.tried) < 2:
    return math.nan
  num_seeds = min(len(v) for v in law.points.values())
  rng = np.random.default_rng(seed)
  grows = 0
  for _ in range(draws):
    need = needed_states(law, state_of, rng.integers(0, num_seeds, num_seeds), censored=True)
    first, last = need.get(law.tried[0], math.inf), need.get(law.tried[-1], math.inf)
    grows += bool(last > first)
  return grows / draws


def summary(law, state_of):
  """What results.json keeps of one law: every trained point, the answers, the fit."""
  return {
    "status": law.status,
    **({"missing": law.missing} if law.status == LEFT_DESIGN else {}),
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
    "growth_share": growth_share(law, state_of),
  }


# --- the table and the plot ------------------------------------------------------------------


def table(laws):
  """One row per model: status, the fitted slope and its interval, S* at each K tried."""
  pairs = sorted({int(k) for s in laws.values() for k in s["tried"]})
  rows = []
  for name, s in laws.items():
    status = s["status"] + (f" at {s['missing']}" if s["status"] == LEFT_DESIGN else "")
    row = {
      "model": name,
      "status": status,
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
  if any(v is None for s in laws.values() for v in s["needed_state"].values()):
    ax.scatter([], [], marker="^", s=60, color="gray", label="largest state failed: need above")
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


# --- the law as an experiment's part: arms, readings, criteria -------------------------------
#
# An experiment holds its capacity design as a ConfigDict `law` (see `default_law`) and calls
# `arms(law)`, `states(law)` (in measure, into metrics["state_floats"]), `readings(metrics,
# law)`, `controls`, `criteria`, `falsification`, `section`: whichever experiment judges the
# law, it judges it through the same functions.


def default_law():
  """The capacity design's fields (every size overrides what it sizes)."""
  import ml_collections

  c = ml_collections.ConfigDict()
  c.vocab_size = 32  # V: keys in [1, V/2), values in [V/2, V): K <= V/2 - 1
  c.seq_len = 32  # L, one for every K (arms of one model share a compiled program): L >= 4K
  c.width = 16  # D of the shell every fixed-state model sits in
  c.num_layers = 2
  c.pairs = (2, 4, 8)  # the K grid, ascending
  # family -> its knob grid (ascending): the state's size
  c.knobs = {"lstm": (8, 32), "linear_attention": (4, 16)}
  # family -> ((knob, K), ...): the points trained; a family not named trains its whole grid
  c.points = {}
  # (optional) c.walk = True: the families not in `points` train only the points their walk
  # visits (`next_arms`: each trained point decides the next), not the whole knobs x pairs
  # grid; absent, as in designs registered before it, the whole grid
  c.claimed = ("lstm", "linear_attention")  # fixed-state families the growth claim reads
  c.reported = ()  # families whose law is reported beside, not judged (e.g. elman)
  c.attention = ("attention", 16)  # (family, knob): attention from a small width
  # (family, knob) the attention criterion must reject; None: not trained (an experiment that
  # declares another falsification arm)
  c.falsification = ("linear_attention", 2)
  c.num_examples = 20_000
  c.num_test_examples = 512
  c.data_seed = 0
  # the law's own training fields (protocol.SCHEDULE) and learning-rate grid when it runs
  # inside another experiment's config; empty / None: the experiment's own
  c.schedule = {}
  c.learning_rates = None
  c.step_cap = None  # None: the experiment's step_cap
  # (optional) c.mixer_fields = {family: {field: value}}: a family's other mixer fields (e.g.
  # the LSTM's forget_bias); absent, as in the designs registered before it, the defaults
  return c


ATTENTION_ARM = "attention"  # model names of the two arms read at every K
FALSIFICATION_ARM = "falsification"


def everywhere(law):
  """[(model, family, knob)] of the arms trained at every K: attention, and the falsification
  arm when the law has one."""
  out = [(ATTENTION_ARM, *law.attention)]
  if law.falsification is not None:
    out.append((FALSIFICATION_ARM, *law.falsification))
  return out


def pairs_of(law, model):
  """The K at which an arm read at every K trains: the grid's, or for the falsification arm
  `law.falsification_pairs` when the design names them (optional, absent in the designs
  registered before it: every K). "Reaches at every K" is refuted by one K, so training it
  at fewer K can only make the falsification arm harder to reject."""
  if model == FALSIFICATION_ARM and law.get("falsification_pairs"):
    chosen = tuple(law.falsification_pairs)
    if not set(chosen) <= set(law.pairs):
      raise ValueError(
        f"falsification_pairs={list(chosen)}: each must be a K of pairs={list(law.pairs)}"
      )
    return chosen
  return tuple(law.pairs)


def setting(law, family, knob, pairs):
  fam = FAMILIES[family]
  return f"{fam.knob}={knob} K={pairs} L={law.seq_len}"


def task(law, pairs):
  if not 1 <= pairs <= law.vocab_size // 2 - 1 or law.seq_len < 4 * pairs:
    raise ValueError(
      f"pairs={pairs}: MQAR needs 1 <= K <= vocab_size // 2 - 1 = {law.vocab_size // 2 - 1} "
      f"and seq_len >= 4 K (seq_len={law.seq_len})"
    )
  return (
    f"mqar:vocab_size={law.vocab_size},seq_len={law.seq_len},num_kv_pairs={pairs},"
    f"num_examples={law.num_examples},num_test_examples={law.num_test_examples},"
    f"seed={law.data_seed}"
  )


def walked(law, family):
  """Whether `family` trains only the points its walk visits (`law.walk`; a family with
  declared `points` trains those)."""
  return bool(law.get("walk", False)) and family not in law.points


def grid_points(law, family):
  """Every (knob, K) point the design holds for `family`: its declared points, else its grid."""
  if family in law.points:
    return [tuple(p) for p in law.points[family]]
  return [(knob, k) for k in law.pairs for knob in law.knobs[family]]


def trained_points(law, family):
  """The (knob, K) points the design trains for `family` from the start: its declared points,
  its whole grid, or (a walked family) the walk's first point, the smallest knob at the
  smallest K."""
  if walked(law, family):
    return [(min(law.knobs[family]), min(law.pairs))]
  return grid_points(law, family)


def law_fields(law, family, knob):
  """The model fields of `family` at `knob` in the law's shell, with the mixer fields the
  design sets for that family (`law.mixer_fields`, optional: absent in the designs registered
  before it)."""
  extra = dict(law.get("mixer_fields", {}) or {}).get(family)
  return model_fields(
    family, knob, law.width, law.vocab_size, law.seq_len, law.num_layers, mixer_fields=extra
  )


def _arm(law, model, family, knob, k):
  from experiments import protocol

  return protocol.Arm(
    model,
    setting(law, family, knob, k),
    "custom",
    task(law, k),
    law_fields(law, family, knob),
    train=dict(law.schedule),
    learning_rates=tuple(law.learning_rates) if law.learning_rates else None,
    step_cap=law.step_cap,
  )


def arms(law, whole_grid=False):
  """protocol.Arm per point trained from the start: model = family (or ATTENTION_ARM /
  FALSIFICATION_ARM for the two arms read at every K), setting = setting(law, family, knob,
  K). A walked family's further points come from `next_arms`. With `whole_grid`, every point
  the design holds, not only those a walk trains first (experiments/retrain.py offers them)."""
  points = grid_points if whole_grid else trained_points
  out = []
  for family in (*law.claimed, *law.reported):
    out += [_arm(law, family, family, knob, k) for knob, k in points(law, family)]
  for model, family, knob in everywhere(law):
    out += [_arm(law, model, family, knob, k) for k in pairs_of(law, model)]
  return out


def next_arms(law, views):
  """The arms a walked family needs next: for each view (a protocol.Trained of one seed set:
  the confirmatory and the exploratory seeds each walk on their own readings), the point at
  which its walk over what is trained stopped for want of one; deduplicated, in order. Empty
  when every walk has ended (saturated, not saturated at the largest K, or not learning)."""
  out = {}
  for view in views:
    adjusted = view.metrics()["adjusted"]
    for family in (*law.claimed, *law.reported):
      if not walked(law, family):
        continue
      found = law_of({"adjusted": adjusted}, law, family)
      if found.status == LEFT_DESIGN and found.missing_point is not None:
        knob, k = found.missing_point
        out.setdefault((family, knob, k), _arm(law, family, family, knob, k))
  return list(out.values())


_STATES = {}  # the law's JSON -> states(law): measure() runs once per seed view and rate


def states(law):
  """{family: {knob: state floats}} counted from each model's real cache at L = seq_len
  (every knob of every family, the attention and falsification arms included)."""
  key = json.dumps(law.to_dict(), sort_keys=True, default=str)
  if key not in _STATES:
    _STATES[key] = _count_states(law)
  return _STATES[key]


def _count_states(law):
  out = {}
  named = dict(law.knobs)
  for _, family, knob in everywhere(law):
    named[family] = tuple(sorted({*named.get(family, ()), knob}))
  for family, knobs in named.items():
    out[family] = {
      str(knob): state_floats(build(law_fields(law, family, knob)), law.seq_len) for knob in knobs
    }
  return out


def read(points, knobs, pairs, state_of):
  """The law from already-trained points (for a caller with its own grid, e.g. the
  scorecard's widths): `points[(knob, K)]` = per-seed adjusted accuracies, `state_of(knob,
  K)` = state floats. Returns summary(...) of the walk, or {"status": LEFT_DESIGN, "missing":
  (knob, K)} and the answers found before it when the walk needs a point `points` lacks."""
  return summary(_walk(points, knobs, pairs), state_of)


def _walk(points, knobs, pairs, name=str):
  def evaluate(knob, k):
    if (knob, k) not in points:
      raise Missing(name((knob, k)), (knob, k))
    return points[(knob, k)]

  return search(knobs, pairs, evaluate)


def law_of(metrics, law, family, infer=False):
  """The walk over the trained points of `family` (status LEFT_DESIGN when it needed one the
  design does not train). `infer`: a point not trained is read as the walk's own premise
  (`search`) reads it where a trained point at the same K decides it: failing below a
  larger state that fails, reaching above a smaller one that reaches (for the corners, whose
  walk may leave the points the real one trained); else it is missing, as without."""
  adjusted = metrics["adjusted"].get(family, {})
  points = {}
  for knob in law.knobs[family]:
    for k in law.pairs:
      key = setting(law, family, knob, k)
      if key in adjusted:
        points[(knob, k)] = adjusted[key]
  if infer:
    num_seeds = min((len(v) for v in points.values()), default=0)
    for k in law.pairs:
      trained = {kn: reaches(v) for (kn, kk), v in points.items() if kk == k}
      for knob in law.knobs[family]:
        if (knob, k) in points or not trained:
          continue
        if any(kn > knob and not hit for kn, hit in trained.items()):
          points[(knob, k)] = [0.0] * num_seeds
        elif any(kn < knob and hit for kn, hit in trained.items()):
          points[(knob, k)] = [1.0] * num_seeds
  return _walk(points, law.knobs[family], law.pairs, lambda p: setting(law, family, *p))


def _state_of(metrics, family):
  """state_of(knob, K): the state floats of `family` at `knob` (from metrics["state_floats"])."""
  floats = metrics["state_floats"][family]
  return lambda knob, k: floats[str(knob)]


def corners(metrics, law, family):
  """{corner name: summary-like reading} of `family` at each corner of what more training can
  do to its replicas still learning (protocol.Spec.learning_bounds): for each K at which a
  point holds one, every such replica's adjusted accuracy is left where it is (a model still
  learning only rises) or raised to 1 (perfect recall, the most any training can give); the
  corner that leaves every K is the reading itself and is not repeated. {} when none of the
  family's replicas in `metrics` is still learning. S*(K) is monotone in its K's accuracies
  (a higher one can only lower it), so the corners hold each K's two extremes of it."""
  from experiments import protocol

  adjusted = metrics["adjusted"].get(family, {})
  plateau = metrics.get("plateau", {}).get(family, {})
  at_k = {setting(law, family, kn, k): k for kn in law.knobs[family] for k in law.pairs}
  learning = {
    key: {i for i, status in enumerate(plateau.get(key, ())) if status not in protocol.FINISHED}
    for key in adjusted
    if key in at_k
  }
  ks = sorted({at_k[key] for key, rows in learning.items() if rows})
  state_of = _state_of(metrics, family)
  out = {}
  for n in range(1, 2 ** len(ks)):
    raised_k = [k for j, k in enumerate(ks) if n >> j & 1]
    raised = dict(adjusted)
    for key, rows in learning.items():
      if at_k[key] in raised_k:
        raised[key] = [1.0 if i in rows else v for i, v in enumerate(adjusted[key])]
    found = law_of({"adjusted": {family: raised}}, law, family, infer=True)
    out["K=" + ",".join(map(str, raised_k)) + " raised"] = {
      "status": found.status,
      "missing": found.missing,
      "tried": found.tried,
      "growth_share": growth_share(found, state_of),
    }
  return out


def readings(metrics, law):
  """{family: summary(...)} for every claimed and reported family (status LEFT_DESIGN: its
  answers before the point it missed, and `missing`)."""
  out = {}
  for family in (*law.claimed, *law.reported):
    out[family] = summary(law_of(metrics, law, family), _state_of(metrics, family))
  return out


def reads_of(law, family, reading=None):
  """The (model, setting) arms a family's criterion reads, whose plateau decides it: the
  points its walk trained (with no reading: every point the design trains for it)."""
  if reading is not None and "points" in reading:
    return tuple((family, setting(law, family, p["knob"], p["K"])) for p in reading["points"])
  return tuple((family, setting(law, family, kn, k)) for kn, k in trained_points(law, family))


GROWTH_SHARE = 0.975  # growth shown: in this share of seed resamples (a one-sided 97.5%)


def _verdict_of_growth(reading):
  """(verdict, note) of a family's growth claim from its reading.

  A saturated grid shows growth by itself once a smaller state reached the smallest K: the
  need at the saturating K lies above the largest state. The seeds must agree on it: the
  need at the largest K tried exceeds the need at the smallest in GROWTH_SHARE of seed
  resamples (SUPPORTED), in at most 1 - GROWTH_SHARE (REFUTED), else UNRESOLVED."""
  from experiments import report

  status = reading["status"]
  if status == LEFT_DESIGN:
    return (
      report.UNRESOLVED,
      f"the walk needed {reading['missing']}, which was not trained for this reading (not a "
      "point of the design, or not at this learning rate)",
    )
  if status == NOT_LEARNING:
    return report.UNRESOLVED, "not learning: no state reached the smallest K"
  if status == NOT_SATURATED:
    last = reading["tried"][-1]
    return report.UNRESOLVED, f"not saturated: the largest state reached {REACHES} up to K={last}"
  share = reading["growth_share"]
  if share >= GROWTH_SHARE:
    return report.SUPPORTED, ""
  if share <= 1 - GROWTH_SHARE:
    return report.REFUTED, ""
  return report.UNRESOLVED, f"the seeds disagree: growth in {share:.1%} of resamples"


def growth(reading, law, family, bounds=None):
  """The claim on a fixed-state family: the grid saturates it (the largest state fails at
  some K) and its needed state grows with K over seed resamples (_verdict_of_growth); the
  fitted log-log slope and its interval are reported beside. Not saturated: UNRESOLVED.
  `bounds`: corners(...) of the reading; when each gives the reading's verdict, the
  criterion is `bounded` (protocol.Spec.learning_bounds decides whether the gate takes it)."""
  from experiments import report

  verdict, note = _verdict_of_growth(reading)
  values = {"status": reading["status"]}
  if "fit" in reading:
    values |= {
      "needed_state": reading["needed_state"],
      "slope": reading["fit"]["slope"],
      "slope_ci95": reading["fit"]["interval"],
      "growth_share": reading["growth_share"],
    }
  bounded = ""
  if bounds:
    at = {name: _verdict_of_growth(corner)[0] for name, corner in bounds.items()}
    values["corners"] = at
    if verdict != report.UNRESOLVED and all(v == verdict for v in at.values()):
      bounded = (
        f"{verdict} at each of the {len(at) + 1} corners of the replicas still learning "
        "(each K's left where it is or raised to 1)"
      )
  return report.Criterion(
    f"{family}: the largest state fails at some K, and the smallest decode state reaching "
    f"{REACHES} adjusted is larger at the largest K tried than at the smallest",
    None,
    values,
    f"smallest reaching state per K on the mean over seeds; growth in >= {GROWTH_SHARE:.1%} "
    "of seed resamples",
    verdict=verdict,
    name=f"{family}_grows",
    reads=reads_of(law, family, reading),
    note=note,
    bounded=bounded,
  )


def recalls_everywhere(metrics, law, model, family, knob, name):
  """Every seed's lowest adjusted accuracy over the K grid >= REACHES (the attention
  criterion; computed the same way on the falsification arm, over the K it trains at)."""
  from experiments import report

  pairs = pairs_of(law, model)
  keys = [setting(law, family, knob, k) for k in pairs]
  per_k = [metrics["adjusted"][model][key] for key in keys]
  criterion = report.every_seed(
    f"{model} ({family}, {FAMILIES[family].knob}={knob}) reaches {REACHES} adjusted at every "
    f"K in {list(pairs)} (per seed: its lowest)",
    [min(v) for v in zip(*per_k, strict=True)],
    lambda a: a >= REACHES,
    name=name,
    reads=tuple((model, key) for key in keys),
  )
  # v7 of fixed_memory and beyond: a K at which every seed fails refutes "every K" once that
  # arm has plateaued, whatever the other K's arms would still learn
  criterion.decided_by = tuple(
    (model, key)
    for key, values in zip(keys, per_k, strict=True)
    if not any(reaches([v]) for v in values)
  )
  return criterion


def controls(metrics, law):
  """Each claimed family learns where its state is large: its best trained state at the
  smallest K reaches REACHES adjusted (mean over seeds). Else the verdict is INCONCLUSIVE."""
  from experiments import report

  k0, out = law.pairs[0], []
  for family in law.claimed:
    adjusted = metrics["adjusted"].get(family, {})
    # the knobs trained at the smallest K (a walked family: those its walk visited)
    keys = [
      setting(law, family, kn, k0)
      for kn in law.knobs[family]
      if setting(law, family, kn, k0) in adjusted
    ]
    means = {key: float(np.mean(adjusted[key])) for key in keys}
    best = max(means, key=means.get) if means else None
    if best is None:
      verdict = report.UNRESOLVED
    else:
      verdict = report.SUPPORTED if reaches(adjusted[best]) else report.REFUTED
    out.append(
      report.Criterion(
        f"{family} learns the smallest K={k0}: its best trained state reaches {REACHES} "
        "adjusted (mean over seeds)",
        None,
        {"best": best, "mean": means.get(best, math.nan), "per_seed": adjusted.get(best, [])},
        "mean over seeds",
        verdict=verdict,
        name=f"{family}_learns",
        reads=((family, best),) if best else (),  # the state it reads: its plateau decides
        note="" if best else f"no point at K={k0} trained",
      )
    )
  return out


def criteria(metrics, law):
  """Each claimed family's growth, then attention from a small width at every K."""
  found = readings(metrics, law)
  family, knob = law.attention
  return [growth(found[f], law, f, corners(metrics, law, f)) for f in law.claimed] + [
    recalls_everywhere(metrics, law, ATTENTION_ARM, family, knob, "attention_recalls")
  ]


def falsification(metrics, law):
  """The attention criterion computed on the falsification arm: it must be REFUTED (none if
  the law has no falsification arm)."""
  if law.falsification is None:
    return []
  family, knob = law.falsification
  return [recalls_everywhere(metrics, law, FALSIFICATION_ARM, family, knob, "attention_recalls")]


def uniform(rows):
  """Rows with every key of any row, in first-seen order ("" where a row has none): a
  Markdown table takes its columns from its first row."""
  keys = list(dict.fromkeys(k for row in rows for k in row))
  return [{k: row.get(k, "") for k in keys} for row in rows]


def section(metrics, law, workdir, name):
  """(readings, table rows, plot file): the law's part of a report."""
  found = readings(metrics, law)
  rows = table(found)
  for model, family, knob in everywhere(law):
    row = {"model": f"{model} ({FAMILIES[family].knob}={knob})"}
    row["state"] = metrics["state_floats"][family][str(knob)]
    for k in pairs_of(law, model):
      row[f"adjusted (K={k})"] = float(
        np.mean(metrics["adjusted"][model][setting(law, family, knob, k)])
      )
    rows.append(row)
  rows = uniform(rows)
  from experiments import harness

  fig = harness.figure(width=6.5, height=4.5)
  ax = fig.add_subplot(1, 1, 1)
  plot(ax, found, law.vocab_size, law.pairs)
  for (model, family, knob), marker in zip(everywhere(law), "sx", strict=False):
    state = metrics["state_floats"][family][str(knob)]
    hit = [
      k
      for k in pairs_of(law, model)
      if reaches(metrics["adjusted"][model][setting(law, family, knob, k)])
    ]
    ax.scatter(hit, [state] * len(hit), marker=marker, color="black",
               label=f"{model} ({FAMILIES[family].knob}={knob}): K it reaches")  # fmt: skip
  ax.legend(fontsize="x-small")
  ax.set_title(f"MQAR V={law.vocab_size} L={law.seq_len}, shell D={law.width}")
  return found, rows, harness.save(fig, workdir, f"{name}_capacity_law.png")
