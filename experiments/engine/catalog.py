"""The declared experiments, by name, in the article's order: name -> module, whose
EXPERIMENT is the declaration. Only these modules are ever imported by name."""

import importlib

DECLARED = {
  "fixed_memory": "experiments.s1_fixed_memory",
  "symmetry": "experiments.s3_symmetry",
  "param_explosion": "experiments.s4_param_explosion",
  "interaction": "experiments.s5_interaction",
  "cache": "experiments.s5_cache",
  "normalization": "experiments.s6_normalization",
  "heads": "experiments.s7_heads",
  "mlp_memory": "experiments.s8_mlp_memory",
  "skips": "experiments.s8_skips",
  "positions": "experiments.s8_positions",
  "beyond": "experiments.s9_beyond",
  "scorecard": "experiments.s9_scorecard",
}
# Declarations that teach (docs/protocol.md): loadable by name, never run by the main job
EXAMPLES = {"window_recall": "experiments.examples.window_recall"}


def load(name, module=None):
  """The Experiment named `name` (`module`: a Python caller's stand-in, never a user's)."""
  if module is None:
    known = DECLARED | EXAMPLES
    if name not in known:
      raise KeyError(f"experiment {name!r}: not declared (declared: {', '.join(known)})")
    module = known[name]
  return importlib.import_module(module).EXPERIMENT


def main_job():
  """The experiments the main job (`make run`) runs by default: those that read the article's
  claims. One of extensions alone (the scorecard: its quick size takes ~13 minutes on 2 cores
  by itself) runs by name: `run_all --only scorecard` or `engine run scorecard`."""
  return [name for name in DECLARED if load(name).claims]


def every():
  return [load(name) for name in DECLARED]
