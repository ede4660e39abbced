"""Section 5, the cache: factoring A = Wq^T Wk to rank r shrinks the key cache D/r-fold; does
a small rank still recall?

A bilinear coefficient x_L^T A x_i caches the key A x_i, D numbers per head, for every past
token and layer (the article: 5,000 tokens x 50 layers x 20 heads x 1,000 dims x 2 bytes =
10 GB). Factored, A = Wq^T Wk with Wq, Wk of shape r x D, it caches Wk x_i, r numbers per
head (2 GB at r = 200 = D/5). The sweep is over the key rank r at a fixed width D = 64, each
rank its own trained model of the `softmax` rung (one head per layer, summed heads: the
values are the same D-wide arrays in every arm and only the scorer differs), pre-norm + final
norm, on MQAR with 8 pairs:

  bilinear   x_L^T A x_i, A: D x D          full rank: keys of D per head and token
  r16        (Wq x_L) . (Wk x_i), r = 16    D/4, about the article's D/5
  r2         r = 2                          D/32
  r1         r = 1                          one number per key: too few to tell 63 keys apart

  python -m experiments.engine run cache --size quick    # ~1.5 minutes on one CPU core
  python -m experiments.engine run cache --size full     # ~20 minutes on 2 CPU cores (est.)

Every arm first sits on MQAR's floor (raw accuracy ~0.13) before recall takes off; full rank
and r = D/4 leave it by ~500 steps, rank 2 needs several times longer, so the low ranks start
at twice the budget (`arm_steps`): read at 500 steps, that floor looks flat and would reject
rank 2 (and rank 1) for a budget, not a capacity.

Expected: r = D/4 recalls as full rank does, where rank 1 stays near chance (with one head per
layer rank binds at the plateau; two heads let rank 1 learn slowly). Whether r = 2 already
holds is an extension. The key bytes per token and layer of each trained model's real decoding
cache (jaxformer/analysis/decode_cache.py) and the formula of decode.cache_dims are reported
beside the verdict, with the measured D/r-fold shrink; their equality is a test
(tests/analysis/test_decode_cache.py), not a criterion. Verdicts: results/cache/.
"""

from experiments.engine import figures
from experiments.engine.declare import Arm, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import decode_cache, inputs

D = 64
RANKS = {"bilinear": D, "r16": 16, "r2": 2, "r1": 1}  # arm -> key numbers per head and token


def _arm(name, note, **scorer):
  return Arm(name, "softmax", {"num_heads": 1} | scorer, note)


ARMS = (
  _arm("bilinear", "x_L^T A x_i: caches A x_i, D per head", interaction="bilinear"),
  _arm("r16", "(Wq x_L) . (Wk x_i), r = D/4: caches Wk x_i", interaction="lowrank", rank=16),
  _arm("r2", "rank 2 = D/32", interaction="lowrank", rank=2),
  _arm("r1", "rank 1: one number per cached key", interaction="lowrank", rank=1),
)

METRICS = (
  Metric("key_bytes", 0.0, float("inf"),
         note="bytes of the key arrays of the trained model's real decoding cache after a "
         "prefill, per token and layer"),
  Metric("key_bytes_formula", 0.0, float("inf"),
         note="the same from decode.cache_dims: heads x key dims x bytes"),
  Metric("key_shrink", 0.0, float("inf"),
         note="bilinear's measured key bytes over the arm's: D/r"),
)  # fmt: skip

CRITERIA = (
  Criterion("full_rank_learns", "control", "the full-rank (bilinear) key learns recall",
            metric="adjusted", arm="bilinear", threshold=0.8),
  Criterion("rank_one_fails", "control", "the task binds the rank: a rank-1 key fails",
            metric="adjusted", arm="r1", compare="<=", threshold=0.5),
  Criterion("quarter_rank_recalls", "5.3", "a key of rank D/4 still recalls",
            metric="adjusted", arm="r16", threshold=0.9,
            positive=Case(arm="bilinear"), falsification=Case(arm="r1"),
            guarded_by=("full_rank_learns", "rank_one_fails")),
  Criterion("rank_two_recalls", "extension", "a key of rank 2 (D/32) already recalls",
            metric="adjusted", arm="r2", threshold=0.9,
            positive=Case(arm="r16"), falsification=Case(arm="r1"),
            guarded_by=("full_rank_learns", "rank_one_fails")),
)  # fmt: skip

MODEL = {"d_model": D, "num_layers": 2, "norm": "pre", "final_norm": True}
TASK = {"vocab_size": 128, "seq_len": 32, "num_kv_pairs": 8}
SIZES = {
  "tiny": Size(
    task={"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 2, "num_examples": 64,
          "num_test_examples": 32}, model=MODEL | {"num_layers": 1}, steps=4, step_cap=4,
    learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2, batch_size=8,
    eval_every=2, warmup_steps=1, extra={"decode_batch": 2},
  ),
  "quick": Size(
    task=TASK | {"num_examples": 20_000, "num_test_examples": 512}, model=MODEL, steps=1000,
    step_cap=2000, learning_rates=(3e-3,), exploratory_seeds=(100,), confirmatory=2,
    confirm_only=True, arm_steps={"r2": (2000, 2000), "r1": (2000, 2000)},
    extra={"decode_batch": 8},
  ),
  "full": Size(
    task=TASK | {"num_examples": 40_000, "num_test_examples": 2048}, model=MODEL, steps=1500,
    step_cap=6000, learning_rates=(1e-3, 3e-3), exploratory_seeds=(100,), confirmatory=5,
    eval_every=100, arm_steps={"r2": (3000, 6000), "r1": (3000, 6000)},
    extra={"decode_batch": 8},
  ),
}  # fmt: skip


def task(size, point):
  return spec("mqar", {**size.task, "seed": 0})


def measure(trained, size):
  """Key bytes per token and layer of each seed's real decoding cache after prefilling
  held-out prompts, the formula's, and the shrink against bilinear's (D/r)."""
  prompts = inputs.eval_inputs(task(size, None), size.extra["decode_batch"])
  batch, length = prompts.shape
  per = {}
  out = {"key_bytes": {}, "key_bytes_formula": {}, "key_shrink": {}}
  for name in RANKS:
    unit = trained.unit(name)
    model, config = unit.model(), unit.result.config.model
    count = batch * length * config.num_layers
    per[name] = [decode_cache.measure(model, p, prompts)["keys"] / count for p in unit.params()]
    formula = decode_cache.key_bytes_formula(config, length, batch=batch) / count
    out["key_bytes"][name] = {"*": per[name]}
    out["key_bytes_formula"][name] = {"*": [formula] * len(trained.seeds)}
  for name in RANKS:
    shrink = [b / a for a, b in zip(per[name], per["bilinear"], strict=True)]
    out["key_shrink"][name] = {"*": shrink}
  return out


def figure(result, path):
  """Validation accuracy by step; adjusted accuracy and measured key bytes along the rank."""
  fig = figures.new(cols=3)
  axes = [fig.add_subplot(1, 3, i) for i in (1, 2, 3)]
  figures.curves(axes[0], result, title="MQAR validation accuracy (lines: seeds)")
  figures.bars(axes[1], result, ("adjusted",), tuple(RANKS),
               title="chance-adjusted accuracy by key rank")  # fmt: skip
  figures.bars(axes[2], result, ("key_bytes",), tuple(RANKS),
               title="key bytes per token and layer (real cache)")  # fmt: skip
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="cache",
  section=5,
  claims=("5.3",),
  summary="The key rank r of a factored scorer (Wq x_L) . (Wk x_i) swept at width D = 64 "
  "against the bilinear x_L^T A x_i on MQAR: does a rank well below D still recall where rank "
  "1 fails, and how many bytes per token does each real key cache hold.",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  measure=measure,
  figure=figure,
)
