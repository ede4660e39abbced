"""The main job's runner: every experiment in a worker process, a live line each, a failure
reported with its log while the others still run, and the claims screen at the end."""

import io
import json
import os
import types

import pytest

from experiments import board, report, run_all, workers
from experiments.engine import page, records, registry
from tests.experiments import run_all_stubs


def _old(passes_control, name="fixed_memory"):
  """An old-protocol stand-in: no arms to train, one control, one claim."""
  return types.SimpleNamespace(
    NAME=name,
    CLAIM=f"{name} claims",
    get_config=lambda size: {"seeds": (0, 1, 2)},
    arms=lambda config: [],
    controls=lambda metrics, config: [report.Criterion("the control learns", passes_control)],
    criteria=lambda metrics, config: [report.Criterion("the claim holds", True)],
  )


def _crashing(config):
  raise RuntimeError("out of memory at L=4096")


def test_main_runs_each_experiment_in_a_worker_and_a_failure_loses_nothing_else(
  tmp_path, monkeypatch, capsys
):
  """Three declared experiments, two at once: one trains, one raises, one's process dies. The
  one that trained reaches the claims screen; each failure is one line with its error and its
  log; the run fails; the whole output stays short."""
  runners = {"cache": run_all_stubs.trains, "heads": run_all_stubs.raises}
  runners["beyond"] = run_all_stubs.dies

  def task(name, size, workdir):
    return workers.Task(name, runners[name], size, workdir)

  monkeypatch.setattr(run_all, "task", task)
  argv = ["--only", "cache,heads,beyond", "--size", "tiny", "--workdir", str(tmp_path)]
  assert run_all.main(argv) == 1  # a failure fails the run ...
  out = capsys.readouterr().out
  lines = out.splitlines()
  assert lines[0].startswith("3 experiments (size=tiny), 2 at once")
  assert "] cache: 5.3 SUPPORTED in 1 s" in out  # ... after every other experiment has run
  assert "] heads: FAILED: RuntimeError: out of memory at L=4096" in out
  assert "] beyond: FAILED: its process died (exit code 3)" in out
  ran = run_all_stubs.result(types.SimpleNamespace(name="cache", size="tiny"))
  screen = page.screen({"cache": ran}, registry.RESULTS)  # this run's reading of 5.3 beside
  assert "\n".join(screen) in out and screen != page.screen({}, registry.RESULTS)
  for name in ("heads", "beyond"):
    log = tmp_path / name / workers.LOG
    assert f"\n{name} FAILED: " in out and f"  its log: {log}" in out and log.exists()
  assert "RuntimeError: out of memory" in (tmp_path / "heads" / workers.LOG).read_text()
  detail = (tmp_path / "cache" / workers.LOG).read_text()  # every step, its own lines too
  assert "r4: step 10/20" in detail and "a line the experiment printed itself" in detail
  assert "step 10/20" not in out and len(lines) < 60
  assert not (tmp_path / "report.md").exists()  # no old-protocol experiment ran
  claims_md = (tmp_path / "claims.md").read_text()  # the five-minute report, its figure beside
  assert f"the claims, with a figure per claim: {tmp_path / 'claims.md'}" in out
  assert "| 5.3 |" in claims_md and (tmp_path / "claims.png").stat().st_size > 0


def test_an_unknown_experiment_is_a_usage_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as done:
    run_all.main(["--only", "fixed_memroy", "--workdir", str(tmp_path)])
  assert done.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--only: unknown experiment(s) ['fixed_memroy']" in err[0]
  assert not (tmp_path / "results.json").exists()


def test_an_old_protocol_crash_is_unresolved_and_a_failed_control_inconclusive(tmp_path, capsys):
  crashing = _old(True, "mlp_memory")
  crashing.arms = _crashing
  quiet = {"log": lambda text: None}
  results = [
    run_all.run_one(crashing, "tiny", str(tmp_path), **quiet),
    run_all.run_one(_old(False), "tiny", str(tmp_path), **quiet),
  ]
  run_all.summary(results, str(tmp_path), wall=1.0)
  saved = json.loads((tmp_path / "results.json").read_text())
  assert [(r["experiment"], r["verdict"], r["size"]) for r in saved] == [
    ("mlp_memory", "UNRESOLVED", "tiny"),
    ("fixed_memory", "INCONCLUSIVE", "tiny"),
  ]
  assert "RuntimeError: out of memory at L=4096" in saved[0]["metrics"]["error"]
  assert saved[1]["controls"][0]["description"] == "the control learns"
  assert saved[1]["controls"][0]["verdict"] == "REFUTED"
  out = capsys.readouterr().out
  assert "0 of 2 experiments SUPPORTED" in out
  assert "mlp_memory       UNRESOLVED   (nothing trained)  (ran to completion (crashed" in out
  assert "fixed_memory     INCONCLUSIVE (nothing trained)  (control failed: the control" in out


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


class _Queue(list):
  put = list.append


def test_a_tracker_reads_the_units_and_steps_of_both_runners():
  """The engine says when a unit starts; an old protocol run is read from its log lines (an
  arm's end, a walk's next arms counted on); a step is sent at most every `every` seconds."""
  now = [0.0]
  sent = _Queue()
  tracker = workers.Tracker("x", sent, io.StringIO(), every=10.0, clock=lambda: now[0])
  tracker.progress(1, 4, "r4 @ *")
  now[0] = 10.0
  tracker.log("r4 @ *: step 100/400: 3/3 replicas training, best validation accuracy 0.5")
  now[0] = 15.0
  tracker.log("r4 @ *: step 150/400: 3/3 replicas training")  # within 10 s: not sent
  states = [payload for _, kind, payload in sent]
  assert states == [
    {"done": 1, "total": 4, "unit": "r4 @ *", "step": None, "steps": None},
    {"done": 1, "total": 4, "unit": "r4 @ *", "step": 100, "steps": 400},
  ]
  sent.clear()
  old = workers.Tracker("fixed_memory", sent, io.StringIO(), every=0.0)
  old.log("      lstm @ hidden=16 K=2 L=32: step 50/800: 4/4 replicas training")
  old.log("    [1/2] lstm @ hidden=16 K=2 L=32: 4 replicas, compile 1.0 s")
  old.log("    [2/2] lstm @ hidden=64 K=2 L=32: 4 replicas, compile 1.0 s")
  old.log("    next: lstm @ hidden=16 K=4 L=32")
  old.log("    [1/1] lstm @ hidden=16 K=4 L=32: 4 replicas, compile 1.0 s")
  read = [(p["done"], p["total"], p["unit"], p["step"]) for _, _, p in sent]
  assert read == [(0, None, "lstm @ hidden=16 K=2 L=32", 50), (1, 2, None, None),
                  (2, 2, None, None), (3, 3, None, None)]  # fmt: skip


def test_a_piped_board_writes_a_line_per_unit_and_one_now_and_then():
  now, out = [0.0], io.StringIO()
  screen = board.Board(out, tty=False, every=60.0, clock=lambda: now[0])
  screen.start("cache")
  screen.update("cache", done=0, total=4, unit="r1 @ *")
  now[0] = 30.0
  screen.update("cache", done=0, total=4, unit="r1 @ *", step=100, steps=400)  # no line
  screen.tick()
  now[0] = 100.0
  screen.update("cache", done=1, total=4, unit="r4 @ *")
  now[0] = 170.0
  screen.update("cache", done=1, total=4, unit="r4 @ *", step=200, steps=400)
  screen.tick()  # a minute since its last line
  screen.update("cache", done=4, total=4)  # the last unit's end: the finishing line says it
  screen.finish("cache", "[1/1] cache: 5.3 SUPPORTED in 200 s")
  assert out.getvalue().splitlines() == [
    "cache: 0/4 units done, now r1 @ *, 0s so far",
    "cache: 1/4 units done, now r4 @ *, 1m40s so far, about 5m00s left",
    "cache: 1/4 units done, now r4 @ * step 200/400, 2m50s so far, about 4m43s left",
    "[1/1] cache: 5.3 SUPPORTED in 200 s",
  ]


def test_a_terminals_board_redraws_its_bars_under_the_lines_that_stay():
  now, out = [0.0], io.StringIO()
  screen = board.Board(out, tty=True, refresh=0.0, clock=lambda: now[0], columns=120)
  screen.start("cache")
  screen.start("heads")
  now[0] = 60.0
  screen.update("cache", done=1, total=4, unit="r4 @ *", step=200, steps=400)
  text = out.getvalue()
  live = text.rsplit("\x1b[2F\x1b[J", 1)[1].splitlines()  # the last redraw of both lines
  assert live[0].startswith("cache") and "[########------------]" in live[0]
  assert "1/4 units  r4 @ * step 200/400  1m40s left" in live[0]
  assert live[1].startswith("heads") and "-/- units" in live[1]
  screen.finish("cache", "[1/2] cache: 5.3 SUPPORTED in 60 s")
  tail = out.getvalue()[len(text) :]
  assert tail.startswith("\x1b[2F\x1b[J[1/2] cache: 5.3 SUPPORTED in 60 s\nheads")
  screen.close()
  assert out.getvalue().endswith("\x1b[1F\x1b[J")


@pytest.mark.parametrize("seconds, text", [(45, "45s"), (185, "3m05s"), (3720, "1h02m")])
def test_durations_read_at_a_glance(seconds, text):
  assert board.duration(seconds) == text


def test_the_longest_experiment_starts_first(tmp_path):
  records.write({"seconds": 190.0}, str(tmp_path / "mlp_memory_quick.json.gz"))
  records.write({"seconds": 40.0}, str(tmp_path / "heads" / "quick.json"))  # a declared record
  names = ["cache", "heads", "mlp_memory"]  # cache: never measured, so it goes first
  assert run_all.longest_first(names, "quick", str(tmp_path)) == ["cache", "mlp_memory", "heads"]


def test_old_protocol_experiments_in_two_worker_processes(tmp_path):
  """Spawned workers running old-protocol stand-ins: a result comes back, every line a worker
  writes goes to its train.log, each worker keeps to its share of the cores, and one whose
  module cannot even be imported ends as an error while the other finishes."""
  stub = "tests.experiments.declared_stub"
  tasks = [
    workers.Task("fixed_memory", run_all.run_protocol, "tiny", str(tmp_path), stub),
    workers.Task("mlp_memory", run_all.run_protocol, "tiny", str(tmp_path), stub + "_missing"),
  ]
  got = {}
  screen = board.Board(io.StringIO(), tty=False)
  workers.run(
    tasks, 2, screen, lambda task, kind, payload: got.update({task.name: (kind, payload)})
  )
  kind, result = got["fixed_memory"]
  assert kind == "result" and result.experiment == "declared_stub"
  assert result.verdict == "SUPPORTED" and result.size == "tiny"
  assert 0 < result.cpu_seconds  # the worker's own CPU time, every thread
  assert 0 <= result.compile_seconds <= result.seconds
  kind, error = got["mlp_memory"]
  assert kind == "error" and error.startswith("ModuleNotFoundError: No module named")
  log = (tmp_path / "fixed_memory" / workers.LOG).read_text()
  cores = log.split("declared stub measured on cores ")[1].splitlines()[0]
  sets = workers.core_sets(2) or [sorted(os.sched_getaffinity(0))]
  assert cores in [str(s) for s in sets], (cores, sets)


def test_the_cores_are_dealt_among_the_jobs(monkeypatch):
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 0, 1, 2, 4})
  assert workers.core_sets(2) == [[0, 2, 4], [1, 3]]
  assert workers.core_sets(5) == [[0], [1], [2], [3], [4]]
  assert workers.core_sets(6) is None  # fewer cores than jobs: the workers share them all


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
