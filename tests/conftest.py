"""Test setup: 8 simulated CPU devices (and XLA_TEST_FLAGS), set before jax is first imported."""

import os

from tests import XLA_TEST_FLAGS

os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {XLA_TEST_FLAGS}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: F401,E402  (import after the flags on purpose)

from jaxformer import compile_cache  # noqa: E402

# JAX's persistent compilation cache (jaxformer/compile_cache.py): a second `make test` reads
# most programs from disk instead of compiling them. JAXFORMER_COMPILATION_CACHE=off disables.
compile_cache.enable()
