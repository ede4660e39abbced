"""The article's claims, numbered by its sections ("Before Q, K, and V: Reconstructing the
Transformer"; docs/reconstruction.md carries the derivation).

Each claim is one statement about learning or cost that a section makes ("Measured by" in
docs/reconstruction.md, "Show" in the spec). An experiment's criterion names the claim it
tests by number, or is tagged `extension` (a question the project adds) or `control` (a
fairness condition). A claim is read by one of three kinds of evidence:

  trained   a criterion read on trained models (the verdict engine, experiments/engine/)
  check     true by construction or by algebra: a property test, never a verdict
  untested  stated here with the reason it cannot be measured on this project's machines

`source` names who makes the claim: the article, or the work an experiment attributes it to
(skips and positions test claims the article leans on without stating them itself).
"""

import dataclasses

ARTICLE = "Before Q, K, and V: Reconstructing the Transformer"
KINDS = ("trained", "check", "untested")


@dataclasses.dataclass(frozen=True)
class Claim:
  number: str  # "<section>.<n>"
  text: str  # one line, as a reader would quote it
  experiment: str  # the experiment that reads it (its results/<name>/ page)
  kind: str = "trained"
  source: str = ARTICLE
  why: str = ""  # check: the test that proves it; untested: why it is not measured here

  @property
  def section(self):
    return int(self.number.split(".")[0])


CLAIMS = (
  Claim(
    "1.1",
    "A fixed-state RNN's recall falls as pairs and length grow at a fixed state size",
    experiment="fixed_memory",
  ),
  Claim(
    "1.2",
    "The same recurrence with an attention read over its past states holds over that sweep, "
    "and so does attention",
    experiment="fixed_memory",
  ),
  Claim(
    "2.1",
    "Recurrence puts L + layers - 1 dependent steps on the critical path; the non-recurrent "
    "net puts one per layer, whatever L",
    kind="check",
    why="tests/nn/test_s2_parallel.py: the dependency graph's critical path, and the "
    "sequential depth of every rung's compiled train step against L",
    experiment="parallelism",
  ),
  Claim(
    "2.2",
    "A recurrent training step's wall time grows with L faster than a non-recurrent one's",
    kind="untested",
    why="a claim about parallel hardware: its wall-time reading needs an accelerator",
    experiment="parallelism",
  ),
  Claim(
    "3.1",
    "Source-only weights make neighbouring units compute nearly the same thing",
    experiment="symmetry",
  ),
  Claim(
    "3.2", "Source-only weights W_iL = f(x_i) fail at associative recall", experiment="symmetry"
  ),
  Claim(
    "3.3",
    "Source-only weights fail at induction (copy what followed the last match)",
    experiment="symmetry",
  ),
  Claim(
    "3.4",
    "Stateless weights (W_iL = 0 for i != L) fail at any task that needs another position",
    experiment="symmetry",
  ),
  Claim(
    "3.5", "Weights of both arguments, f(x_i, x_L), succeed where those fail", experiment="symmetry"
  ),
  Claim(
    "4.1",
    "A matrix-valued weight function explodes: full dynamic weights need D^2 functions, the "
    "diagonal D, a sum of H learned matrices H",
    experiment="param_explosion",
    kind="check",
    why="tests/experiments/test_s4_param_explosion.py::test_the_cost_criteria_decide_on_the_forms_"
    "alone and tests/analysis/test_explosion.py: functions, mixing parameters and train-step "
    "FLOPs of the real modules against D follow the closed forms",
  ),
  Claim(
    "4.2",
    "The diagonal restricts what a layer can write: it cannot mix coordinates",
    experiment="param_explosion",
  ),
  Claim(
    "5.1",
    "Only the interaction term can pick a source: an additive coefficient g(x_i) + h(x_L) "
    "fails at recall where a pure interaction (bilinear, low-rank dot product) learns it",
    experiment="interaction",
  ),
  Claim(
    "5.2",
    "tanh(U x_i + W x_L) interacts only weakly: it learns recall slower than the product",
    experiment="interaction",
  ),
  Claim(
    "5.3",
    "Factoring A = Wq^T Wk to rank r shrinks the key cache D/r-fold, and a small rank still "
    "recalls",
    experiment="cache",
  ),
  Claim(
    "6.1",
    "The loop form of the normalized sum equals the masked matrix form",
    kind="check",
    why="tests/nn/test_s6_softmax.py: the per-position sum against the matrix form",
    experiment="normalization",
  ),
  Claim(
    "6.2",
    "Without normalization quality degrades as L grows; the softmax over the sources holds",
    experiment="normalization",
  ),
  Claim(
    "7.1",
    "concat + Wo with identity blocks equals the summed heads",
    kind="check",
    why="tests/math/test_mixing.py::test_concat_with_identity_blocks_equals_summed_heads",
    experiment="heads",
  ),
  Claim(
    "7.2",
    "Low-rank values with concat + Wo keep quality at a rank well below D, shrinking the "
    "value cache",
    experiment="heads",
  ),
  Claim(
    "8.1",
    "With a single skip W1 folds into Wo; the split skip with a norm between stops the fold",
    kind="check",
    why="tests/analysis/test_absorption.py: the fold in the single-skip block, its failure "
    "in the split block",
    experiment="mlp_memory",
  ),
  Claim(
    "8.2",
    "The MLP is a key-value memory: W2's columns are vectors written into the "
    "residual stream, and units fire on recognisable input patterns",
    experiment="mlp_memory",
  ),
  Claim(
    "8.3",
    "Residual connections let a deep stack train where the plain stack does not",
    source="He et al. 2016, attributed by the article's split-skip step",
    experiment="skips",
  ),
  Claim(
    "8.4",
    "Attention without positions sees a set: order-dependent tasks fail without a position "
    "signal, where the mask supplies none",
    source="the set argument of Vaswani et al. 2017; the causal mask as a position signal, "
    "Haviv et al. 2022",
    experiment="positions",
  ),
  Claim("9.1", "A sliding window loses pin-point recall beyond the window", experiment="beyond"),
  Claim(
    "9.2",
    "Attention's cost grows quadratically in L; a window's and a recurrence's linearly",
    experiment="beyond",
    kind="check",
    why="tests/experiments/test_s9_beyond.py::test_claim_9_2_dense_memory_grows_as_l_squared_"
    "the_others_as_l: XLA's compiled temp memory of one causal attention forward and backward "
    "pass against L has a log-log slope >= 1.8 for dense attention, <= 1.2 for blockwise, "
    "sliding-window and linear attention's recurrence",
  ),
  Claim(
    "9.3",
    "Sparse attention does less arithmetic yet runs slower than dense on GPUs; exact "
    "blockwise attention wins",
    kind="untested",
    why="memory-bound GPU kernels: read only when a device is lent",
    experiment="beyond",
  ),
)

BY_NUMBER = {c.number: c for c in CLAIMS}
TAGS = ("extension", "control")  # what a criterion may name instead of a claim number


def claim(number):
  """The Claim numbered `number`; KeyError naming it and the numbers there are."""
  try:
    return BY_NUMBER[number]
  except KeyError:
    raise KeyError(f"claim {number!r}: no such claim (known: {', '.join(BY_NUMBER)})") from None
