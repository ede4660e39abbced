"""A declaration's tiny size run end to end in a scratch registry: what each declaration's
test does before it checks its own record."""

from experiments.engine import registry, run


def run_tiny(experiment, tmp_path):
  """Registers `experiment`'s tiny size under `tmp_path` and runs it there quietly: (the
  registry entry, the result, the results folder a record would go to)."""
  reg, results = str(tmp_path / "registry.json"), str(tmp_path / "results")
  entry = registry.register(experiment, "tiny", "the test", path=reg, log_dir=results)
  result = run.run(
    experiment, "tiny", str(tmp_path / "work"), registry_path=reg, log=lambda t: None
  )
  return entry, result, results
