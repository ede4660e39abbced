"""The verdicts of record as a notebook shows them, rendered from results/ (never typed).

`markdown(numbers)` gives, per numbered claim (experiments/claims.py): the claim as its source
states it; its verdict of record, read from the record summary.committed picks for the claim's
experiment (full, accel, else quick); that record's size, version, date and scale; what the
verdict means at that scale; and a link to the experiment's page, results/<name>/README.md. A
claim read by a property test or not measured says so; a trained claim whose experiment has
no record yet says "no record yet". In a notebook:

  from IPython.display import Markdown, display
  from experiments.engine import verdicts
  display(Markdown(verdicts.markdown(["3.2", "3.3"])))
"""

import os

from experiments import claims as claims_lib
from experiments import harness
from experiments.engine import catalog, page, summary

COLABS = os.path.join(harness.REPO_ROOT, "colabs")  # where a notebook's links start
OF_RECORD = ("full", "accel")  # sizes whose record is a verdict of record; smaller: a reading


def record(number, found):
  """The record that holds claim `number`'s verdict in `found` ({experiment: record}, e.g.
  summary.committed()), or None: a check, untested, or no record yet."""
  r = found.get(claims_lib.claim(number).experiment)
  return r if r and number in r["claims"] else None


def verdict(number, results_dir=summary.RESULTS):
  """Claim `number`'s verdict of record (e.g. 'SUPPORTED'), or None where it has none."""
  r = record(number, summary.committed(results_dir))
  return r["claims"][number]["verdict"] if r else None


def _meaning(r, number):
  """What the verdict means at the record's scale, with why where it cannot decide."""
  verdict = r["claims"][number]["verdict"]
  behind = [j for j in r["criteria"] if j["tests"] == number]
  judged = next((j for j in behind if j["verdict"] == verdict), behind[0] if behind else None)
  why = summary.why(judged, named=True) if judged else "no criterion read it"
  return summary.MEANING.get(verdict, "").format(why=why)


def line(c, r, results_dir=summary.RESULTS, link_from=COLABS):
  """One claim's markdown bullet: `c` a claims.Claim, `r` the record of its verdict or None."""
  who = "the article" if c.source == claims_lib.ARTICLE else c.source
  head = f"- **{c.number}** ({who}): {c.text}."
  if c.kind != "trained":
    return f"{head} {'A property test' if c.kind == 'check' else 'Untested'}: {c.why}."
  path = os.path.join(results_dir, c.experiment, page.PAGE)
  rel = os.path.relpath(path, link_from).replace(os.sep, "/")
  link = f"[results/{c.experiment}/{page.PAGE}]({rel})" if os.path.exists(path) else ""
  if r is None:
    why = "no record yet" if c.experiment in catalog.DECLARED else "not yet ported to the engine"
    return f"{head} Verdict of record: {why}." + (f" Its page: {link}." if link else "")
  size = r["size"] if r["size"] in OF_RECORD else f"{r['size']}, no full record yet"
  of = f"{size}; version {r['version']}, {r['date']}; {r['scale']}"
  text = f"{head} Verdict of record: **{r['claims'][c.number]['verdict']}** ({of})."
  return f"{text} {_meaning(r, c.number)}" + (f" Every reading: {link}." if link else "")


def markdown(numbers, results_dir=summary.RESULTS, link_from=COLABS):
  """The claims numbered `numbers` (a number or a list of them, in the order given), one
  bullet each, with their verdicts of record from `results_dir`; links are relative to
  `link_from` (the notebooks' folder)."""
  numbers = [numbers] if isinstance(numbers, str) else list(numbers)
  found = summary.committed(results_dir)
  lines = [line(claims_lib.claim(n), record(n, found), results_dir, link_from) for n in numbers]
  return "\n".join(lines) + "\n"
