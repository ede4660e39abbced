"""A newcomer's path end to end: the char-level text preset on a local text file, no size set
by hand, then sampling and evaluating the trained run through the command line."""

import re
import sys

import pytest

from tests.train.train_helpers import REPO, run

SENTENCE = "the quick brown fox jumps over the lazy dog. "
# Shrunk for seconds of CPU: width, depth and steps only (vocabulary and length from the task).
TINY = (
  "--config.total_steps=60",
  "--config.model.d_model=32",
  "--config.model.num_layers=1",
  "--config.model.num_heads=2",
  "--config.model.d_ff=64",
  "--config.learning_rate=1e-2",
  "--config.warmup_steps=5",
  "--config.eval_every=60",
  "--config.peak_flops_per_device=1e11",
)


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
  """(workdir, data_dir, training stdout) of the preset trained on a generated text file."""
  root = tmp_path_factory.mktemp("text")
  corpus = root / "input.txt"
  corpus.write_text(SENTENCE * 560)  # 25k characters: 16+ test windows of the preset's 128
  workdir, data_dir = root / "run", root / "data"
  cmd = [
    sys.executable,
    "-m",
    "experiments.main",
    f"--config={REPO}/experiments/configs/text.py:path={corpus}",
    f"--workdir={workdir}",
    *TINY,
  ]
  result = run(cmd, data_dir)
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir, data_dir, result.stdout


def _cli(module, workdir, data_dir, *flags):
  return run(
    [sys.executable, "-m", f"experiments.{module}", f"--workdir={workdir}", *flags], data_dir
  )


@pytest.mark.slow  # the text preset end to end: `make test-slow`
def test_text_preset_trains_and_samples_its_text(text_run):
  workdir, data_dir, stdout = text_run
  assert "completed at step 60" in stdout
  # Greedy from a prompt, ending at a stop character: the sentence was learned.
  greedy = _cli("sample", workdir, data_dir, "--prompt=the quick", "--top_k=1", "--stop=x")
  assert greedy.returncode == 0, greedy.stderr[-3000:]
  assert greedy.stdout == "the quick brown fox\n"
  # Past the model's 128 positions, several samples: each continues in chunks.
  many = _cli("sample", workdir, data_dir, "--num_tokens=150", "--num_samples=2", "--seed=3")
  assert many.returncode == 0, many.stderr[-3000:]
  samples = many.stdout.rstrip("\n").split("\n" + "-" * 40 + "\n")
  assert [len(s) for s in samples] == [1 + 150, 1 + 150]  # the default prompt: one character
  assert samples[0] != samples[1] and set("".join(samples)) <= set(SENTENCE)


def test_evaluate_reproduces_the_runs_final_eval(text_run):
  workdir, data_dir, stdout = text_run
  trained = re.search(r"eval_loss=([0-9.]+), eval_accuracy=([0-9.]+)", stdout).groups()
  result = _cli("evaluate", workdir, data_dir)
  assert result.returncode == 0, result.stderr[-3000:]
  assert f"step 60: eval_loss={trained[0]} eval_accuracy={trained[1]}" in result.stdout
