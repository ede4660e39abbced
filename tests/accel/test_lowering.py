"""Programs lower for GPU and TPU from this CPU host (`lowering_platforms`), without any
accelerator: every attention kernel (forward and backward) and the train step; jax.export
serializes one (flatbuffers)."""

import jax
import jax.numpy as jnp
import pytest

from jaxformer.math import attention
from jaxformer.train import program, sharding
from tests.train.train_helpers import tiny_config

PLATFORMS = ("cuda", "tpu")


@pytest.mark.parametrize("impl", attention.IMPLEMENTATIONS)
def test_every_attention_kernel_lowers_for_cuda_and_tpu(impl):
  q = jnp.ones((1, 32, 2, 64), jnp.bfloat16)
  window = 8 if impl == "sliding_window" else None

  def loss(q):
    out = attention.attend(q, q, q, impl=impl, window=window, block_size=16)
    return jnp.sum(out.astype(jnp.float32))

  for platform in PLATFORMS:
    text = jax.jit(jax.grad(loss)).trace(q).lower(lowering_platforms=(platform,)).as_text()
    assert "func.func public @main" in text


def test_train_step_lowers_for_cuda_and_tpu():
  config = tiny_config()
  mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  with sharding.active(mesh):
    built = program.build(config, mesh, (16, 16))
    sds = jax.ShapeDtypeStruct((16, 16), jnp.int32, sharding=built.batch_sharding)
    batch = {"inputs": sds, "targets": sds, "mask": sds}
    traced = built.train_step.trace(built.abstract_state, batch)
    for platform in PLATFORMS:
      assert "func.func public @main" in traced.lower(lowering_platforms=(platform,)).as_text()


def test_export_serializes_for_several_platforms():
  # failed before flatbuffers was pinned: serialize() imports it
  q = jnp.ones((1, 16, 2, 8), jnp.float32)
  fn = jax.jit(lambda q: attention.attend(q, q, q, impl="blockwise", block_size=8))
  exported = jax.export.export(fn, platforms=("cpu", "cuda", "tpu"))(q)
  restored = jax.export.deserialize(exported.serialize())
  assert restored.platforms == ("cpu", "cuda", "tpu")
  assert jnp.allclose(restored.call(q), fn(q))
