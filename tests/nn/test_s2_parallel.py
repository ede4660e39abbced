"""Step 2 (jaxformer.steps.s2_parallel), claim 2.1: recurrence puts L + layers - 1 dependent
steps on the critical path, a non-recurrent net one per layer whatever L.

Read twice: on the dependency graph of the argument (`critical_path`), and on the real programs,
the sequential depth of every rung's compiled train step (forward, backward, AdamW) read from
its jaxpr by jaxformer.analysis.depth (lowering only, nothing runs) at L = 32, 512, 4096.
"""

import math

import pytest

from experiments import harness
from jaxformer import ladder
from jaxformer.analysis import depth
from jaxformer.steps.s2_parallel import critical_path

LENGTHS = (32, 512, 4096)
RECURRENT = ("rnn", "rnn_attention")
LINEAR_SLOPE = 0.9  # log-log slope (two largest L) of a depth that grows linearly
CONSTANT_FACTOR = 1.05  # largest / smallest depth over LENGTHS of a constant one
GROWS_SLOPE = 0.5  # a kernel "grows with L" at or above this slope (log L stays far below)
FLAT_SLOPE = 0.1  # |slope| of a flat available parallelism (FLOPs per dependent step)
# What each attention kernel's algorithm implies (jaxformer.math.attention), stated before
# measuring: True where it walks L in a sequential loop.
KERNEL_LOOPS = {
  "dense": False,
  "blockwise": True,  # loops over query and key blocks
  "sliding_window": False,
  "block_sparse": False,
  "linear": False,  # chunked: a cumulative sum across chunks
  "linear_recurrent": True,  # lax.scan over positions
}


@pytest.mark.parametrize("length", [1, 4, 17])
@pytest.mark.parametrize("layers", [1, 2, 5])
def test_the_graphs_critical_path_is_l_plus_layers_minus_1_against_layers(length, layers):
  assert critical_path(length, layers, recurrent=True) == length + layers - 1
  assert critical_path(length, layers, recurrent=False) == layers


def test_the_spec_example_and_bad_sizes():
  assert critical_path(4, 2, recurrent=True) == 5 and critical_path(4, 2, recurrent=False) == 2
  with pytest.raises(ValueError, match="length=0"):
    critical_path(0, 2, recurrent=True)


def _slope(ys):
  """log-log slope between the two largest L (the growth exponent where it is cleanest)."""
  return math.log(ys[-1] / ys[-2]) / math.log(LENGTHS[-1] / LENGTHS[-2])


def _depths(rung, **fields):
  """[depth.Depth] of the rung's train step at each of LENGTHS (2 layers, D = 16)."""
  out = []
  for n in LENGTHS:
    model = {"vocab_size": 16, "max_len": n, "num_layers": 2, "d_model": 16, **fields}
    config = harness.train_config(rung, f"mqar:vocab_size=16,seq_len={n}", model)
    out.append(depth.train_step(config, (2, n)))
  return out


@pytest.mark.parametrize("rung", ladder.RUNGS)
def test_claim_2_1_a_recurrent_rungs_depth_grows_as_l_every_other_rungs_stays_constant(rung):
  rows = _depths(rung)
  d = [r.depth for r in rows]
  parallelism = [r.parallelism for r in rows]
  if rung in RECURRENT:
    assert _slope(d) >= LINEAR_SLOPE, d
    if rung == "rnn":  # work linear in L waits on a depth linear in L (rnn_attention's
      # attention over past states is L^2 work: it spreads as L)
      assert abs(_slope(parallelism)) <= FLAT_SLOPE, parallelism
  else:
    assert max(d) / min(d) <= CONSTANT_FACTOR, d
    assert _slope(parallelism) >= LINEAR_SLOPE, parallelism  # the work spreads as L grows


@pytest.mark.parametrize("kernel", KERNEL_LOOPS)
def test_an_attention_kernel_brings_depth_back_exactly_where_it_loops_over_l(kernel):
  fields = {"attention": kernel} | ({"window": 16} if kernel == "sliding_window" else {})
  d = [r.depth for r in _depths("transformer", **fields)]
  if KERNEL_LOOPS[kernel]:
    assert _slope(d) >= GROWS_SLOPE, d
  else:
    assert max(d) / min(d) <= CONSTANT_FACTOR, d
