"""experiments.compile_all (run_all --compile_only): an experiment's sweep programs compiled for a
TPU topology this machine does not have, placed as a sweep places its replicas, nothing run."""

import dataclasses
import json

from experiments import compile_all, run_all
from experiments.engine import catalog
from jaxformer import mixers
from jaxformer.train import compile_only, sweep

CACHE = catalog.load("cache")  # the declared cache experiment (experiments/s5_cache.py)


def tiny_cache(replicas):
  """The first sweep of the declared cache experiment's tiny size, at `replicas` replicas."""
  (label, config, _), *_ = compile_all.declared_sweeps(CACHE, "tiny")
  return [(label, config, replicas)]


def test_the_replica_axis_is_laid_along_one_host_of_v5e_2x4_and_the_state_donated(tmp_path):
  sweeps = tiny_cache(4)  # 4 replicas: one per device of a v5e:2x4 host
  code = compile_all.main([("cache", sweeps)], "tiny", "v5e:2x4", str(tmp_path))
  assert code == 0
  report = json.load(open(tmp_path / "cache" / compile_all.REPORT_FILE))
  (arm,) = report["arms"]
  assert arm["replicas"] == 4 and arm["host_devices"] == 4 and arm["placement_devices"] == 4
  assert arm["state_bytes_per_device"] * 4 == arm["state_bytes"]  # one replica per device
  step = arm["programs"]["train_step"]
  assert step["fits"] and step["alias_bytes"] >= arm["state_bytes_per_device"], step
  assert set(arm["programs"]) == set(compile_only.SWEEP_PROGRAMS)
  summary = json.load(open(tmp_path / "compile_summary.json"))
  assert summary["experiments"][0]["compiled"] == 1 and summary["experiments"][0]["fits"]


def test_replicas_that_do_not_divide_the_devices_stay_on_one(tmp_path):
  sweeps = tiny_cache(2)  # 2 replicas on 4 devices: the sweep keeps them on the first
  tgt = compile_only.target("v5e:2x4")
  report = compile_all.compile_arms("cache", sweeps, tgt, str(tmp_path))
  (arm,) = report["arms"]
  assert arm["replicas"] == 2 and arm["placement_devices"] == 1
  assert arm["state_bytes_per_device"] == arm["state_bytes"]
  assert all(p["collectives"] is None for p in arm["programs"].values())


def test_replicas_are_laid_over_the_most_devices_that_share_them_equally(tmp_path):
  sweeps = tiny_cache(6)  # 6 replicas on a host of 4 chips: 3 chips, 2 each
  tgt = compile_only.target("v5e:2x4")
  report = compile_all.compile_arms("cache", sweeps, tgt, str(tmp_path))
  (arm,) = report["arms"]
  assert arm["replicas"] == 6 and arm["host_devices"] == 4 and arm["placement_devices"] == 3
  assert arm["state_bytes_per_device"] * 3 == arm["state_bytes"]


def test_a_device_runs_its_replicas_in_one_group_unless_it_needs_too_much_memory(
  tmp_path, monkeypatch
):
  sweeps = tiny_cache(8)  # 8 replicas on a host of 4 chips: 2 each
  tgt = compile_only.target("v5e:2x4")
  (arm,) = compile_all.compile_arms("cache", sweeps, tgt, str(tmp_path / "a"))["arms"]
  assert arm["replica_chunk"] == sweep.ALL and not arm["flops_undercounted"]
  # a memory budget nothing fits: the sweep's groups of REPLICA_CHUNK, as sweep.programs does
  monkeypatch.setattr(sweep, "GROUP_MEMORY_FRACTION", 1e-12)
  (arm,) = compile_all.compile_arms("cache", sweeps, tgt, str(tmp_path / "b"))["arms"]
  assert arm["replica_chunk"] == sweep.REPLICA_CHUNK and arm["placement_devices"] == 4


def test_run_all_compile_limit_reaches_the_compiler(tmp_path, monkeypatch):
  seen = []
  monkeypatch.setattr(compile_all, "main", lambda *args, limit=None, **kw: seen.append(limit) or 0)
  argv = ["--only", "cache", "--size", "tiny", "--compile_only=v5e:2x4", "--workdir", str(tmp_path)]
  assert run_all.main(argv + ["--compile_limit=2"]) == 0
  assert run_all.main(argv) == 0
  assert seen == [2, None]


def test_run_all_compile_only_bad_target_is_one_line_exit_2(tmp_path, capsys):
  argv = ["--only", "cache", "--size", "tiny", "--compile_only=v5e", "--workdir", str(tmp_path)]
  assert run_all.main(argv) == 2
  out = capsys.readouterr().out.strip().splitlines()
  assert out[-1] == "error: --compile_only=v5e: 'v5e': expected a TPU topology name such as v5e:2x4"
  assert not list(tmp_path.iterdir())  # nothing compiled, nothing written


def test_scorecard_compile_only_hands_its_trained_arms_over_one_group_per_mixer(
  tmp_path, monkeypatch
):
  from experiments import scorecard

  handed, limits = [], []

  def main(items, *args, limit=None, **kw):
    handed.extend(items)
    limits.append(limit)
    return 0

  monkeypatch.setattr(compile_all, "main", main)
  argv = ["--size", "tiny", "--builtins=softmax,mamba2", "--state_sweep", "--config.widths=(8,16)"]
  argv += ["--compile_only=v5e:2x4", "--compile_limit=1", "--workdir", str(tmp_path)]
  assert scorecard.main(argv) == 0
  assert [name for name, _ in handed] == ["scorecard/softmax", "scorecard/mamba2"]
  config = scorecard.get_config("tiny")
  config.widths, config.builtins, config.state_sweep = (8, 16), ("softmax", "mamba2"), True
  every = scorecard.arms(config, scorecard.candidates(config))
  models = [label.split(" @ ")[0] for _, sweeps in handed for label, _, _ in sweeps]
  assert sorted(models) == sorted(a.model for a in every)
  (_, mamba2), states = handed[1], mixers.STATE_SWEEPS["mamba2"][1]
  rows = {f"mamba2 state={n} D={w}" for n in states for w in (8, 16)}
  assert {label.split(" @ ")[0] for label, _, _ in mamba2} == rows  # every state, every width
  assert limits == [1]
  assert scorecard.main(argv[:-3] + ["--workdir", str(tmp_path)]) == 0
  assert limits == [1, None]  # 0, the default: every program


def test_scorecard_compile_only_unknown_builtin_is_one_line_exit_2(tmp_path, capsys):
  from experiments import scorecard

  argv = ["--size", "tiny", "--builtins=nope", "--compile_only=v5e:2x4", "--workdir", str(tmp_path)]
  assert scorecard.main(argv) == 2
  out = capsys.readouterr().out.strip().splitlines()
  assert out == ["error: builtins: unknown mixer 'nope'; built-ins: " + ", ".join(_builtins())]


def _builtins():
  return mixers.BUILTINS


def test_a_scorecard_row_names_its_mixer():
  from experiments import scorecard

  assert scorecard.mixer_of("mamba2 state=8 D=64") == "mamba2"
  assert scorecard.mixer_of("mamba2 state=8") == "mamba2"
  assert scorecard.mixer_of("softmax D=16") == "softmax"
  assert scorecard.mixer_of("MyMixer (yours)") == "MyMixer (yours)"
  assert scorecard.mixer_of("odd D=name") == "odd D=name"  # not a width: left whole


def test_a_limit_compiles_the_largest_arms_first_and_counts_the_rest(tmp_path):
  sweeps = compile_all.declared_sweeps(CACHE, "tiny")
  tgt = compile_only.target("v5e:2x4")
  report = compile_all.compile_arms("cache", sweeps, tgt, str(tmp_path), limit=1)
  assert report["arms_total"] == len(sweeps) > 1 and report["compiled"] == 1
  works = {label: compile_all.work(tc, n, compile_only.task_sizes(tc)) for label, tc, n in sweeps}
  assert works[report["arms"][0]["arm"]] == max(works.values()), works
  assert compile_all.summary(report)["arms"] == len(sweeps)


def test_a_declared_experiments_sweeps_are_its_units_stages():
  """Per trained unit at its first budget, with the model the policy trains: one exploratory
  sweep (seeds x rates x weight decays) and one confirmatory sweep; where the grid is one
  point (cache's tiny: one rate, one weight decay), one sweep of every seed."""
  units = [(a, p) for a in CACHE.arms for p in CACHE.trained_points("tiny")]
  tiny = CACHE.sizes["tiny"]
  assert len(tiny.learning_rates) * len(tiny.weight_decays) == 1
  one = compile_all.declared_sweeps(CACHE, "tiny")
  assert [n for _, _, n in one] == [len(tiny.exploratory_seeds) + tiny.confirmatory] * len(units)
  grid = dataclasses.replace(tiny, learning_rates=(1e-2, 3e-3))
  two = compile_all.declared_sweeps(dataclasses.replace(CACHE, sizes={"tiny": grid}), "tiny")
  explore = len(grid.exploratory_seeds) * 2 * len(grid.weight_decays)
  assert [n for _, _, n in two] == [explore, grid.confirmatory] * len(units)
  (label, config, _), (confirm_label, confirm_config, _) = two[:2]
  assert confirm_label == f"{label} (confirmatory)" and confirm_config == config
  arm = CACHE.arms[0]
  assert config.rung == arm.rung and config.total_steps == grid.steps
  assert all(config.model[k] == v for k, v in arm.fields.items())


def test_the_summary_table_widens_its_name_column_to_the_longest_name():
  tgt = compile_only.target("v5e:2x4")
  row = {"arms": 24, "compiled": 1, "peak_bytes": compile_only.GiB, "fits": True}
  row |= {"compile_seconds": 1.0, "peak_arm": "an arm"}
  names = ["scorecard/gated_deltanet", "cache"]
  lines = compile_all.table([row | {"experiment": n} for n in names], tgt).splitlines()[1:]
  w = len(names[0])
  assert [line[:w].rstrip() for line in lines] == ["experiment", *names]
  assert all(line[w] == " " and line[w + 1 :].split()[0] in ("arms", "24") for line in lines)
