"""Spec parsing: defaults, the canonical form, and one clear error per bad field."""

import numpy as np
import pytest

from jaxformer.data import TASKS, DataError, check_tokens, format_spec, parse_spec
from jaxformer.data.spec import SCHEMAS

SYNTHETIC = ("mqar", "induction", "copy", "selective_copy", "needle", "facts")


def test_tasks_are_the_issue_list():
  assert set(TASKS) == {*SYNTHETIC, "text", "catalog"}


@pytest.mark.parametrize("name", SYNTHETIC)
def test_defaults_parse_and_canonical_form_round_trips(name):
  got_name, params = parse_spec(name)
  assert got_name == name
  assert list(params) == list(SCHEMAS[name])  # every field, in schema order
  canonical = format_spec(name, params)
  assert parse_spec(canonical) == (name, params)
  assert format_spec(*parse_spec(canonical)) == canonical


def test_explicit_default_is_the_same_spec():
  assert format_spec(*parse_spec("mqar")) == format_spec(*parse_spec("mqar:vocab_size=8192"))
  assert format_spec(*parse_spec("mqar")) != format_spec(*parse_spec("mqar:vocab_size=256"))


def test_values_are_typed_and_defaults_follow_other_fields():
  _, p = parse_spec(" mqar : seq_len=32 , num_kv_pairs=4,power_a=0.5,random_non_queries=false ")
  assert p["seq_len"] == 32 and p["num_kv_pairs"] == 4
  assert p["power_a"] == 0.5 and p["random_non_queries"] is False
  assert p["num_examples"] == 20000 and p["num_test_examples"] == 1000
  assert parse_spec("needle:seq_len=40")[1]["distance"] == 20
  assert parse_spec("copy:seq_len=40")[1]["copy_len"] == 10
  assert parse_spec("text:path=a/*.txt,seq_len=16")[1]["stride"] == 16


@pytest.mark.parametrize(
  "spec, starts",
  [
    ("nope:seq_len=3", "task='nope': unknown task"),
    ("mqar:sequence_length=64", "mqar.sequence_length: unknown parameter"),
    ("mqar:seq_len", "mqar.seq_len: expected key=value"),
    ("mqar:seq_len=64,seq_len=32", "mqar.seq_len: given twice"),
    ("mqar:seq_len=sixty", "mqar.seq_len=sixty: expected int"),
    ("mqar:power_a=x", "mqar.power_a=x: expected float"),
    ("mqar:random_non_queries=maybe", "mqar.random_non_queries=maybe: expected true or false"),
    ("mqar:seq_len=0", "mqar.seq_len=0: must be >= 4"),
    ("mqar:power_a=0", "mqar.power_a=0.0: must be >="),
    ("mqar:num_examples=0", "mqar.num_examples=0: must be >= 1"),
    ("mqar:seq_len=64,num_kv_pairs=40", "mqar.num_kv_pairs=40: needs 2*num_kv_pairs"),
    ("mqar:vocab_size=8,seq_len=64,num_kv_pairs=4", "mqar.vocab_size=8: 3 distinct keys"),
    ("copy:seq_len=16,copy_len=9", "copy.copy_len=9: needs 2*copy_len <= seq_len=16"),
    ("selective_copy:seq_len=8,num_tokens=5", "selective_copy.num_tokens=5: needs"),
    ("needle:seq_len=16,distance=16", "needle.distance=16: needs distance <= seq_len-1=15"),
    ("needle:vocab_size=3", "needle.vocab_size=3: must be >= 4"),
    ("induction:vocab_size=2", "induction.vocab_size=2: must be >= 3"),
    ("text:level=char", "text.path: required"),
    ("text:path=a.txt,level=word", "text.level=word: expected one of byte, char"),
    ("text:path=a.txt,val_fraction=1", "text.val_fraction=1.0: must be <="),
    ("catalog:seq_len=8", "catalog.name: required"),
    ("", "task spec ''"),
  ],
)
def test_bad_specs_raise_one_error_naming_the_field(spec, starts):
  with pytest.raises(DataError) as info:
    parse_spec(spec)
  assert str(info.value).startswith(starts), str(info.value)
  assert isinstance(info.value, ValueError)


def test_check_tokens_accepts_ids_in_range_and_names_the_field():
  check_tokens(np.arange(10), 10)
  check_tokens(np.zeros((0,), np.int32), 1)
  with pytest.raises(DataError, match=r"^targets: token id 10 at flat index 3 .* vocab_size=10"):
    check_tokens(np.array([[0, 1, 2], [10, 4, 5]]), 10, field="targets")
  with pytest.raises(DataError, match=r"^inputs: token id -1"):
    check_tokens(np.array([3, -1]), 10)
