"""A declared experiment with nothing to train, for the runner's tests (imported by name in a
worker process)."""

import os

from experiments import report

NAME = "declared_stub"
CLAIM = "a declared stand-in"


def get_config(size):
  return {"seeds": (0, 1, 2)}


def arms(config):
  return []


def controls(metrics, config):
  return [report.Criterion("the control holds", True)]


def criteria(metrics, config):
  print(f"declared stub measured on cores {sorted(os.sched_getaffinity(0))}", flush=True)
  return [report.Criterion("the claim holds", True)]
