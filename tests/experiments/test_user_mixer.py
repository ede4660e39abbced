"""A user's mixer through the scorecard (experiments/s9_scorecard.py `with_mixer`, the engine's
`run scorecard --mixer`): one more arm read by the built-ins' own gap criterion, the contract
first (a broken mixer stops in one line, exit 2), explored at the size given and never
recorded; and a tiny sweep end to end from a file that is nowhere in the package."""

import dataclasses
import json
import os

import pytest

from experiments import s9_scorecard as m
from experiments.engine import cli, declare, records, registry
from tests.experiments.test_s9_scorecard import _subset

MIXERS = '''
import flax.linen as nn
import jax.numpy as jnp


class CumMean(nn.Module):
  """out_L = Wo mean_{i<=L} v(x_i); decoding keeps the running sum and count."""

  width: int
  scale: float = 1.0

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    v_BLD = self.scale * nn.Dense(self.width, name="wv")(x_BLD)
    n_L = jnp.arange(1, x_BLD.shape[1] + 1, dtype=jnp.float32)
    sum_BLD = jnp.cumsum(v_BLD, axis=1)
    if decode:
      total = self.variable("cache", "total", jnp.zeros, (x_BLD.shape[0], self.width))
      count = self.variable("cache", "count", jnp.zeros, (), jnp.float32)
      sum_BLD, n_L = sum_BLD + total.value[:, None], n_L + count.value
      total.value, count.value = sum_BLD[:, -1], n_L[-1]
    return nn.Dense(self.width, name="wo")(sum_BLD / n_L[None, :, None])


class Peek(nn.Module):
  """Every position reads the mean of the whole sequence: the future too."""

  width: int

  @nn.compact
  def __call__(self, x_BLD, decode=False):
    return nn.Dense(self.width)(jnp.broadcast_to(x_BLD.mean(1, keepdims=True), x_BLD.shape))


class NoDecode(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x_BLD):
    return nn.Dense(self.width)(jnp.cumsum(x_BLD, axis=1))
'''


@pytest.fixture
def mine(tmp_path):
  path = tmp_path / "mine.py"
  path.write_text(MIXERS)
  return str(path)


def _run(*flags, name="scorecard"):
  return cli.main(["run", name, "--size", "tiny", *flags])


def _one_line(capsys):
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and len(err.splitlines()) == 1, err
  return err


def test_the_users_arm_is_one_more_arm_read_by_the_built_ins_gap_criterion(mine):
  e = m.with_mixer(f"{mine}:CumMean", {"scale": 2.0})
  assert declare.validate(e) is e and e.arms[:-1] == m.EXPERIMENT.arms
  arm = e.arm("user")
  assert (arm.rung, arm.fields) == (
    "custom",
    {"mixer": f"{mine}:CumMean", "mixer_fields": '{"scale": 2.0}'},
  )
  assert e.criteria[:-2] == m.EXPERIMENT.criteria
  linear = m.LARGE["linear"]
  for what in ("recalls_fewest", "gap_grows"):  # its control, then its reading
    mine_c, builtin = e.criterion(f"user_{what}"), e.criterion(f"{linear}_{what}")
    assert mine_c.arm == "user" and mine_c.says.startswith("user")
    same = dataclasses.replace(mine_c, name=builtin.name, arm=builtin.arm, says=builtin.says,
                               guarded_by=builtin.guarded_by)  # fmt: skip
    assert same == builtin
  gap = e.criterion("user_gap_grows")
  assert gap.guarded_by == (m.EVERY, "user_recalls_fewest")
  assert (gap.positive, gap.falsification.arm) == (m.GROWS, m.REF)
  assert registry.design_hash(m.EXPERIMENT, "tiny") == registry.entry(m.EXPERIMENT, "tiny")["hash"]


def test_a_users_mixer_runs_the_tiny_sweep_beside_attention(mine, tmp_path, monkeypatch, capsys):
  """Through the command line from a relative path, with three arms (all 24 compile for
  minutes): attention, the small window, and yours."""
  seen, with_mixer = {}, m.with_mixer

  def three_arms(spec, fields):
    seen["spec"], seen["fields"] = spec, fields
    return _subset(with_mixer(spec, fields), {m.REF, m.SMALL[m.WINDOW], "user"})

  monkeypatch.setattr(cli.scorecard, "with_mixer", three_arms)
  work = tmp_path / "work"
  spec = f"{os.path.relpath(mine)}:CumMean"
  assert _run("--mixer", spec, "--mixer_fields", '{"scale": 2}', "--workdir", str(work)) == 0
  assert seen == {"spec": f"{mine}:CumMean", "fields": {"scale": 2}}  # the file made absolute
  result = records.read(str(work / "scorecard_tiny.json"))
  assert result["exploratory_only"] and result["seeds"]["confirmatory"] == [100]
  adjusted = result["metrics"]["adjusted"]
  for arm in (m.REF, m.SMALL[m.WINDOW], "user"):
    assert {p: len(v) for p, v in adjusted[arm].items()} == dict.fromkeys(
      ("mix", "mix:2", "mix:4"), 1
    )
  assert result["metrics"]["state_bytes"]["user"]["*"] == [4.0 * 8]  # one running sum, D = 8
  assert [f for f in os.listdir(work) if f.endswith(".png")] == ["scorecard_tiny.png"]
  judged = {c["name"]: c for c in result["criteria"]}
  assert set(judged) == {m.EVERY, "user_gap_grows", "user_recalls_fewest"}
  out = capsys.readouterr().out
  assert out.splitlines()[0].startswith(f"contract: {spec} ok at D = 8")
  mean = {
    a: [sum(adjusted[a][p]) / len(adjusted[a][p]) for p in ("mix:2", "mix:4")]
    for a in (m.REF, "user")
  }
  for a in (m.REF, "user"):
    assert f"  {a:<7} " + " ".join(f"{x:6.2f}" for x in mean[a]) in out.splitlines()
  for name, c in judged.items():
    assert f"{c['verdict']:<12} {name}" in out.splitlines()


def test_a_non_causal_mixer_stops_at_the_contract(mine, tmp_path, capsys):
  assert _run("--mixer", f"{mine}:Peek", "--workdir", str(tmp_path / "work")) == 2
  assert "mixer Peek: not causal" in _one_line(capsys)
  assert not (tmp_path / "work").exists()


def test_a_mixer_that_cannot_decode_is_refused_before_training(mine, tmp_path, capsys):
  assert _run("--mixer", f"{mine}:NoDecode", "--workdir", str(tmp_path / "work")) == 2
  assert "mixer NoDecode: its __call__ takes no `decode`" in _one_line(capsys)
  assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
  "flags, name, says",
  [
    (("--record",), "scorecard", "--record: a user's mixer is no registered design"),
    (("--mixer_fields", "{scale: 2}"), "scorecard", "--mixer_fields='{scale: 2}': not JSON"),
    (("--mixer_fields", "[2]"), "scorecard", "--mixer_fields='[2]': must be a JSON object"),
    (("--mixer_fields", json.dumps({"width": 3})), "scorecard", "mixer CumMean: cannot be built"),
    (("--mixer_fields", json.dumps({"rank": 3})), "scorecard", "unknown field 'rank'"),
    ((), "fixed_memory", "--mixer: only the scorecard takes a mixer, not fixed_memory"),
  ],
)
def test_what_a_users_run_cannot_take_is_one_line_naming_it(mine, flags, name, says, capsys):
  assert _run("--mixer", f"{mine}:CumMean", *flags, name=name) == 2
  assert says in _one_line(capsys)


def test_mixer_fields_without_a_mixer_is_refused(capsys):
  assert _run("--mixer_fields", "{}") == 2
  assert "--mixer_fields: given without --mixer" in _one_line(capsys)
