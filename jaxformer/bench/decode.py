"""Decode suite: per-token latency with the KV cache vs recomputing the prefix.

  python -m experiments.bench decode [--size gpt_small|tiny] [--json]

For each position P the model has already seen P tokens; we time the next token:
- cached:    one `decode_step` on one token against a cache holding P tokens;
- recompute: one forward pass over all P + 1 tokens (what a model without a cache does).
The cache is allocated once for `max_len` tokens, as `generate` does for a whole run, and
every step reads all of its slots (masked beyond P): the per-token cost is flat in P by
construction, and the price is paid at small P. Targets (BENCHMARKS.md):
latency(2048) <= 1.3 x latency(64), and cached >= 10x faster than recompute at P = 1024.
"""

import functools

import jax

from jaxformer import decode, ladder
from jaxformer.bench import BenchError, Suite, check_choice, check_positive
from jaxformer.train import metrics

POSITIONS = (64, 256, 1024, 2048)
CHUNK = 64  # prefill in chunks of this many tokens: one compiled prefill for every P
MODELS = {
  # the train suite's gpt_small, with room for 2048 + a few decoded tokens
  "gpt_small": dict(d_model=384, num_heads=6, num_layers=6, d_ff=1536, vocab_size=256),
  "tiny": dict(d_model=64, num_heads=2, num_layers=2, d_ff=256, vocab_size=64),
}
TARGET_FLATNESS = 1.3  # latency(2048) / latency(64) at most
TARGET_SPEEDUP = 10.0  # recompute / cached at P = 1024, at least


def model_config(size, max_len):
  c = ladder.default_config("transformer")
  for field, value in MODELS[size].items():
    c[field] = value
  c.max_len = max_len
  return c


def run(model_size="gpt_small", positions=POSITIONS, repeats=10, batch=1):
  """One row per position (cached vs recompute), then one row per target."""
  check_choice("model_size", model_size, tuple(MODELS))
  check_positive(positions=positions, repeats=repeats, batch=batch)
  for position in positions:
    if position % CHUNK:
      raise BenchError(f"positions={positions!r}: each must be a multiple of the chunk {CHUNK}")
  max_len = max(positions) + CHUNK
  model = ladder.build("transformer", model_config(model_size, max_len))
  rng = jax.random.key(0)
  vocab = MODELS[model_size]["vocab_size"]
  tokens_BL = jax.random.randint(rng, (batch, max(positions) + 1), 0, vocab)
  params = jax.jit(lambda t: model.init(rng, t[:, :CHUNK])["params"])(tokens_BL)

  prefill = jax.jit(functools.partial(decode.decode_step, model))
  step = jax.jit(functools.partial(decode.decode_step, model), donate_argnums=1)
  forward = jax.jit(lambda p, t: model.apply({"params": p}, t)[:, -1])
  rows = []
  for position in positions:
    cache = decode.init_cache(model, batch, max_len)
    for start in range(0, position, CHUNK):
      _, cache = prefill(params, cache, tokens_BL[:, start : start + CHUNK])
    token_B1 = tokens_BL[:, position : position + 1]
    _, cache = step(params, cache, token_B1)  # compile; the cache now holds P + 1 tokens
    state = {"cache": cache}

    def one_token(state=state, token_B1=token_B1):
      logits, state["cache"] = step(params, state["cache"], token_B1)
      return logits

    cached = metrics.time_calls(one_token, repeats)
    prefix = tokens_BL[:, : position + 1]
    jax.block_until_ready(forward(params, prefix))  # compile
    recompute = metrics.time_calls(
      lambda prefix=prefix: forward(params, prefix), max(3, repeats // 3)
    )
    rows.append(
      {  # wall: the best call; CPU: the median
        "position": position,
        "cached_ms": 1e3 * cached.best,
        "recompute_ms": 1e3 * recompute.best,
        "speedup": recompute.best / cached.best,
        "cached_cpu_ms": 1e3 * cached.median_cpu,
        "recompute_cpu_ms": 1e3 * recompute.median_cpu,
        "cache_slots": max_len,
      }
    )
  rows += _checks({r["position"]: r for r in rows})
  rate = _generate_rate(model, params, tokens_BL[:, :CHUNK])
  rows.append({"check": "generate tokens/s", "value": rate, "target": "", "met": None})
  return rows


def _checks(by_pos):
  """The targets, as rows: what was measured against what was asked."""
  checks = []
  if 64 in by_pos and 2048 in by_pos:
    flat = by_pos[2048]["cached_ms"] / by_pos[64]["cached_ms"]
    checks.append(
      {
        "check": "latency(2048)/latency(64)",
        "value": flat,
        "target": f"<= {TARGET_FLATNESS}",
        "met": bool(flat <= TARGET_FLATNESS),
      }
    )
  if 1024 in by_pos:
    speedup = by_pos[1024]["speedup"]
    checks.append(
      {
        "check": "recompute/cached at 1024",
        "value": speedup,
        "target": f">= {TARGET_SPEEDUP:g}",
        "met": bool(speedup >= TARGET_SPEEDUP),
      }
    )
  return checks


def _generate_rate(model, params, prompt_BL, steps=128):
  """Sampled tokens per second of `generate` (one compiled scan), prompt of 64 tokens."""
  run_once = lambda: decode.generate(model, params, prompt_BL, steps=steps, rng=jax.random.key(1))  # noqa: E731
  jax.block_until_ready(run_once())
  return steps * prompt_BL.shape[0] / metrics.time_calls(run_once, 3).best


SUITE = Suite(
  run=run,
  sizes={
    "gpt_small": dict(model_size="gpt_small"),
    "tiny": dict(model_size="tiny", positions=(64, 256), repeats=3),
  },
  columns=(
    "position",
    "cached_ms",
    "recompute_ms",
    "speedup",
    "cached_cpu_ms",
    "recompute_cpu_ms",
    "check",
    "value",
    "target",
    "met",
  ),
  description="per-token latency with the KV cache vs recomputing the prefix, by position",
)
