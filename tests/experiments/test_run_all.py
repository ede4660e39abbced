"""The main job's runner: a crash in one experiment is UNRESOLVED in the report, not a lost run."""

import gzip
import io
import json
import os
import types

import pytest

from experiments import report, run_all


def _declared(passes_control):
  """An experiment declared through the protocol: no arms to train, one control, one claim."""
  return types.SimpleNamespace(
    NAME="cache",
    CLAIM="cache claims",
    get_config=lambda size: {"seeds": (0, 1, 2)},
    arms=lambda config: [],
    controls=lambda metrics, config: [report.Criterion("the control learns", passes_control)],
    criteria=lambda metrics, config: [report.Criterion("the claim holds", True)],
  )


def _crashing(config):
  raise RuntimeError("out of memory at L=4096")


def test_a_crash_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
  crashing = _declared(True)
  crashing.NAME = "beyond"
  crashing.arms = _crashing
  passing = _declared(True)
  passing.NAME = "fixed_memory"
  modules = {"experiments.fixed_memory": passing, "experiments.beyond": crashing}
  monkeypatch.setattr(run_all.importlib, "import_module", modules.__getitem__)
  code = run_all.main(
    ["--only", "beyond,fixed_memory", "--size", "tiny", "--jobs", "1", "--workdir", str(tmp_path)]
  )

  assert code == 1  # a crash makes the run fail ...
  results = json.loads((tmp_path / "results.json").read_text())
  assert [(r["experiment"], r["verdict"]) for r in results] == [
    ("beyond", "UNRESOLVED"),
    ("fixed_memory", "SUPPORTED"),  # ... after every other experiment has run
  ]
  assert "RuntimeError: out of memory at L=4096" in results[0]["metrics"]["error"]
  text = (tmp_path / "report.md").read_text()
  assert "1 of 2 experiments SUPPORTED" in text and "out of memory" in text
  out = capsys.readouterr().out
  assert "1 of 2 experiments SUPPORTED, 1 UNRESOLVED" in out
  assert "beyond           UNRESOLVED   (nothing trained)  (ran to completion (crashed" in out


def test_an_unknown_experiment_is_a_usage_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as done:
    run_all.main(["--only", "fixed_memroy", "--workdir", str(tmp_path)])
  assert done.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--only: unknown experiment(s) ['fixed_memroy']" in err[0]
  assert not (tmp_path / "results.json").exists()


def test_a_failed_control_makes_the_verdict_inconclusive(tmp_path, monkeypatch, capsys):
  modules = {"experiments.cache": _declared(False), "experiments.heads": _declared(True)}
  modules["experiments.heads"].NAME = "heads"
  monkeypatch.setattr(run_all.importlib, "import_module", modules.__getitem__)
  code = run_all.main(
    ["--only", "cache,heads", "--size", "tiny", "--jobs", "1", "--workdir", str(tmp_path)]
  )
  assert code == 0  # nothing crashed
  results = json.loads((tmp_path / "results.json").read_text())
  assert [(r["experiment"], r["verdict"], r["size"]) for r in results] == [
    ("cache", "INCONCLUSIVE", "tiny"),
    ("heads", "SUPPORTED", "tiny"),
  ]
  assert results[0]["controls"][0] == {
    "name": "",
    "description": "the control learns",
    "verdict": "REFUTED",
    "note": "",
    "rule": "",
    "reads": [],
    "values": {},
  }
  out = capsys.readouterr().out
  assert "1 of 2 experiments SUPPORTED, 1 INCONCLUSIVE" in out
  assert (
    "cache            INCONCLUSIVE (nothing trained)  (control failed: the control learns)" in out
  )


def test_the_summary_names_the_replicas_still_learning():
  result = report.Result("skips", "", "", [], {})
  result.plateau = [
    {
      "model": "no_skip",
      "setting": "depth=4",
      "exploratory": "100:flat",
      "confirmatory": "0:learning 1:target 2:learning",
    },
    {
      "model": "residual",
      "setting": "depth=4",
      "exploratory": "100:target",
      "confirmatory": "0:target 1:target 2:diverged",
    },
  ]
  line = run_all.plateau_line(result)
  assert line == "plateau 6/8 replicas (still learning: no_skip @ depth=4 seeds 0, 2)"


def test_workers_lines_carry_their_experiments_name():
  out = io.StringIO()
  stream = run_all._Prefixed(out, "heads| ")
  stream.write("step 100")
  stream.write("/400\n[1/2] done\n")
  stream.write("")
  assert out.getvalue() == "heads| step 100/400\nheads| [1/2] done\n"


def test_the_longest_experiment_starts_first(tmp_path):
  for name, seconds in (("heads", 40.0), ("mlp_memory", 190.0)):
    with gzip.open(tmp_path / f"{name}_quick.json.gz", "wt") as f:
      json.dump({"seconds": seconds}, f)
  names = ["cache", "heads", "mlp_memory"]  # cache: never measured, so it goes first
  assert run_all.longest_first(names, "quick", str(tmp_path)) == ["cache", "mlp_memory", "heads"]


def test_an_experiment_that_times_the_cpu_runs_alone_after_the_others(tmp_path, monkeypatch):
  calls = []

  def parallel(names, size, workdir, jobs, on_result, module_paths=None):
    calls.append((list(names), jobs))
    out = []
    for name in names:
      module = types.SimpleNamespace(NAME=name, CLAIM="")
      out.append(run_all.crashed(module, size, RuntimeError("stand-in")))
      on_result(name, out[-1])
    return out

  monkeypatch.setattr(run_all, "run_parallel", parallel)
  monkeypatch.setattr(run_all, "lay_over_cores", lambda count, jobs: None)
  only = "beyond,fixed_memory,heads"
  run_all.main(["--only", only, "--size", "tiny", "--jobs", "2", "--workdir", str(tmp_path)])
  assert run_all.ALONE == ("beyond",)
  assert calls == [(["fixed_memory", "heads"], 2), (["beyond"], 1)]
  results = json.loads((tmp_path / "results.json").read_text())
  assert [r["experiment"] for r in results] == ["beyond", "fixed_memory", "heads"]  # as asked


def test_two_experiments_in_two_worker_processes(tmp_path, capfd):
  """The parallel path of `make run`: spawned workers running declared experiments through the
  protocol, results in the order asked for, every worker's lines prefixed with its name, a
  worker's crash reported as that experiment's UNRESOLVED result."""
  stub = "tests.experiments.declared_stub"
  got = []
  results = run_all.run_parallel(
    ["fixed_memory", "heads"],
    "tiny",
    str(tmp_path),
    jobs=2,
    on_result=lambda name, result: got.append(name),
    module_paths={"fixed_memory": stub, "heads": stub + "_missing"},
  )
  assert sorted(got) == ["fixed_memory", "heads"]
  assert [r.experiment for r in results] == ["declared_stub", "heads"]
  assert results[0].verdict == "SUPPORTED" and results[0].size == "tiny"
  assert 0 < results[0].cpu_seconds  # the worker's own CPU time, every thread
  assert 0 <= results[0].compile_seconds <= results[0].seconds
  assert results[1].crashed and "No module named" in results[1].metrics["error"]
  out = capfd.readouterr().out
  assert "fixed_memory| declared stub measured" in out
  # the worker kept to its share of the cores (all of them where there are fewer than 2)
  cores = out.split("fixed_memory| declared stub measured on cores ")[1].splitlines()[0]
  sets = run_all.core_sets(2) or [sorted(os.sched_getaffinity(0))]
  assert cores in [str(s) for s in sets], (cores, sets)


def test_the_cores_are_dealt_among_the_jobs(monkeypatch):
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 0, 1, 2, 4})
  assert run_all.core_sets(2) == [[0, 2, 4], [1, 3]]
  assert run_all.core_sets(5) == [[0], [1], [2], [3], [4]]
  assert run_all.core_sets(6) is None  # fewer cores than jobs: the workers share them all


@pytest.mark.parametrize(
  "flags, cores, jobs, count, set_",
  [
    ("", 2, 1, 0, "--xla_force_host_platform_device_count=2"),  # a full run alone: both cores
    ("", 2, 2, 0, ""),  # make run: two experiments, one device each (left unset)
    ("", 16, 2, 0, "--xla_force_host_platform_device_count=8"),
    ("", 2, 1, 3, "--xla_force_host_platform_device_count=3"),  # asked for
    ("--xla_force_host_platform_device_count=8", 2, 1, 0, None),  # the tests' 8: left alone
  ],
)
def test_cpu_devices_share_the_cores_among_the_jobs(monkeypatch, flags, cores, jobs, count, set_):
  monkeypatch.setenv("XLA_FLAGS", flags)
  monkeypatch.setattr(run_all, "host_cores", lambda: cores)
  run_all.lay_over_cores(count, jobs)
  assert os.environ["XLA_FLAGS"] == (flags if set_ is None else set_)


def test_cpu_devices_asked_for_over_a_set_count_is_a_usage_error(monkeypatch, capsys):
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
  with pytest.raises(SystemExit) as e:
    run_all.lay_over_cores(2, 1)
  assert e.value.code == 2
  assert "--cpu_devices: XLA_FLAGS already sets a device count" in capsys.readouterr().err
