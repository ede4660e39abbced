"""Task spec strings: parsing, defaults, validation, and the canonical form.

A task is named by one string, `name:key=value,key=value`, so that an experiment
config, a cache directory and a log line all carry the same identity. Parsing fills
every default and validates every field here, before any data is generated, and a bad
field raises one `DataError` that names it (`mqar.num_kv_pairs=40: ...`). Nothing is
clamped: a value that cannot work is an error, not a silent substitute.

The canonical form lists every parameter in schema order with its resolved value, so
`mqar` and `mqar:vocab_size=8192` name (and cache) the same dataset.

A parameter declared `many` also takes a set of values joined by '+' (`num_kv_pairs=4+8+16`):
it parses to a tuple of distinct values in ascending order (the canonical form), while one
value stays a plain scalar, so a single-value spec parses, prints and generates as before.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


class DataError(ValueError):
  """A bad task spec, data file or token id; the message starts with the field."""


def check_tokens(array, vocab_size: int, field: str = "inputs") -> None:
  """Raises DataError unless every id in `array` lies in [0, vocab_size).

  An id >= vocab would index past the embedding table, which JAX clamps silently on
  gather: the model would train on the wrong token with no error.
  """
  array = np.asarray(array)
  if array.size == 0:
    return
  bad = np.flatnonzero((array < 0) | (array >= vocab_size))
  if bad.size:
    i = int(bad[0])
    raise DataError(
      f"{field}: token id {int(array.flat[i])} at flat index {i} is outside "
      f"[0, vocab_size={vocab_size}) ({bad.size} such ids; max id {int(array.max())})"
    )


@dataclasses.dataclass(frozen=True)
class Param:
  """One task parameter: its type, default and allowed range.

  `default` is a value, None for a required parameter, or a function of the params
  parsed so far (schema order) for a default that scales with another field.
  """

  type: type
  default: Any = None
  low: float | None = None  # inclusive
  high: float | None = None  # inclusive
  choices: tuple[str, ...] | None = None
  doc: str = ""
  many: bool = False  # also takes distinct values joined by '+': a sorted tuple (as_tuple)


def as_tuple(value: Any) -> tuple:
  """The values of a `many` parameter as a tuple: `(v,)` for a single value."""
  return tuple(value) if isinstance(value, tuple) else (value,)


def _examples(train: int = 20000, test: int = 1000, seed: bool = True) -> dict[str, Param]:
  out = {
    "num_examples": Param(int, train, low=1, doc="training examples"),
    "num_test_examples": Param(int, test, low=1, doc="test examples"),
  }
  if seed:
    out["seed"] = Param(int, 0, low=0, doc="train uses stream [seed, 0], test [seed, 1]")
  return out


NO_TOKENIZER = "none"  # text.tokenizer: a level=bpe task learns its own
_LEVEL = Param(str, "byte", choices=("byte", "char"), doc="byte: ids 0..255; char: sorted chars")
_TEXT_COMMON = {
  "level": _LEVEL,
  "seq_len": Param(int, 128, low=1, doc="tokens per example"),
  "stride": Param(int, lambda p: p["seq_len"], low=1, doc="window start step (seq_len: disjoint)"),
  "vocab_size": Param(int, 0, low=0, doc="0: the size the level needs; else checked >= it"),
}

SCHEMAS: dict[str, dict[str, Param]] = {
  "mqar": {
    "vocab_size": Param(int, 8192, low=4, doc="keys in [1, V/2), values in [V/2, V)"),
    "seq_len": Param(int, 64, low=4),
    "num_kv_pairs": Param(
      int,
      8,
      low=1,
      many=True,
      doc="pairs P per example, each key queried once; 4+8+16: "
      "each example draws its P uniformly from the set",
    ),
    "power_a": Param(float, 0.01, low=1e-6, doc="query gap p(i) ~ i^(a-1); 1 is uniform"),
    "random_non_queries": Param(bool, True, doc="fill non-query slots with random ids"),
    **_examples(),
  },
  "induction": {
    "vocab_size": Param(int, 64, low=3),
    "seq_len": Param(int, 64, low=3),
    **_examples(),
  },
  "copy": {
    "vocab_size": Param(int, 16, low=3, doc="0 pad, 1 separator, data in [2, V)"),
    "seq_len": Param(int, 64, low=2),
    "copy_len": Param(int, lambda p: max(1, p["seq_len"] // 4), low=1),
    **_examples(),
  },
  "selective_copy": {
    "vocab_size": Param(int, 16, low=3, doc="0 blank, 1 separator, data in [2, V)"),
    "seq_len": Param(int, 64, low=2),
    "num_tokens": Param(int, lambda p: max(1, p["seq_len"] // 4), low=1),
    **_examples(),
  },
  "needle": {
    "vocab_size": Param(int, 256, low=4, doc="key in [1, V/2), value in [V/2, V)"),
    "seq_len": Param(int, 64, low=3),
    "distance": Param(int, lambda p: p["seq_len"] // 2, low=2, doc="query pos - key pos"),
    **_examples(),
  },
  "facts": {
    "num_subjects": Param(int, 32, low=2, doc="S subjects, and S objects"),
    "num_relations": Param(int, 8, low=1, doc="R relations: S x R facts"),
    "vocab_size": Param(
      int, lambda p: 1 + 2 * p["num_subjects"] + p["num_relations"], low=4, doc=">= 1 + 2S + R"
    ),
    "seq_len": Param(int, 24, low=3, doc="seq_len // 3 facts per example"),
    "table_seed": Param(int, 0, low=0, doc="draws the table, the same in both splits"),
    **_examples(),
  },
  "text": {
    "path": Param(str, None, doc="a file, directory or glob of UTF-8 / byte text files"),
    **_TEXT_COMMON,
    "level": Param(
      str, "byte", choices=("byte", "char", "bpe"), doc="bpe: byte-level BPE (jaxformer.data.bpe)"
    ),
    "vocab_size": Param(int, 0, low=0, doc="bpe: its size (>= 256); else 0 or checked >= need"),
    "val_fraction": Param(float, 0.1, low=1e-6, high=0.999999, doc="tail held out as test"),
    "tokenizer": Param(
      str, NO_TOKENIZER, doc="bpe: none learns one on the train split; else a tokenizer dir/file"
    ),
  },
  "catalog": {
    "name": Param(str, None, doc="a TFDS catalog name, e.g. tiny_shakespeare, lm1b"),
    "feature": Param(str, "text", doc="the text feature to read"),
    **_TEXT_COMMON,
    "max_records": Param(int, 0, low=0, doc="0: all records of a split; else the first N"),
  },
}
TASKS: tuple[str, ...] = tuple(SCHEMAS)


def _convert(name: str, key: str, param: Param, raw: str) -> Any:
  field = f"{name}.{key}={raw}"
  if param.many and "+" in raw:
    try:
      values = [param.type(v) for v in raw.split("+")]
    except ValueError:
      raise DataError(f"{field}: expected distinct {param.type.__name__}s joined by '+'") from None
    if len(set(values)) < len(values):
      raise DataError(f"{field}: a value is given twice; expected distinct values")
    return tuple(sorted(values))
  if param.type is bool:
    if raw.lower() in ("1", "true", "yes"):
      return True
    if raw.lower() in ("0", "false", "no"):
      return False
    raise DataError(f"{field}: expected true or false")
  try:
    value = param.type(raw)
  except ValueError:
    many = f" or distinct {param.type.__name__}s joined by '+'" if param.many else ""
    raise DataError(f"{field}: expected {param.type.__name__}{many}") from None
  if param.type is str and not value:
    raise DataError(f"{field}: must not be empty")
  return value


def _check_range(name: str, key: str, param: Param, value: Any) -> None:
  field = f"{name}.{key}={format_value(value)}"
  for v in as_tuple(value):
    if param.choices is not None and v not in param.choices:
      raise DataError(f"{field}: expected one of {', '.join(param.choices)}")
    if param.low is not None and v < param.low:
      raise DataError(f"{field}: must be >= {param.low}")
    if param.high is not None and v > param.high:
      raise DataError(f"{field}: must be <= {param.high}")


def format_value(value: Any) -> str:
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, tuple):
    return "+".join(format_value(v) for v in value)
  return str(value)


def format_spec(name: str, params: dict[str, Any]) -> str:
  """The canonical spec: every parameter, in schema order."""
  body = ",".join(f"{k}={format_value(params[k])}" for k in SCHEMAS[name])
  return f"{name}:{body}" if body else name


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
  """`'mqar:seq_len=32'` -> `('mqar', {every param, typed, defaults filled})`.

  Raises DataError naming the field for an unknown task or parameter, a value of the
  wrong type or out of range, or a combination the task cannot satisfy.
  """
  if not isinstance(spec, str) or not spec.strip():
    raise DataError(f"task spec {spec!r}: expected 'name:key=value,...'")
  name, _, body = spec.strip().partition(":")
  name = name.strip()
  if name not in SCHEMAS:
    raise DataError(f"task={name!r}: unknown task; known tasks: {', '.join(TASKS)}")
  schema = SCHEMAS[name]
  raw: dict[str, str] = {}
  for item in filter(None, (s.strip() for s in body.split(","))):
    key, eq, value = (s.strip() for s in item.partition("="))
    if not eq:
      raise DataError(f"{name}.{key}: expected key=value")
    if key not in schema:
      raise DataError(f"{name}.{key}: unknown parameter; known: {', '.join(schema)}")
    if key in raw:
      raise DataError(f"{name}.{key}: given twice")
    raw[key] = value
  params: dict[str, Any] = {}
  for key, param in schema.items():
    if key in raw:
      value = _convert(name, key, param, raw[key])
    elif param.default is None:
      raise DataError(f"{name}.{key}: required (e.g. {name}:{key}=...)")
    elif callable(param.default):
      value = param.default(params)
    else:
      value = param.default
    _check_range(name, key, param, value)
    params[key] = value
  if name in _CHECKS:
    _CHECKS[name](params, lambda key: f"{name}.{key}={format_value(params[key])}")
  return name, params


# Cross-field rules: each states what the generator needs to lay out one example.
# A rule gets the params and `f(key)`, the field as an error message starts it.
Check = Callable[[dict[str, Any], Callable[[str], str]], None]


def _check_mqar(p, f):
  # a set of pair counts: each must fit, so the largest must
  P = max(as_tuple(p["num_kv_pairs"]))
  largest = f" (for its largest, {P})" if isinstance(p["num_kv_pairs"], tuple) else ""
  if 4 * P > p["seq_len"]:
    raise DataError(
      f"{f('num_kv_pairs')}: needs 2*num_kv_pairs context tokens plus 2*num_kv_pairs "
      f"query slots, 4*num_kv_pairs <= seq_len={p['seq_len']}{largest}"
    )
  keys, values = p["vocab_size"] // 2 - 1, p["vocab_size"] - p["vocab_size"] // 2
  if P > min(keys, values):
    raise DataError(
      f"{f('vocab_size')}: {keys} distinct keys in [1, V/2) < "
      f"num_kv_pairs={format_value(p['num_kv_pairs'])}{largest}; needs vocab_size >= {2 * P + 2}"
    )


def _check_copy(p, f):
  if 2 * p["copy_len"] > p["seq_len"]:
    raise DataError(f"{f('copy_len')}: needs 2*copy_len <= seq_len={p['seq_len']}")


def _check_selective_copy(p, f):
  if 2 * p["num_tokens"] > p["seq_len"]:
    raise DataError(f"{f('num_tokens')}: needs 2*num_tokens <= seq_len={p['seq_len']}")


def _check_text(p, f):
  if p["tokenizer"] != NO_TOKENIZER and p["level"] != "bpe":
    raise DataError(f"{f('tokenizer')}: a tokenizer needs level=bpe (level={p['level']})")
  if p["level"] == "bpe" and p["tokenizer"] == NO_TOKENIZER and p["vocab_size"] < 256:
    raise DataError(
      f"{f('vocab_size')}: level=bpe learns a BPE of vocab_size ids, >= 256 (its bytes); "
      "e.g. vocab_size=1024, or give tokenizer=DIR"
    )


def _check_needle(p, f):
  if p["distance"] > p["seq_len"] - 1:
    raise DataError(f"{f('distance')}: needs distance <= seq_len-1={p['seq_len'] - 1}")


def _check_facts(p, f):
  S, R = p["num_subjects"], p["num_relations"]
  if p["vocab_size"] < 1 + 2 * S + R:
    raise DataError(f"{f('vocab_size')}: needs >= 1 + 2*num_subjects + num_relations = "
                    f"{1 + 2 * S + R}")  # fmt: skip
  if p["seq_len"] // 3 > S * R:
    raise DataError(f"{f('seq_len')}: seq_len // 3 distinct facts need <= S*R = {S * R}")


_CHECKS: dict[str, Check] = {
  "mqar": _check_mqar,
  "copy": _check_copy,
  "selective_copy": _check_selective_copy,
  "needle": _check_needle,
  "facts": _check_facts,
  "text": _check_text,
}
