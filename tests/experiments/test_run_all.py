"""The main job's runner: every experiment in a worker process, a live line each, a failure
reported with its log while the others still run, and the claims screen at the end."""

import io
import os
import types

import pytest

from experiments import board, claims, run_all, workers
from experiments.engine import catalog, page, records, registry
from tests.experiments import run_all_stubs


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
  claims_md = (tmp_path / "claims.md").read_text()  # the five-minute report, its figure beside
  assert f"the claims, with a figure per claim: {tmp_path / 'claims.md'}" in out
  assert "| 5.3 |" in claims_md and (tmp_path / "claims.png").stat().st_size > 0


def test_an_unknown_experiment_is_a_usage_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as done:
    run_all.main(["--only", "fixed_memroy", "--workdir", str(tmp_path)])
  assert done.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--only: unknown experiment(s) ['fixed_memroy']" in err[0]
  assert not list(tmp_path.iterdir())  # nothing ran, nothing written


def test_a_size_not_registered_yet_is_skipped_with_a_line(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(registry, "versions", lambda experiment, size: [])  # being sized
  assert run_all.main(["--only", "cache", "--size", "tiny", "--workdir", str(tmp_path)]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[:2] == [
    "  cache: no registered tiny design yet (being sized): skipped",
    f"0 experiments (size=tiny), 1 at once; each one's detail in {tmp_path}/<name>/train.log",
  ]
  assert not (tmp_path / "cache").exists()


class _Queue(list):
  put = list.append


def test_a_tracker_reads_the_units_and_steps():
  """The engine says when a unit starts; its sweep's step lines say how far the unit is; a step
  is sent at most every `every` seconds, a unit's start at once."""
  now = [0.0]
  sent = _Queue()
  tracker = workers.Tracker("x", sent, io.StringIO(), every=10.0, clock=lambda: now[0])
  tracker.progress(1, 4, "r4 @ *")
  now[0] = 10.0
  tracker.log("r4 @ *: step 100/400: 3/3 replicas training, best validation accuracy 0.5")
  now[0] = 15.0
  tracker.log("r4 @ *: step 150/400: 3/3 replicas training")  # within 10 s: not sent
  tracker.log("a line of the experiment's own")  # no step: nothing sent
  tracker.progress(2, 4, "r16 @ *")
  states = [payload for _, kind, payload in sent]
  assert states == [
    {"done": 1, "total": 4, "unit": "r4 @ *", "step": None, "steps": None},
    {"done": 1, "total": 4, "unit": "r4 @ *", "step": 100, "steps": 400},
    {"done": 2, "total": 4, "unit": "r16 @ *", "step": None, "steps": None},
  ]


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
  records.write({"seconds": 190.0}, str(tmp_path / "mlp_memory" / "quick.json"))
  records.write({"seconds": 40.0}, str(tmp_path / "heads" / "quick.json"))
  records.write({"seconds": 900.0}, str(tmp_path / "skips" / "full.json"))  # another size
  names = ["skips", "cache", "heads", "mlp_memory"]  # skips, cache: never measured at quick
  assert run_all.longest_first(names, "quick", str(tmp_path)) == [
    "skips",
    "cache",
    "mlp_memory",
    "heads",
  ]


def test_experiments_in_two_worker_processes(tmp_path):
  """Spawned workers: a result comes back, every line a worker writes goes to its train.log,
  each worker keeps to its share of the cores, and one whose declaration cannot even be
  imported ends as an error while the other finishes."""
  missing = "tests.experiments.no_such_declaration"
  tasks = [
    workers.Task("cache", run_all_stubs.measures_cores, "tiny", str(tmp_path)),
    workers.Task("heads", run_all.run_declared, "tiny", str(tmp_path), missing),
  ]
  got = {}
  screen = board.Board(io.StringIO(), tty=False)
  workers.run(
    tasks, 2, screen, lambda task, kind, payload: got.update({task.name: (kind, payload)})
  )
  assert got["cache"] == ("result", {"experiment": "cache", "size": "tiny"})
  kind, error = got["heads"]
  assert kind == "error" and error.startswith("ModuleNotFoundError: No module named")
  log = (tmp_path / "cache" / workers.LOG).read_text()
  cores = log.split("stub measured on cores ")[1].splitlines()[0]
  sets = workers.core_sets(2) or [sorted(os.sched_getaffinity(0))]
  assert cores in [str(s) for s in sets], (cores, sets)
  assert "No module named" in (tmp_path / "heads" / workers.LOG).read_text()  # its traceback


def test_a_worker_takes_task_after_task_and_a_fresh_one_replaces_a_worker_that_died(tmp_path):
  """One job: the first task's process dies; a fresh worker runs the next two, one after the
  other, in the same process (a worker starts once, not once per task)."""
  tasks = [workers.Task("beyond", run_all_stubs.dies, "tiny", str(tmp_path))]
  tasks += [workers.Task(n, run_all_stubs.reports_process, "tiny", str(tmp_path))
            for n in ("cache", "heads")]  # fmt: skip
  got = {}
  screen = board.Board(io.StringIO(), tty=False)
  workers.run(
    tasks, 1, screen, lambda task, kind, payload: got.update({task.name: (kind, payload)})
  )
  assert got["beyond"] == ("error", "its process died (exit code 3)")
  (k1, cache), (k2, heads) = got["cache"], got["heads"]
  assert k1 == k2 == "result" and cache["pid"] == heads["pid"] != os.getpid()


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


def test_the_main_job_runs_the_experiments_that_read_the_articles_claims():
  names = catalog.main_job()
  assert "scorecard" not in names and "fixed_memory" in names  # extensions alone run by name
  assert {c.experiment for c in claims.CLAIMS if c.experiment in catalog.DECLARED} <= set(names)
  assert all(catalog.load(n).claims for n in names)
