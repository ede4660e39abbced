"""The summary: one small panel per trained claim, in the article's order, drawing the curve
that decides it (`figure`), and the report a person reads in five minutes (`report`).

A claim's panel draws its deciding criterion (the first whose verdict is the claim's, one
along the experiment's axis first): its metric along the axis, or across the arms it names
without one (lines: means over the confirmatory seeds; dots: seeds). The criterion's arm is
bold, its `against` (a gain's untrained reading) a second colour, its positive and
falsification arms faint; dashed, where the arm must lie (the threshold, or against +, x
threshold); dotted, chance, the untrained reading or zero. Experiment.panel replaces it
where it cannot show a claim well. `python -m experiments.engine summary` draws the committed
records to docs/img/claims.png, and docs/img/claims.json holds their hash: a test fails when
the records change and the figure is not redrawn.
"""

import hashlib
import json
import os
import textwrap

import numpy as np

from experiments import claims as claims_lib
from experiments import harness
from experiments.engine import catalog, declare, figures, judge, page, records, stats

FIGURE = os.path.join(harness.REPO_ROOT, "docs", "img", "claims.png")
SIDECAR = os.path.join(harness.REPO_ROOT, "docs", "img", "claims.json")
RESULTS = os.path.join(harness.REPO_ROOT, "results")
SIZES = ("full", "accel", "quick")  # the first on file is drawn
TRAINED = tuple(c for c in claims_lib.CLAIMS if c.kind == "trained")
VERDICT_COLORS = {stats.SUPPORTED: "#1b7837", stats.REFUTED: "#b2182b",
                  stats.UNRESOLVED: "#c06c00", stats.INCONCLUSIVE: "#666666"}  # fmt: skip
STYLE = {"strong": dict(color="#2166ac", linewidth=2.0, zorder=4),
         "weak": dict(color="#d6604d", linewidth=2.0, zorder=4),
         "positive": dict(color="#9ecae1", linewidth=1.2, zorder=3),
         "falsification": dict(color="#f4a582", linewidth=1.2, zorder=3)}  # fmt: skip
THRESHOLD = dict(color="black", linestyle="--", linewidth=1.0, gid="threshold")
REFERENCE = dict(color="0.45", linestyle=":", linewidth=1.0)
SIGNS = {">=": "\u2265", "<=": "\u2264"}
MEANING = {
  stats.SUPPORTED: "At this scale the claim holds, read by criteria shown able to accept "
  "their positive case and reject their falsification case.",
  stats.REFUTED: "At this scale the claim does not hold, by a criterion shown able to tell.",
  stats.UNRESOLVED: "This scale cannot decide it: {why}.",
  stats.INCONCLUSIVE: "The test was not shown able to tell at this scale: {why}.",
}


def committed(results_dir=RESULTS):
  """{experiment: its record of the largest size on file (full, accel, else quick)}."""
  found = {
    n: records.in_folder(os.path.join(results_dir, n)) for n in {c.experiment for c in TRAINED}
  }
  return {n: next(f[f"{s}.json"] for s in SIZES if f"{s}.json" in f)
          for n, f in sorted(found.items()) if any(f"{s}.json" in f for s in SIZES)}  # fmt: skip


def records_hash(found):
  """sha256 of the records drawn and the trained claims they are drawn for (with whether
  their experiment is declared: a panel says 'not yet ported' where it is not)."""
  claims = [[c.number, c.experiment, c.experiment in catalog.DECLARED] for c in TRAINED]
  text = json.dumps({"records": found, "claims": claims}, sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()


def _declared(name, experiments):
  if experiments and name in experiments:
    return experiments[name]
  return catalog.load(name) if name in catalog.DECLARED else None


def _points(record, experiment, c):
  """The axis points (labels, in the axis' order) at which criterion `c`'s metric of its arm
  is measured; [] when fewer than two (the metric is then read across the arms)."""
  if experiment.axis is None or record["size"] not in experiment.sizes:
    return []
  measured = record["metrics"].get(c.metric, {}).get(c.arm, {})
  points = [judge.label(p) for p in experiment.points(record["size"])]
  points = [p for p in points if p in measured]
  return points if len(points) > 1 else []


def deciding(record, number, experiment):
  """The record's criterion (a dict) that claim `number`'s panel draws, or None."""
  behind = [c for c in record["criteria"] if c["tests"] == number]
  same = [c for c in behind if c["verdict"] == record["claims"][number]["verdict"]] or behind
  along = [c for c in same if _points(record, experiment, experiment.criterion(c["name"]))]
  return (along or same or [None])[0]


def _roles(c):
  """{arm: role} in drawing order: the criterion's arm, its against, its cases' arms."""
  roles = {c.arm: "strong"} | ({c.against: "weak"} if c.against else {})
  for role, case in (("positive", c.positive), ("falsification", c.falsification)):
    arms = () if case is None or case.analytic else (case.arm, case.against)
    roles |= {arm: role for arm in arms if arm and arm not in roles}
  return roles


def _reference(record, experiment, metric, arm, keys):
  """(per-key y, label) of chance, the untrained reading or zero for `metric`; None."""
  m = declare.metric(experiment, metric)
  if metric == "adjusted" or (m.low, m.high) == (-1.0, 1.0) and "adjusted" in m.note:
    return [0.0] * len(keys), "chance"
  if metric == "over_chance":
    return [1.0] * len(keys), "chance"
  untrained = record["metrics"].get(m.untrained, {}).get(arm, {})
  if m.untrained and all(k in untrained for k in keys):
    return [np.nanmean(records.confirmatory(record, untrained[k])) for k in keys], "untrained"
  return ([0.0] * len(keys), "zero") if m.low < 0 < m.high else None


def why(judged, named=False):
  """Why a criterion is UNRESOLVED or INCONCLUSIVE, with the note of the case it blames."""
  for case in ("positive", "falsification"):
    r = judged.get(case)
    if f"its {case} case" in judged["why"] and r:
      named_ = f" ({r['case']})" if named else ""
      return f"its {case} case{named_} reads {r['verdict']}" + (f": {r['note']}" * bool(r["note"]))
  return judged["why"]


def _reading(judged):
  text = page.fmt(judged["confirmatory"])  # "mean [low, high] VERDICT"
  return text.rsplit(" ", 1)[0] if "[" in text else text


def panel(ax, number, record, experiment):
  """Claim `number`'s panel on `ax`: see the module's docstring."""
  if experiment is None or record is None or number not in record["claims"]:
    name = claims_lib.claim(number).experiment
    text = f"{name}:\n" + ("no record" if experiment else "not yet ported to the engine")
    ax.text(0.5, 0.5, text, ha="center", va="center", color="0.4", transform=ax.transAxes)
    ax.set(xticks=[], yticks=[])
    return ax.set_title(f"{number} no record", loc="left", fontsize=9, color="0.4")
  verdict = record["claims"][number]["verdict"]
  ax.set_title(f"{number} {verdict}", loc="left", fontsize=9, fontweight="bold",
               color=VERDICT_COLORS.get(verdict, "black"))  # fmt: skip
  ax.set_title(f"{record['size']} v{record['version']}", loc="right", fontsize=7, color="0.4")
  if experiment.panel is not None:
    return experiment.panel(ax, record, number)
  judged = deciding(record, number, experiment)
  c = experiment.criterion(judged["name"])
  metric, roles = record["metrics"].get(c.metric, {}), _roles(c)
  points = _points(record, experiment, c)
  ends = experiment.points(record["size"]) if experiment.axis else (None,)
  at = judge.label(ends[0 if c.at == "first" else -1] if c.at in declare.ENDS else c.at)
  order = [a.name for a in experiment.arms if a.name in roles and a.name in metric]
  keys = points or [at]  # along the axis; else one column per arm, read where c reads
  xs = {arm: np.arange(len(points)) if points else np.array([i]) for i, arm in enumerate(order)}
  span = np.arange(len(points)) if points else np.array([-0.4, len(order) - 0.6])
  means = {}
  for arm in (a for a in order if all(k in metric[a] for k in keys)):
    seeds = [records.confirmatory(record, metric[arm][k]) for k in keys]
    means[arm], style = np.array([np.nanmean(v) for v in seeds]), STYLE[roles[arm]]
    for x, v in zip(xs[arm], seeds, strict=True):
      ax.plot(np.full(v.shape, x), v, ".", color=style["color"], markersize=3, zorder=1)
    if points:
      _joined(ax, xs[arm], means[arm], points, label=arm, marker="o", markersize=3, **style)
    else:
      ax.plot(xs[arm], means[arm], "_", markersize=14, mew=style["linewidth"] + 0.5,
              color=style["color"], zorder=style["zorder"])  # fmt: skip
  if c.statistic == "gain":  # the same networks untrained stand where `against` would
    untrained = record["metrics"][declare.metric(experiment, c.metric).untrained][c.arm]
    base = np.array([np.nanmean(records.confirmatory(record, untrained[k])) for k in keys])
    ax.plot(xs[c.arm], base, "x-", label=f"{c.arm} untrained", **STYLE["weak"])
  else:
    base = means.get(c.against, np.full(len(keys), np.nan))
    if (reference := _reference(record, experiment, c.metric, c.arm, keys)) is not None:
      ax.plot(span, np.resize(reference[0], len(span)), gid=reference[1], **REFERENCE)
  bar = {"value": np.full(len(keys), c.threshold), "difference": base + c.threshold,
         "ratio": base * c.threshold, "gain": base + c.threshold}[c.statistic]  # fmt: skip
  _joined(ax, span, np.resize(bar, len(span)), points or ["*", "*"], **THRESHOLD)
  if at in points:
    ax.axvline(points.index(at), color="0.6", linestyle=":", linewidth=0.8, gid="read")
  ax.set_xticks(range(len(points or order)), _short(points) if points else order, fontsize=7,
                rotation=0 if points else 25)  # fmt: skip
  ax.tick_params(axis="y", labelsize=7)
  lines = [f"{c.name}, along {experiment.axis.name}" if points else c.name,
           f"{_reading(judged)} {SIGNS[c.compare]} {c.threshold:g}"]  # fmt: skip
  if verdict in (stats.UNRESOLVED, stats.INCONCLUSIVE):
    lines += textwrap.wrap(why(judged), 52)[:2]
  ax.set_xlabel("\n".join(lines), fontsize=7)
  ax.set_ylabel(c.metric, fontsize=7)
  if points:
    ax.legend(fontsize=6, frameon=False, handlelength=1.5)


def _setting(point):
  head, colon, _ = point.partition(":")
  return head if colon else ("" if point.lstrip("-").replace(".", "").isdigit() else point)


def _joined(ax, xs, ys, points, label=None, **style):
  """A line joining the points of one setting ('mqar:2' .. 'mqar:8'), one label."""
  start = 0
  for i in range(1, len(points) + 1):
    if i == len(points) or _setting(points[i]) != _setting(points[start]):
      x, y = xs[start:i], ys[start:i]
      if i - start == 1 and "marker" not in style:  # a lone point: a short level line
        x, y = np.array([x[0] - 0.25, x[0] + 0.25]), np.repeat(y, 2)
      ax.plot(x, y, label=None if start else label, **style)
      start = i


def _short(points):
  """Tick labels: a setting's name on its first point only ('mqar:2', '4', '8')."""
  return [p.partition(":")[2] if i and ":" in p and _setting(points[i - 1]) == _setting(p)
          else p for i, p in enumerate(points)]  # fmt: skip


def _key(ax):
  """The spare cell: what each line means, shared by every panel."""
  ax.axis("off")
  labels = {"strong": "the criterion's arm", "weak": "its against (or: untrained)",
            "positive": "its positive case's arm", "falsification": "its falsification arm"}  # fmt: skip
  for role, text in labels.items():
    ax.plot([], [], label=text, **STYLE[role])
  ax.plot([], [], label="threshold: where the arm must lie", **THRESHOLD)
  ax.plot([], [], label="chance / untrained / zero", **REFERENCE)
  ax.legend(loc="center", fontsize=7, frameon=False, title_fontsize=7,
            title="lines: means over the confirmatory\nseeds; dots: seeds")  # fmt: skip


def figure(records_by_name, path, experiments=None, cols=3):
  """The panel grid of every trained claim from {experiment: record}; `experiments`:
  {name: Experiment} in place of the catalog's (a caller's stand-ins)."""
  rows = -(-(len(TRAINED) + 1) // cols)
  fig = figures.new(cols=cols, rows=rows, width=3.4, height=2.7)
  axes = [fig.add_subplot(rows, cols, i + 1) for i in range(rows * cols)]
  for ax, claim in zip(axes, TRAINED, strict=False):
    name = claim.experiment
    panel(ax, claim.number, records_by_name.get(name), _declared(name, experiments))
  _key(axes[len(TRAINED)])
  for ax in axes[len(TRAINED) + 1 :]:
    ax.axis("off")
  figures.save(fig, path)
  return fig


def write(found, path=None, sidecar=None):
  """Draws `found`'s figure to `path` (FIGURE) and the hash it was drawn from to `sidecar`
  (SIDECAR)."""
  figure(found, path or FIGURE)
  drawn = {name: f"{r['size']} v{r['version']}, {r['date']}" for name, r in found.items()}
  with open(sidecar or SIDECAR, "w") as f:
    json.dump({"command": "python -m experiments.engine summary", "records": drawn,
               "hash": records_hash(found)}, f, indent=1, sort_keys=True)  # fmt: skip
    f.write("\n")


def _figure_file(result, folder):
  """The experiment's own figure: beside the report (a run's), else its committed one."""
  for where in (folder, RESULTS):
    if os.path.exists(path := os.path.join(where, result["experiment"], page.figure_name(result))):
      return os.path.relpath(path, folder)
  return None


def _of(r):
  seeds = ", ".join(map(str, r["seeds"]["confirmatory"]))
  return f"{r['size']} v{r['version']}, {r['date']}, seeds {seeds}"


def _verdict(result, number):
  return result["claims"][number]["verdict"] if result and number in result["claims"] else None


def _row(claim, run, record):
  if claim.kind != "trained":
    return [claim.number, claim.text, f"{claim.kind}: {claim.why}", "-", ""]
  recorded, reading = _verdict(record, claim.number), _verdict(run, claim.number) or "-"
  of = f"**{recorded}** ({_of(record)}; {record['scale']})" if recorded else "pending"
  return [claim.number, claim.text, of, reading, page.agreement(recorded or "pending", reading)]


def _section(claim, run, record, folder, experiments, shown):
  """A claim's few lines: the quote, its experiment's figure (once), its verdict in a
  sentence and what that means at this scale."""
  by = "" if claim.source == claims_lib.ARTICLE else f" ({claim.source})"
  out = [f"### {claim.number}", "", f"> {claim.text}{by}.", ""]
  result = run if _verdict(run, claim.number) else record
  if claim.kind != "trained":
    return [*out, f"{'A property test' if claim.kind == 'check' else 'Untested'}: {claim.why}.", ""]
  if not _verdict(result, claim.number):
    return [*out, "No reading: its experiment has no record and did not run here.", ""]
  name, verdict = claim.experiment, _verdict(result, claim.number)
  if (image := _figure_file(result, folder)) and name not in shown:
    out += [f"![{name}]({image})", ""]
    shown.add(name)
  experiment = _declared(name, experiments)
  judged, criteria = deciding(result, claim.number, experiment), []
  for j in (j for j in result["criteria"] if j["tests"] == claim.number):
    c = experiment.criterion(j["name"])
    criteria.append(f"{c.says} ({_reading(j)} {SIGNS[c.compare]} {c.threshold:g}: {j['verdict']})")
  text = (f"{'This run' if result is run else 'The record'} ({_of(result)}) reads "
          f"**{verdict}**: {'; '.join(criteria)}.")  # fmt: skip
  if result is run and (recorded := _verdict(record, claim.number)):
    text += f" The record ({_of(record)}) reads **{recorded}**: " \
            f"{page.agreement(recorded, verdict)}."  # fmt: skip
  link = os.path.relpath(os.path.join(RESULTS, name, page.PAGE), folder)
  meaning = MEANING[verdict].format(why=why(judged, named=True))
  return [*out, f"{text} {meaning} Every reading: [results/{name}]({link}).", ""]


def report(quick, full, path, experiments=None):
  """Writes the five-minute report to `path` (markdown) and this run's figure beside it
  (claims.png): this run's readings (`quick`: {experiment: result}) against the verdicts of
  record (`full`: {experiment: record}, e.g. committed()). An experiment's own figure is
  linked from <report's folder>/<name>/ (where the main job's run writes it), else from
  results/<name>/."""
  folder = os.path.dirname(os.path.abspath(path))
  figure(quick, os.path.join(folder, "claims.png"), experiments)
  rel = lambda *parts: os.path.relpath(os.path.join(harness.REPO_ROOT, *parts), folder)  # noqa: E731
  rows = [_row(c, quick.get(c.experiment), full.get(c.experiment)) for c in claims_lib.CLAIMS]
  out = ["# The article's claims: this run against the record", "",
         f'jaxformer turns each numbered claim of the article "{claims_lib.ARTICLE}" '
         f"([experiments/claims.py]({rel('experiments', 'claims.py')})) into a verdict read on "
         f"trained models by one method ([docs/protocol.md]({rel('docs', 'protocol.md')})). "
         "Each claim's verdict of record (its size, date, confirmatory seeds and scale) "
         "stands beside this run's reading; then the curve that decides each claim, a few "
         "lines per claim, and the numbers last.", "",
         *page.table(["claim", "the article says", "verdict of record", "this run", "agree?"],
                     rows), "",
         "## The curves that decide them", "", "![one panel per trained claim](claims.png)", "",
         "Each panel draws the criterion that decides its claim (see the key), from this run; "
         f"the verdicts of record are drawn in [docs/img/claims.png]({rel('docs', 'img', 'claims.png')}).",
         "", "## Claim by claim", ""]  # fmt: skip
  shown = set()
  for c in claims_lib.CLAIMS:
    out += _section(c, quick.get(c.experiment), full.get(c.experiment), folder, experiments, shown)
  out += ["## Appendix: the numbers", "", "Every criterion this run read (confirmatory seeds: "
          "mean [95% interval] and verdict); each experiment's page holds the rest.", ""]  # fmt: skip
  for name, result in quick.items():
    rows = [[c["name"], c["tests"], c["statement"], page.fmt(c["confirmatory"]),
             f"**{c['verdict']}** {c['why']}"] for c in result["criteria"]]  # fmt: skip
    out += [f"### {name} ([results/{name}]({rel('results', name, page.PAGE)}))", "",
            *page.table(["criterion", "tests", "statement", "read", "verdict"], rows), ""]  # fmt: skip
  with open(path, "w") as f:
    f.write("\n".join(out))
