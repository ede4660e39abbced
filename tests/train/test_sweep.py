"""jaxformer.train.sweep: N replicas in one program behave as N separate trainings."""

import functools
import math

import jax
import numpy as np
import pytest

from jaxformer import data, ladder
from jaxformer.train import config as config_lib
from jaxformer.train import loop, program, sweep

TASK = "mqar:vocab_size=16,seq_len=8,num_kv_pairs=2,num_examples=256,num_test_examples=32"


def _config(**fields):
  c = config_lib.get_config("transformer")
  c.task = TASK
  c.model.update(vocab_size=16, max_len=8, d_model=16, num_heads=1, d_ff=32)
  c.update(total_steps=4, eval_every=2, batch_size=8, warmup_steps=1)
  c.peak_flops_per_device = 1e11  # no matmul measurement in loop.train
  c.update(**fields)
  return c


def _rows(run):
  """A run's evaluation rows as floats (NaN where the eval half was not measured)."""
  return np.asarray(run.evals, np.float64)


REPLICAS = [
  sweep.Replica(seed=0, learning_rate=1e-3, weight_decay=0.1),
  sweep.Replica(seed=1, learning_rate=3e-3, weight_decay=0.0),
  sweep.Replica(seed=2, learning_rate=1e-2, weight_decay=0.1),
]


@pytest.fixture(scope="module")
def three():
  """REPLICAS swept once; the tests below reuse its compiled program (same shapes)."""
  return sweep.train(_config(), REPLICAS)


def test_each_vmapped_replica_matches_the_same_run_trained_alone(three):
  result = three
  assert [r.final_step for r in result.runs] == [4, 4, 4]
  for replica, run in zip(REPLICAS, result.runs, strict=True):
    alone = _config(
      seed=replica.seed, learning_rate=replica.learning_rate, weight_decay=replica.weight_decay
    )
    losses = loop.train(alone)["losses"]
    np.testing.assert_allclose(run.losses, losses, rtol=2e-6, atol=2e-6)
  # the replicas really differ (different seeds, data orders and learning rates)
  assert len({tuple(np.round(r.losses, 4)) for r in result.runs}) == 3


@pytest.mark.parametrize("total_steps", [4, sweep.FAST_COMPILE_STEPS + 1])  # both init options
def test_init_params_of_a_replicas_key_are_its_initial_params_exactly(total_steps):
  c = program.resolve(_config(total_steps=total_steps), data.get_dataset(TASK, "train"))
  seeds = [r.seed for r in REPLICAS]
  compiled, _ = sweep.programs(c, len(seeds), (8, 8), (8, 8))
  hyper = {k: np.full(len(seeds), 0.1, np.float32) for k in ("learning_rate", "weight_decay")}
  state = compiled.init(jax.vmap(jax.random.key)(np.asarray(seeds, np.uint32)), hyper)
  start = compiled.flat.unflatten_stacked(jax.device_get(state["params"]))
  keys = [jax.random.split(jax.random.key(s))[0] for s in seeds]
  model = ladder.build(c.rung, c.model)
  got = sweep.init_params(model, keys, (8, 8))
  for i, params in enumerate(got):
    assert jax.tree.structure(params) == jax.tree.structure(start)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(start), strict=True):
      np.testing.assert_array_equal(a, b[i])  # the same bits, not merely close
  kept = dict(sweep._INITS)
  again = sweep.init_params(model, keys, (8, 8))
  assert sweep._INITS == kept  # the same program, not compiled again
  np.testing.assert_array_equal(jax.tree.leaves(again[2])[0], jax.tree.leaves(got[2])[0])
  assert not np.array_equal(*(jax.tree.leaves(p)[0] for p in got[:2]))  # seeds differ


def test_replicas_laid_along_the_devices_match_the_single_device_program():
  assert len(jax.local_devices()) == 8  # tests/conftest.py
  replicas = sweep.grid(range(4), (1e-3, 1e-2))  # 8 replicas: one per device
  sharded = sweep.train(_config(), replicas)
  first_three = sweep.train(_config(), replicas[:3])  # 3 do not divide 8: one device
  for a, b in zip(sharded.runs[:3], first_three.runs, strict=True):
    np.testing.assert_allclose(a.losses, b.losses, rtol=2e-6, atol=2e-6)


def test_each_device_runs_its_replicas_in_groups(monkeypatch):
  # 16 replicas over the 8 devices, 2 each; groups of 1: each device loops over its own two
  monkeypatch.setattr(sweep, "CPU_REPLICA_CHUNK", 1)
  sweep.clear_compiled()
  replicas = sweep.grid(range(4), (1e-3, 3e-3, 1e-2, 2e-2))
  grouped = sweep.train(_config(), replicas)
  assert sweep.replica_devices(16, jax.local_devices()) == jax.local_devices()
  monkeypatch.setattr(sweep, "CPU_REPLICA_CHUNK", None)
  sweep.clear_compiled()
  alone = sweep.train(_config(), replicas[:3])  # one device, one vmap
  sweep.clear_compiled()
  for a, b in zip(grouped.runs[:3], alone.runs, strict=True):
    np.testing.assert_allclose(a.losses, b.losses, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(_rows(a), _rows(b), rtol=2e-6, atol=2e-6)


def test_a_cpu_pads_the_replicas_to_a_multiple_of_its_devices_with_idle_ones():
  devices = jax.local_devices()  # 8 (tests/conftest.py)
  assert sweep.padded_count(5, devices[:2], "cpu") == 6  # 3 and 3 over 2 cores, not 5 on one
  assert sweep.padded_count(10, devices, "cpu") == 16
  assert sweep.padded_count(3, devices, "cpu") == 3  # fewer than the devices: one device
  assert sweep.padded_count(16, devices, "cpu") == 16
  assert sweep.padded_count(10, devices, "gpu") == 10  # a vmapped group would compute them
  replicas = sweep.grid(range(5), (1e-3, 1e-2))  # 10: trained as 16 over the 8 devices
  padded = sweep.train(_config(), replicas)
  assert len(padded.runs) == 10 and [r.final_step for r in padded.runs] == [4] * 10
  assert {x.shape[0] for x in jax.tree.leaves(padded.params)} == {10}
  alone = sweep.train(_config(), replicas[7:])  # 3 replicas: one device
  for a, b in zip(padded.runs[7:], alone.runs, strict=True):  # the last is what pads copy
    np.testing.assert_allclose(a.losses, b.losses, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(_rows(a), _rows(b), rtol=2e-6, atol=2e-6)


def test_a_recurrent_model_sweeps_along_the_devices():
  # an LSTM's scan starts from zeros that do not vary over the replica axis (shard_map's check)
  c = _config()
  c.rung = "rnn"
  c.model = ladder.default_config("rnn")
  c.model.update(vocab_size=16, max_len=8, d_model=8, cell="lstm", num_layers=1)
  replicas = sweep.grid(range(4), (1e-3, 1e-2))  # 8 replicas: one per device
  sharded = sweep.train(c, replicas)
  alone = sweep.train(c, replicas[:3])  # one device
  for a, b in zip(sharded.runs[:3], alone.runs, strict=True):
    np.testing.assert_allclose(a.losses, b.losses, rtol=2e-6, atol=2e-6)


def test_the_eval_sums_run_in_groups_so_their_memory_is_that_of_a_group(monkeypatch):
  monkeypatch.setattr(sweep, "CPU_REPLICA_CHUNK", sweep.REPLICA_CHUNK)  # an accelerator's 3
  c = program.resolve(_config(), data.get_dataset(TASK, "train", None))
  temp = {}
  for n in (3, 6):  # both on one device (fewer replicas than devices); the eval alone
    _, _, built = sweep.jitted(c, n, (8, 8), (8, 8))
    evaluate, args, options = built["eval_step"]
    compiled = evaluate.lower(*args).compile(compiler_options=options)
    temp[n] = compiled.memory_analysis().temp_size_in_bytes
  assert temp[6] < 1.5 * temp[3]  # one vmap of 6: twice the temporaries of 3 (measured)


def test_an_accelerator_runs_one_group_where_it_fits_else_groups():
  def run(platform, chunk=None, fits=True, exhausted=False):
    calls = []

    def compile_group(group):
      calls.append(group)
      return None if exhausted and group == sweep.ALL else {"group": group}

    chosen, out = sweep.grouped(compile_group, lambda out: fits, platform, chunk)
    assert out == {"group": calls[-1]}
    return chosen, calls

  assert run("cpu") == (sweep.CPU_REPLICA_CHUNK, [None])  # one compile, a CPU's one at a time
  assert run("gpu", chunk=4) == (4, [4])  # a chosen chunk is compiled as asked
  assert run("gpu") == (sweep.ALL, [sweep.ALL])
  assert run("tpu", fits=False) == (sweep.REPLICA_CHUNK, [sweep.ALL, sweep.REPLICA_CHUNK])
  assert run("gpu", exhausted=True) == (sweep.REPLICA_CHUNK, [sweep.ALL, sweep.REPLICA_CHUNK])


def test_replicas_trained_in_groups_match_one_at_a_time(three, monkeypatch):
  assert sweep.replica_chunk("cpu") == 1 and sweep.replica_chunk("tpu") == 3
  assert sweep.replica_chunk("cpu", 4) == 4 and sweep.replica_chunk("gpu", sweep.ALL) is None
  for bad in (0, True, "most", 2.0):
    with pytest.raises(ValueError, match="chunk="):
      sweep.replica_chunk("gpu", bad)
  # an accelerator's groups of 3: 4 replicas on one device (4 does not divide 8) run 3 + 1
  monkeypatch.setattr(sweep, "CPU_REPLICA_CHUNK", sweep.REPLICA_CHUNK)
  sweep.clear_compiled()
  grouped = sweep.train(_config(), [*REPLICAS, sweep.Replica(seed=3, learning_rate=2e-3)])
  sweep.clear_compiled()
  for a, b in zip(grouped.runs[:3], three.runs, strict=True):
    np.testing.assert_allclose(a.losses, b.losses, rtol=2e-6, atol=2e-6)
  # not the scorer's key bias: its gradient is zero in exact arithmetic (it adds the same
  # q . b to every score of a query, which the softmax cancels), so AdamW turns the rounding
  # of a batched against an unbatched product into steps of the learning rate's size
  for path, g in jax.tree_util.tree_leaves_with_path(grouped.params):
    if "bk" not in jax.tree_util.keystr(path):
      t = functools.reduce(lambda tree, k: tree[k.key], path, three.params)
      np.testing.assert_allclose(g[:3], t, rtol=2e-6, atol=2e-6, err_msg=str(path))


def test_a_diverging_replica_stops_and_leaves_the_others_untouched(three):
  exploding = sweep.Replica(seed=0, learning_rate=1e30)
  mixed = sweep.train(_config(), [exploding, *REPLICAS[1:]])
  bad = mixed.runs[0]
  assert bad.stop_reason == "diverged" and not bad.finite
  assert bad.final_step < 4 and not math.isfinite(bad.losses[-1])
  assert all(math.isfinite(v) for v in bad.losses[:-1])
  for a, b in zip(mixed.runs[1:], three.runs[1:], strict=True):
    assert a.stop_reason == "completed"
    np.testing.assert_allclose(a.losses, b.losses, rtol=2e-6, atol=2e-6)
  # a stopped replica's parameters stop changing: no non-finite value was applied
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(mixed.replica_params(0)))


def test_early_stop_is_per_replica_and_ends_the_program_when_all_stopped(three):
  # `three` compiled the program of these shapes in this process (alone, -k or under xdist)
  result = sweep.train(_config(early_stop_accuracy=0.01), REPLICAS)
  assert result.compile_seconds == 0.0  # the stop target is not part of the program
  assert result.steps == 2  # everyone reached 0.01 at the first evaluation
  assert [r.stop_reason for r in result.runs] == ["early_stop"] * 3
  assert [len(r.losses) for r in result.runs] == [2, 2, 2]
  assert all(len(r.evals) == 1 for r in result.runs)


def test_a_second_sweep_with_the_same_shapes_compiles_nothing(three):
  again = sweep.train(_config(), [sweep.Replica(7, 5e-3), sweep.Replica(8), sweep.Replica(9)])
  assert again.compile_seconds == 0.0
  assert again.runs[1].learning_rate == _config().learning_rate  # None keeps the config's


def test_validation_and_eval_halves_are_separate_and_chance_is_the_tasks(three):
  result = three
  for run in result.runs:
    _, val_loss, _, eval_loss, _ = run.evals[-1]
    assert val_loss != eval_loss  # different examples
  assert result.chance == 0.5 and "K values" in result.chance_rule  # MQAR with K = 2


def test_the_eval_half_is_measured_where_a_replicas_run_ends(three):
  for run in three.runs:  # evaluations at steps 2 and 4 (total_steps)
    assert [row[0] for row in run.evals] == [2, 4]
    assert run.evals[0][3:] == (None, None)  # not read: not run
    assert all(math.isfinite(x) for x in run.evals[-1][1:])
    assert run.final()["eval_loss"] == run.evals[-1][3]
  # an early stop ends a run before total_steps: its last evaluation measures the eval half
  stopped = sweep.train(_config(early_stop_accuracy=1e-6), REPLICAS[:2])  # any accuracy
  for run in stopped.runs:
    assert run.stop_reason == "early_stop" and [row[0] for row in run.evals] == [2]
    assert all(math.isfinite(x) for x in run.evals[0][1:])


@pytest.mark.parametrize(
  "replica, field",
  [
    (sweep.Replica(seed=-1), "replicas[0].seed"),
    (sweep.Replica(seed=0, learning_rate=0.0), "replicas[0].learning_rate"),
    (sweep.Replica(seed=0, learning_rate=math.nan), "replicas[0].learning_rate"),
    (sweep.Replica(seed=0, weight_decay=-0.1), "replicas[0].weight_decay"),
  ],
)
def test_a_bad_replica_is_named(replica, field):
  with pytest.raises(ladder.ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
    sweep.train(_config(), [replica])


def test_grid_is_seeds_fastest():
  reps = sweep.grid((0, 1), (1e-3, 1e-2), (0.0, 0.1))
  assert len(reps) == 8
  assert [(r.seed, r.learning_rate, r.weight_decay) for r in reps[:3]] == [
    (0, 1e-3, 0.0),
    (1, 1e-3, 0.0),
    (0, 1e-3, 0.1),
  ]


def test_flat_params_round_trip_and_group_by_weight_decay():
  params = {
    "dense": {"kernel": np.arange(6.0, dtype=np.float32).reshape(2, 3), "bias": np.ones(3, "f4")},
    "norm": {"scale": np.full(2, 2.0, np.float32)},
    "embed": np.arange(4.0, dtype=np.float32).reshape(4, 1),
  }
  flat = sweep.FlatParams(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
  groups = flat.flatten(params)
  # decayed: the kernel and the embedding (6 + 4); not: the bias and the norm scale (3 + 2)
  assert {g: v.shape for g, v in groups.items()} == {"decayed": (10,), "bias": (5,)}
  back = flat.unflatten(groups)
  jax.tree.map(np.testing.assert_array_equal, back, params)
  stacked = flat.unflatten_stacked({g: np.stack([v, 2 * v]) for g, v in groups.items()})
  jax.tree.map(lambda s, p: np.testing.assert_array_equal(s[1], 2 * p), stacked, params)

  # the gradient through unflatten is the leaves' gradients, flattened the same way
  def loss(tree):
    return sum(jax.numpy.sum(x**3) for x in jax.tree.leaves(tree))

  through = jax.grad(lambda g: loss(flat.unflatten(g)))(groups)
  direct = flat.flatten(jax.grad(loss)(params))
  jax.tree.map(np.testing.assert_allclose, through, direct)


def test_replicas_spread_over_the_most_devices_that_share_them_equally():
  devices = list(range(8))
  assert sweep.replica_devices(28, devices) == list(range(7))  # 4 each on 7 of 8
  assert sweep.replica_devices(24, devices) == devices
  assert sweep.replica_devices(29, devices) == [0]  # a prime: one device
  assert sweep.replica_devices(3, devices) == [0]  # fewer replicas than devices
  assert sweep.replica_devices(5, [0]) == [0]


def test_short_cpu_sweeps_compile_fast_and_long_or_accelerator_ones_keep_the_defaults():
  short = sweep.compiler_options(_config(total_steps=sweep.FAST_COMPILE_STEPS), "cpu")
  assert short["train_step"] == short["eval_step"] == sweep.FAST_COMPILE
  assert short["init"]["xla_backend_optimization_level"] == 0
  assert short["init"]["xla_cpu_parallel_codegen_split_count"] == 1
  long = sweep.compiler_options(_config(total_steps=sweep.FAST_COMPILE_STEPS + 1), "cpu")
  assert long == {"init": sweep.RUN_ONCE_CPU, "train_step": None, "eval_step": None}
  gpu = sweep.compiler_options(_config(), "cuda")  # no CPU option reaches another platform
  assert gpu == {"init": sweep.RUN_ONCE, "train_step": None, "eval_step": None}
  said = sweep.compiler_options(
    _config(total_steps=10 * sweep.FAST_COMPILE_STEPS, fast_compile=True), "cpu"
  )
  assert said == short and sweep.compiler_options(_config(fast_compile=True), "cuda") == gpu
  assert sweep.compiler_options(_config(total_steps=4, fast_compile=False), "cpu") == long


def test_a_stopped_replica_is_skipped_on_a_cpu_and_keeps_its_state(three):
  # `three` compiled this program (3 replicas: one device, one replica at a time)
  c = program.resolve(_config(), data.get_dataset(TASK, "train", None))
  compiled, seconds = sweep.programs(c, 3, (8, 8), (8, 8))
  assert seconds == 0.0
  # on a CPU the step is a branch per replica, so a stopped one costs nothing
  assert "conditional" in compiled.train.as_text()
  keys = jax.vmap(jax.random.key)(np.arange(3, dtype=np.uint32))
  hyper = {"learning_rate": np.full(3, 1e-2, np.float32), "weight_decay": np.zeros(3, np.float32)}
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 16, (3, 8, 8), dtype=np.int32)
  batch = {"inputs": tokens, "targets": tokens, "mask": np.ones_like(tokens)}
  before = jax.device_get(compiled.init(keys, hyper))
  ran, loss_all, _ = compiled.train(compiled.init(keys, hyper), batch, hyper, np.ones(3, bool))
  mask = np.array([True, False, True])
  some, loss_some, still = compiled.train(compiled.init(keys, hyper), batch, hyper, mask)
  assert list(np.asarray(still)) == [True, False, True]
  leaves = (jax.tree.leaves(ran), jax.tree.leaves(some), jax.tree.leaves(before))
  for r, s, b in zip(*leaves, strict=True):
    np.testing.assert_array_equal(np.asarray(s)[1], b[1])  # the stopped one: unchanged
    np.testing.assert_array_equal(np.asarray(s)[[0, 2]], np.asarray(r)[[0, 2]])
  np.testing.assert_array_equal(np.asarray(loss_some)[[0, 2]], np.asarray(loss_all)[[0, 2]])
  # replica 1 steps when it is active (its step count; the first step's rate is 0: warmup)
  assert list(np.asarray(ran["step"]) - before["step"]) == [1, 1, 1]
  assert list(np.asarray(some["step"]) - before["step"]) == [1, 0, 1]


def test_an_evaluation_skips_the_replicas_it_does_not_need_on_a_cpu(three):
  # the validation half reads the replicas still training, the eval half those whose run
  # ends: a replica not needed is a branch not taken one at a time, and reads zeros
  c = program.resolve(_config(), data.get_dataset(TASK, "train", None))
  compiled, seconds = sweep.programs(c, 3, (8, 8), (8, 8))
  assert seconds == 0.0  # `three` compiled it
  assert "conditional" in compiled.evaluate.as_text()
  keys = jax.vmap(jax.random.key)(np.arange(3, dtype=np.uint32))
  hyper = {"learning_rate": np.full(3, 1e-2, np.float32), "weight_decay": np.zeros(3, np.float32)}
  params = compiled.init(keys, hyper)["params"]
  tokens = np.random.default_rng(0).integers(0, 16, (8, 8), dtype=np.int32)
  batch = {"inputs": tokens, "targets": tokens, "mask": np.ones_like(tokens)}
  every = jax.device_get(compiled.evaluate(params, batch, np.ones(3, bool)))
  some = jax.device_get(compiled.evaluate(params, batch, np.array([True, False, True])))
  for name in every:
    np.testing.assert_array_equal(some[name][[0, 2]], every[name][[0, 2]])
    assert some[name][1] == 0 and every[name][1] != 0


def _same_runs(a, b):
  for x, y in zip(a.runs, b.runs, strict=True):
    assert (x.stop_reason, x.final_step) == (y.stop_reason, y.final_step)
    np.testing.assert_allclose(x.losses, y.losses, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(_rows(x), _rows(y), rtol=2e-6, atol=2e-6)


def test_a_wsd_sweep_continues_into_a_longer_budget_as_if_trained_to_it_from_the_start(three):
  assert three.continuation is None  # a cosine's every step depends on total_steps
  wsd = functools.partial(_config, lr_schedule="wsd", lr_decay_fraction=0.5)
  # 9 replicas (one diverges) padded to 16 over the 8 devices; the decay of 6 steps starts at
  # step 3, between two evaluations
  replicas = sweep.grid(range(3), (1e-3, 1e-2, 1e30))
  short = sweep.train(wsd(total_steps=6), replicas)
  assert short.continuation.step == 3
  longer = sweep.train(wsd(total_steps=10), replicas, resume=short.continuation)
  direct = sweep.train(wsd(total_steps=10), replicas)
  assert (longer.first_step, longer.steps, direct.first_step) == (3, 10, 0)
  assert [r.stop_reason for r in direct.runs] == ["completed"] * 6 + ["diverged"] * 3
  _same_runs(longer, direct)
  for x, y in zip(jax.tree.leaves(longer.params), jax.tree.leaves(direct.params), strict=True):
    np.testing.assert_allclose(x, y, rtol=2e-6, atol=2e-6)
  # every replica stopped before the decay: the continuation is where a longer run ends too
  stops = functools.partial(wsd, early_stop_accuracy=0.01)
  healthy = replicas[:6]
  stopped = sweep.train(stops(total_steps=6), healthy)
  assert stopped.steps == 2 and stopped.continuation.step == 2
  again = sweep.train(stops(total_steps=10), healthy, resume=stopped.continuation)
  _same_runs(again, sweep.train(stops(total_steps=10), healthy))
  # only a longer run of the same config, with every replica, continues
  for config, subset, why in (
    (wsd(total_steps=10, learning_rate=5e-3), replicas, "differs in more than total_steps"),
    (wsd(total_steps=4), replicas, "total_steps=4 is not longer"),
    (wsd(total_steps=10), [*replicas, sweep.Replica(9)], "no state for 1 replicas"),
  ):
    with pytest.raises(ladder.ConfigError, match=f"resume: cannot continue this sweep: .*{why}"):
      sweep.train(config, subset, resume=short.continuation)
