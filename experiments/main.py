r"""Train a rung of the ladder (what every entry point shares is in experiments/cli.py).

  python -m experiments.main --config=experiments/configs/default.py:rung=transformer \
    --workdir=/tmp/jaxformer/transformer [--config.total_steps=100 ...] [--debug] \
    [--profile [--profile_steps=5]] [--compile_only=v5e:2x4]

Rerunning the same command resumes from the workdir's latest good checkpoint. SIGTERM
(preemption) finishes the current step, saves and exits 0. A usage error (bad or unknown
config field, missing config file, a mesh that does not fit the devices, ...) prints one
line naming the field and exits 2; `--debug` shows the traceback instead.

Several processes (multi-host): set JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES
and JAX_PROCESS_ID on each (or JAXFORMER_DISTRIBUTED=1 to let JAX detect a TPU pod or
SLURM); main then calls jax.distributed.initialize before touching any device.
"""

import os

from absl import app, flags
from ml_collections import config_flags

from experiments import cli
from jaxformer import compile_cache, files, ladder
from jaxformer.train import compile_only, loop

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Config file experiments/configs/<name>.py[:arg].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and metrics.")
_DEBUG = flags.DEFINE_bool("debug", False, "Show tracebacks of usage errors.")
_PROFILE = flags.DEFINE_bool(
  "profile",
  False,
  "Write a jax.profiler trace of --profile_steps train steps (after the first, compiling one) "
  "to WORKDIR/profile (TensorBoard's profile plugin; *.trace.json.gz opens in ui.perfetto.dev).",
)
_PROFILE_STEPS = flags.DEFINE_integer("profile_steps", 5, "Steps --profile traces.")
_COMPILE_ONLY = flags.DEFINE_string(
  "compile_only",
  None,
  "Compile the run's programs for TARGET (a TPU topology: v5e:2x4[,slices=2]; or "
  "gpu:TARGET_CONFIG.txtpb,topology=1x1x8) without running anything: writes "
  "WORKDIR/compile_report.json and prints its table; exit 2 when a program does not fit "
  "(jaxformer.train.compile_only).",
)


def parse_flags(argv):
  """absl parsing, with any flag or config-file error reported as one line and exit code 2."""
  return cli.parse_flags(argv, before=_check_config_file, after=lambda: _CONFIG.value)


def _check_config_file(argv):
  for i, arg in enumerate(argv):
    value = None
    if arg.startswith("--config="):
      value = arg.split("=", 1)[1]
    elif arg == "--config" and i + 1 < len(argv):
      value = argv[i + 1]
    path = value.split(":", 1)[0] if value is not None else None
    if path is not None and not os.path.isfile(path):
      raise ladder.ConfigError(f"--config={value}: no such config file {path!r}")


def check_workdir(workdir):
  """Creates the workdir if needed; raises ConfigError when it is missing or not writable."""
  if not workdir:
    raise ladder.ConfigError("--workdir is required (a directory for checkpoints and metrics)")
  try:
    files.ensure_writable_dir(workdir)
  except Exception as e:  # OSError locally; gs:// and other file systems raise their own
    raise ladder.ConfigError(
      f"--workdir={workdir}: not a writable directory ({files.describe(e)})"
    ) from e
  return workdir


def initialize_distributed():
  """jax.distributed.initialize when this process is one of several (see the docstring)."""
  import jax

  env = os.environ
  if env.get("JAX_COORDINATOR_ADDRESS"):
    for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
      if not env.get(name, "").isdigit():
        raise ladder.ConfigError(f"{name}={env.get(name)!r}: set it with JAX_COORDINATOR_ADDRESS")
    jax.distributed.initialize(
      env["JAX_COORDINATOR_ADDRESS"],
      num_processes=int(env["JAX_NUM_PROCESSES"]),
      process_id=int(env["JAX_PROCESS_ID"]),
      initialization_timeout=int(env.get("JAX_INITIALIZATION_TIMEOUT", "300")),
    )
  elif env.get("JAXFORMER_DISTRIBUTED") == "1" or int(env.get("SLURM_NTASKS", "1")) > 1:
    jax.distributed.initialize()


def note_unnamed_params(config, log=print):
  """A custom rung's mixer whose parameters carry no logical axis names trains replicated on
  a mesh of several devices: says so in one line (jaxformer.mixers.plug.unnamed_note)."""
  import jax

  if config.rung != ladder.CUSTOM or jax.device_count() <= 1:
    return None
  from jaxformer.mixers import plug

  cls, fields = ladder.custom_mixer(config.model)
  unnamed = plug.mixer_unnamed(cls, fields, config.model.d_model)
  note = plug.unnamed_note(cls.__name__, unnamed, jax.device_count())
  if note and jax.process_index() == 0:
    log(note)
  return note


def main(argv):
  debug = _DEBUG.value
  with cli.usage_errors(argv, debug, hint="; fields go in --config.FIELD="):
    config = _CONFIG.value
    if config is None:
      raise ladder.ConfigError("--config is required (e.g. experiments/configs/default.py)")
    workdir = check_workdir(_WORKDIR.value)
    compile_cache.enable()
    if _COMPILE_ONLY.value is not None:
      compile_only.report_run(config, _COMPILE_ONLY.value, workdir)
      return
    initialize_distributed()
    if _PROFILE_STEPS.value <= 0:
      raise ladder.ConfigError(f"--profile_steps={_PROFILE_STEPS.value}: must be positive")
    note_unnamed_params(config)
    try:
      summary = loop.train(config, workdir, _PROFILE_STEPS.value if _PROFILE.value else 0)
    except loop.NonFiniteError as e:
      cli.fail(str(e), cli.FAILED, debug)

  import jax

  if jax.process_index() == 0:
    print(_summary_line(summary, workdir), flush=True)


def _summary_line(s, workdir):
  if s["stop_reason"] == "preempted":
    return f"preempted at step {s['final_step']}: checkpoint saved in {workdir}; rerun to resume"
  parts = [f"{s['stop_reason']} at step {s['final_step']}"]
  if s["final_eval_loss"] is not None:
    parts.append(f"eval_loss={s['final_eval_loss']:.4f}")
    parts.append(f"eval_accuracy={s['final_eval_accuracy']:.4f}")
  parts.append(f"{s['tokens_per_sec']:.0f} tokens/s")
  parts.append(f"{s['steps_per_sec']:.2f} steps/s")
  parts.append(f"MFU {100 * s['mfu']:.2f}%")
  if s["skipped_steps"]:
    parts.append(f"skipped {s['skipped_steps']} non-finite steps")
  return ", ".join(parts) + f" ({workdir})"


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
