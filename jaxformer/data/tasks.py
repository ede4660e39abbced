"""Synthetic tasks as pure numpy generators, one function per task.

Each generator takes a `np.random.Generator` and validated params (see spec.py) and
returns int32 arrays `inputs`, `targets`, `mask` of shape [N, L]. `targets[t]` is what
position t must predict: the next input token (0 after the last), except at scored
positions where a task's answer is not the next input (mqar). `mask` is 1 only where
loss and accuracy count, so the arrays also stay a valid language-modelling pair.

Token 0 is reserved as pad / blank in every task; the tasks with a separator use 1.
Train and test draw from the seed streams [seed, 0] and [seed, 1]: disjoint seeds.
"""

from typing import Any

import numpy as np

from jaxformer.data.spec import as_tuple

SPLIT_STREAM = {"train": 0, "test": 1}


def distinct(rng: np.random.Generator, rows: int, pool: int, k: int, p=None) -> np.ndarray:
  """[rows, k] draws without replacement from range(pool), in draw order.

  With weights `p` the order follows successive sampling (draw one by p, renormalize
  over the rest), which is what `np.random.choice(replace=False, p=p)` does row by row
  in Zoology; here it is vectorized with exponential clocks: item i rings at
  Exp(p_i) and the first k to ring are the draws (Efraimidis & Spirakis 2006).
  """
  if p is None and k * k <= pool:
    # Rejection: draw with replacement, redraw the rows that hold a repeat.
    out = rng.integers(0, pool, (rows, k))
    while True:
      s = np.sort(out, axis=1)
      bad = np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))
      if bad.size == 0:
        return out
      out[bad] = rng.integers(0, pool, (bad.size, k))
  w = np.ones(pool) if p is None else np.asarray(p, dtype=np.float64)
  out = np.empty((rows, k), dtype=np.int64)
  chunk = max(1, (1 << 22) // pool)  # bounds the [chunk, pool] clock matrix to 32 MiB
  for start in range(0, rows, chunk):
    n = min(chunk, rows - start)
    clocks = rng.exponential(size=(n, pool)) / w  # [n, pool]
    first = np.argpartition(clocks, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(clocks, first, axis=1), axis=1)
    out[start : start + n] = np.take_along_axis(first, order, axis=1)
  return out


def _not(rng: np.random.Generator, low: int, high: int, avoid: np.ndarray, shape) -> np.ndarray:
  """Uniform ids in [low, high) other than `avoid` (broadcast over `shape`)."""
  x = rng.integers(low, high - 1, shape)
  return x + (x >= avoid)


def _next_token(inputs: np.ndarray) -> np.ndarray:
  targets = np.zeros_like(inputs)
  targets[:, :-1] = inputs[:, 1:]
  return targets


def _pack(inputs, targets, mask) -> dict[str, np.ndarray]:
  return {k: np.ascontiguousarray(v, dtype=np.int32) for k, v in
            (("inputs", inputs), ("targets", targets), ("mask", mask))}  # fmt: skip


def mqar(rng, n, *, vocab_size, seq_len, num_kv_pairs, power_a, random_non_queries):
  """Multi-query associative recall in the Zoology layout (Arora et al. 2023).

  `k1 v1 k2 v2 ... kP vP` (P pairs; keys distinct in [1, V/2), values distinct in
  [V/2, V)), then the query region: slot `2P + 2g` holds a key whose gap g in
  [0, (L-2P)//2) is drawn without replacement with p(g) ~ a (g+1)^(a-1), so most queries
  sit close to the context. Every key is queried once; the target at a query is its
  value, which never appears after the query in the inputs. Other slots are 0, or uniform
  ids in [0, V) when random_non_queries (as Zoology does, they may repeat keys: unscored).

  `num_kv_pairs` a tuple (a mixed spec, `4+8+16`): each example draws its P uniformly
  from it, then the examples of each P (in ascending P) are drawn as above, each laid out
  with its own P (its query region starts at 2P), so its mask holds P ones. One P draws
  exactly what it always did.
  """
  counts = as_tuple(num_kv_pairs)
  fixed = dict(vocab_size=vocab_size, seq_len=seq_len, power_a=power_a,
               random_non_queries=random_non_queries)  # fmt: skip
  if len(counts) == 1:
    return _mqar(rng, n, counts[0], **fixed)
  P_N = np.asarray(counts)[rng.integers(0, len(counts), n)]  # [N]
  out = {k: np.zeros((n, seq_len), np.int32) for k in ("inputs", "targets", "mask")}
  for P in counts:
    (rows,) = np.nonzero(P_N == P)
    if rows.size:
      for k, v in _mqar(rng, rows.size, P, **fixed).items():
        out[k][rows] = v
  return out


def _mqar(rng, n, P, *, vocab_size, seq_len, power_a, random_non_queries):
  """n MQAR examples of P pairs each (see mqar)."""
  L, V = seq_len, vocab_size
  keys = distinct(rng, n, V // 2 - 1, P) + 1  # [N, P]
  values = distinct(rng, n, V - V // 2, P) + V // 2  # [N, P]
  space = (L - 2 * P) // 2
  g = np.arange(1, space + 1, dtype=np.float64)
  gaps = distinct(rng, n, space, P, p=power_a * g ** (power_a - 1))  # [N, P]
  inputs = np.zeros((n, L), dtype=np.int64)
  inputs[:, 0 : 2 * P : 2] = keys
  inputs[:, 1 : 2 * P : 2] = values
  query_pos = 2 * P + 2 * gaps  # [N, P]
  np.put_along_axis(inputs, query_pos, keys, axis=1)
  if random_non_queries:
    blank = inputs == 0  # keys >= 1 and values >= V/2, so only unused query slots
    inputs[blank] = rng.integers(0, V, int(blank.sum()))
  targets = _next_token(inputs)
  np.put_along_axis(targets, query_pos, values, axis=1)
  mask = np.zeros_like(inputs)
  np.put_along_axis(mask, query_pos, 1, axis=1)
  return _pack(inputs, targets, mask)


def induction(rng, n, *, vocab_size, seq_len):
  """`... A B ... A` -> B: the pattern an induction head completes.

  A appears exactly twice (noise avoids it), B is any other id; the first A sits at
  a uniform position in [0, L-3], the second A ends the sequence and is scored.
  """
  L, V = seq_len, vocab_size
  a = rng.integers(1, V, n)  # [N]
  b = _not(rng, 1, V, a, n)
  inputs = _not(rng, 1, V, a[:, None], (n, L))
  rows, first = np.arange(n), rng.integers(0, L - 2, n)
  inputs[rows, first], inputs[rows, first + 1], inputs[:, -1] = a, b, a
  targets = _next_token(inputs)
  targets[:, -1] = b
  mask = np.zeros_like(inputs)
  mask[:, -1] = 1
  return _pack(inputs, targets, mask)


def copy(rng, n, *, vocab_size, seq_len, copy_len):
  """`x1..xn SEP x1..xn 0...`: after the separator, reproduce the whole string."""
  c = copy_len
  data = rng.integers(2, vocab_size, (n, c))
  stream = np.zeros((n, seq_len + 1), dtype=np.int64)  # inputs = [:-1], targets = [1:]
  stream[:, :c], stream[:, c], stream[:, c + 1 : 2 * c + 1] = data, 1, data
  mask = np.zeros((n, seq_len), dtype=np.int64)
  mask[:, c : 2 * c] = 1  # positions whose next token is a copied one
  return _pack(stream[:, :-1], stream[:, 1:], mask)


def selective_copy(rng, n, *, vocab_size, seq_len, num_tokens):
  """Selective copying (Gu & Dao 2023): c data ids scattered among blanks, then SEP,
  then the data ids in order. The gaps vary, so a fixed shift cannot solve it: the
  model must choose what to keep by content."""
  c, region = num_tokens, seq_len - num_tokens
  data = rng.integers(2, vocab_size, (n, c))
  where = np.sort(distinct(rng, n, region, c), axis=1)  # [N, c], in [0, region)
  stream = np.zeros((n, seq_len + 1), dtype=np.int64)
  np.put_along_axis(stream, where, data, axis=1)
  stream[:, region], stream[:, region + 1 :] = 1, data
  mask = np.zeros((n, seq_len), dtype=np.int64)
  mask[:, region:] = 1
  return _pack(stream[:, :-1], stream[:, 1:], mask)


def needle(rng, n, *, vocab_size, seq_len, distance):
  """One fact `k v` with k at L-1-distance, noise elsewhere, and k again at L-1 -> v.

  The noise avoids k, so the fact is unambiguous; a window shorter than `distance`
  cannot see it (sliding window vs full attention).
  """
  L, V = seq_len, vocab_size
  k = rng.integers(1, V // 2, n)  # [N]
  v = rng.integers(V // 2, V, n)
  inputs = _not(rng, 1, V, k[:, None], (n, L))
  at = L - 1 - distance
  inputs[:, at], inputs[:, at + 1], inputs[:, -1] = k, v, k
  targets = _next_token(inputs)
  targets[:, -1] = v
  mask = np.zeros_like(inputs)
  mask[:, -1] = 1
  return _pack(inputs, targets, mask)


def facts(rng, n, *, vocab_size, seq_len, num_subjects, num_relations, table_seed):
  """Stored facts: `s1 r1 o1 s2 r2 o2 ...`, each triple a fact o = T[s, r] of one fixed table.

  Subjects are ids [1, 1+S), relations [1+S, 1+S+R), objects [1+S+R, 1+2S+R); the table is
  drawn from `table_seed` alone, so both splits (and every seed) read the same facts. Each
  relation's column is a permutation of the S objects, so a relation alone (or its position)
  says nothing about the object: only the pair (s, r) does. An example holds seq_len // 3
  distinct facts (the rest is 0), so no earlier triple answers a query: the object, scored
  at the relation, must come from a memory of the table.
  """
  S, R, K = num_subjects, num_relations, seq_len // 3
  table_SR = fact_table(num_subjects, num_relations, table_seed)
  which = distinct(rng, n, S * R, K)  # [N, K] fact indices
  s, r = which // R, which % R
  inputs = np.zeros((n, seq_len), dtype=np.int64)
  inputs[:, 0 : 3 * K : 3] = 1 + s
  inputs[:, 1 : 3 * K : 3] = 1 + S + r
  inputs[:, 2 : 3 * K : 3] = table_SR[s, r]
  mask = np.zeros_like(inputs)
  mask[:, 1 : 3 * K : 3] = 1
  return _pack(inputs, _next_token(inputs), mask)


def fact_table(num_subjects, num_relations, table_seed):
  """int [S, R]: the object id of every fact of `facts` (each column a permutation)."""
  S, R = num_subjects, num_relations
  rng = np.random.default_rng([table_seed, 2])  # a stream apart from both splits'
  return np.stack([rng.permutation(S) for _ in range(R)], axis=1) + 1 + S + R


GENERATORS = {
  "mqar": mqar,
  "induction": induction,
  "copy": copy,
  "selective_copy": selective_copy,
  "needle": needle,
  "facts": facts,
}
_NOT_TASK_ARGS = ("num_examples", "num_test_examples", "seed")


def generate(name: str, params: dict[str, Any], split: str) -> dict[str, np.ndarray]:
  """All examples of one split, deterministic in (params, split)."""
  n = params["num_examples"] if split == "train" else params["num_test_examples"]
  rng = np.random.default_rng([params["seed"], SPLIT_STREAM[split]])
  kwargs = {k: v for k, v in params.items() if k not in _NOT_TASK_ARGS}
  return GENERATORS[name](rng, n, **kwargs)


def _mqar_chance(p):
  """1/P; a mixed spec: 1/mean(P). Accuracy pools the scored positions (correct / scored,
  jaxformer.train.step), and an example of P pairs adds P of them, each right with 1/P:
  one right guess per example in expectation, over mean(P) scored positions."""
  counts = as_tuple(p["num_kv_pairs"])
  return len(counts) / sum(counts)


def _mqar_chance_rule(p):
  if not isinstance(p["num_kv_pairs"], tuple):
    return "a guess among the K values in context"
  pairs = ", ".join(map(str, p["num_kv_pairs"]))
  return (
    f"a guess among the P values in context, pooled over the queries: 1/mean(P), P in {{{pairs}}}"
  )


# The accuracy of an informed guess on each task: a model that knows where the answer comes
# from but recalled nothing scores this. Experiments report accuracy raw and chance-adjusted,
# (accuracy - chance) / (1 - chance), so 0 is guessing and 1 is perfect. The rule is a text,
# or a function of the params for a task whose rule depends on them.
CHANCE = {
  "mqar": (_mqar_chance, _mqar_chance_rule),
  "induction": (lambda p: 1 / (p["seq_len"] - 2), "a guess among the L - 2 other context ids"),
  "copy": (lambda p: 1 / (p["vocab_size"] - 2), "a guess among the V - 2 data ids"),
  "selective_copy": (lambda p: 1 / (p["vocab_size"] - 2), "a guess among the V - 2 data ids"),
  "needle": (
    lambda p: 1 / (p["vocab_size"] - p["vocab_size"] // 2),
    "a guess among the V - V/2 value ids",
  ),
  "facts": (lambda p: 1 / p["num_subjects"], "a guess among the S objects a relation takes"),
}


def chance(name: str, params: dict[str, Any], vocab_size: int) -> tuple[float, str]:
  """(chance accuracy, how it is defined) of a parsed task whose prepared vocabulary is
  `vocab_size`; the text tasks: a uniform guess over it."""
  if name in CHANCE:
    level, how = CHANCE[name]
    return float(level(params)), how if isinstance(how, str) else how(params)
  return 1.0 / vocab_size, "a uniform guess over the vocabulary"
