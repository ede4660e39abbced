"""The results tables of README.md and docs/experiments.md, generated from `results/`.

  python -m experiments.tables --add runs/ladder/results.json   # file each experiment's result
  python -m experiments.tables                                   # rewrite the tables
  python -m experiments.tables --check                           # exit 1 if a table drifted

`results/<experiment>_<size>.json.gz` holds one experiment's complete results.json entry
(design hash and version, commit, date, criteria, plateau, per-rate verdicts, every trained
replica), so a single experiment can be rerun and its file replaced. Each table sits between
`<!-- results table: SIZE -->` and `<!-- end results table -->` in a document (`results table:
learning SIZE`: the arms still learning at their cap, with what each gained over the plateau
window); nothing inside is typed by hand, and tests/test_tables.py fails when a table disagrees
with its files.
"""

import gzip
import json
import os
import re
import sys

from absl import flags

from experiments import cli, designs, harness, protocol, run_all

RESULTS = os.path.join(harness.REPO_ROOT, "results")
DOCUMENTS = (
  os.path.join(harness.REPO_ROOT, "README.md"),
  os.path.join(harness.REPO_ROOT, "docs", "experiments.md"),
)
BLOCK = re.compile(
  r"(<!-- results table: (?P<kind>learning )?(?P<size>\w+) -->\n)(?P<body>.*?)"
  r"(?P<end><!-- end results table -->)",
  re.S,
)


def path(experiment, size, results=RESULTS):
  return os.path.join(results, f"{experiment}_{size}.json.gz")


def add(results_json, results=RESULTS):
  """Files each entry of a results.json (a list, as run_all writes it) under `results`;
  returns the paths written. Raises ValueError naming an entry without experiment or size."""
  with open(results_json) as f:
    entries = json.load(f)
  os.makedirs(results, exist_ok=True)
  written = []
  for i, entry in enumerate(entries):
    if not entry.get("experiment") or not entry.get("size"):
      raise ValueError(f"{results_json}[{i}]: no experiment or size")
    out = path(entry["experiment"], entry["size"], results)
    text = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    with open(out, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
      gz.write(text)
    written.append(out)
  return written


def load(experiment, size, results=RESULTS):
  p = path(experiment, size, results)
  if not os.path.exists(p):
    return None
  with gzip.open(p, "rt") as f:
    return json.load(f)


def _plateau(entry):
  status = [
    s.split(":")[1]
    for row in entry.get("plateau", [])
    for part in (row["exploratory"], row["confirmatory"])
    for s in part.split()
  ]
  if not status:
    return "nothing trained"
  return f"{sum(s in protocol.FINISHED for s in status)}/{len(status)}"


def _rests_on(entry):
  """The criteria (controls, falsification readings) that are not SUPPORTED, by name."""
  out = []
  for group in ("controls", "falsification", "criteria"):
    for c in entry.get(group, []):
      bad = c["verdict"] == "SUPPORTED" if group == "falsification" else c["verdict"] != "SUPPORTED"
      if bad:
        label = c["name"] or c["description"]
        note = f" ({c['note']})" if c.get("note") else ""
        where = {"controls": "control ", "falsification": "falsification "}.get(group, "")
        out.append(f"{where}{label}: {c['verdict']}{note}")
  return "; ".join(dict.fromkeys(out)) or "every criterion SUPPORTED"


def _falsification(entry):
  """What the falsification arm's criterion read: rejected (every reading REFUTED, as the
  protocol asks), accepted (one SUPPORTED: the criterion cannot tell, INCONCLUSIVE),
  unresolved, or none declared."""
  verdicts = [c["verdict"] for c in entry.get("falsification", [])]
  if not verdicts:
    return "none declared"
  if "SUPPORTED" in verdicts:
    return "**accepted**"
  return "rejected" if all(v == "REFUTED" for v in verdicts) else "unresolved"


def rows(size, results=RESULTS, registry=None):
  """One row per experiment of run_all: its filed result at `size`, or what is missing."""
  registry = designs.load() if registry is None else registry
  out = []
  for name in run_all.EXPERIMENTS:
    entry = load(name, size, results)
    if entry is None:
      out.append(f"| `{name}` | not run at this size | | | | | | | | |")
      continue
    d = entry.get("design") or {}
    versions = registry.get(name, {})
    current = versions.get(str(d.get("version")), {}).get(size)
    latest = max((int(v) for v in versions), default=None)
    design = f"v{d['version']} `{d['hash'][:8]}`" if d else "unregistered"
    if d and current != d.get("hash"):
      design += " (not the registered design)"
    elif d and latest is not None and int(d["version"]) != latest:
      # a later version that left this size as it was (same hash) keeps the result current
      same = versions.get(str(latest), {}).get(size) == d.get("hash")
      design += f" (= v{latest} at this size)" if same else f" (the current design is v{latest})"
    if d and not d.get("config_as_registered", True):
      design += " (config varied)"
    seeds = f"{len(entry.get('seeds', []))} + {len(entry.get('exploratory_seeds', []))}"
    out.append(
      f"| `{name}` | **{entry['verdict']}** | {_falsification(entry)} | {design} | "
      f"{entry.get('commit', '')} {entry.get('date', '')} | {seeds} | {_plateau(entry)} | "
      f"{_rests_on(entry)} "
      f"| {entry.get('seconds', '')} | {entry.get('cpu_seconds', '')} |"
    )
  return out


def table(size, results=RESULTS, registry=None):
  header = [
    "| experiment | verdict | falsification arm | design | commit, date (UTC) | seeds: "
    "confirmatory + exploratory | plateau (replicas finished) | what the verdict rests on "
    "| wall s | CPU s |",
    "|---|---|---|---|---|---|---|---|---:|---:|",
  ]
  return "\n".join(header + rows(size, results, registry)) + "\n"


def _gain(record):
  """A replica's gain over the plateau window: filed with it, or (files from before it was)
  recomputed from its validation curve under the default window, the one every design used."""
  m = record["metrics"]
  if "plateau_gain" in m:
    return m["plateau_gain"]
  return protocol.window_gain(m.get("val_accuracy_by_step", []), m["budget"])


def learning_rows(size, results=RESULTS):
  """One row per arm whose replicas read by the criteria did not all finish learning: those at
  the selected point, or under a design's confirm_below the run each seed is read at."""
  out = []
  for name in run_all.EXPERIMENTS:
    entry = load(name, size, results) or {}
    arms = {}
    for record in entry.get("runs", []):
      m = record["metrics"]
      if m.get("read", m.get("selected")):
        arms.setdefault((record["model"], record["setting"]), []).append(record)
    for (model, setting), records in arms.items():
      learning = [x for x in records if x["metrics"]["plateau"] not in protocol.FINISHED]
      if not learning:
        continue
      gains = [g for g in map(_gain, learning) if g is not None]
      spread = "too few evaluations"
      if gains:
        spread = " to ".join(dict.fromkeys(f"{g:+.3f}" for g in (min(gains), max(gains))))
      doubled = sum(x["metrics"].get("plateau_reading") == "doubling" for x in learning)
      if doubled:
        spread += f" ({doubled} over the budget before)"
      out.append(
        f"| `{name}` | {model} @ {setting} | {records[0]['metrics']['budget']} "
        f"| {len(learning)} of {len(records)} | {spread} |"
      )
  return out or ["| every arm finished learning | | | | |"]


def learning_table(size, results=RESULTS):
  header = [
    "| experiment | arm | budget (the cap) | replicas still learning | their gain over the "
    f"last {protocol.PLATEAU_WINDOW:.0%}, or over the budget before where the design reads "
    f"the doubling (flat: < {protocol.PLATEAU_TOLERANCE:g}) |",
    "|---|---|---:|---|---|",
  ]
  return "\n".join(header + learning_rows(size, results)) + "\n"


def render(text, results=RESULTS, registry=None):
  """`text` with every results table regenerated."""

  def one(m):
    size = m.group("size")
    body = learning_table(size, results) if m.group("kind") else table(size, results, registry)
    return m.group(1) + body + m.group("end")

  return BLOCK.sub(one, text)


def drifted(documents=DOCUMENTS, results=RESULTS, registry=None):
  """The documents whose tables disagree with `results`."""
  out = []
  for doc in documents:
    with open(doc) as f:
      text = f.read()
    if render(text, results, registry) != text:
      out.append(doc)
  return out


def _define(values, argv):
  flags.DEFINE_string("add", None, "A results.json whose entries to file.", flag_values=values)
  flags.DEFINE_bool("check", False, "Exit 1 if a table drifted.", flag_values=values)


def main(argv=None):
  """argv: the arguments after the program name (None: sys.argv's); returns the exit code."""
  values, rest = cli.command_line(__doc__, _define, argv)
  if rest:
    cli.usage_error(f"unexpected arguments {rest}")
  if values.add:
    if not os.path.exists(values.add):
      cli.usage_error(f"--add={values.add}: no such file")
    for p in add(values.add):
      print(f"filed {os.path.relpath(p, harness.REPO_ROOT)}")
  if values.check:
    bad = drifted()
    for doc in bad:
      print(f"{doc}: its results tables disagree with results/ (run python -m experiments.tables)")
    return 1 if bad else 0
  for doc in DOCUMENTS:
    with open(doc) as f:
      text = f.read()
    new = render(text)
    if new != text:
      with open(doc, "w") as f:
        f.write(new)
      print(f"rewrote {os.path.relpath(doc, harness.REPO_ROOT)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
