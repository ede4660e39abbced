"""README.md's claims table is generated from results/ (experiments/engine/page.py), and a table
that disagrees with the records fails here."""

from pathlib import Path

import pytest

from experiments.engine import page, registry

README = Path(__file__).resolve().parents[1] / "README.md"
COMMAND = "python -m experiments.engine claims"


def test_the_readme_claims_table_agrees_with_results():
  text = README.read_text(encoding="utf-8")
  assert page.CLAIMS_BLOCK.search(text), (
    "README.md has no '<!-- claims table -->' ... '<!-- end claims table -->' block"
  )
  expected = page.with_claims_table(text, registry.RESULTS)
  assert text == expected, f"README.md's claims table is stale: run `{COMMAND}` to regenerate it"


def test_a_text_without_the_block_is_refused():
  with pytest.raises(ValueError, match="claims table"):
    page.with_claims_table("# a README\n\nno claims block here\n", registry.RESULTS)
