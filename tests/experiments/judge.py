"""The verdict of an experiment module on synthetic metrics, for the criteria tests."""

from experiments import report


def judge(module, metrics, config):
  """([control passed], [criterion passed], verdict) of `module` on `metrics`, its
  falsification readings included in the verdict (no plateau gate: synthetic metrics)."""
  controls = module.controls(metrics, config) if hasattr(module, "controls") else []
  criteria = module.criteria(metrics, config)
  falsif = module.falsification(metrics, config) if hasattr(module, "falsification") else []
  result = report.Result(
    module.NAME, "", "", criteria, metrics, controls=controls, falsification=falsif
  )
  return [c.passed for c in controls], [c.passed for c in criteria], result.verdict
