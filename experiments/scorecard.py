"""The scorecard: any sequence mixer through every design pressure, beside the Transformer's.

The article ends by arguing that the Transformer is not inevitable: a successor must recall
without a fixed memory, train in parallel, keep its inference state small, and run well on
the hardware. This runs one battery on any sequence mixer (jaxformer.mixers: a Linen module
`Class(width=D, **fields)`, [B, L, D] -> [B, L, D], causal, optionally decoding through the
'cache' collection) and on the built-in ones, each inside the same block (the `custom` rung:
pre-norm, split skip, MLP, embeddings), so that only the mixer differs:

  python -m experiments.scorecard --workdir runs/scorecard                    # the built-ins
  python -m experiments.scorecard --mixer_class=path/to/my_mixer.py:MyMixer \\
    --mixer.num_heads=2 --size quick --workdir runs/scorecard_mine
  python -m experiments.scorecard --mixer_class=mypackage.mixers:MyMixer --builtins=softmax,gated
  python -m experiments.scorecard --size tiny --config.seeds='(0,)'   # a field of the config

`--mixer.FIELD=VALUE` sets a field of the mixer (a Python literal, else a string; `true` and
`false` are booleans) and `--config.FIELD=VALUE` a field of the scorecard's config at --size.

  from experiments import scorecard
  card = scorecard.run(mixer=MyMixer, fields={"num_heads": 2}, size="tiny", workdir="/tmp/s")

Before anything trains, every mixer runs the contract (jaxformer.mixers.plug.check: builds
from width, keeps [B, L, D], causal under a perturbation of each later position, decoding
equals the full pass); a mixer that breaks it stops the command with one line and exit 2.
With more than one device, a mixer whose parameters carry no logical axis names gets one
line saying they are replicated, not sharded (the contract's `unnamed` report).

The battery (every number from a real program or a trained model):
  recall        MQAR accuracy at growing pairs K and length L (no noise between the queries)
  noisy recall  MQAR with random tokens filling the query region (MAD's noisy recall)
  selective copy  the data tokens scattered among blanks, copied in order (MAD)
  needle        one fact at `distance` tokens before its query, per distance
  depth         the sequential depth of the compiled train step vs L (jaxformer.analysis.depth:
                loops x trips and the longest chain of dependent operations), lowering only
  state         decode-state bytes vs L: the 'cache' collection of one sequence
  time, memory  one train step (batch 1) vs L: median process CPU seconds and XLA's compiled
                memory on this machine (a CPU here; on an accelerator when run there)
  params        parameter count of the whole model
The trained parts follow the sweep protocol (experiments/protocol.py): every mixer and task
is trained at every seed and learning rate in one program, the learning rate is selected on
the validation half, accuracy is reported per seed on the eval half with its chance level.

Output in the workdir: scorecard.md (one row per mixer, one column per pressure: the
measured number and whether it reaches the reference row, the Transformer's softmax
attention), scorecard.json (every number, rule and trained replica) and plots: recall vs
decode-state bytes (the Zoology / Based trade-off, every mixer on it), and depth, state,
time and memory vs L.

"Reaches the reference" (thresholds fixed before any run; the reference row reaches itself):
  accuracy columns  the bootstrap 95% interval of the mean paired (by seed) difference
                    mixer - reference lies above -ACCURACY_MARGIN; if the reference did not
                    learn the task (accuracy < REFERENCE_LEARNS for some seed) the column is
                    inconclusive ('?') for every mixer
  depth             log-log slope of depth vs L over the grid <= PARALLEL_SLOPE: no faster
                    than ~log L (the reference: constant; a recurrence: ~1)
  state             decode-state bytes at the largest L <= the reference's
  time, memory      at the largest L <= COST_FACTOR x the reference's
Sizes: tiny (the tests: seconds), quick (every built-in at D = 32, V = 32, one task: recall
K = 4 at L = 32, batch 32, 3 seeds, 600 steps that do not grow; the other tasks' columns are
left out), full (every task; widths D in
{16, 32, 64}: the recall-vs-state plot gets a curve per mixer; L up to 64, the four learning
rates of protocol.FULL_LEARNING_RATES, 2,000 steps growing to at most 4,000), accel (Zoology's
V = 8192 setting, L up to 256 trained at batch 128 and 16384 for the costs). Each arm follows the
protocol's plateau rule: a row still learning at its cap is marked '(learning)' and read as
'?'.
Measured numbers: docs/experiments.md.
"""

import inspect
import json
import math
import os
import sys
import time

import matplotlib
import ml_collections
import numpy as np

from experiments import cli, harness, orderings, protocol, report, sizes
from jaxformer import ladder, mixers
from jaxformer.mixers import plug

NAME = "scorecard"
USAGE = 2  # exit code of a usage error (bad flag, a mixer that breaks the contract)

# Thresholds of the marks, fixed before any run (see the docstring).
ACCURACY_MARGIN = 0.05
REFERENCE_LEARNS = 0.8
PARALLEL_SLOPE = 0.5
COST_FACTOR = 1.5
FIXED_STATE_SLOPE = 0.1  # state bytes slope (two largest L) <= this: "fixed" in the table


def get_config(size="quick"):
  c = ml_collections.ConfigDict()
  c.builtins = tuple(mixers.BUILTINS)  # built-in mixers scored beside any user mixer
  # True: each built-in of mixers.STATE_SWEEPS at each of its state sizes, one row each
  # ('mamba2 state=8'), so each is a curve on the recall-vs-state plot
  c.state_sweep = False
  c.widths = (32,)  # D of every model; several widths give the recall-vs-state curves
  c.num_layers = 2
  c.ff_per_width = 2  # d_ff = this x D
  c.vocab_size = 32  # the model's V (every task's ids fit); small V: recall forms early
  # Quick trains one recall task (a field set to () is not trained; the others train at the
  # full size): with the twelve built-ins, five tasks at batch 64 growing to 1,000 steps took
  # hours on 2 cores, and recall K = 4 and 8 at batch 32 and 600 steps 17 min 52 s, with the
  # reference at 0.65 on K = 8, still learning on 2 of 3 seeds (docs/experiments.md).
  c.recall = ((4, 32),)  # MQAR (K pairs, L), random_non_queries=false; full: K up to 16
  c.noisy = ()  # MQAR (K, L) with random ids in the query region; full: (8, 64)
  c.selective_copy = ()  # (tokens to copy, L, task V); full: (8, 64, 16)
  c.needle = ()  # (L, distances); full: (64, (4, 12, 48))
  c.seeds = (0, 1, 2)
  c.learning_rates = (3e-3,)
  c.weight_decays = (0.1,)
  # Batch 32: the reference learned recall K = 4 at L = 32 on all 3 seeds (0.99, early stop)
  # in 15 s (sizing run, 2026-12-02); batch 64 was sized for noisy recall and selective copy.
  c.batch_size = 32
  c.total_steps = 600  # the budget per arm; early stop at early_stop_accuracy
  # The protocol's budget rule (experiments/protocol.py): an arm still learning over the last
  # half of its budget trains again at twice the steps, up to step_cap, so that the reference
  # (and every mixer) is read at its plateau; one still learning at the cap is reported so.
  # Quick does not grow (the cap is its budget): a row still learning reads '?'.
  c.step_cap = 600
  c.warmup_steps = 30
  c.eval_every = 50
  c.early_stop_accuracy = 0.98
  c.num_examples = 20_000
  c.num_test_examples = 512  # halves: validation (selection, early stop) and eval
  c.data_seed = 0
  c.depth_lengths = (32, 256, 4096)  # L of the depth measurement (lowering only)
  c.depth_batch = 4
  c.state_lengths = (32, 512, 4096)  # L of the decode-state bytes (shapes only)
  c.cost_lengths = (64, 512)  # L of the timed, compiled train step
  c.cost_batch = 1
  c.repeats = 5  # timed steps per (mixer, L) after a warm-up; the median is kept
  if size == "tiny":
    c.builtins = (mixers.REFERENCE,)
    c.widths, c.vocab_size, c.num_layers = (8,), 16, 1
    c.recall, c.noisy, c.selective_copy, c.needle = ((2, 16),), (2, 16), (4, 16, 8), (16, (2, 8))
    c.seeds, c.learning_rates = (0, 1), (3e-3,)
    c.batch_size, c.total_steps, c.eval_every, c.warmup_steps = 8, 2, 2, 1
    c.step_cap = 2
    c.num_examples, c.num_test_examples = 64, 32
    c.depth_lengths, c.state_lengths, c.cost_lengths, c.repeats = (16, 64), (16, 64), (), 1
  elif size == "full":
    c.widths = (16, 32, 64)
    c.vocab_size = 64
    c.recall = ((2, 16), (8, 32), (16, 64))
    c.noisy, c.selective_copy, c.needle = (8, 64), (8, 64, 16), (64, (4, 12, 48))
    c.learning_rates = protocol.FULL_LEARNING_RATES
    c.batch_size, c.total_steps, c.eval_every = 64, 2000, 250
    c.step_cap = 4000
    c.depth_lengths = (32, 128, 512, 1024, 4096)
    c.state_lengths = (64, 512, 4096, 16384)
    c.cost_lengths = (128, 512, 2048)
  elif size == "accel":
    c.widths, c.vocab_size = (64, 128, 256), 8192
    c.recall = ((4, 64), (8, 128), (16, 256))
    c.noisy, c.selective_copy, c.needle = (16, 256), (16, 256, 16), (256, (4, 12, 240))
    c.learning_rates = sizes.ACCEL_LEARNING_RATES
    # Batch 128: compiled for v5e:2x4 at batch 256 (each mixer's largest sweep, 3 replicas a
    # chip), the eval step alone needed 14.1 GiB of a chip's 15.75, mamba2's train step 15.7,
    # and gla, deltanet and gated deltanet did not fit (17.0, 23.4, 23.9 GB of temporaries;
    # BENCHMARKS.md). Set before any accel run.
    c.batch_size, c.total_steps, c.eval_every, c.warmup_steps = 128, 20_000, 500, 1000
    c.step_cap = 40_000
    c.num_examples, c.num_test_examples = 100_000, 2000
    c.depth_lengths = (64, 512, 4096, 16384)
    c.state_lengths = (256, 4096, 16384, 65536)
    c.cost_lengths, c.cost_batch = (1024, 4096, 16384), 8
  else:
    sizes.check(size)
  return c


# --- the candidates ----------------------------------------------------------------------------


def candidate(mixer, fields=None):
  """(name, spec, fields) of a built-in name, a spec string or a Module class; MixerError if
  it cannot be named or loaded."""
  fields = dict(fields or {})
  if isinstance(mixer, str) and mixer in mixers.BUILTINS:
    spec, defaults = mixers.BUILTINS[mixer]
    return mixer, spec, defaults | fields
  if isinstance(mixer, str):
    spec = mixer
    if ":" in spec and (spec.rpartition(":")[0].endswith(".py") or "/" in spec):
      where, _, cls_name = spec.rpartition(":")
      spec = f"{os.path.abspath(where)}:{cls_name}"  # a file: the same one from any cwd
    cls = mixers.load(spec)
  elif inspect.isclass(mixer):
    cls, spec = mixer, mixers.spec_of(mixer)
  else:
    raise mixers.MixerError(f"mixer {mixer!r}: expected a spec string or a Module class")
  return cls.__name__, spec, fields


def candidates(config, mixer=None, fields=None):
  """[(name, spec, fields)], the reference first, then the other built-ins, then `mixer`."""
  unknown = [b for b in config.builtins if b not in mixers.BUILTINS]
  if unknown:
    raise mixers.MixerError(
      f"builtins: unknown mixer {unknown[0]!r}; built-ins: {', '.join(mixers.BUILTINS)}"
    )
  names = [mixers.REFERENCE] + [b for b in config.builtins if b != mixers.REFERENCE]
  out = []
  for name in names:
    out += swept(*candidate(name)) if config.get("state_sweep") else [candidate(name)]
  if mixer is not None:
    name, spec, own = candidate(mixer, fields)
    if name in names:
      name = f"{name} (yours)"
    out.append((name, spec, own))
  elif fields:
    raise mixers.MixerError("mixer fields given without a mixer")
  return out


def swept(name, spec, fields):
  """[(name, spec, fields)] of a built-in at each state size of mixers.STATE_SWEEPS
  ('mamba2 state=8', ...), or the built-in alone when it has no sweep."""
  if name not in mixers.STATE_SWEEPS:
    return [(name, spec, fields)]
  field, values = mixers.STATE_SWEEPS[name]
  return [(f"{name} {field}={v}", spec, fields | {field: v}) for v in values]


def family(name):
  """The built-in a swept row belongs to ('mamba2 state=8' -> 'mamba2')."""
  base, _, rest = name.partition(" ")
  if base in mixers.STATE_SWEEPS and rest.startswith(mixers.STATE_SWEEPS[base][0] + "="):
    return base
  return name


def check_all(config, cands, log=print):
  """Runs the contract on every candidate at every width (the user's mixer, last in
  `cands`, first: a broken one stops the run at once); returns {name: check info}."""
  import jax

  info = {}
  for name, spec, fields in reversed(cands):
    cls = mixers.load(spec)
    for width in config.widths:
      info[name] = mixers.check(cls, fields, width)
    log(f"  contract: {name} ok ({'decodes' if info[name]['decode'] else 'no decode'})")
    note = plug.unnamed_note(name, info[name]["unnamed"], jax.device_count())
    if note:  # before training: the sweep lays its replicas over every device
      log(f"  {note}")
  return info


# --- the trained battery -------------------------------------------------------------------


def tasks(config):
  """{setting: task spec} of every trained task (the settings are the table's columns)."""
  V, out = config.vocab_size, {}
  data = f"num_examples={config.num_examples},num_test_examples={config.num_test_examples}"
  data += f",seed={config.data_seed}"

  def mqar(pairs, length, noisy):
    flag = "true" if noisy else "false"
    return (
      f"mqar:vocab_size={V},seq_len={length},num_kv_pairs={pairs},random_non_queries={flag}," + data
    )

  for pairs, length in config.recall:
    out[f"recall K={pairs} L={length}"] = mqar(pairs, length, False)
  if config.noisy:
    pairs, length = config.noisy
    out[f"noisy recall K={pairs} L={length}"] = mqar(pairs, length, True)
  if config.selective_copy:
    tokens, length, vocab = config.selective_copy
    out[f"selective copy n={tokens} L={length}"] = (
      f"selective_copy:vocab_size={vocab},seq_len={length},num_tokens={tokens}," + data
    )
  if config.needle:
    length, distances = config.needle
    for d in distances:
      out[f"needle d={d} L={length}"] = (
        f"needle:vocab_size={V},seq_len={length},distance={d}," + data
      )
  return out


def max_len(config):
  lengths = [length for _, length in config.recall]
  lengths += [config.noisy[1]] if config.noisy else []
  lengths += [config.selective_copy[1]] if config.selective_copy else []
  lengths += [config.needle[0]] if config.needle else []
  return max(lengths)


def model_fields(config, spec, fields, width, length=None):
  """The custom rung's model fields: the mixer in the transformer's block at width D."""
  return {
    "mixer": spec,
    "mixer_fields": json.dumps(fields, sort_keys=True),
    "d_model": width,
    "num_layers": config.num_layers,
    "d_ff": config.ff_per_width * width,
    "vocab_size": config.vocab_size,
    "max_len": length or max_len(config),
  }


def row(name, width, config):
  """The row name of a mixer at a width (the width only when several are scored)."""
  return name if len(config.widths) == 1 else f"{name} D={width}"


def mixer_of(row_name):
  """The mixer a row belongs to, its width and state size dropped ('mamba2 state=8 D=64' ->
  'mamba2')."""
  base, sep, width = row_name.rpartition(" D=")
  return family(base if sep and width.isdigit() else row_name)


def arms(config, cands):
  out = []
  for width in config.widths:
    for name, spec, fields in cands:
      model = model_fields(config, spec, fields, width)
      for setting, task in tasks(config).items():
        out.append(protocol.Arm(row(name, width, config), setting, ladder.CUSTOM, task, model))
  return out


# --- the measured battery ------------------------------------------------------------------


def _train_config(config, spec, fields, width, length):
  return harness.train_config(
    ladder.CUSTOM,
    f"mqar:vocab_size={config.vocab_size},seq_len={length}",  # names the shapes only
    model_fields(config, spec, fields, width, length),
  )


def slope(xs, ys):
  """Least-squares slope of log y vs log x: the growth exponent (0 flat, 1 linear)."""
  xs, ys = np.log(np.asarray(xs, float)), np.log(np.maximum(np.asarray(ys, float), 1e-30))
  return float(np.polyfit(xs, ys, 1)[0]) if len(xs) > 1 else math.nan


def last_slope(xs, ys):
  """Log-log slope between the two largest x."""
  if len(xs) < 2 or min(ys[-2:]) <= 0:
    return 0.0 if len(xs) >= 2 and ys[-1] == ys[-2] else math.nan
  return float(math.log(ys[-1] / ys[-2]) / math.log(xs[-1] / xs[-2]))


def measure_programs(config, cands, log=print):
  """Depth, decode-state bytes, step cost and parameters of every mixer (widest D)."""
  from jaxformer.analysis import cost, depth

  width = max(config.widths)
  out = {"depth": {}, "state_bytes": {}, "cost": {}, "params": {}}
  for name, spec, fields in cands:
    d = {"L": list(config.depth_lengths), "depth": [], "flops": [], "loops": [], "dynamic": []}
    for length in config.depth_lengths:
      tc = _train_config(config, spec, fields, width, length)
      m = depth.train_step(tc, (config.depth_batch, length))
      d["depth"].append(m.depth)
      d["flops"].append(m.flops)
      d["loops"].append(m.loop_trips)
      d["dynamic"].append(m.dynamic_loops)
    d["parallelism"] = [f / max(x, 1) for f, x in zip(d["flops"], d["depth"], strict=True)]
    d["slope"] = slope(d["L"], d["depth"])
    out["depth"][name] = d
    states = []
    for length in config.state_lengths:
      model = ladder.build(ladder.CUSTOM, _train_config(config, spec, fields, width, length).model)
      try:
        states.append(cost.decode_state_bytes(model, length))
      except plug.MixerError:  # a mixer without decode: no state to measure
        states.append(math.nan)
    out["state_bytes"][name] = {
      "L": list(config.state_lengths),
      "bytes": states,
      "slope": last_slope(config.state_lengths, states),
    }
    c = {"L": list(config.cost_lengths), "peak_bytes": [], "seconds": [], "cpu_seconds": []}
    for length in config.cost_lengths:
      tc = _train_config(config, spec, fields, width, length)
      m = cost.train_step(tc, (config.cost_batch, length), repeats=config.repeats)
      for key in ("peak_bytes", "seconds", "cpu_seconds"):
        c[key].append(m[key])
    out["cost"][name] = c
    length = max_len(config)
    model = ladder.build(ladder.CUSTOM, _train_config(config, spec, fields, width, length).model)
    out["params"][name] = cost.param_count(model, (1, length))
    log(
      f"  {name}: depth {d['depth']} at L={d['L']}; state bytes {states}; step "
      f"{[round(1e3 * s, 2) for s in c['cpu_seconds']]} cpu-ms, "
      f"{[round(b / 2**20, 1) for b in c['peak_bytes']]} MiB at L={c['L']}"
    )
  return out


# --- marks: does a mixer reach the reference's level? --------------------------------------


def finished(metrics, r, setting):
  """Every seed of row r on `setting` finished learning (the protocol's plateau rule)."""
  return all(s in protocol.FINISHED for s in metrics["plateau"][r][setting])


def controls(metrics, config):
  """Per trained setting: the reference learned it, and finished learning (else its column is
  inconclusive)."""
  out = {}
  for width in config.widths:
    ref = row(mixers.REFERENCE, width, config)
    for setting in tasks(config):
      c = report.every_seed(
        f"the reference ({ref}) learns {setting}: accuracy >= {REFERENCE_LEARNS}",
        metrics["accuracy"][ref][setting],
        lambda a: a >= REFERENCE_LEARNS,
      )
      if not finished(metrics, ref, setting):
        c.unresolved(f"still learning at {metrics['budget'][ref][setting]} steps")
      out[(width, setting)] = c
  return out


def marks(metrics, config):
  """{row: {column: {'value', 'reaches' (True / False / None: inconclusive), 'rule'}}}."""
  control = controls(metrics, config)
  names = list(metrics["mixers"])
  out = {}
  for width in config.widths:
    ref = row(mixers.REFERENCE, width, config)
    for name in names:
      r = row(name, width, config)
      cells = {}
      for setting in tasks(config):
        acc = metrics["accuracy"][r][setting]
        diff = [a - b for a, b in zip(acc, metrics["accuracy"][ref][setting], strict=True)]
        crit = report.mean_above(f"{r} vs {ref} on {setting}", diff, -ACCURACY_MARGIN)
        done = finished(metrics, r, setting)
        reaches = crit.passed if control[(width, setting)].passed and done else None
        cells[setting] = {
          "value": protocol.mean(acc),
          "per_seed": acc,
          "finished": done,
          "reaches": True if r == ref else reaches,
          "rule": crit.rule + f" (paired difference with {ref})",
          "ci95": crit.values["ci95"],
        }
      out[r] = cells
  widest = max(config.widths)
  ref = mixers.REFERENCE
  for name in names:
    r = row(name, widest, config)
    depth, state, cost = (metrics[k][name] for k in ("depth", "state_bytes", "cost"))
    cells = out[r]
    cells["depth slope"] = {
      "value": depth["slope"],
      "reaches": depth["slope"] <= PARALLEL_SLOPE,
      "rule": f"log-log slope of depth vs L <= {PARALLEL_SLOPE}",
    }
    ref_state = metrics["state_bytes"][ref]["bytes"][-1]
    cells["state bytes"] = {
      "value": state["bytes"][-1],
      "reaches": _le(state["bytes"][-1], ref_state),
      "rule": f"decode-state bytes at L={state['L'][-1]} <= the reference's ({ref_state})",
      "fixed": _le(state["slope"], FIXED_STATE_SLOPE),
    }
    for key, column in (("cpu_seconds", "step time"), ("peak_bytes", "memory")):
      if not cost["L"]:
        continue
      ref_value = metrics["cost"][ref][key][-1]
      cells[column] = {
        "value": cost[key][-1],
        "reaches": _le(cost[key][-1], COST_FACTOR * ref_value),
        "rule": f"at L={cost['L'][-1]} <= {COST_FACTOR} x the reference's ({ref_value:.4g})",
      }
    if name == ref:
      for cell in cells.values():
        cell["reaches"] = True
  return out


def _le(a, b):
  return bool(math.isfinite(a) and math.isfinite(b) and a <= b)


# --- the report ------------------------------------------------------------------------------


def _fmt_bytes(n):
  if not math.isfinite(n):
    return "n/a"
  for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
    if n >= size:
      return f"{n / size:.3g} {unit}"
  return f"{int(n)} B"


def _mark(reaches):
  return {True: "yes", False: "no", None: "?"}[reaches]


def table(metrics, config, card):
  """Rows of scorecard.md: the measured number and whether it reaches the reference."""
  rows = []
  widest = max(config.widths)
  for r, cells in card.items():
    name = r if len(config.widths) == 1 else r.rsplit(" D=", 1)[0]
    out = {"mixer": r, "params": metrics["params"].get(name, "")}
    for setting in tasks(config):
      c = cells[setting]
      out[setting] = f"{c['value']:.2f} {_mark(c['reaches'])}" + (
        "" if c["finished"] else " (learning)"
      )
    if f" D={widest}" in r or len(config.widths) == 1:
      d = cells["depth slope"]
      depth = metrics["depth"][name]
      out["depth (slope)"] = f"{depth['depth'][0]}->{depth['depth'][-1]} ({d['value']:.2f}) " + (
        _mark(d["reaches"])
      )
      s = cells["state bytes"]
      kind = "fixed" if s["fixed"] else "grows"
      out[f"state @L={metrics['state_bytes'][name]['L'][-1]}"] = (
        f"{_fmt_bytes(s['value'])} {kind} {_mark(s['reaches'])}"
      )
      if "step time" in cells:
        t, m = cells["step time"], cells["memory"]
        L = metrics["cost"][name]["L"][-1]
        out[f"step @L={L}"] = f"{1e3 * t['value']:.3g} ms {_mark(t['reaches'])}"
        out[f"memory @L={L}"] = f"{_fmt_bytes(m['value'])} {_mark(m['reaches'])}"
    rows.append(out)
  keys = list(dict.fromkeys(k for row_ in rows for k in row_))
  return [{k: row_.get(k, "") for k in keys} for row_ in rows]


def _orderings_lines(published):
  """scorecard.md's section on the published orderings: one line per reading."""
  if not published:
    return []
  lines = ["**Published orderings** (experiments/orderings.py: sources and rules).", ""]
  for name, check in published.items():
    lines.append(f"- `{name}`: **{check['verdict']}**")
    for c in check["readings"]:
      ci = c.values.get("ci95")
      interval = f", mean {c.values['mean']:.3f} CI95 [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
      note = f" ({c.note})" if c.note else ""
      lines.append(f"  - {c.description}: {c.verdict}{interval}{note}")
  return [*lines, ""]


def write(config, metrics, card, records, workdir, plots, seconds, size, published=None):
  os.makedirs(workdir, exist_ok=True)
  rules = {
    "accuracy": f"bootstrap 95% interval of the mean paired difference with the reference > "
    f"-{ACCURACY_MARGIN}; '?' where the reference did not reach {REFERENCE_LEARNS} on every seed",
    "depth": f"log-log slope of the train step's depth vs L <= {PARALLEL_SLOPE}",
    "state": "decode-state bytes at the largest L <= the reference's; 'fixed': slope between "
    f"the two largest L <= {FIXED_STATE_SLOPE}",
    "cost": f"step CPU time and compiled memory at the largest L <= {COST_FACTOR} x the "
    "reference's",
  }
  payload = {
    "size": size,
    "reference": mixers.REFERENCE,
    "config": json.loads(config.to_json()),
    "rules": rules,
    "metrics": report._jsonable(metrics),
    "marks": report._jsonable(card),
    "orderings": {
      name: {
        "verdict": check["verdict"],
        "readings": [report._criterion_json(c) for c in check["readings"]],
      }
      for name, check in (published or {}).items()
    },
    "runs": report._jsonable(records),
    "seconds": round(seconds, 1),
  }
  with open(os.path.join(workdir, "scorecard.json"), "w") as f:
    json.dump(payload, f, indent=2)
  platform = metrics["platform"]
  lines = [
    "# jaxformer scorecard: every sequence mixer through every design pressure",
    "",
    f"Size {size}, generated {time.strftime('%Y-%m-%d %H:%M')} in {seconds:.0f} s on "
    f"{platform}. Every mixer sits in the same block (pre-norm, split skip, MLP of "
    f"{config.ff_per_width} D, learned positions, {config.num_layers} layers, D in "
    f"{list(config.widths)}); the reference row is `{mixers.REFERENCE}`, the Transformer's "
    "attention. Each cell: the measured number, then whether it reaches the reference "
    "(yes / no / ? inconclusive).",
    "",
    report.markdown_table(table(metrics, config, card)),
    "",
    "Accuracy: mean over seeds "
    f"{list(config.seeds)} of the eval half at the learning rate selected on validation; "
    "depth: dependent operations of the train step at the smallest -> largest L of "
    f"{list(config.depth_lengths)} (batch {config.depth_batch}); state: decode-state bytes of "
    f"one sequence; step / memory: a batch-{config.cost_batch} train step, median process "
    f"CPU time of {config.repeats} and XLA's compiled memory ({platform}).",
    "",
    "**Rules.**",
    "",
    *[f"- {k}: {v}" for k, v in rules.items()],
    "",
    *_orderings_lines(published),
    "**Mixers.**",
    "",
    *[
      f"- `{n}`: `{m['spec']}` fields {json.dumps(m['fields'], sort_keys=True)}, "
      f"{'decodes' if m['decode'] else 'no decode'}"
      for n, m in metrics["mixers"].items()
    ],
    "",
    *[f"![{p}]({p})" for p in plots],
    "",
  ]
  with open(os.path.join(workdir, "scorecard.md"), "w") as f:
    f.write("\n".join(lines))


MARKERS = "osD^vP*Xp<>h"


def plot(config, metrics, workdir):
  plots = []
  # recall vs decode-state bytes at the task's L: the Zoology / Based trade-off
  pairs, length = config.recall[-1]
  panels = [(f"recall K={pairs} L={length}", length)]
  if config.noisy:
    noisy_k, noisy_l = config.noisy
    panels.append((f"noisy recall K={noisy_k} L={noisy_l}", noisy_l))
  fig = harness.figure(cols=len(panels) + 0.5)  # the half: the legend, outside the points
  families = list(dict.fromkeys(family(name) for name in metrics["mixers"]))
  colors = matplotlib.colormaps["tab20"].colors
  style = {  # one colour and marker per mixer, the same in every panel (12 built-ins > tab10)
    f: {"color": colors[i % len(colors)], "marker": MARKERS[i % len(MARKERS)]}
    for i, f in enumerate(families)
  }
  for i, (setting, task_length) in enumerate(panels):
    ax = fig.add_subplot(1, len(panels), i + 1)
    curves = {}  # a mixer's rows at every state size and width: one curve
    for name in metrics["mixers"]:
      for w in config.widths:
        x = metrics["task_state_bytes"][name][str(w)][str(task_length)]
        y = metrics["accuracy"][row(name, w, config)][setting]
        curves.setdefault(family(name), []).append((x, y))
    for label, points in curves.items():
      if all(math.isfinite(x) for x, _ in points):
        points.sort(key=lambda p: p[0])
        xs, ys = [x for x, _ in points], [y for _, y in points]
        protocol.spread(ax, xs, ys, label, **style[label])
    ax.axhline(metrics["chance"][setting], color="gray", linestyle=":", label="chance")
    ax.set_xscale("log", base=2)
    ax.set(xlabel=f"decode-state bytes of one sequence (L={task_length})", ylim=(-0.02, 1.02))
    ax.set_ylabel("eval accuracy (points: seeds)")
    ax.set_title(setting)
  fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize="small")
  plots.append(harness.save(fig, workdir, f"{NAME}_recall_vs_state.png"))
  # the pressures vs L
  fig = harness.figure(cols=4.5)
  axes = fig.subplots(1, 4)
  for name in metrics["mixers"]:
    d, s, c = (metrics[k][name] for k in ("depth", "state_bytes", "cost"))
    kw = {"label": name} | style[family(name)]
    axes[0].plot(d["L"], d["depth"], **kw)
    axes[1].plot(s["L"], s["bytes"], **kw)
    if c["L"]:
      axes[2].plot(c["L"], [1e3 * t for t in c["cpu_seconds"]], **kw)
      axes[3].plot(c["L"], [b / 2**20 for b in c["peak_bytes"]], **kw)
  titles = ("train-step depth (dependent ops)", "decode-state bytes", "step CPU ms", "MiB")
  for ax, title in zip(axes, titles, strict=True):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="L", title=title)
  fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="small")
  plots.append(harness.save(fig, workdir, f"{NAME}_vs_length.png"))
  return plots


# --- the whole run ---------------------------------------------------------------------------


def run(mixer=None, fields=None, size="quick", workdir="runs/scorecard", config=None, log=print):
  """Scores `mixer` (a spec string, a Module class or None: the built-ins alone) and the
  built-ins; writes scorecard.md / .json and plots under workdir; returns
  {'metrics', 'marks', 'table', 'controls'}. Raises MixerError before any training for a
  mixer that breaks the contract."""
  import jax

  start = time.time()
  config = config or get_config(size)
  cands = candidates(config, mixer, fields)
  info = check_all(config, cands, log)
  store = os.path.join(workdir, protocol.SWEEPS)
  trained = protocol.train(arms(config, cands), config, log, store=store)
  metrics = trained.metrics()
  metrics["mixers"] = {name: {"spec": spec, "fields": f, **info[name]} for name, spec, f in cands}
  metrics["tasks"] = tasks(config)
  metrics["platform"] = f"{jax.devices()[0].platform} ({jax.devices()[0].device_kind})"
  metrics |= measure_programs(config, cands, log)
  metrics["task_state_bytes"] = _task_states(config, cands)
  card = marks(metrics, config)
  ctl = controls(metrics, config)
  published = published_orderings(metrics, config, ctl)
  plots = plot(config, metrics, workdir)
  seconds = time.time() - start
  write(config, metrics, card, trained.records(), workdir, plots, seconds, size, published)
  return {
    "metrics": metrics,
    "marks": card,
    "table": table(metrics, config, card),
    "controls": {f"D={w} {s}": c for (w, s), c in ctl.items()},
    "orderings": published,
  }


def published_orderings(metrics, config, ctl):
  """{check: {'verdict', 'readings'}} of experiments.orderings at the widest D (where decode
  state is measured), from this run's numbers."""
  widest = max(config.widths)
  view = orderings.at_width(metrics, widest, config.widths)
  learned = {s: c for (w, s), c in ctl.items() if w == widest}
  ref = mixers.REFERENCE
  checks = orderings.check(view, mixers.STATE_SWEEPS, ref, FIXED_STATE_SLOPE, learned)
  for readings in checks.values():  # the protocol's plateau rule: a row still learning
    for c in readings:
      for name, setting in c.reads:
        r = row(name, widest, config)
        if not finished(metrics, r, setting):
          c.unresolved(
            f"still learning at {metrics['budget'][r][setting]} steps: {name} @ {setting}"
          )
          break
  return {
    name: {"verdict": orderings.verdict(readings), "readings": readings}
    for name, readings in checks.items()
  }


def _task_states(config, cands):
  """{name: {width: {L: decode-state bytes}}} at every trained task length."""
  from jaxformer.analysis import cost

  lengths = {length for _, length in config.recall}
  lengths = sorted(lengths | ({config.noisy[1]} if config.noisy else set()))
  out = {}
  for name, spec, fields in cands:
    out[name] = {}
    for width in config.widths:
      model = ladder.build(
        ladder.CUSTOM, _train_config(config, spec, fields, width, max(lengths)).model
      )
      per = {}
      for length in lengths:
        try:
          per[str(length)] = cost.decode_state_bytes(model, length)
        except plug.MixerError:
          per[str(length)] = math.nan
      out[name][str(width)] = per
  return out


# --- the command line --------------------------------------------------------------------------


def _define(values, argv):
  define = cli.definer(values)

  define("string", "mixer_class", None, "'package.module:Class' or 'path/to/file.py:Class'.")
  define("enum", "size", "quick", "tiny (tests), quick, full, accel.", protocol.SIZES)
  define("string", "workdir", "runs/scorecard", "Where scorecard.md, .json and the plots go.")
  define("list", "builtins", None, "Comma-separated built-ins (default: all of them).")
  define("bool", "state_sweep", False, "Each built-in at several state sizes.")
  define("bool", "debug", False, "Show tracebacks of usage errors.")
  define(
    "string",
    "compile_only",
    None,
    "Compile the trained arms' sweep programs for TARGET (v5e:2x4, gpu:FILE,topology=1x1x8) "
    "without running anything (experiments/compile_all.py).",
  )
  define(
    "integer",
    "compile_limit",
    0,
    "With --compile_only: at most this many distinct sweep programs of each mixer (its widths "
    "and state sizes together), largest first (1: each mixer's largest; 0: all).",
    lower_bound=0,
  )
  given = [a for a in argv[1:] if a.startswith("--mixer=")]
  if given:
    raise cli.UsageError(
      f"{given[0]}: the mixer is --mixer_class={given[0][len('--mixer=') :]}; "
      "--mixer.FIELD=VALUE sets its fields"
    )
  size = cli.pre_parse(argv, "size", "quick", protocol.SIZES)
  help_string = "The scorecard's config at --size (--config.FIELD=VALUE sets a field)."
  cli.config_flag(values, argv, "config", get_config(size), help_string)
  help_string = "Fields of the mixer: --mixer.FIELD=VALUE (a Python literal, else a string)."
  cli.config_flag(values, argv, "mixer", ml_collections.ConfigDict(), help_string, new_fields=True)


def main(argv=None):
  """`python -m experiments.scorecard`; argv: the arguments after the program name (None:
  sys.argv's). Returns the exit code."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest} (mixer fields: --mixer.FIELD=VALUE)")
  config, fields = values.config, values.mixer.to_dict()
  if values.builtins is not None:
    config.builtins = tuple(values.builtins)
  if values.state_sweep:
    config.state_sweep = True
  if values.compile_only is not None:
    from experiments import compile_all

    return compile_all.scorecard(
      config,
      values.mixer_class,
      fields,
      values.size,
      values.compile_only,
      values.workdir,
      limit=values.compile_limit or None,
    )
  try:
    card = run(values.mixer_class, fields, values.size, values.workdir, config)
  except (mixers.MixerError, ladder.ConfigError) as e:
    if values.debug:
      raise
    print(f"error: {cli.first_line(e)}", file=sys.stderr)
    return USAGE
  print(report.markdown_table(card["table"]))
  print(f"scorecard: {os.path.join(values.workdir, 'scorecard.md')}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
