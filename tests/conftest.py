"""Test setup: 8 simulated CPU devices, set before jax is first imported."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: F401  (import after the flags on purpose)
