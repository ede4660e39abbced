import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import capacity, cli, fixed_memory, protocol, retrain, run_all

ARM = "linear_attention @ head_dim=4 K=2 L=16"  # an arm of fixed_memory's tiny design


def test_every_arm_of_a_walked_law_is_its_whole_grid_and_the_arms_read_at_every_k():
  law = fixed_memory.get_config("full").law
  settings = {(a.model, a.setting) for a in capacity.arms(law, whole_grid=True)}
  grid = {
    (family, capacity.setting(law, family, knob, k))
    for family in law.claimed
    for knob in law.knobs[family]
    for k in law.pairs
  }
  attention = {
    (capacity.ATTENTION_ARM, capacity.setting(law, "attention", 16, k)) for k in law.pairs
  }
  falsification = {
    (capacity.FALSIFICATION_ARM, capacity.setting(law, "linear_attention", 2, k))
    for k in law.falsification_pairs
  }
  assert settings == grid | attention | falsification
  # the walk's first arms are among them, as the protocol builds them
  first = {(a.model, a.setting): a for a in capacity.arms(law)}
  every = {(a.model, a.setting): a for a in capacity.arms(law, whole_grid=True)}
  assert all(every[key] == arm for key, arm in first.items())


def test_a_retrained_arm_is_the_protocols_replica(tmp_path):
  """At the design's seeds, rates and first budget, the retrained replicas are the ones the
  protocol trains (the same config, so the same curves), and retrain.json says what ran."""
  config = fixed_memory.get_config("tiny")
  arm = retrain.arms_of(fixed_memory, config)[ARM]
  seeds = protocol.seed_sets(config)[1]
  done = protocol.train_arm(arm, config, log=lambda text: None)
  want = {(r.seed, r.learning_rate): r for res in (done.sweep, *done.more) for r in res.runs}
  rates = sorted({lr for _, lr in want})
  code = retrain.main(
    [
      "--experiment=fixed_memory",
      "--size=tiny",
      f"--arm={ARM}",
      f"--seeds={','.join(map(str, seeds))}",
      f"--learning_rates={','.join(map(str, rates))}",
      f"--workdir={tmp_path}",
    ]
  )
  assert code == 0
  record = json.load(open(tmp_path / "retrain.json"))
  assert os.path.getsize(tmp_path / "retrain.png") > 0
  assert (record["experiment"], record["size"], record["arm"]) == ("fixed_memory", "tiny", ARM)
  assert record["design_hash"] == protocol.design(fixed_memory, "tiny").hash[:12]
  assert record["total_steps"] == config.total_steps
  got = {(r["seed"], r["learning_rate"]): r for r in record["replicas"]}
  assert set(got) == {(s, lr) for s in seeds for lr in rates}
  for key, row in got.items():
    run = want[key]
    np.testing.assert_allclose(
      [acc for _, acc in row["val_accuracy_by_step"]], [e[2] for e in run.evals], rtol=1e-6
    )
    assert [step for step, _ in row["val_accuracy_by_step"]] == [e[0] for e in run.evals]
    assert row["final_step"] == run.final_step
    assert row["eval_adjusted"] == pytest.approx(
      protocol.adjust(run.final()["eval_accuracy"], done.chance)
    )


def test_steps_replace_the_budget(tmp_path):
  config = fixed_memory.get_config("tiny")
  arm = retrain.arms_of(fixed_memory, config)[ARM]
  assert protocol.arm_config(config, arm).total_steps == config.total_steps
  assert protocol.arm_config(config, arm, total_steps=8).total_steps == 8


def test_without_arm_it_lists_the_designs_arms(capsys):
  assert retrain.main(["--experiment=fixed_memory", "--size=full"]) == 0
  out = capsys.readouterr().out
  for arm in capacity.arms(fixed_memory.get_config("full").law, whole_grid=True):
    assert f"  {arm.model} @ {arm.setting}\n" in out


@pytest.mark.parametrize(
  "args, field",
  [
    (["--arm=lstm @ N=16 K=2"], "--arm="),
    ([f"--arm={ARM}", "--seeds=a"], "--seeds=a"),
    ([f"--arm={ARM}", "--learning_rates=0.01,x"], "--learning_rates="),
    ([f"--arm={ARM}", "--learning_rates=-0.01"], "--learning_rates="),
    ([f"--arm={ARM}", "--steps=0"], "steps"),
    (["--experiment="], "--experiment"),
  ],
)
def test_bad_input_is_one_error_naming_the_field(args, field, capsys):
  with pytest.raises(SystemExit) as e:
    retrain.main(["--experiment=fixed_memory", "--size=tiny", *args])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error:") and field in err[0]


def test_it_lays_the_replicas_over_the_cores_as_an_experiments_own_command_does(monkeypatch):
  """On a CPU the device count changes each product's split over threads, and so the rounding:
  the layout of `python -m experiments.<name>` (one experiment: every core) is the one whose
  replicas a retrain must follow."""
  calls = []
  monkeypatch.setattr(run_all, "lay_over_cores", lambda count, jobs: calls.append((count, jobs)))

  def stop(*args, **kwargs):
    raise cli.UsageError("stopped before training")

  monkeypatch.setattr(retrain, "retrain", stop)
  with pytest.raises(SystemExit):
    retrain.main(["--experiment=fixed_memory", "--size=tiny", f"--arm={ARM}"])
  assert calls == [(0, 1)]


def test_set_changes_the_design_for_the_retrain_and_is_recorded(tmp_path):
  """--set asks "what if the design had ...": the LSTM's forget-gate bias of fixed_memory's
  law reaches the arm's model, the record names the setting, and the arm is otherwise the
  design's."""
  config = fixed_memory.get_config("full")
  name = "lstm @ hidden=16 K=2 L=32"
  mixer = {"lstm": {"forget_bias": 1.0}}
  changed = retrain.overridden(config, [("law.mixer_fields", mixer)])
  before, after = (
    retrain.arms_of(fixed_memory, config)[name],
    retrain.arms_of(fixed_memory, changed)[name],
  )
  assert json.loads(after.fields["mixer_fields"])["forget_bias"] == 1.0
  assert "forget_bias" not in json.loads(before.fields["mixer_fields"])
  assert {k: v for k, v in after.fields.items() if k != "mixer_fields"} == {
    k: v for k, v in before.fields.items() if k != "mixer_fields"
  }
  assert "mixer_fields" not in config.law  # the design itself is untouched
  # the bias reaches the model: the forget gate's slice starts at 1, the others at 0
  model = capacity.build(after.fields)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32), jnp.int32))["params"]
  biases = [np.asarray(getattr(b, "value", b)) for p, b in _leaves(params) if p.endswith("/b")]
  assert biases and all(
    (b[16:32] == 1).all() and (b[:16] == 0).all() and (b[32:] == 0).all() for b in biases
  )
  # end to end at the tiny size: retrain.json records the setting
  code = retrain.main(
    [
      "--experiment=fixed_memory",
      "--size=tiny",
      f"--arm={ARM}",
      "--seeds=0",
      "--learning_rates=0.003",
      "--set=law.num_test_examples=16",
      f"--workdir={tmp_path}",
    ]
  )
  assert code == 0
  record = json.load(open(tmp_path / "retrain.json"))
  assert record["settings"] == {"law.num_test_examples": 16}


def _leaves(tree, prefix=""):
  for key, value in tree.items():
    path = f"{prefix}/{key}"
    if hasattr(value, "items"):
      yield from _leaves(value, path)
    else:
      yield path, value


@pytest.mark.parametrize(
  "setting, field",
  [
    ("law.mixer_field={'lstm': {'forget_bias': 1.0}}", "law.mixer_field"),  # misspelt
    ("lawx.seq_len=16", "lawx"),
    ("law.seq_len=sixteen", "law.seq_len"),
    ("law.seq_len", "law.seq_len"),
    ("law.seq_len='16'", "law.seq_len"),  # an int field given a string
  ],
)
def test_a_bad_setting_is_one_error_naming_it(setting, field, capsys):
  with pytest.raises(SystemExit) as e:
    retrain.main(["--experiment=fixed_memory", "--size=tiny", f"--arm={ARM}", f"--set={setting}"])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error:") and field in err[0], err


def test_settings_that_make_an_arm_together_each_count(monkeypatch):
  """An arm the design lacks can need several settings at once (a longer L, a larger V and
  K): each is judged given the others, so none is "changes nothing" for want of the rest,
  and one that matters with none of them still is."""
  from jaxformer.train import sweep

  settings = [("law.seq_len", 64), ("law.vocab_size", 64), ("law.pairs", (2, 4, 8, 16))]
  name = "linear_attention @ head_dim=8 K=16 L=64"
  full = fixed_memory.get_config("full")
  # without L = 64 or V = 64 the design is invalid (K = 16 needs both); without K = 16 in the
  # grid the arm is not there
  for i, field in ((0, "seq_len"), (1, "vocab_size")):
    with pytest.raises(ValueError, match=field):
      retrain.arms_of(fixed_memory, retrain.overridden(full, settings[:i] + settings[i + 1 :]))
  assert (
    retrain._what_trains(fixed_memory, retrain.overridden(full, settings[:2]), name, 10) is None
  )
  seen = {}

  def stop(config, replicas, log):
    seen["task"] = config.task
    raise cli.UsageError("stopped before training")

  monkeypatch.setattr(sweep, "train", stop)
  with pytest.raises(cli.UsageError, match="stopped"):
    retrain.retrain(fixed_memory, "full", name, [100], [1e-3], 10, settings)
  assert "num_kv_pairs=16" in seen["task"] and "seq_len=64" in seen["task"]
  with pytest.raises(cli.UsageError, match="law.data_seed"):  # changes nothing, given them
    retrain.retrain(
      fixed_memory, "full", name, [100], [1e-3], 10, [*settings, ("law.data_seed", 0)]
    )
