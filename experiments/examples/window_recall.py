"""The tutorial's experiment (docs/protocol.md): does a sliding window lose recall that full
attention keeps? A reading of claim 9.1 in the fewest lines a declaration can have.

  python -m experiments.engine run window_recall --size quick --explore   # the sizing run

Three arms of the softmax rung, one head, everything else equal: full causal attention, a
window of 4 tokens (MQAR's pairs sit further back than that from their queries), and a model
that sees only its own position (a failure by construction: the criterion must accept it).
"""

from experiments.engine.declare import Arm, Case, Criterion, Experiment, Size, spec

ARMS = (
  Arm("full", "softmax", {"num_heads": 1}, "causal attention over every earlier token"),
  Arm("window", "softmax", {"num_heads": 1, "window": 4}, "the last 4 tokens only"),
  Arm("self", "softmax", {"num_heads": 1, "mask": "self"}, "its own position only"),
)

CRITERIA = (
  Criterion("window_trains", "control", "the window learns the answer format",
            metric="over_chance", arm="window", threshold=0.8),
  Criterion("window_fails", "9.1", "a window shorter than the distance to the pairs fails",
            metric="adjusted", arm="window", compare="<=", threshold=0.3,
            positive=Case(arm="self"), falsification=Case(arm="full"),
            guarded_by=("window_trains",)),
)  # fmt: skip

MODEL = {"d_model": 32, "num_layers": 2, "norm": "pre", "final_norm": True}
SIZES = {
  "tiny": Size(task={"vocab_size": 16, "seq_len": 16, "num_kv_pairs": 2, "num_examples": 64,
                     "num_test_examples": 32}, model=MODEL | {"d_model": 8}, steps=4,
               step_cap=4, learning_rates=(1e-2,), exploratory_seeds=(100,), confirmatory=2,
               batch_size=8, eval_every=2, warmup_steps=1),
  "quick": Size(task={"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4,
                      "num_examples": 20_000, "num_test_examples": 512}, model=MODEL,
                steps=600, step_cap=1200, learning_rates=(3e-3,), exploratory_seeds=(100,),
                confirmatory=3),
}  # fmt: skip


def task(size, point):
  return spec("mqar", {**size.task, "seed": 0})


EXPERIMENT = Experiment(
  name="window_recall",
  section=9,
  claims=("9.1",),
  summary="A sliding window against full attention on MQAR (the tutorial's experiment).",
  arms=ARMS,
  criteria=CRITERIA,
  sizes=SIZES,
  task=task,
)
