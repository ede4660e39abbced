"""Decode suite: per-token latency with the KV cache vs recomputing the prefix.

  python -m experiments.bench decode [--size tiny|gpt_small] [--json]

For each position P the model has already seen P tokens; we time the next token:
- cached:    one `decode_step` on one token against a cache holding P tokens;
- recompute: one forward pass over all P + 1 tokens (what a model without a cache does).
The cache is allocated once for `max_len` tokens, as `generate` does for a whole run, and
every step reads all of its slots (masked beyond P): the per-token cost is flat in P by
construction, and the price is paid at small P. Targets (docs/benchmarks.md):
latency(2048) <= 1.3 x latency(64), and cached >= 10x faster than recompute at P = 1024.
"""

import functools
import time

import jax

from jaxformer import decode, ladder

POSITIONS = (64, 256, 1024, 2048)
CHUNK = 64  # prefill in chunks of this many tokens: one compiled prefill for every P
SIZES = {
  # the train suite's gpt_small, with room for 2048 + a few decoded tokens
  "gpt_small": dict(d_model=384, num_heads=6, num_layers=6, d_ff=1536, vocab_size=256),
  "tiny": dict(d_model=64, num_heads=2, num_layers=2, d_ff=256, vocab_size=64),
}
TARGET_FLATNESS = 1.3  # latency(2048) / latency(64) at most
TARGET_SPEEDUP = 10.0  # recompute / cached at P = 1024, at least


def model_config(size, max_len):
  c = ladder.default_config("transformer")
  for field, value in SIZES[size].items():
    c[field] = value
  c.max_len = max_len
  return c


def _best_of(fn, repeats):
  """Best wall time of `repeats` calls of fn() (each returns something to block on)."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return min(times)


def run(size="gpt_small", positions=POSITIONS, repeats=10, batch=1):
  """Latency table and targets; returns a JSON-able dict."""
  max_len = max(positions) + CHUNK
  model = ladder.build("transformer", model_config(size, max_len))
  rng = jax.random.key(0)
  tokens_BL = jax.random.randint(rng, (batch, max(positions) + 1), 0, SIZES[size]["vocab_size"])
  params = jax.jit(lambda t: model.init(rng, t[:, :CHUNK])["params"])(tokens_BL)

  prefill = jax.jit(functools.partial(decode.decode_step, model))
  step = jax.jit(functools.partial(decode.decode_step, model), donate_argnums=1)
  forward = jax.jit(lambda p, t: model.apply({"params": p}, t)[:, -1])
  rows = []
  for position in positions:
    if position % CHUNK:
      raise ValueError(f"positions: {position} is not a multiple of the prefill chunk {CHUNK}")
    cache = decode.init_cache(model, batch, max_len)
    for start in range(0, position, CHUNK):
      _, cache = prefill(params, cache, tokens_BL[:, start : start + CHUNK])
    token_B1 = tokens_BL[:, position : position + 1]
    _, cache = step(params, cache, token_B1)  # compile; the cache now holds P + 1 tokens
    state = {"cache": cache}

    def one_token(state=state, token_B1=token_B1):
      logits, state["cache"] = step(params, state["cache"], token_B1)
      return logits

    cached = _best_of(one_token, repeats)
    prefix = tokens_BL[:, : position + 1]
    jax.block_until_ready(forward(params, prefix))  # compile
    recompute = _best_of(lambda prefix=prefix: forward(params, prefix), max(3, repeats // 3))
    rows.append(
      {
        "position": position,
        "cached_ms": 1e3 * cached,
        "recompute_ms": 1e3 * recompute,
        "speedup": recompute / cached,
      }
    )
  by_pos = {r["position"]: r for r in rows}
  result = {"suite": "decode", "size": size, "batch": batch, "cache_slots": max_len, "rows": rows}
  if 64 in by_pos and 2048 in by_pos:
    flat = by_pos[2048]["cached_ms"] / by_pos[64]["cached_ms"]
    result["latency_2048_over_64"] = flat
    result["flatness_target_met"] = bool(flat <= TARGET_FLATNESS)
  if 1024 in by_pos:
    result["speedup_at_1024"] = by_pos[1024]["speedup"]
    result["speedup_target_met"] = bool(by_pos[1024]["speedup"] >= TARGET_SPEEDUP)
  result["generate_tokens_per_s"] = _generate_rate(model, params, tokens_BL[:, :CHUNK], size)
  return result


def _generate_rate(model, params, prompt_BL, size, steps=128):
  """Sampled tokens per second of `generate` (one compiled scan), prompt of 64 tokens."""
  run_once = lambda: decode.generate(model, params, prompt_BL, steps=steps, rng=jax.random.key(1))  # noqa: E731
  jax.block_until_ready(run_once())
  return steps * prompt_BL.shape[0] / _best_of(run_once, 3)


def format_table(result):
  lines = [
    f"decode suite, size={result['size']}, batch={result['batch']}, "
    f"cache slots={result['cache_slots']}",
    f"{'position':>9} {'cached ms':>10} {'recompute ms':>13} {'speedup':>8}",
  ]
  for r in result["rows"]:
    lines.append(
      f"{r['position']:>9} {r['cached_ms']:>10.2f} {r['recompute_ms']:>13.2f} {r['speedup']:>7.1f}x"
    )
  if "latency_2048_over_64" in result:
    met = "met" if result["flatness_target_met"] else "NOT met"
    lines.append(
      f"latency(2048)/latency(64) = {result['latency_2048_over_64']:.2f} "
      f"(target <= {TARGET_FLATNESS}: {met})"
    )
  if "speedup_at_1024" in result:
    met = "met" if result["speedup_target_met"] else "NOT met"
    lines.append(
      f"cache vs recompute at 1024 = {result['speedup_at_1024']:.1f}x "
      f"(target >= {TARGET_SPEEDUP:.0f}x: {met})"
    )
  lines.append(f"generate: {result['generate_tokens_per_s']:.0f} tokens/s")
  return "\n".join(lines)
