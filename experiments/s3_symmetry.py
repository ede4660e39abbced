"""Section 3: the weight function needs two arguments, the source and the receiver.

W_iL = f(x_i) sends the same weight from x_i into every later unit: the last position reads one
running summary of the prefix (a fixed state of D numbers per layer), and neighbouring units mix
nearly the same inputs. W_iL = 0 for i != L breaks the symmetry but leaves no communication.
W_iL = f(x_i, x_L) breaks it usefully. Three arms, everything else equal (width, depth, one
head, pre-norm + final norm, the softmax over the sources, data, budget; each at its selected
learning rate):

  source_only   W_iL = f(x_i)                the `source_only` rung
  stateless     W_iL = 0 for i != L          the `stateless` rung (a self mask)
  matrix_sum    W_iL = (Wq x_L) . (Wk x_i)   the `matrix_sum` rung, low rank

Each arm trains one model on MQAR with a mixture of pair counts P, read at each P
(jaxformer/analysis/recall.py), and one on induction (`... A B ... A` -> B, read at
"induction:1": one match to copy from). On the trained networks and the same networks at init
(jaxformer/analysis/inputs.py), on each point's eval inputs: the receiver dependence of the
weights (jaxformer/analysis/receivers.py; source_only's is 0 by construction, asserted) and the
first mixer's centred neighbour contrast (jaxformer/analysis/similarity.py).

  python -m experiments.engine run symmetry --size quick    # ~2 minutes on one CPU core
  python -m experiments.engine run symmetry --size full     # 15-40 minutes (estimated)

Expected: matrix_sum recalls at every P and on induction (3.5), stateless at neither (3.4).
Earlier runs found a 2-layer source-only stack slowly learns MQAR of 4 pairs of 16 ids (a small
fixed memory) and fails at induction, so 3.2 is read at the most pairs, where a fixed state of
D = 64 should not hold them; and training lowered matrix_sum's neighbour contrast on MQAR but
raised it beyond source_only's on induction, so 3.1 may not reproduce there.
"""

import jax
import numpy as np

from experiments.engine import figures
from experiments.engine.declare import Arm, Axis, Case, Criterion, Experiment, Metric, Size, spec
from jaxformer.analysis import inputs, recall, receivers, similarity
from jaxformer.analysis.cache import cached

SHARED = {"num_heads": 1, "normalizer": "softmax"}
ARMS = (
  Arm("source_only", "source_only", SHARED, "W_iL = f(x_i): the same weight into every receiver"),
  Arm("stateless", "stateless", SHARED, "W_iL = 0 for i != L: sees no other position"),
  Arm("matrix_sum", "matrix_sum", SHARED | {"interaction": "lowrank"},
      "W_iL = (Wq x_L) . (Wk x_i): both arguments"),
)  # fmt: skip
NAMES = tuple(a.name for a in ARMS)

METRICS = (
  Metric("dependence", 0.0, 1.0, untrained="dependence_untrained",
         note="mean total variation between receivers' weights over shared sources, all layers"),
  Metric("dependence_untrained", 0.0, 1.0, note="dependence of the same networks at init"),
  Metric("contrast", -2.0, 2.0, note="first mixer's centred cos(s_L, s_L+1) - cos(s_L, s_L+k)"),
  Metric("contrast_untrained", -2.0, 2.0, note="contrast of the same networks at init"),
  Metric("contrast_rise", -4.0, 4.0, note="contrast trained minus untrained, same networks"),
)  # fmt: skip

MQAR_HARD, MQAR_EASY, INDUCTION = "last", "mqar:2", "induction:1"


def _informed(task, at):
  return Criterion(f"source_only_informed_{task}", "control", f"{task}: source_only learns "
                   "where answers come from", metric="over_chance", arm="source_only", at=at,
                   threshold=0.8)  # fmt: skip


def _per_task(task, at, other):
  """The criteria read on one task at point `at`; `other`: the other task's point."""
  return (
    _informed(task, at),
    Criterion(f"neighbours_alike_{task}", "3.1", f"{task}: training makes source_only's "
              "neighbouring units more alike than matrix_sum's", metric="contrast_rise",
              statistic="difference", arm="source_only", against="matrix_sum", at=at,
              threshold=0.1, positive=Case(arm="stateless", why="no running average to lose"),
              falsification=Case(against="source_only", why="an arm against itself")),
    Criterion(f"stateless_fails_{task}", "3.4", f"{task}: stateless weights fail",
              metric="adjusted", arm="stateless", at=at, compare="<=", threshold=0.1,
              positive=Case(at=other), falsification=Case(arm="matrix_sum")),
    Criterion(f"matrix_sum_recalls_{task}", "3.5", f"{task}: f(x_i, x_L) succeeds",
              metric="adjusted", arm="matrix_sum", at=at, threshold=0.8,
              positive=Case(at=MQAR_EASY), falsification=Case(arm="stateless")),
  )  # fmt: skip


CRITERIA = (
  *_per_task("mqar", MQAR_HARD, INDUCTION),
  *_per_task("induction", INDUCTION, MQAR_HARD),
  Criterion("source_only_fails_mqar", "3.2", "source-only weights fail at recall at the most "
            "pairs", metric="adjusted", arm="source_only", at=MQAR_HARD, compare="<=",
            threshold=0.3, positive=Case(arm="stateless"), falsification=Case(arm="matrix_sum"),
            guarded_by=("source_only_informed_mqar",)),
  Criterion("source_only_fails_induction", "3.3", "source-only weights fail at induction",
            metric="adjusted", arm="source_only", at=INDUCTION, compare="<=", threshold=0.3,
            positive=Case(arm="stateless"), falsification=Case(arm="matrix_sum"),
            guarded_by=("source_only_informed_induction",)),
  Criterion("source_only_holds_few_pairs", "extension", "a source-only stack recalls the "
            "fewest pairs (a small fixed memory)", metric="adjusted", arm="source_only",
            at=MQAR_EASY, threshold=0.5, positive=Case(arm="matrix_sum"),
            falsification=Case(arm="stateless")),
  Criterion("receiver_dependence", "extension", "training makes f(x_i, x_L)'s weights depend "
            "on the receiver at the most pairs", metric="dependence", statistic="gain",
            arm="matrix_sum", at=MQAR_HARD, threshold=0.1, positive=Case(at=INDUCTION),
            falsification=Case(arm="source_only")),
)  # fmt: skip


def _size(task, points, d_model, **fields):
  model = {"d_model": d_model, "num_layers": 2, "norm": "pre", "final_norm": True}
  return Size(task=task, model=model, points={"induction": (1,), "mqar": points}, **fields)


SIZES = {
  "tiny": _size(
    {"mqar": {"vocab_size": 16, "seq_len": 16}, "induction": {"vocab_size": 16, "seq_len": 8},
     "num_examples": 64, "num_test_examples": 32}, (2, 4), 8, steps=4, step_cap=8,
    learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2, batch_size=8,
    eval_every=2, warmup_steps=1, extra={"eval_examples": 16, "probe_batch": 8, "far": 2},
  ),
  "quick": _size(
    {"mqar": {"vocab_size": 64, "seq_len": 32}, "induction": {"vocab_size": 64, "seq_len": 16},
     "num_examples": 20_000, "num_test_examples": 2048}, (2, 4, 8), 64, steps=1000,
    step_cap=4000, learning_rates=(3e-3,), exploratory_seeds=(100,), confirmatory=2,
    confirm_only=True, eval_every=100, extra={"eval_examples": 256, "probe_batch": 64, "far": 4},
    # v2: the induction units start at the budgets v1 grew them to
    arm_steps={"matrix_sum @ induction": (4000, 4000), "source_only @ induction": (2000, 2000)},
  ),
  "full": _size(
    {"mqar": {"vocab_size": 128, "seq_len": 64}, "induction": {"vocab_size": 64,
     "seq_len": 16}, "num_examples": 40_000, "num_test_examples": 2048}, (2, 4, 8, 16), 64,
    steps=1500, step_cap=6000, learning_rates=(1e-3, 3e-3), exploratory_seeds=(100,),
    confirmatory=5, eval_every=100, warmup_steps=100,
    extra={"eval_examples": 512, "probe_batch": 128, "far": 4},
  ),
}  # fmt: skip


def task(size, point):
  """A setting's training task ("mqar": its mixture of P), or a point's reading ("mqar:4")."""
  setting, _, pairs = str(point).partition(":")
  shared = {k: v for k, v in size.task.items() if k not in size.points}
  if setting == "induction":
    return spec("induction", {**shared, **size.task[setting], "seed": 0})
  held = {"num_test_examples": size.extra["eval_examples"]} if pairs else {}
  pairs = pairs or "+".join(str(p) for p in size.points[setting])
  return spec("mqar", {**shared, **size.task[setting], "num_kv_pairs": pairs, "seed": 0, **held})


PROBED = ("layers_0/mixer/out", "*/mixer/weights")  # one compiled forward pass per model


def _probe(model, params, tokens, far, dependence):
  """(receiver dependence, mean over layers and heads, or None where no two receivers share
  sources; the mean centred neighbour contrast of the first mixer)."""
  cache = cached(model, {"params": params}, tokens, PROBED)
  contrast = float(np.mean(similarity.offset_contrast(cache["layers_0/mixer/out"], far)))
  if not dependence:
    return None, contrast
  per_layer = receivers.cache_dependence(model, cache, tokens.shape[1])
  return float(np.mean([np.mean(v) for v in per_layer.values()])), contrast


def _recall(trained, size, arm, setting):
  """{point: (accuracy per seed, chance)} of the arm's model of `setting`."""
  unit = trained.unit(arm, setting)
  if setting == "induction":
    return {INDUCTION: (np.asarray(unit.final("eval_accuracy")), unit.result.chance)}
  stacked = jax.tree.map(lambda *x: np.stack(x), *unit.params())
  pairs = size.points[setting]
  by_p = recall.by_pairs(unit.model(), stacked, lambda p: task(size, f"{setting}:{p}"), pairs)
  return {f"{setting}:{p}": (v, 1 / p) for p, v in by_p.items()}


def measure(trained, size):
  """Per arm and point: accuracy, adjusted and over_chance at that point's chance; receiver
  dependence and neighbour contrast of the trained and untrained networks on its eval inputs."""
  out = {}

  def put(metric, arm, point, values):
    out.setdefault(metric, {}).setdefault(arm, {})[point] = [float(v) for v in values]

  for arm in NAMES:
    for setting in size.points:
      unit = trained.unit(arm, setting)
      model = unit.model()
      for point, (acc, chance) in _recall(trained, size, arm, setting).items():
        put("accuracy", arm, point, acc)
        put("adjusted", arm, point, (acc - chance) / (1 - chance))
        put("over_chance", arm, point, acc / chance)
        tokens = inputs.eval_inputs(task(size, point), size.extra["probe_batch"])
        initial = inputs.initial_params(model, trained.seeds, tokens.shape)
        for suffix, params in (("", unit.params()), ("_untrained", initial)):
          read = [_probe(model, p, tokens, size.extra["far"], arm != "stateless") for p in params]
          put(f"contrast{suffix}", arm, point, [c for _, c in read])
          if arm != "stateless":  # a self mask: no two receivers share a source
            put(f"dependence{suffix}", arm, point, [d for d, _ in read])
        contrast = out["contrast"][arm][point], out["contrast_untrained"][arm][point]
        put("contrast_rise", arm, point, np.subtract(*contrast))
        if arm == "source_only" and not max(out["dependence"][arm][point]) <= 1e-5:
          raise RuntimeError(f"source_only's weights depend on the receiver at {point}: "
                             f"{out['dependence'][arm][point]}; W_iL = f(x_i) must give 0")  # fmt: skip
  return out


def figure(result, path):
  """Adjusted recall against P and on induction; validation curves; the neighbour contrast."""
  fig = figures.new(cols=3, rows=2)
  adjusted = result["metrics"]["adjusted"]
  mqar = [p for p in adjusted["matrix_sum"] if p.startswith("mqar:")]
  ax = fig.add_subplot(2, 3, 1)
  for i, arm in enumerate(NAMES):
    ax.plot([p.split(":")[1] for p in mqar], [np.mean(adjusted[arm][p]) for p in mqar], "o-",
            color=f"C{i}", label=arm)  # fmt: skip
  ax.axhline(0, color="gray", linewidth=0.8)
  ax.set(xlabel="P (MQAR pairs)", ylabel="adjusted recall (0: chance 1/P)", title="MQAR")
  ax.legend(fontsize=7)
  figures.bars(fig.add_subplot(2, 3, 4), result, ("adjusted",), NAMES, INDUCTION,
               title="induction: adjusted accuracy")  # fmt: skip
  for col, point in ((2, "mqar"), (3, "induction")):
    figures.curves(fig.add_subplot(2, 3, col), result, point, f"{point}: validation accuracy")
  for col, point in ((5, mqar[-1]), (6, INDUCTION)):
    figures.bars(fig.add_subplot(2, 3, col), result, ("contrast_untrained", "contrast"), NAMES,
                 point, title=f"{point}: neighbour contrast")  # fmt: skip
  figures.save(fig, path)


EXPERIMENT = Experiment(
  name="symmetry",
  section=3,
  claims=("3.1", "3.2", "3.3", "3.4", "3.5"),
  summary="Source-only (f(x_i)), stateless (0 for i != L) and two-argument (f(x_i, x_L)) "
  "weights on mixed-P MQAR read at each P and on induction: which recall, and how alike "
  "training makes neighbouring units.",
  arms=ARMS,
  metrics=METRICS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
  axis=Axis(
    "P",
    mixed=True,
    note="MQAR pairs, one model per arm on their mixture; induction "
    "trains its own, read at 1 (one match)",
  ),
  measure=measure,
  figure=figure,
)
