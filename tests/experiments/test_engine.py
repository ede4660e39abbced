"""The verdict engine on synthetic measurements: refusal, both directions, controls, claims,
the registry's drift check and the seed ledger. Nothing trains here."""

import dataclasses
import json

import pytest

from experiments.engine import declare, judge, page, policy, records, registry, stats
from experiments.engine.declare import Arm, Case, Criterion, Experiment, Metric, Size

SEEDS_EXPLORE, SEEDS_CONFIRM = (100,), (1000, 1001, 1002, 1003, 1004)


def _size(**fields):
  base = dict(task={"vocab_size": 16}, model={"d_model": 8}, steps=10, step_cap=20,
              learning_rates=(1e-3,), exploratory_seeds=SEEDS_EXPLORE, confirmatory=5)  # fmt: skip
  return Size(**(base | fields))


def _experiment(*criteria, metrics=()):
  return Experiment(
    name="toy",
    section=5,
    claims=("5.1",),
    summary="a toy",
    arms=(Arm("strong", "softmax"), Arm("weak", "source_only"), Arm("other", "softmax")),
    criteria=criteria,
    sizes={"tiny": _size()},
    task=lambda size, point: declare.spec("mqar", size.task),
    metrics=(
      Metric("share", 0.0, 1.0, untrained="share0"),
      Metric("share0", 0.0, 1.0),
      *metrics,
    ),  # fmt: skip
  )


def _recalls(**fields):
  base = dict(name="recalls", tests="5.1", says="strong recalls", metric="adjusted",
              arm="strong", threshold=0.9, positive=Case(arm="other"),
              falsification=Case(arm="weak"))  # fmt: skip
  return Criterion(**(base | fields))


def _measured(values, plateau=None):
  """values: {metric: {arm: per-seed list over exploratory + confirmatory seeds}}."""
  metrics = {m: {a: {"*": list(v)} for a, v in by_arm.items()} for m, by_arm in values.items()}
  arms = {a for by_arm in values.values() for a in by_arm}
  n = len(SEEDS_EXPLORE) + len(SEEDS_CONFIRM)
  plateau = plateau or {}
  return judge.Measured(
    metrics,
    {a: {"*": plateau.get(a, ["flat"] * n)} for a in arms},
    {a: {"*": 20} for a in arms},
    SEEDS_EXPLORE,
    SEEDS_CONFIRM,
  )


GOOD = [0.97, 0.95, 0.99, 0.96, 0.98, 0.97]
CHANCE = [0.02, -0.01, 0.0, 0.03, 0.01, 0.0]


def _by_name(judged):
  return {j.criterion.name: j for j in judged}


def test_a_criterion_that_holds_with_both_directions_shown_is_supported():
  e = declare.validate(_experiment(_recalls()))
  measured = _measured({"adjusted": {"strong": GOOD, "other": GOOD, "weak": CHANCE}})
  j = _by_name(judge.judge(e, measured))["recalls"]
  assert (j.verdict, j.positive.verdict, j.falsification.verdict) == (
    stats.SUPPORTED, stats.SUPPORTED, stats.REFUTED)  # fmt: skip
  assert judge.claims(e, judge.judge(e, measured)) == {"5.1": stats.SUPPORTED}


def test_a_criterion_that_fails_with_both_directions_shown_is_refuted():
  e = _experiment(_recalls())
  measured = _measured({"adjusted": {"strong": CHANCE, "other": GOOD, "weak": CHANCE}})
  assert judge.claims(e, judge.judge(e, measured)) == {"5.1": stats.REFUTED}


def test_a_failing_positive_control_makes_the_criterion_inconclusive():
  e = _experiment(_recalls())
  measured = _measured({"adjusted": {"strong": GOOD, "other": CHANCE, "weak": CHANCE}})
  j = _by_name(judge.judge(e, measured))["recalls"]
  assert j.verdict == stats.INCONCLUSIVE and "cannot be shown to accept" in j.why


def test_an_accepted_falsification_arm_makes_the_criterion_inconclusive():
  e = _experiment(_recalls())
  measured = _measured({"adjusted": {"strong": GOOD, "other": GOOD, "weak": GOOD}})
  j = _by_name(judge.judge(e, measured))["recalls"]
  assert j.verdict == stats.INCONCLUSIVE and "cannot be shown to reject" in j.why


def test_an_unmet_control_makes_what_it_guards_inconclusive_and_a_met_one_is_met_while_learning():
  control = Criterion("weak_trains", "control", "weak learns the format", "over_chance",
                      "weak", threshold=0.8)  # fmt: skip
  e = _experiment(control, _recalls(guarded_by=("weak_trains",)))
  values = {"adjusted": {"strong": GOOD, "other": GOOD, "weak": CHANCE}}
  learning = {"weak": ["learning"] * 6}
  met = _measured(values | {"over_chance": {"weak": [1.0] * 6}}, plateau=learning)
  unmet = _measured(values | {"over_chance": {"weak": [0.1] * 6}}, plateau=learning)
  assert _by_name(judge.judge(e, met))["weak_trains"].verdict == stats.SUPPORTED
  judged = _by_name(judge.judge(e, unmet))
  assert judged["weak_trains"].verdict == stats.REFUTED
  assert judged["recalls"].verdict == stats.INCONCLUSIVE and "weak_trains" in judged["recalls"].why


def test_an_arm_still_learning_at_its_cap_leaves_the_criterion_unresolved():
  e = _experiment(_recalls())
  values = {"adjusted": {"strong": CHANCE, "other": GOOD, "weak": CHANCE}}
  j = _by_name(judge.judge(e, _measured(values, {"strong": ["flat"] + ["learning"] * 5})))
  assert j["recalls"].verdict == stats.UNRESOLVED and "still learning" in j["recalls"].why


def test_an_arm_at_chance_has_finished_only_where_the_reading_expects_it_to_fail():
  """`weak` never rose above chance (policy status `chance`): reading "weak <= 0.3" (it must
  fail) it has finished, so the criterion reads SUPPORTED; read as the falsification case of
  "strong >= 0.9" (which must reject it) it has finished too; reading "weak >= 0.9" (it must
  succeed) it is still learning, UNRESOLVED."""
  at_chance = {"weak": ["chance"] * 6}
  values = {"adjusted": {"strong": GOOD, "other": GOOD, "weak": CHANCE}}
  blind = Case(values=(0.0,), why="an arm that sees no other position recalls at chance")
  fails = _recalls(name="fails", arm="weak", compare="<=", threshold=0.3, positive=blind,
                   falsification=Case(arm="strong"))  # fmt: skip
  succeeds = _recalls(name="succeeds", arm="weak", positive=Case(arm="strong"),
                      falsification=Case(values=(0.0,), why="chance"))  # fmt: skip
  e = _experiment(fails, succeeds, _recalls())
  j = _by_name(judge.judge(e, _measured(values, at_chance)))
  assert j["fails"].verdict == stats.SUPPORTED, j["fails"].why
  assert j["recalls"].verdict == stats.SUPPORTED and j["recalls"].falsification.verdict == (
    stats.REFUTED)  # fmt: skip
  assert j["succeeds"].confirmatory.verdict == stats.UNRESOLVED
  assert "weak still learning" in j["succeeds"].confirmatory.note


def test_the_plateau_rule_marks_a_replica_that_never_left_chance():
  budget, chance = 1000, 0.2
  noisy = [(s, chance + (0.03 if s == 900 else 0.0)) for s in range(100, 1001, 100)]
  rising = [(s, chance + s / 5000) for s in range(100, 1001, 100)]
  assert policy.curve_status("completed", noisy, budget, chance) == "chance"
  assert policy.curve_status("completed", noisy, budget) == "learning"  # no chance known
  assert policy.curve_status("completed", rising, budget, chance) == "learning"  # 0.4 at the end
  assert (
    policy.curve_status("completed", [(s, 0.5) for s in range(100, 1001, 100)], budget, chance)
    == "flat"
  )


def test_an_extension_cannot_change_a_claims_verdict():
  ext = _recalls(name="ext", tests="extension", arm="other", positive=Case(arm="strong"))
  e = _experiment(_recalls(), ext)
  for other in (GOOD, CHANCE):  # the extension SUPPORTED, then REFUTED
    measured = _measured({"adjusted": {"strong": GOOD, "other": other, "weak": CHANCE}})
    judged = judge.judge(e, measured)
    assert judge.claims(e, judged) == judge.claims(
      e, [j for j in judged if j.criterion.tests != "extension"]
    )
  # and the claim reads its own criterion only: SUPPORTED above, whatever the extension read
  assert judge.claims(e, judge.judge(e, _measured(
    {"adjusted": {"strong": GOOD, "other": GOOD, "weak": CHANCE}}))) == {"5.1": stats.SUPPORTED}  # fmt: skip


def test_an_unreachable_threshold_is_refused_before_judging():
  # a share can never pass 1: refused when declared
  share_above_one = _recalls(name="share", metric="share", threshold=1.2)
  with pytest.raises(declare.DesignError, match="threshold 1.2 cannot be reached"):
    declare.validate(_experiment(share_above_one))
  # a rise larger than the room above the untrained value: refused once the untrained nets are
  # read, before any criterion is judged (interaction's old pure_share_strong: >= 0.5 over 0.8)
  rise = _recalls(name="rise", metric="share", statistic="gain", threshold=0.5,
                  positive=Case(arm="other"), falsification=Case(arm="weak"))  # fmt: skip
  e = declare.validate(_experiment(rise))
  measured = _measured({"share": {a: [0.95] * 6 for a in ("strong", "other", "weak")},
                        "share0": {a: [0.8] * 6 for a in ("strong", "other", "weak")}})  # fmt: skip
  with pytest.raises(declare.DesignError, match="given its untrained reading"):
    judge.judge(e, measured)


@pytest.mark.parametrize(
  "change, field",
  [
    (dict(positive=None), "positive"),
    (dict(falsification=Case(values=(0.0,))), "why"),
    (dict(arm="nobody"), "nobody"),
    (dict(tests="7.2"), "tests"),
    (dict(statistic="difference"), "against"),
    (dict(compare=">"), "compare"),
    (dict(guarded_by=("recalls",)), "guarded_by"),
  ],
)
def test_a_declaration_the_engine_cannot_judge_is_one_error_naming_the_field(change, field):
  with pytest.raises(declare.DesignError, match=field):
    declare.validate(_experiment(_recalls(**change)))


def test_an_analytic_case_is_read_as_stated():
  criterion = _recalls(positive=Case(values=(1.0, 1.0, 1.0), why="a perfect recall by hand"))
  e = declare.validate(_experiment(criterion))
  measured = _measured({"adjusted": {"strong": GOOD, "weak": CHANCE}})
  j = _by_name(judge.judge(e, measured))["recalls"]
  assert j.positive.verdict == stats.SUPPORTED and j.verdict == stats.SUPPORTED
  assert j.as_json()["positive"]["analytic"] is True


def test_a_threshold_or_statistic_edited_without_a_new_version_fails(tmp_path):
  path = str(tmp_path / "registry.json")
  e = _experiment(_recalls())
  registry.register(e, "tiny", "the first design", path=path, log_dir=str(tmp_path))
  assert registry.entry(e, "tiny", path)["version"] == 1
  for edit in (dict(threshold=0.8), dict(statistic="difference", against="weak"),
               dict(rule="every_seed"), dict(compare="<=")):  # fmt: skip
    edited = _experiment(dataclasses.replace(_recalls(), **edit))
    with pytest.raises(registry.Unregistered, match="register a new version"):
      registry.entry(edited, "tiny", path)
  # prose is not judged, so it is not hashed
  reworded = _experiment(dataclasses.replace(_recalls(), says="the strong arm recalls well"))
  assert registry.entry(reworded, "tiny", path)["version"] == 1


def test_the_ledger_hands_out_fresh_confirmatory_seeds_and_logs_why(tmp_path):
  path = str(tmp_path / "registry.json")
  first = registry.register(_experiment(_recalls()), "tiny", "v1", path=path, log_dir=str(tmp_path))
  with pytest.raises(declare.DesignError, match="already registered"):
    registry.register(_experiment(_recalls()), "tiny", "again", path=path, log_dir=str(tmp_path))
  second = registry.register(_experiment(_recalls(threshold=0.8)), "tiny", "a bug: v2", path=path,
                             log_dir=str(tmp_path))  # fmt: skip
  assert second["version"] == 2
  assert not set(first["confirmatory"]) & set(second["confirmatory"])
  assert not set(second["confirmatory"]) & set(SEEDS_EXPLORE)
  assert len(second["confirmatory"]) == 5
  log = (tmp_path / "toy" / "log.md").read_text()
  assert "version 1 registered" in log and "a bug: v2" in log
  assert [v["version"] for v in json.load(open(path))["toy"]["tiny"]] == [1, 2]


def test_interval_and_every_seed_rules():
  assert stats.read([0.95, 0.97, 0.96], ">=", 0.9, "interval").verdict == stats.SUPPORTED
  assert stats.read([0.1, 0.2, 0.15], ">=", 0.9, "interval").verdict == stats.REFUTED
  straddle = stats.read([0.0, 1.0, 0.0, 1.0, 1.0], ">=", 0.5, "interval")
  assert straddle.verdict == stats.UNRESOLVED and "straddles" in straddle.note
  assert stats.read([0.1, 0.2], "<=", 0.3, "interval").verdict == stats.SUPPORTED
  assert stats.read([0.95, 0.5], ">=", 0.9, "every_seed").verdict == stats.UNRESOLVED
  assert stats.read([float("nan"), 1.0], ">=", 0.9, "interval").verdict == stats.UNRESOLVED
  assert stats.statistic("ratio", [4.0, 2.0], against=[2.0, 2.0]) == [2.0, 1.0]
  assert stats.statistic("gain", [0.9], untrained=[0.8]) == pytest.approx([0.1])


def test_the_last_screen_pairs_each_claim_with_its_record(tmp_path):
  full = {"claims": {"5.1": {"verdict": "SUPPORTED"}, "5.2": {"verdict": "SUPPORTED"}}}
  records.write(full, str(tmp_path / "interaction" / "full.json"))
  # normalization's record: claim 6.1 beside it is a check, never in the record's claims
  records.write({"claims": {"6.2": {"verdict": "SUPPORTED"}}},
                str(tmp_path / "normalization" / "full.json"))  # fmt: skip
  quick = {"interaction": {"claims": {"5.1": {"verdict": "SUPPORTED"},
                                      "5.2": {"verdict": "REFUTED"}}}}  # fmt: skip
  lines = {line.split()[0]: line for line in page.screen(quick, str(tmp_path))[1:]}
  assert lines["5.1"].split()[-1] == "agree"
  assert lines["5.2"].endswith("DISAGREE")
  assert "pending" in lines["1.1"] and lines["1.1"].endswith("not run here")
  assert " check " in lines["6.1"]
  assert "SUPPORTED     -" in lines["6.2"] and lines["6.2"].endswith("not run here")
  assert all(len(line) <= 100 for line in lines.values())


def test_a_one_point_grid_trains_every_seed_in_one_stage_and_arm_rates_win():
  """policy.stages: two stages where there is a rate to select, one where the grid is one
  point; a size's arm_rates entry replaces the arm's own grid."""
  arm = declare.Arm("a", "transformer", learning_rates=(1e-3, 3e-3))
  size = declare.Size(task={}, model={}, steps=1, step_cap=1, learning_rates=(1e-2,),
                      exploratory_seeds=(100,), confirmatory=2)  # fmt: skip
  assert policy.rates(size, arm) == (1e-3, 3e-3)
  assert policy.stages(size, arm, (100, 7, 8)) == [
    ((100,), (1e-3, 3e-3), (0.1,)), ((7, 8), None, None)
  ]  # fmt: skip
  one = dataclasses.replace(size, arm_rates={"a": (3e-3,)})
  assert policy.stages(one, arm, (100, 7, 8)) == [((100, 7, 8), (3e-3,), (0.1,))]


def test_tiny_and_quick_sweeps_compile_at_the_short_sweep_options_full_ones_by_budget():
  """The engine's sizes set each sweep's fast_compile (run.fast_compile): tiny and quick
  sweeps compile at sweep.FAST_COMPILE on a CPU whatever their budget, full ones by it."""
  from experiments import s8_skips
  from experiments.engine import run
  from jaxformer.train import sweep

  e = s8_skips.EXPERIMENT
  for size_name, fast in (("tiny", True), ("quick", True), ("full", False)):
    size, arm = e.sizes[size_name], e.arms[0]
    _, cap = policy.budgets(size, arm, None)
    config = policy.unit_config(arm, e.task(size, None), size, cap, run.fast_compile(size_name))
    assert cap > sweep.FAST_COMPILE_STEPS or size_name == "tiny"  # quick: 2,500 steps
    options = sweep.compiler_options(config, "cpu")
    assert (options["train_step"] == sweep.FAST_COMPILE) == fast, size_name
    assert sweep.compiler_options(config, "cuda")["train_step"] is None


@pytest.mark.parametrize("rates, match", [({"nobody": (1e-3,)}, "arm 'nobody'"),
                                          ({"weak": (3.0,)}, r"arm_rates\[weak\]")])  # fmt: skip
def test_arm_rates_name_an_arm_and_hold_learning_rates(rates, match):
  e = dataclasses.replace(_experiment(_recalls()), sizes={"tiny": _size(arm_rates=rates)})
  with pytest.raises(declare.DesignError, match=match):
    declare.validate(e)


def test_an_experiment_no_claim_names_lists_its_extensions_in_one_row(tmp_path):
  """The scorecard tests only extensions (dozens): one row of the README's extensions table
  counts their verdicts and links its page; its controls are not counted."""
  ordering = {"tests": "extension", "statement": "the delta rule recalls more", "why": "",
              "verdict": "SUPPORTED"}  # fmt: skip
  criteria = [ordering, dict(ordering, verdict="REFUTED"), dict(ordering, verdict="SUPPORTED"),
              dict(ordering, tests="control", verdict="REFUTED")]  # fmt: skip
  record = {"size": "full", "version": 2, "claims": {}, "criteria": criteria}
  records.write(record, str(tmp_path / "scorecard" / "full.json"))
  ((where, says, read, at),) = page.extensions_rows(str(tmp_path))
  assert (where, read, at) == ("[scorecard](results/scorecard/)",
                               "**SUPPORTED** 2, **REFUTED** 1", "full v2")  # fmt: skip
  assert says.startswith("3 extensions: Every built-in mixer")


def test_confirm_only_needs_a_one_point_grid_for_every_arm():
  e = _experiment(_recalls())
  ok = dataclasses.replace(e, sizes={"tiny": _size(confirm_only=True)})
  assert declare.validate(ok) is ok
  two = dataclasses.replace(e, sizes={"tiny": _size(confirm_only=True,
                                                    arm_rates={"weak": (1e-3, 3e-3)})})  # fmt: skip
  with pytest.raises(declare.DesignError, match=r"confirm_only: weak's grid has 2 points"):
    declare.validate(two)


def test_a_confirm_only_run_trains_and_reads_the_confirmatory_seeds_alone(tmp_path):
  """normalization's tiny size with confirm_only, end to end in a scratch registry: no unit
  trains the exploratory seed, the judge reads no exploratory seed (and says why), and the
  record re-judged reads the same verdicts."""
  from experiments import s6_normalization
  from experiments.engine import run
  from tests.experiments import scratch

  base = s6_normalization.EXPERIMENT
  tiny = dataclasses.replace(base.sizes["tiny"], confirm_only=True)
  e = dataclasses.replace(base, sizes={"tiny": tiny})
  entry, result, _ = scratch.run_tiny(e, tmp_path)
  assert run.read_seeds(e, "tiny", entry) == ((), tuple(entry["confirmatory"]))
  assert run.read_seeds(base, "tiny", entry)[0] == tuple(entry["exploratory"])
  # the record names the seeds its per-seed lists hold
  assert result["seeds"] == {"exploratory": [], "confirmatory": entry["confirmatory"]}
  for unit in result["units"]:
    assert [r["seed"] for r in unit["replicas"]] == entry["confirmatory"], unit["arm"]
  for c in result["criteria"]:
    assert c["exploratory"]["values"] == [] and "sizing run" in c["exploratory"]["note"]
  again = run.rejudge(result, e, registry_path=str(tmp_path / "registry.json"))
  assert [c["verdict"] for c in again["criteria"]] == [c["verdict"] for c in result["criteria"]]


def test_a_records_confirmatory_values_come_from_either_seed_order():
  record = {"seeds": {"exploratory": [100], "confirmatory": [7, 8, 9]}}
  assert records.confirmatory(record, [0.1, 0.7, 0.8, 0.9]).tolist() == [0.7, 0.8, 0.9]
  # a confirm_only run read its confirmatory seeds alone
  assert records.confirmatory(record, [0.7, 0.8, 0.9]).tolist() == [0.7, 0.8, 0.9]
  assert records.confirmatory(record, [0.5]).tolist() == [0.5]  # not a per-seed list


def test_workers_take_the_costliest_units_first():
  """The full scorecard: its arms at a one-point grid and 5,000 steps (six seeds in one
  stage) go to the workers before the 3,000-step arms (the exploratory seeds at each rate,
  then the confirmatory ones), in declared order among equals."""
  from experiments import s9_scorecard
  from experiments.engine import run

  e = s9_scorecard.EXPERIMENT
  size, seeds = e.sizes["full"], run.seed_order(e, "full", registry.entry(e, "full"))
  units, order = run._units(e, "full"), run.longest_first(e, "full", seeds)
  assert sorted(order) == list(range(len(units)))
  cost = [policy.replica_steps(size, arm, point, seeds) for arm, point in units]
  explore, confirm = len(size.exploratory_seeds), len(seeds) - len(size.exploratory_seeds)
  for (arm, point), c in zip(units, cost, strict=True):
    first, _ = policy.budgets(size, arm, point)
    grid = len(size.rates(arm)) * len(size.weight_decays)
    assert c == first * (len(seeds) if grid == 1 else explore * grid + confirm), arm.name
  assert [cost[i] for i in order] == sorted(cost, reverse=True)
  longest = [i for i in order if cost[i] == max(cost)]
  assert longest == sorted(longest) and units[order[0]][0].name == "linear_16"
  assert max(cost) > min(cost)


def test_units_trained_in_two_worker_processes_read_as_trained_in_one(tmp_path):
  """normalization's tiny size with jobs=2: the units train in two spawned workers, into the
  sweep store the run then reads every unit back from; the record matches a run in one
  process, replica for replica, with each unit's training seconds from its worker and its
  sweeps' seconds as they measured them."""
  from experiments import s6_normalization
  from experiments.engine import run

  e, reg = s6_normalization.EXPERIMENT, str(tmp_path / "registry.json")
  registry.register(e, "tiny", "the test", path=reg, log_dir=str(tmp_path / "results"))
  lines = {1: [], 2: []}
  one, two = (run.run(e, "tiny", str(tmp_path / f"jobs{n}"), registry_path=reg,
                      log=lines[n].append, jobs=n) for n in (1, 2))  # fmt: skip
  # the parent trained nothing: every sweep it read came from a worker
  assert any(": step " in line for line in lines[1])
  assert not any(": step " in line for line in lines[2])
  assert sum("read back" in line for line in lines[2]) >= len(two["units"])
  for a, b in zip(one["units"], two["units"], strict=True):
    assert (a["arm"], a["point"], a["replicas"]) == (b["arm"], b["point"], b["replicas"])
    assert b["seconds"] > 0.05  # the worker's training, not the read-back
    # the sweeps' own compile and training seconds, kept in the store: read back as measured
    assert 0.05 < a["sweep_seconds"] <= a["seconds"] and 0.05 < b["sweep_seconds"] <= b["seconds"]
  assert one["metrics"] == two["metrics"]
  assert [c["verdict"] for c in one["criteria"]] == [c["verdict"] for c in two["criteria"]]
