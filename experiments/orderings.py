"""Published orderings of the scorecard's successors, as checks with verdicts.

Each check states an ordering a paper reports on associative recall (MQAR), computed from a
scorecard run's metrics (experiments/scorecard.py) with the protocol's interval rules
(experiments/report.py): a paired difference over seeds whose bootstrap 95% interval lies
above 0 is SUPPORTED, at or below 0 REFUTED, straddling 0 UNRESOLVED. Written before any
full scorecard run; a mismatch is reported as REFUTED with its numbers.

  delta_rule_recalls_more   at equal decode state (read as: linear attention or RetNet given
                            no less state), the delta-rule mixers (deltanet, gated_deltanet)
                            recall more than linear attention and RetNet on the hardest
                            recall task (Yang et al. 2024, "Parallelizing Linear
                            Transformers with the Delta Rule over Sequence Length", MQAR).
  mamba2_state_helps        Mamba-2 with its largest swept state recalls more than with its
                            smallest (Dao and Gu 2024, "Transformers are SSMs", MQAR).
  fixed_state_falls_behind  each fixed-state mixer's gap to attention (reference - mixer)
                            grows from the easiest recall task to the hardest (Zoology, Arora
                            et al. 2023, Fig. 2; Based, Arora et al. 2024, Fig. 2).
  gap_shrinks_with_state    on the hardest recall task each swept fixed-state mixer's gap to
                            attention is smaller at its largest state than at its smallest
                            (the same figures).

A check whose rows were not trained (no state sweep, a built-in left out) or whose reference
did not learn the task is UNRESOLVED with the reason, never SUPPORTED.
"""

from experiments import report

DELTA_RULE = ("deltanet", "gated_deltanet")
LINEAR = ("linear", "retnet")
MAMBA = "mamba2"
CHECKS = (
  "delta_rule_recalls_more",
  "mamba2_state_helps",
  "fixed_state_falls_behind",
  "gap_shrinks_with_state",
)


def recall_settings(metrics):
  """The trained plain-recall settings, easiest (fewest pairs K) first."""
  settings = [s for s in metrics["tasks"] if s.startswith("recall K=")]
  return sorted(settings, key=lambda s: (int(s.split()[1][2:]), s))


def _unresolved(description, name, note):
  return report.Criterion(description, verdict=report.UNRESOLVED, name=name, note=note)


def _rows(metrics, family, sweeps):
  """{state value or None: row name} of a built-in family's trained rows at one width: its
  swept rows ('mamba2 state=8'), else the plain row."""
  field = sweeps.get(family, (None,))[0]
  out = {}
  for row in metrics["accuracy"]:
    base, _, rest = row.partition(" ")
    if base != family:
      continue
    if field and rest.startswith(f"{field}="):
      out[int(rest.split()[0].split("=")[1])] = row
    elif not rest:
      out[None] = row
  return out


def _state(metrics, row):
  """Decode-state bytes of a row's mixer at the largest measured L (the table's number)."""
  return metrics["state_bytes"].get(row, {}).get("bytes", [float("nan")])[-1]


def _gap(metrics, reference, row, setting):
  """reference - row accuracy per seed on `setting`."""
  ref, acc = metrics["accuracy"][reference][setting], metrics["accuracy"][row][setting]
  return [a - b for a, b in zip(ref, acc, strict=True)]


def _gap_grows(description, name, metrics, reference, a, b, controls):
  """The gap to the reference of (row, setting) `a` - that of `b`, paired by seed, above 0;
  UNRESOLVED where the reference did not learn a setting either reads."""
  settings = list(dict.fromkeys((a[1], b[1])))
  if not all(_reference_learned(controls or {}, s) for s in settings):
    what = "the task" if len(settings) == 1 else "both tasks"
    return _unresolved(description, name, f"the reference did not learn {what}")
  change = [
    x - y for x, y in zip(_gap(metrics, reference, *a), _gap(metrics, reference, *b), strict=True)
  ]
  return report.mean_above(description, change, 0.0, name=name, reads=[a, b])


def _reference_learned(controls, setting):
  control = controls.get(setting)
  return control is None or control.passed


def delta_rule_recalls_more(metrics, sweeps):
  """Per delta-rule row and compared family (linear attention, RetNet): the compared family's
  smallest row holding at least the delta-rule row's decode state (its state sizes do not
  line up with the delta rule's at the same head_dim, so "equal state" is read as "no less
  state for the compared mixer"); accuracy difference on the hardest recall task, paired by
  seed, above 0. A pair whose compared family has no row with that much state is not read;
  UNRESOLVED when no pair can be, naming them."""
  name, out, unmatched = "delta_rule_recalls_more", [], []
  hardest = recall_settings(metrics)[-1]
  for delta in DELTA_RULE:
    for a in _rows(metrics, delta, sweeps).values():
      for other in LINEAR:
        candidates = sorted(
          (_state(metrics, b), b)
          for b in _rows(metrics, other, sweeps).values()
          if _state(metrics, b) >= _state(metrics, a)
        )
        if not candidates:
          if _rows(metrics, other, sweeps):
            unmatched.append(f"{a} ({_state(metrics, a):g} B) vs {other}")
          continue
        b = candidates[0][1]
        out.append(
          report.paired_above(
            f"{a} ({_state(metrics, a):g} B) recalls more than {b} ({_state(metrics, b):g} B) "
            f"on {hardest}",
            metrics["accuracy"][a][hardest],
            metrics["accuracy"][b][hardest],
            0.0,
            name=name,
            reads=[(a, hardest), (b, hardest)],
          )
        )
  if not out:
    note = "no compared row holds as much state: " + "; ".join(unmatched) if unmatched else ""
    return [_unresolved("delta-rule vs linear attention / RetNet", name, note or "not trained")]
  return out


def mamba2_state_helps(metrics, sweeps):
  """Mamba-2 at its largest swept state - at its smallest, on the hardest recall task."""
  name = "mamba2_state_helps"
  hardest = recall_settings(metrics)[-1]
  rows = {v: r for v, r in _rows(metrics, MAMBA, sweeps).items() if v is not None}
  if len(rows) < 2:
    return [_unresolved("Mamba-2: a larger state recalls more", name, "no state sweep trained")]
  small, large = rows[min(rows)], rows[max(rows)]
  return [
    report.paired_above(
      f"{large} recalls more than {small} on {hardest}",
      metrics["accuracy"][large][hardest],
      metrics["accuracy"][small][hardest],
      0.0,
      name=name,
      reads=[(large, hardest), (small, hardest)],
    )
  ]


def _fixed_families(metrics, sweeps, reference, fixed_slope):
  """The built-in families whose decode state stays fixed as L grows (the scorecard's
  'fixed' mark: the state bytes' log-log slope between the two largest L <= fixed_slope)."""
  out = []
  for family in sweeps:
    rows = _rows(metrics, family, sweeps)
    slopes = [metrics["state_bytes"].get(r, {}).get("slope", float("nan")) for r in rows.values()]
    if rows and all(slope <= fixed_slope for slope in slopes):
      out.append(family)
  return [f for f in out if f != reference]


def fixed_state_falls_behind(metrics, sweeps, reference, fixed_slope, controls=None):
  """Each fixed-state family at its largest state: gap to the reference on the hardest
  recall task - on the easiest, paired by seed, above 0."""
  name, out = "fixed_state_falls_behind", []
  settings = recall_settings(metrics)
  if len(settings) < 2:
    return [_unresolved("fixed-state mixers fall behind as K grows", name, "one recall task")]
  easy, hard = settings[0], settings[-1]
  for family in _fixed_families(metrics, sweeps, reference, fixed_slope):
    rows = _rows(metrics, family, sweeps)
    row = rows[max(rows, key=lambda v: (v is not None, v or 0))]
    description = f"{row}: its gap to {reference} grows from {easy} to {hard}"
    reading = (row, hard), (row, easy)
    out.append(_gap_grows(description, name, metrics, reference, *reading, controls))
  return out or [_unresolved("fixed-state mixers fall behind", name, "no fixed-state rows")]


def gap_shrinks_with_state(metrics, sweeps, reference, fixed_slope, controls=None):
  """Each swept fixed-state family on the hardest recall task: gap at its smallest state -
  gap at its largest, paired by seed, above 0."""
  name, out = "gap_shrinks_with_state", []
  hard = recall_settings(metrics)[-1]
  for family in _fixed_families(metrics, sweeps, reference, fixed_slope):
    rows = {v: r for v, r in _rows(metrics, family, sweeps).items() if v is not None}
    if len(rows) < 2:
      continue
    small, large = rows[min(rows)], rows[max(rows)]
    description = f"{family}: its gap to {reference} on {hard} shrinks from {small} to {large}"
    reading = (small, hard), (large, hard)
    out.append(_gap_grows(description, name, metrics, reference, *reading, controls))
  return out or [_unresolved("the gap shrinks with state", name, "no state sweep trained")]


def at_width(metrics, width, widths):
  """The metrics with the rows trained at `width` under their bare names ('linear D=32' ->
  'linear'), as the scorecard names rows when it trains several widths."""
  if len(widths) == 1:
    return metrics
  suffix = f" D={width}"
  rows = {r[: -len(suffix)]: v for r, v in metrics["accuracy"].items() if r.endswith(suffix)}
  return {**metrics, "accuracy": rows}


def check(metrics, sweeps, reference, fixed_slope, controls=None):
  """{check name: [Criterion]} of every published ordering on one width's rows (at_width: the
  scorecard measures decode state at its widest D, so it reads that one); controls:
  {setting: the reference-learns Criterion} at that width."""
  return {
    "delta_rule_recalls_more": delta_rule_recalls_more(metrics, sweeps),
    "mamba2_state_helps": mamba2_state_helps(metrics, sweeps),
    "fixed_state_falls_behind": fixed_state_falls_behind(
      metrics, sweeps, reference, fixed_slope, controls
    ),
    "gap_shrinks_with_state": gap_shrinks_with_state(
      metrics, sweeps, reference, fixed_slope, controls
    ),
  }


def verdict(criteria):
  """One check's verdict over its readings: REFUTED if any is, else UNRESOLVED if any is,
  else SUPPORTED."""
  verdicts = {c.verdict for c in criteria}
  if report.REFUTED in verdicts:
    return report.REFUTED
  return report.UNRESOLVED if report.UNRESOLVED in verdicts or not verdicts else report.SUPPORTED
