"""The scorecard: marks computed from measurements (each threshold from both sides, the
reference's control), the contract stopping a broken mixer with exit 2 before training, and a
mixer from a file outside the repository scored through the command line."""

import json
import os
import textwrap

import flax.linen as nn
import pytest

from experiments import orderings, scorecard
from jaxformer import mixers

SEEDS = 3
REF = mixers.REFERENCE


def _config():
  c = scorecard.get_config("quick")
  c.builtins = (REF, "gated")
  # every kind of task (quick trains one), each at L = 32
  c.recall = ((4, 32), (8, 32))
  c.noisy, c.selective_copy, c.needle = (4, 32), (4, 32, 16), (32, (4, 24))
  return c


def _metrics(
  config, acc=None, depth_slope=0.0, state=1000.0, seconds=1.0, memory=100.0, learning=()
):
  """Every mixer at the reference's numbers unless `acc` (name, setting) -> accuracy and the
  gated mixer's depth slope, state bytes, seconds and memory say otherwise; the (name,
  setting) pairs in `learning` were still learning at their budget, the others flat."""
  names = [REF, "gated"]
  m = {"mixers": {n: {} for n in names}, "accuracy": {}, "params": {n: 10 for n in names}}
  m["plateau"], m["budget"] = {}, {}
  for n in names:
    m["accuracy"][n] = {s: [acc(n, s) if acc else 0.95] * SEEDS for s in scorecard.tasks(config)}
    m["plateau"][n] = {
      s: ["learning" if (n, s) in learning else "flat"] * SEEDS for s in scorecard.tasks(config)
    }
    m["budget"][n] = {s: config.step_cap for s in scorecard.tasks(config)}
  m["depth"] = {REF: {"L": [32, 4096], "depth": [400, 400], "slope": 0.0}}
  m["depth"]["gated"] = {"L": [32, 4096], "depth": [500, 900], "slope": depth_slope}
  m["state_bytes"] = {REF: {"L": [512, 4096], "bytes": [125.0, 1000.0], "slope": 1.0}}
  m["state_bytes"]["gated"] = {"L": [512, 4096], "bytes": [state, state], "slope": 0.0}
  m["cost"] = {
    REF: {"L": [64, 512], "cpu_seconds": [0.5, 1.0], "peak_bytes": [50, 100]},
    "gated": {"L": [64, 512], "cpu_seconds": [0.5, seconds], "peak_bytes": [50, memory]},
  }
  return m


def _reaches(config, metrics, column):
  return scorecard.marks(metrics, config)["gated"][column]["reaches"]


@pytest.mark.parametrize("gap, reaches", [(0.04, True), (0.06, False)])
def test_accuracy_reaches_the_reference_within_the_margin(gap, reaches):
  config = _config()
  setting = "recall K=8 L=32"

  def acc(name, s):
    return 0.95 - gap if (name, s) == ("gated", setting) else 0.95

  assert _reaches(config, _metrics(config, acc), setting) is reaches
  assert _reaches(config, _metrics(config, acc), "needle d=4 L=32") is True


@pytest.mark.parametrize("reference, reaches", [(0.8, False), (0.79, None)])
def test_a_column_whose_reference_did_not_learn_is_inconclusive(reference, reaches):
  config = _config()
  setting = "selective copy n=4 L=32"

  def acc(name, s):
    if s != setting:
      return 0.95
    return reference if name == REF else 0.1

  metrics = _metrics(config, acc)
  assert _reaches(config, metrics, setting) is reaches
  assert scorecard.marks(metrics, config)[REF][setting]["reaches"] is True  # by definition
  control = scorecard.controls(metrics, config)[(32, setting)]
  assert control.passed is (reference >= scorecard.REFERENCE_LEARNS)


@pytest.mark.parametrize("who", [REF, "gated"])
def test_a_row_still_learning_at_its_cap_is_inconclusive(who):
  config = _config()
  setting = "recall K=8 L=32"

  def acc(name, s):
    return 0.5 if (name, s) == ("gated", setting) else 0.95  # gated: clearly below

  done = _metrics(config, acc)
  assert _reaches(config, done, setting) is False
  learning = _metrics(config, acc, learning=[(who, setting)])
  assert _reaches(config, learning, setting) is None  # '?': not read before its plateau
  assert _reaches(config, learning, "needle d=4 L=32") is True  # the other columns stand
  control = scorecard.controls(learning, config)[(32, setting)]
  assert control.passed is (who != REF)
  if who == REF:
    assert control.note == f"still learning at {config.step_cap} steps"
  rows = scorecard.table(learning, config, scorecard.marks(learning, config))
  gated = next(r for r in rows if r["mixer"] == "gated")
  assert gated[setting] == ("0.50 ? (learning)" if who == "gated" else "0.50 ?")


@pytest.mark.parametrize(
  "column, kwargs, reaches",
  [
    ("depth slope", {"depth_slope": 0.5}, True),
    ("depth slope", {"depth_slope": 0.51}, False),
    ("state bytes", {"state": 1000.0}, True),
    ("state bytes", {"state": 1001.0}, False),
    ("step time", {"seconds": 1.5}, True),
    ("step time", {"seconds": 1.51}, False),
    ("memory", {"memory": 150}, True),
    ("memory", {"memory": 151}, False),
  ],
)
def test_each_program_threshold_from_both_sides(column, kwargs, reaches):
  config = _config()
  metrics = _metrics(config, **kwargs)
  assert _reaches(config, metrics, column) is reaches
  others = {"depth slope", "state bytes", "step time", "memory"} - {column}
  assert all(_reaches(config, metrics, other) for other in others)


def test_a_state_that_does_not_grow_is_fixed_and_a_missing_one_never_reaches():
  config = _config()
  metrics = _metrics(config)
  assert scorecard.marks(metrics, config)["gated"]["state bytes"]["fixed"]
  assert not scorecard.marks(metrics, config)[REF]["state bytes"]["fixed"]
  metrics["state_bytes"]["gated"]["bytes"] = [float("nan")] * 2
  assert _reaches(config, metrics, "state bytes") is False


def test_slopes():
  assert scorecard.slope([32, 64, 128], [3.0, 6.0, 12.0]) == pytest.approx(1.0)
  assert scorecard.slope([32, 4096], [400, 400]) == pytest.approx(0.0)
  assert scorecard.last_slope([512, 4096], [8.0, 8.0]) == 0.0


def test_mixer_fields_are_a_config_flag_of_python_literals(monkeypatch):
  seen = {}
  monkeypatch.setattr(scorecard, "run", lambda *args: seen.update(args=args) or {"table": []})
  argv = ["--mixer_class=m.py:M", "--mixer.n=16", "--mixer.on=true", "--mixer.off=False"]
  argv += ["--mixer.act=gelu", "--mixer.sizes=[1, 2]", "--size=tiny", "--config.seeds=(0,)"]
  assert scorecard.main(argv) == 0
  spec, fields, size, _, config = seen["args"]
  assert (spec, size, config.seeds) == ("m.py:M", "tiny", (0,))
  assert fields == {"n": 16, "on": True, "off": False, "act": "gelu", "sizes": [1, 2]}


USER = '''
import flax.linen as nn
import jax.numpy as jnp


class CumulativeMean(nn.Module):
  """The mean of every input so far: causal, a fixed state (no decode here)."""

  width: int
  gain: float = 1.0

  @nn.compact
  def __call__(self, x):
    mean = jnp.cumsum(x, axis=1) / jnp.arange(1, x.shape[1] + 1)[None, :, None]
    return nn.Dense(self.width)(self.gain * mean)


class Future(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.width)(jnp.flip(jnp.cumsum(jnp.flip(x, 1), axis=1), 1))
'''


@pytest.fixture
def user_file(tmp_path):
  path = tmp_path / "outside" / "my_mixers.py"
  path.parent.mkdir()
  path.write_text(textwrap.dedent(USER))
  return str(path)


@pytest.mark.parametrize(
  "args, message",
  [
    (["--mixer_class={file}:Future"], "not causal"),
    (["--mixer_class={file}:CumulativeMean", "--mixer.gian=2"], "unknown field 'gian'"),
    (["--mixer_class={file}:Nothing"], "has no attribute 'Nothing'"),
    (["--builtins=softmax,attention"], "unknown mixer 'attention'"),
    (["--mixer.gain=2"], "mixer fields given without a mixer"),
    (["--size=huge"], "--size=huge: value should be one of"),
    (["--verbose"], "flag 'verbose'"),
    (["--config.sedds=(0,)"], "--config.sedds: unknown field 'sedds' of config; did you mean"),
    (["--mixer={file}:Future"], "the mixer is --mixer_class="),
  ],
)
def test_a_usage_error_is_one_line_and_exit_2_before_any_training(
  user_file, tmp_path, capsys, args, message
):
  workdir = tmp_path / "run"
  argv = [a.format(file=user_file) for a in args] + ["--size=tiny", f"--workdir={workdir}"]
  flag_error = args[0].startswith(("--size", "--verbose", "--config", "--mixer="))
  with pytest.raises(SystemExit) if flag_error else _nothing():
    assert scorecard.main(argv) == scorecard.USAGE
  err = capsys.readouterr().err.strip()
  assert message in err and len(err.splitlines()) == 1 and err.startswith("error: ")
  assert not workdir.exists()  # nothing trained, nothing written


class _nothing:
  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


def test_a_mixer_outside_the_repository_is_scored_through_the_command_line(
  user_file, tmp_path, capsys
):
  workdir = tmp_path / "card"
  argv = [f"--mixer_class={user_file}:CumulativeMean", "--mixer.gain=0.5", "--size=tiny"]
  assert scorecard.main([*argv, f"--workdir={workdir}"]) == 0
  card = json.loads((workdir / "scorecard.json").read_text())
  assert set(card["marks"]) == {REF, "CumulativeMean"}
  mine = card["metrics"]["mixers"]["CumulativeMean"]
  assert mine["fields"] == {"gain": 0.5} and mine["decode"] is False
  assert mine["spec"] == f"{user_file}:CumulativeMean"
  config = scorecard.get_config("tiny")
  for setting in scorecard.tasks(config):
    assert len(card["metrics"]["accuracy"]["CumulativeMean"][setting]) == len(config.seeds)
  assert card["metrics"]["depth"]["CumulativeMean"]["depth"][0] > 0
  assert card["metrics"]["state_bytes"]["CumulativeMean"]["bytes"] == ["nan", "nan"]
  assert card["marks"]["CumulativeMean"]["state bytes"]["reaches"] is False  # no decode
  assert len(card["runs"]) == 2 * len(scorecard.tasks(config)) * len(config.seeds)
  # the published orderings cannot be read without their built-ins or a second recall task
  assert {k: v["verdict"] for k, v in card["orderings"].items()} == {
    name: "UNRESOLVED" for name in orderings.CHECKS
  }
  text = (workdir / "scorecard.md").read_text()
  assert "`mamba2_state_helps`: **UNRESOLVED**" in text
  assert "| CumulativeMean |" in text and "| softmax |" in text
  for plot in ("scorecard_recall_vs_state.png", "scorecard_vs_length.png"):
    assert os.path.getsize(workdir / plot) > 1000
  out = capsys.readouterr().out
  assert "CumulativeMean" in out
  # 8 devices (tests/conftest.py) and nn.Dense's unnamed parameters: said before training
  assert "mixer CumulativeMean: 2 parameter(s) without logical axis names" in out


class Identity(nn.Module):
  """A top-level class: the Python API names it by its module."""

  width: int

  def __call__(self, x, decode=False):
    return x


def test_from_python_a_class_is_named_by_its_module_and_builtins_keep_their_fields():
  name, spec, fields = scorecard.candidate(Identity, {"width": 4})
  assert (name, spec) == ("Identity", f"{__name__}:Identity") and fields == {"width": 4}
  assert scorecard.candidate("sliding_window")[2] == mixers.BUILTINS["sliding_window"][1]
  names = [c[0] for c in scorecard.candidates(_config(), Identity)]
  assert names == [REF, "gated", "Identity"]


def test_the_state_sweep_makes_each_builtin_a_row_per_state_size():
  config = _config()
  config.builtins, config.state_sweep = (REF, "mamba2", "gated"), True
  names = [c[0] for c in scorecard.candidates(config, Identity)]
  assert names[:5] == [
    REF,
    "mamba2 state=4",
    "mamba2 state=8",
    "mamba2 state=16",
    "mamba2 state=32",
  ]
  assert names[5:] == ["gated head_dim=4", "gated head_dim=8", "gated head_dim=16", "Identity"]
  assert scorecard.candidates(config)[2][2] == {"state": 8}
  assert [scorecard.family(n) for n in names[:2]] == [REF, "mamba2"]
  assert scorecard.family("gated (yours)") == "gated (yours)"  # a user's mixer is its own
  config.state_sweep = False
  assert [c[0] for c in scorecard.candidates(config)] == [REF, "mamba2", "gated"]


def test_an_empty_task_field_is_not_trained():
  c = scorecard.get_config("quick")
  c.noisy, c.selective_copy, c.needle = (), (), ()
  c.recall = ((4, 16), (8, 24))
  assert list(scorecard.tasks(c)) == ["recall K=4 L=16", "recall K=8 L=24"]
  assert scorecard.max_len(c) == 24
