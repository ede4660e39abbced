"""Equivalences between pieces of neighbouring steps, on the real Linen modules."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from jaxformer import ladder
from jaxformer.steps.s4_values_heads import MatrixSum
from jaxformer.steps.s7_concat_wo import ConcatWo


class PiecesTest(chex.TestCase):
  @chex.variants(with_jit=True, without_jit=True)
  def test_rank_d_values_with_identity_wo_equal_summed_full_values(self):
    d, h = 6, 3
    x = jax.random.normal(jax.random.key(0), (2, 5, d))
    summed = MatrixSum(width=d, num_heads=h)
    v_params = nn.unbox(summed.init(jax.random.key(1), x, method=MatrixSum.values))
    v_HDE = v_params["params"]["v"]
    concat = ConcatWo(width=d, num_heads=h, rank=d)
    c_params = {
      "params": {
        "wv": jnp.transpose(v_HDE, (1, 0, 2)),
        "wo": jnp.broadcast_to(jnp.eye(d), (h, d, d)),
      }
    }
    o = jax.random.normal(jax.random.key(2), (2, 5, h, d))

    def both(method_concat, method_summed, inputs):
      return (
        concat.apply(c_params, inputs, method=method_concat),
        summed.apply(v_params, inputs, method=method_summed),
      )

    pairs = self.variant(
      lambda x, o: (
        both(ConcatWo.values, MatrixSum.values, x),
        both(ConcatWo.combine, MatrixSum.combine, o),
      )
    )(x, o)
    for got, want in pairs:
      chex.assert_trees_all_close(got, want, atol=1e-5)
    self.assertGreater(float(jnp.abs(pairs[0][1]).max()), 0.1)


def test_every_bias_starts_at_zero():
  # A random (H, K) key bias adds bq . k_i to every score: a source-only term that stalled
  # recall training. Biases of every shape must start at zero, like GPT-2's.
  model = ladder.build("transformer")
  params = nn.unbox(model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32)))["params"]
  biases = {
    jax.tree_util.keystr(path): leaf
    for path, leaf in jax.tree_util.tree_leaves_with_path(params)
    if jax.tree_util.keystr(path).split("'")[-2].startswith("b")
  }
  assert {"bq", "bk", "bv", "bo", "b1", "b2"} <= {k.split("'")[-2] for k in biases}
  for name, leaf in biases.items():
    assert not np.any(np.asarray(leaf)), f"{name} is not zero at init"
