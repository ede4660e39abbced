"""The embedding lookup stays sharded on a (2,2,2) mesh: compiled for v5e:2x4, no collective of
the lookup produces the whole global batch of embeddings."""

import re

import jax

from jaxformer.train import compile_only, program, sharding
from tests.accel.test_compile_only import small_config

B, L = 16, 16


def test_the_lookup_never_gathers_the_global_batch():
  # failed before: with the table split [vocab over tensor, embed over fsdp] and the batch over
  # data x fsdp, the partitioner all-gathered the lookup to f32[16, L, D] and sliced it back
  config = small_config((2, 2, 2), d_model=256, num_heads=2, d_ff=512, vocab_size=8192)
  mesh = sharding.make_mesh((2, 2, 2), devices=compile_only.target("v5e:2x4").devices)
  with sharding.active(mesh):
    built = program.build(config, mesh, (B, L))
    batch = compile_only.abstract_batch(B, L, built.batch_sharding)
    lowered = built.eval_step.trace(built.abstract_state["params"], batch).lower()
    _, hlo = compile_only.compile_with_hlo(lowered)
  lookup = [line for line in hlo.splitlines() if "_take" in line]
  assert any(" gather(" in line for line in lookup), "no lookup found"
  whole_batch = re.compile(rf"= [a-z0-9]+\[{B},{L},\d+\][^ ]* (all-gather|all-reduce)\(")
  assert not [line for line in lookup if whole_batch.search(line)]
  assert jax.tree.leaves(built.abstract_state)  # the state was built on the compile-only mesh
