"""`train(config, workdir)`: the training loop, top to bottom (mesh, data, model, state,
restore, loop, eval, save).

With a workdir it checkpoints (async, every `checkpoint_every` steps and at the end), resumes
from the latest good checkpoint (state, rng and the data iterator's position), writes the
config as run and the task's facts (jaxformer.train.workdir), metrics.jsonl and TensorBoard
events, and on SIGTERM finishes the current step, saves and returns. With `workdir=None` it writes nothing: experiments call it many times on small
models, and the jitted programs (jaxformer.train.program) are cached, so a second call with
the same shapes does not compile again.

Metrics are fetched one step late (the host reads step t's numbers after dispatching step
t + 1), so the device never waits for the host; a non-finite step leaves the state
unchanged (see step.py), so being told one step late loses nothing.
"""

import contextlib
import functools
import math
import signal
import threading
import time

import jax
import numpy as np
from etils import epath
from jax.experimental import multihost_utils

from jaxformer import data, ladder
from jaxformer.interop import finetune
from jaxformer.train import metrics as metrics_lib
from jaxformer.train import program as program_lib
from jaxformer.train import sharding
from jaxformer.train import workdir as workdir_lib
from jaxformer.train.checkpoint import Checkpointer, CheckpointError

PROFILE_DIR = "profile"


class NonFiniteError(RuntimeError):
  """Training produced a non-finite loss or gradient; the message names the step."""


class Hooks:
  """Named points of a training run where a caller may act (train's `hooks`), in the order the
  loop reaches them; each does nothing here. A caller subclasses it and overrides the points it
  acts on (the reliability tests' fault injection, tests/reliability/faults.py, is one)."""

  def started(self, step):
    """The state is created (step 0) or restored (its step), before the first step compiles."""

  def batch(self, batch, step, vocab_size):
    """The host batch of step `step`, before it goes to the devices: returns the one to use."""
    return batch

  def stepped(self, step):
    """Step `step` dispatched, before its metrics are read."""

  def evaluated(self, step):
    """The eval at `step` computed, its record not yet written."""

  def saving(self, step, ckpt):
    """Just before the save of `step` (ckpt: the run's Checkpointer)."""

  def saved(self, step, ckpt):
    """The save of `step` dispatched: its async write may be in flight."""


def train(config, workdir=None, profile_steps=0, hooks=None):
  """Trains `config` (fields: jaxformer/train/config.py); returns a summary dict.

  profile_steps > 0 (needs a workdir): a `jax.profiler` trace of that many steps, from the
  step after the first (which compiles), in WORKDIR/profile: TensorBoard's profile plugin
  reads it (`tensorboard --logdir WORKDIR/profile`), and the `*.trace.json.gz` beside it
  opens in ui.perfetto.dev. hooks: a Hooks, called at its points (default: Hooks(), which
  does nothing).

  Summary: steps (run by this call), first_step, final_step, losses (per step of this call),
  final/best eval_loss and eval_accuracy, evals [(step, loss, accuracy)], steps_per_sec,
  tokens_per_sec, mfu, skipped_steps, stop_reason (completed | early_stop | preempted), the
  trained params and `config`: the config as run, its model sized for the task
  (jaxformer.train.program.resolve), which a workdir also keeps in config.json. Raises
  ConfigError / DataError / MeshError / CheckpointError for a config that cannot run (or a
  workdir another live run holds: WORKDIR/lock), NonFiniteError at a non-finite step (unless
  skip_nonfinite).
  """
  config = finetune.resolve(config)  # init_from: the GPT-2 checkpoint's model and tokenizer
  program_lib.check_config(config)
  if profile_steps and workdir is None:
    raise ladder.ConfigError("profile: a trace needs a workdir to be written to")
  if config.rung == ladder.CUSTOM:
    _check_mixer(config.model)
  # One writer per workdir: process 0 holds WORKDIR/lock (a second run fails naming it).
  with contextlib.ExitStack() as stack:
    _lead_first("locked", lambda: stack.enter_context(workdir_lib.lock(workdir)))
    # From here on SIGTERM asks for a clean stop, even before the first step (data, restore,
    # compilation): the loop then saves the state it has and returns `preempted`.
    preempted = stack.enter_context(_preemption_watch(enabled=workdir is not None))
    hooks = Hooks() if hooks is None else hooks
    return _train(config, workdir, profile_steps, preempted, hooks)


def _train(config, workdir, profile_steps, preempted, hooks):
  lead = jax.process_index() == 0

  # --- mesh -------------------------------------------------------------------------------
  mesh = sharding.make_mesh(config.mesh_shape, dcn_shape=config.dcn_mesh_shape)
  dp = sharding.data_parallel_size(mesh)
  if config.batch_size % dp:
    raise ladder.ConfigError(
      f"batch_size={config.batch_size} is not divisible by the data-parallel size "
      f"data x fsdp = {dp} (mesh_shape={tuple(mesh.shape.values())})"
    )
  # This process reads the rows its devices hold: processes sharing a batch shard, the same.
  shard = _batch_shard(mesh)

  # --- data -------------------------------------------------------------------------------
  train_ds, test_ds = _datasets(config.task, config.data_dir)
  config = program_lib.resolve(config, train_ds)  # model.vocab_size / max_len from the task
  loader = data.Loader(train_ds, config.batch_size, seed=config.seed, **shard)
  seq_len = train_ds.seq_len
  tokens_per_step = config.batch_size * seq_len

  # Outside the mesh context: a measured peak is a single-device matmul, which jit refuses to
  # place on one device while a multi-device mesh is the context.
  peak = metrics_lib.system_peak(mesh, config.peak_flops_per_device, config.model.dtype)

  with sharding.active(mesh):
    # --- model ------------------------------------------------------------------------------
    program = program_lib.build(config, mesh, (config.batch_size, seq_len))

    # --- restore / state --------------------------------------------------------------------
    ckpt, restored = None, None
    if workdir is not None:
      workdir_lib.check_mixer_unchanged(workdir, config)
      ckpt = Checkpointer(
        workdir_lib.checkpoint_dir(workdir),
        max_to_keep=config.keep_checkpoints,
        fingerprint=program_lib.fingerprint(config),
      )
      restored = ckpt.restore_latest(
        program.abstract_state, check=functools.partial(_resume_problem, loader)
      )
      if lead:  # after the restore: a workdir of another config was refused above
        workdir_lib.write_run(workdir, config, train_ds)
    if restored is None:
      state, first_step, skipped = program.init(jax.random.key(config.seed)), 0, 0
      if config.get("init_from") is not None:  # fine-tuning: the checkpoint's weights
        params = finetune.initial_params(config, program.abstract_state["params"])
        state = {**state, "params": params}
    else:
      first_step, state, extra = restored
      loader.set_state(extra["loader"])
      skipped = int(extra.get("skipped_steps", 0))

    flops = metrics_lib.flops_per_token(
      config.rung,
      config.model,
      seq_len,
      metrics_lib.matmul_param_count(state["params"], config.model.tie_embeddings),
    )
    writer = metrics_lib.Writer(workdir, enabled=lead, resume_step=first_step if restored else None)
    progress = metrics_lib.Progress(
      config.total_steps, first_step, every=config.log_every, enabled=lead and workdir is not None
    )
    progress.message(
      f"{config.rung} on {config.task}: {sharding.describe(mesh)}, "
      f"{'resumed at step ' + str(first_step) if restored else 'from scratch'}"
    )
    hooks.started(first_step)

    # --- loop -------------------------------------------------------------------------------
    losses, evals = [], []
    stop_reason, pending = "completed", None
    # Throughput clock: wall time minus time spent in eval and checkpoint saves.
    clock = {"first": None, "last_log": None, "paused": 0.0}
    s = first_step

    def record(done_step, device_metrics):
      """Host side of one finished step: history, skip/stop on non-finite, logs."""
      nonlocal skipped
      m = {k: float(v) for k, v in _fetch(device_metrics).items()}
      now = time.perf_counter() - clock["paused"]
      losses.append(m["loss"])
      if not m.pop("finite"):
        if not config.skip_nonfinite:
          if ckpt is not None:
            ckpt.wait()  # a save still being written counts once it is durable
          last = ckpt.latest_step() if ckpt else None
          raise NonFiniteError(
            f"non-finite loss or gradient at step {done_step} (loss={m['loss']}, "
            f"grad_norm={m['grad_norm']}); the last good checkpoint "
            f"{'is step ' + str(last) if last is not None else 'does not exist'}; "
            "set skip_nonfinite=True to skip such batches instead"
          )
        skipped += 1
        progress.message(f"step {done_step}: non-finite loss or gradient, batch skipped")
      m["skipped_steps"] = skipped
      if clock["first"] is None:
        clock["first"] = clock["last_log"] = (done_step, now)
      log_now = done_step % config.log_every == 0 or done_step == config.total_steps
      if log_now:
        prev_step, prev_time = clock["last_log"]
        if done_step > prev_step:
          m["tokens_per_sec"] = (done_step - prev_step) * tokens_per_step / (now - prev_time)
          m["mfu"] = m["tokens_per_sec"] * flops / peak
        clock["last_log"] = (done_step, now)
        writer.write(done_step, m)
      clock["end"] = (done_step, now)
      progress.update(done_step, m)

    trace = _Trace(workdir, profile_steps, first_step + 1, progress)
    try:
      if getattr(preempted, "early", None) is not None and preempted.early():
        stop_reason = "preempted"  # SIGTERM before the first step: save what was restored
        progress.message(f"preempted before step {s + 1}: saving step {s}, exiting")
      while s < config.total_steps and stop_reason == "completed":
        local = hooks.batch(next(loader), s + 1, config.model.vocab_size)
        batch = data.to_global(local, program.batch_sharding, config.batch_size)
        if s == first_step:  # one all-gather: replicas of a batch shard hold the same rows
          data.check_replicas(batch)
        trace.before_step(s, state)
        state, device_metrics = program.train_step(state, batch)
        s += 1
        trace.after_step(s, device_metrics)
        hooks.stepped(s)
        if ckpt is not None:
          ckpt.check()  # a failed async save stops the run within a step, naming it
        if pending is not None:
          record(*pending)
        pending = (s, device_metrics)

        due_eval = s % config.eval_every == 0 or s == config.total_steps
        due_save = ckpt is not None and s % config.checkpoint_every == 0
        stop_now = preempted(s)
        if not (due_eval or due_save or stop_now):
          continue
        record(*pending)
        pending = None
        paused_at = time.perf_counter()

        # --- eval ---------------------------------------------------------------------------
        if due_eval:
          result = _evaluate(program, state["params"], test_ds, config, shard)
          hooks.evaluated(s)
          evals.append((s, result["eval_loss"], result["eval_accuracy"]))
          writer.write(s, result)
          progress.message(
            f"step {s}: eval_loss={result['eval_loss']:.4f} "
            f"eval_accuracy={result['eval_accuracy']:.4f}"
          )
          target = config.early_stop_accuracy
          if target is not None and result["eval_accuracy"] >= target:
            stop_reason = "early_stop"

        # --- save ---------------------------------------------------------------------------
        if due_save or (ckpt is not None and (stop_now or stop_reason != "completed")):
          hooks.saving(s, ckpt)
          _save(ckpt, s, state, loader, skipped)
          hooks.saved(s, ckpt)
        clock["paused"] += time.perf_counter() - paused_at
        if stop_now:
          stop_reason = "preempted"
          progress.message(f"preempted: saved step {s}, exiting")
        if stop_reason != "completed":
          break
      if pending is not None:
        record(*pending)
        pending = None
      if ckpt is not None:
        _save(ckpt, s, state, loader, skipped)
        ckpt.wait()
    finally:
      trace.stop()
      progress.close()
      writer.close()
      if ckpt is not None:
        ckpt.close()

  return _summary(
    config,
    state,
    first_step=first_step,
    final_step=s,
    losses=losses,
    evals=evals,
    clock=clock,
    tokens_per_step=tokens_per_step,
    flops=flops,
    peak=peak,
    skipped=skipped,
    stop_reason=stop_reason,
  )


def _summary(
  config,
  state,
  *,
  first_step,
  final_step,
  losses,
  evals,
  clock,
  tokens_per_step,
  flops,
  peak,
  skipped,
  stop_reason,
):
  """train's summary (see its docstring); flops: per token, peak: FLOP/s."""
  steps_per_sec = math.nan
  if clock["first"] is not None and clock["end"][0] > clock["first"][0]:
    (s0, t0), (s1, t1) = clock["first"], clock["end"]
    steps_per_sec = (s1 - s0) / (t1 - t0)  # excludes the first step (compilation)
  eval_losses = [e[1] for e in evals]
  eval_accs = [e[2] for e in evals]
  return {
    "steps": final_step - first_step,
    "first_step": first_step,
    "final_step": final_step,
    "losses": losses,
    "evals": evals,
    "final_eval_loss": eval_losses[-1] if evals else None,
    "final_eval_accuracy": eval_accs[-1] if evals else None,
    "best_eval_loss": min(eval_losses) if evals else None,
    "best_eval_accuracy": max(eval_accs) if evals else None,
    "steps_per_sec": steps_per_sec,
    "tokens_per_sec": steps_per_sec * tokens_per_step,
    "mfu": steps_per_sec * tokens_per_step * flops / peak,
    "skipped_steps": skipped,
    "stop_reason": stop_reason,
    "params": state["params"],
    "config": config,
  }


def evaluate_workdir(
  workdir, *, batch_size=None, eval_batches=None, data_dir=None, trust_code=False
):
  """Evaluates the trained run in `workdir` on its task's test split, without training.

  Reads config.json and only the params of the newest checkpoint that verifies; runs data
  parallel over every device. batch_size / eval_batches default to the run's; data_dir to the
  run's (the task's data is prepared again if it is not there). trust_code: needed for a
  custom rung, whose mixer file is imported (jaxformer.train.workdir.read_config). Returns
  {step, eval_loss, eval_accuracy}.
  """
  config = workdir_lib.read_config(workdir, trust_code)
  with config.unlocked():
    for field, value in (("batch_size", batch_size), ("eval_batches", eval_batches)):
      if value is not None:
        config[field] = value
    if data_dir is not None:
      config.data_dir = data_dir
    config.mesh_shape = (-1, 1, 1)  # any device count: data parallel
  program_lib.check_config(config)
  mesh = sharding.make_mesh(config.mesh_shape)
  dp = sharding.data_parallel_size(mesh)
  if config.batch_size % dp:
    raise ladder.ConfigError(
      f"batch_size={config.batch_size}: not divisible by the {dp} devices evaluating it"
    )
  _, test_ds = _datasets(config.task, config.data_dir)
  program_lib.resolve(config, test_ds)  # the task still fits the model
  with sharding.active(mesh):
    program = program_lib.build(config, mesh, (config.batch_size, test_ds.seq_len))
    step, params = workdir_lib.restore_params(workdir, config, program.abstract_state["params"])
    return {"step": step, **_evaluate(program, params, test_ds, config, _batch_shard(mesh))}


class _Trace:
  """A jax.profiler trace of `steps` train steps after step `after` (see `train`)."""

  def __init__(self, workdir, steps, after, progress):
    self.dir = str(epath.Path(workdir) / PROFILE_DIR) if steps else None
    self.steps, self.after, self.progress = steps, after, progress
    self.active = False

  def before_step(self, s, state):
    if self.dir and not self.active and s == self.after:
      jax.block_until_ready(state)  # the trace holds whole steps only, compilation none
      jax.profiler.start_trace(self.dir, create_perfetto_trace=True)
      self.active = True

  def after_step(self, s, device_metrics):
    if self.active and s == self.after + self.steps:
      jax.block_until_ready(device_metrics)
      self.stop()

  def stop(self):
    if self.active:
      jax.profiler.stop_trace()
      self.active = False
      self.progress.message(f"profile: a trace of steps {self.after + 1}.. in {self.dir}")


def _datasets(spec, data_dir):
  """Train and test splits; process 0 prepares the files first when several processes run
  (and a usage error it meets there stops every process with the same line)."""

  def both():
    return data.get_dataset(spec, "train", data_dir), data.get_dataset(spec, "test", data_dir)

  splits = _lead_first("data_prepared", both)
  return both() if splits is None else splits


# Errors process 0 shares with the others in _lead_first, by name.
_SHARED_ERRORS = {
  "ConfigError": ladder.ConfigError,
  "DataError": data.DataError,
  "CheckpointError": CheckpointError,
}
_LEAD_ROUNDS = [0]  # every process calls _lead_first in the same order: keys match
LEAD_TIMEOUT_MS = 24 * 3600 * 1000  # process 0 may prepare a large dataset first


def _lead_first(name, fn):
  """fn() on process 0 while the others wait, its outcome shared through JAX's key-value
  store: an error of _SHARED_ERRORS there is raised on every process with the same message
  (a barrier would leave the others to fail later with a gloo timeout traceback). Returns
  fn()'s result on process 0, None on the others (and fn() itself with one process)."""
  if jax.process_count() == 1:
    return fn()
  from jax._src import distributed

  client = distributed.global_state.client
  _LEAD_ROUNDS[0] += 1
  key = f"jaxformer/{name}/{_LEAD_ROUNDS[0]}"
  if jax.process_index() == 0:
    try:
      out = fn()
    except tuple(_SHARED_ERRORS.values()) as e:
      client.key_value_set(key, f"{type(e).__name__}:{e}")
      raise
    except BaseException as e:
      client.key_value_set(key, f"RuntimeError:process 0 failed: {type(e).__name__}: {e}")
      raise
    client.key_value_set(key, "ok")
    return out
  outcome = client.blocking_key_value_get(key, LEAD_TIMEOUT_MS)
  if outcome != "ok":
    kind, _, message = outcome.partition(":")
    raise _SHARED_ERRORS.get(kind, RuntimeError)(message)
  return None


def _batch_shard(mesh):
  """The Loader's shard_index / shard_count: the batch rows this process's devices hold."""
  index, count = sharding.process_batch_shard(mesh)
  return {"shard_index": index, "shard_count": count}


def _evaluate(program, params, dataset, config, shard):
  """Masked loss and accuracy over the test split (or its first eval_batches batches)."""
  loader = data.Loader(
    dataset,
    config.batch_size,
    seed=config.seed,
    shuffle=False,
    num_epochs=1,
    drop_remainder=False,
    **shard,
  )
  totals = None
  for i, batch in enumerate(loader):
    if config.eval_batches is not None and i >= config.eval_batches:
      break
    sums = program.eval_step(
      params, data.to_global(batch, program.batch_sharding, config.batch_size)
    )
    totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
  totals = _fetch(totals)
  weight = max(float(totals["weight_sum"]), 1.0)
  return {
    "eval_loss": float(totals["loss_sum"]) / weight,
    "eval_accuracy": float(totals["correct_sum"]) / weight,
  }


def _check_mixer(model_config):
  """A custom mixer's contract (jaxformer.mixers.plug.check, time-limited) before the data, so
  that a broken or hanging mixer is one line naming the field."""
  from jaxformer.mixers import plug

  key = (model_config.mixer, model_config.mixer_fields, model_config.d_model)
  if key in _CHECKED_MIXERS:
    return
  cls, fields = ladder.custom_mixer(model_config)
  try:
    plug.check(cls, fields, model_config.d_model)
  except plug.MixerError as e:
    raise ladder.ConfigError(f"model.mixer: {e}") from None
  _CHECKED_MIXERS.add(key)


_CHECKED_MIXERS = set()  # (spec, fields, width) that passed in this process


def _resume_problem(loader, step, state, extra):
  """Why a verified checkpoint cannot be resumed from, or None: the data position, the state's
  step and the directory's step must agree, and the position must belong to this loader."""
  position = extra.get("loader")
  if not isinstance(position, dict) or not isinstance(position.get("step"), int):
    return "no data position (extra['loader']['step'])"
  state_step = int(np.asarray(state["step"].addressable_data(0)))
  if not position["step"] == state_step == step:
    return (
      f"data position {position['step']}, state step {state_step} and directory step {step} differ"
    )
  skipped = extra.get("skipped_steps", 0)
  if not isinstance(skipped, int) or not 0 <= skipped <= step:
    return f"skipped_steps={skipped!r} is not a count of steps up to {step}"
  try:
    loader.set_state(position)
  except data.DataError as e:
    return str(e)
  return None


def _save(ckpt, s, state, loader, skipped):
  ckpt.save(s, state, extra={"loader": loader.get_state(), "skipped_steps": skipped})


def _fetch(tree):
  """Host copies of replicated results (in multi-process runs no array is fully addressable)."""
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)


@contextlib.contextmanager
def _preemption_watch(enabled):
  """Yields `preempted(step) -> bool`: SIGTERM asks the loop to save and stop.

  One process: a Python SIGTERM handler sets a flag, read after each step. Several
  processes: JAX's preemption service (started by jax.distributed.initialize) receives the
  signal and agrees on one step at which every process stops.
  """
  if not enabled:
    yield lambda s: False
    return
  if jax.process_count() > 1:
    yield multihost_utils.reached_preemption_sync_point
    return
  if threading.current_thread() is not threading.main_thread():
    yield lambda s: False
    return
  flag = threading.Event()
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: flag.set())

  def preempted(s):
    return flag.is_set()

  preempted.early = flag.is_set  # a single process may stop before its first step
  try:
    yield preempted
  finally:
    signal.signal(signal.SIGTERM, previous)
