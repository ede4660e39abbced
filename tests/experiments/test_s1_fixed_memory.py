"""fixed_memory's declaration (experiments/s1_fixed_memory.py): its axis, its arms, and the
failure label's rule on stated numbers."""

from experiments import s1_fixed_memory as fm
from experiments.engine import declare

E = fm.EXPERIMENT


def test_the_axis_runs_from_the_easy_mixture_to_the_hard_end_the_review_asked_for():
  declare.validate(E)
  full = E.sizes["full"]
  assert E.points("full")[0] == "easy:2" and E.points("full")[-1] == "hard:16"
  assert full.task["hard"]["vocab_size"] >= 256 and full.task["hard"]["seq_len"] >= 64
  assert max(full.points["hard"]) >= 16
  assert E.trained_points("full") == ("easy", "hard")
  assert "num_kv_pairs=2+4+8+16" in E.task(full, "hard")
  assert "num_kv_pairs=16" in E.task(full, "hard:16") and "vocab_size=256" in E.task(
    full, "hard:16"
  )


def test_the_recurrence_with_and_without_the_attention_read_is_the_same_lstm():
  arms = {a.name: a for a in E.arms}
  assert arms["rnn_attention"].fields == arms["rnn_128"].fields
  assert arms["rnn_attention"].rung == "rnn_attention" and arms["rnn_128"].rung == "rnn"


def _result(adjusted, learning=()):
  points = ["easy:2", "easy:4", "hard:2", "hard:16"]
  metrics = {arm: dict(zip(points, [[v] for v in values], strict=True))
             for arm, values in adjusted.items()}  # fmt: skip
  units = [{"arm": a, "point": s, "plateau": ["learning" if (a, s) in learning else "flat"]}
           for a in adjusted for s in ("easy", "hard")]  # fmt: skip
  return {"metrics": {"adjusted": metrics}, "seeds": {"exploratory": [], "confirmatory": [7]},
          "units": units}  # fmt: skip


def test_the_label_tells_capacity_from_learnability():
  labels = fm.label(_result({
    "rnn_64": [0.6, 0.2, 0.1, 0.0],     # learns the easy end, falls; the larger state does better
    "rnn_128": [0.99, 0.6, 0.3, 0.0],
    "linear_8": [0.95, 0.96, 0.95, 0.92],  # holds at the easy end's most pairs
    "linear_32": [0.2, 0.1, 0.0, 0.0],     # fails already at the fewest pairs
    "attention": [1.0, 1.0, 1.0, 1.0],
  }, learning={("rnn_128", "hard")}))  # fmt: skip
  assert labels["rnn_64 @ easy"].startswith("capacity")
  assert labels["rnn_128 @ easy"].startswith("capacity")
  assert labels["linear_8 @ easy"].startswith("holds")
  assert labels["linear_32 @ easy"].startswith("learnability")
  assert (
    labels["rnn_128 @ hard"].startswith("learnability")
    and "still learning" in labels["rnn_128 @ hard"]
  )
  assert labels["rnn_64 @ hard"].startswith("learnability")  # 0.1 at its fewest pairs
