"""Bad input: the whole catalogue, one row per mistake, through the real entry points.

Each row: entry point, what is given, the field its one-line message must name, and for
`python -m experiments.main` the exit code (2: usage error, one `error: ...` line on stderr,
no traceback; with --debug the traceback is shown). The API rows expect a ValueError (or
an OSError for a missing file) whose message is one line naming the field.

`python -m experiments.bench`, `sample` and `evaluate` rows run as subprocesses too (exit 2, one
line); the bench suites' arguments are checked through `experiments.bench.run_suite`, which runs nothing until they pass.
"""

import concurrent.futures
import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import bench, bench_loader
from jaxformer import data, ladder
from jaxformer.interop import gpt2
from jaxformer.train import loop
from tests.interop.gpt2_reference import random_state
from tests.reliability import helpers as h
from tests.train.train_helpers import REPO, TINY_TASK, main_command, tiny_config

DEFAULT = f"{REPO}/experiments/configs/default.py"
NO_WORKDIR = "<no --workdir>"
CLI = ("main", "bench", "sample", "evaluate")  # entry points run as subprocesses
D = 16  # width of the GPT-2 state dicts below

# fmt: off
CATALOGUE = [
  # (entry point, case, input, field the message names, exit code)
  # --- python -m experiments.main (tiny softmax config; placeholders filled per row) -------
  ("main", "unknown rung", [f"--config={DEFAULT}:rung=gpt"], "rung='gpt'", 2),
  ("main", "unknown field", ["--config.batchsize=8"], "--config.batchsize", 2),
  ("main", "unknown model field", ["--config.model.heads=2"], "--config.model.heads", 2),
  ("main", "unknown task", ["--config.task=recall:vocab_size=32"], "task='recall'", 2),
  ("main", "unknown task field", ["--config.task=mqar:vocab=32"], "mqar.vocab", 2),
  ("main", "zero size", ["--config.model.d_model=0"], "model.d_model=0", 2),
  ("main", "negative size", ["--config.batch_size=-16"], "batch_size=-16", 2),
  ("main", "d_model % num_heads", ["--config.model.num_heads=3"], "model.num_heads=3", 2),
  ("main", "mesh vs devices", ["--config.mesh_shape=(2,1,1)"], "mesh_shape=(2, 1, 1)", 2),
  ("main", "batch % data-parallel", ["devices=2", "--config.batch_size=15"], "batch_size=15", 2),
  ("main", "seq_len > max_len", ["--config.model.max_len=8"], "model.max_len=8", 2),
  ("main", "token ids >= vocab", ["--config.model.vocab_size=16"], "model.vocab_size=16", 2),
  ("main", "non-finite lr", ["--config.learning_rate=inf"], "learning_rate=inf", 2),
  ("main", "missing workdir", [NO_WORKDIR], "--workdir", 2),
  ("main", "unwritable workdir", ["--workdir={tmp}/file/run"], "--workdir={tmp}/file/run", 2),
  ("main", "unwritable data_dir", ["--config.data_dir={tmp}/file/d"], "data_dir={tmp}/file/d", 2),
  ("main", "missing config file", ["--config=configs/nope.py"], "--config=configs/nope.py", 2),
  ("main", "empty config path", ["--config="], "--config=", 2),
  ("main", "incompatible checkpoint", ["--workdir={trained}", "--config.model.d_model=16"],
   "model.d_model: checkpoint 32 vs now 16", 2),
  ("main", "checkpoint of other optimizer", ["--workdir={trained}", "--config.grad_accum_steps=2"],
   "leaves not in the checkpoint, e.g. state['opt_state']", 2),
  ("main", "--debug shows the traceback", ["--config.learning_rate=nan", "--debug"],
   "learning_rate=nan", 1),
  # --- python -m experiments.sample / evaluate ARGS ({trained}: a tiny MQAR run) --------------
  ("sample", "missing workdir", ["--prompt=1 2"], "--workdir", 2),
  ("sample", "workdir without a run", ["--workdir={tmp}"], "--workdir={tmp}: no", 2),
  ("sample", "zero temperature", ["--workdir={trained}", "--temperature=0"], "--temperature", 2),
  ("sample", "top_p above 1", ["--workdir={trained}", "--top_p=1.5"], "--top_p=1.5", 2),
  ("sample", "zero tokens", ["--workdir={trained}", "--num_tokens=0"], "--num_tokens=0", 2),
  ("sample", "top_k > vocab", ["--workdir={trained}", "--top_k=99"], "--top_k=99", 2),
  ("sample", "text for a non-text task", ["--workdir={trained}", "--prompt=hi"], "--prompt='hi'",
   2),
  ("sample", "prompt id >= vocab", ["--workdir={trained}", "--prompt=1 32"], "--prompt='1 32'", 2),
  ("sample", "prompt of max_len", ["--workdir={trained}", "--prompt=" + "1 " * 16], "--prompt", 2),
  ("sample", "stop of two tokens", ["--workdir={trained}", "--stop=1 2"], "--stop='1 2'", 2),
  ("sample", "unknown flag", ["--workdir={trained}", "--temp=1"], "temp", 2),
  ("evaluate", "missing workdir", [], "--workdir", 2),
  ("evaluate", "zero batch", ["--workdir={trained}", "--batch_size=0"], "--batch_size=0", 2),
  ("evaluate", "batch % devices", ["devices=2", "--workdir={trained}", "--batch_size=3"],
   "batch_size=3", 2),
  # --- python -m experiments.bench ARGS ------------------------------------------------------
  ("bench", "unknown suite", ["flash"], "suite='flash'", 2),
  ("bench", "malformed --set", ["attention", "--set", "block_size"], "--set=block_size", 2),
  ("bench", "zero length", ["attention", "--lengths", "0"], "lengths=(0,)", 2),
  ("bench", "unknown parameter", ["decode", "--lengths", "64"], "lengths: not a parameter", 2),
  ("bench", "negative device count", ["train", "--cpu-devices", "-1"], "--cpu-devices=-1", 2),
  # --- experiments.bench.run_suite(suite, size, overrides) -------------------------------------
  ("run_suite", "unknown size", ("attention", "huge", {}), "size='huge'", None),
  ("run_suite", "unknown impl", ("attention", None, {"impls": ("flash",)}), "impls=('flash',)",
   None),
  ("run_suite", "negative size", ("attention", None, {"heads": -1}), "heads=-1", None),
  ("run_suite", "unknown model size", ("decode", None, {"model_size": "huge"}),
   "model_size='huge'", None),
  ("run_suite", "position off the chunk", ("decode", "tiny", {"positions": (65,)}),
   "positions=(65,)", None),
  ("run_suite", "zero steps", ("train", "tiny", {"steps": 0}), "steps=0", None),
  ("run_suite", "unknown attention", ("train", "tiny", {"attention": "flash"}),
   "model.attention='flash'", None),
  ("run_suite", "more devices than exist", ("train", "tiny", {"devices": 64}), "devices=64",
   None),
  ("run_suite", "devices not dividing the batch", ("train", "tiny", {"devices": 3}),
   "devices=3", None),
  # --- jaxformer.data.get_dataset(spec, split) ----------------------------------------------
  ("get_dataset", "unknown task", ("recall:seq_len=8", "train"), "task='recall'", None),
  ("get_dataset", "unknown field", ("mqar:vocab=32", "train"), "mqar.vocab", None),
  ("get_dataset", "zero size", ("mqar:seq_len=0", "train"), "mqar.seq_len=0", None),
  ("get_dataset", "negative size", ("mqar:num_examples=-5", "train"), "mqar.num_examples=-5", None),
  ("get_dataset", "impossible layout", ("mqar:seq_len=16,num_kv_pairs=8", "train"),
   "mqar.num_kv_pairs=8", None),
  ("get_dataset", "unknown split", (TINY_TASK, "valid"), "split='valid'", None),
  ("get_dataset", "unwritable data_dir", ("mqar:seed=7", "train", "{tmp}/file/d"),
   "data_dir={tmp}/file/d", None),
  # --- jaxformer.data.Loader(dataset, global_batch_size) --------------------------------------
  ("Loader", "zero batch", 0, "loader.global_batch_size=0", None),
  ("Loader", "batch > dataset", 1000, "loader.global_batch_size=1000", None),
  # --- jaxformer.ladder.build(rung, config with these fields changed) ------------------------
  ("ladder.build", "unknown rung", ("gpt", {}), "rung='gpt'", None),
  ("ladder.build", "unknown field", ("softmax", {"num_head": 2}), "model.num_head", None),
  ("ladder.build", "zero size", ("softmax", {"d_model": 0}), "model.d_model=0", None),
  ("ladder.build", "negative size", ("softmax", {"num_layers": -1}), "model.num_layers=-1", None),
  ("ladder.build", "d_model % num_heads", ("softmax", {"num_heads": 3}), "model.num_heads=3", None),
  ("ladder.build", "unknown choice", ("softmax", {"normalizer": "max"}), "model.normalizer='max'",
   None),
  ("ladder.build", "not a ConfigDict", ("softmax", None), "model: expected", None),
  # --- the built model: model.apply(params, tokens) (softmax rung, V = 64, max_len = 64) ------
  ("model", "token id = vocab", "id=64", "tokens: id 64", None),
  ("model", "negative token id", "id=-1", "tokens: id -1", None),
  ("model", "seq_len > max_len", "length=65", "max_len=64", None),
  ("model", "tokens not [B, L]", "rank=1", "tokens: expected integer ids of shape [B, L]", None),
  # --- jaxformer.interop.gpt2.load(state dict of a 1-layer GPT-2, num_heads=...) ---------------
  ("gpt2.load", "missing tensor", ("drop", "h.0.attn.c_attn.weight", 2), "'h.0.attn.c_attn.weight'",
   None),
  ("gpt2.load", "wrong shape", ("reshape", "h.0.attn.c_proj.weight", 2), "'h.0.attn.c_proj.weight'",
   None),
  ("gpt2.load", "missing num_heads", ("keep", None, None), "num_heads", None),
  ("gpt2.load", "num_heads not dividing", ("keep", None, 3), "num_heads=3", None),
  ("gpt2.load", "missing file", ("file", "{tmp}/nope.safetensors", 2), "{tmp}/nope.safetensors",
   None),
  # --- experiments.bench_loader.run(**kwargs) -------------------------------------------------
  ("bench_loader.run", "zero batch", {"batch_size": 0}, "bench_loader.batch_size=0", None),
  ("bench_loader.run", "negative steps", {"steps": -1}, "bench_loader.steps=-1", None),
  ("bench_loader.run", "unknown task", {"spec": "recall"}, "task='recall'", None),
]
# fmt: on


def _id(row):
  return f"{row[0]}: {row[1]}"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
  """Paths for the placeholders: {tmp} (holding a plain file `file`, so {tmp}/file/x cannot
  be created), the data dir, and {trained}: a workdir with a real checkpoint of the tiny
  config that the main rows use."""
  tmp = tmp_path_factory.mktemp("bad_input")
  (tmp / "file").write_text("")
  data_dir, trained = tmp / "data", tmp / "trained"
  config = tiny_config("softmax", data_dir=str(data_dir), total_steps=1, **{"model.num_layers": 2})
  loop.train(config, str(trained))
  return {"tmp": str(tmp), "data_dir": str(data_dir), "trained": str(trained)}


def _fill(text, ctx):
  return text.format(**ctx) if isinstance(text, str) else text


def _command(entry, args, workdir, ctx):
  if entry == "bench":
    return [sys.executable, "-m", "experiments.bench", *args], 1
  if entry in ("sample", "evaluate"):
    devices = [int(a.split("=")[1]) for a in args if a.startswith("devices=")] or [1]
    rest = [_fill(a, ctx) for a in args if not a.startswith("devices=")]
    return [sys.executable, "-m", f"experiments.{entry}", *rest], devices[0]
  cmd, devices = main_command(workdir, rung="softmax"), 1
  for arg in args:
    arg = _fill(arg, ctx)
    if arg.startswith("devices="):
      devices = int(arg.split("=")[1])
    elif arg == NO_WORKDIR:
      cmd.remove(f"--workdir={workdir}")
    elif arg.startswith("--config="):
      cmd[3] = arg
    elif arg == f"--workdir={ctx['trained']}":
      # each run gets its own copy: runs at the same time on one workdir refuse each other
      copy = f"{workdir}-trained"
      shutil.copytree(ctx["trained"], copy)
      cmd[4] = f"--workdir={copy}"
    elif arg.startswith("--workdir="):
      cmd[4] = arg
    else:
      cmd.append(arg)
  return cmd, devices


@pytest.fixture(scope="module")
def cli_results(ctx):
  """{row id: (returncode, stderr)} of every command-line row, two processes at a time."""
  rows = [row for row in CATALOGUE if row[0] in CLI]

  def run(i, row):
    cmd, devices = _command(row[0], row[2], os.path.join(ctx["tmp"], f"run{i}"), ctx)
    proc = h.start(cmd, ctx["data_dir"], devices=devices)
    code, _, err = h.finish(proc)
    return _id(row), (code, err)

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return dict(pool.map(lambda a: run(*a), enumerate(rows)))


@pytest.fixture(scope="module")
def softmax_model():
  model = ladder.build("softmax")
  return model, model.init(jax.random.key(0), jnp.zeros((2, 8), jnp.int32))


def _gpt2_state():
  return random_state(np.random.default_rng(0), vocab=20, positions=8, width=D, layers=1)


def _call(entry, given, ctx, model):
  """Calls the API entry point with the row's input (returns only if it accepts it)."""
  if entry == "get_dataset":
    spec, split, *data_dir = given
    return data.get_dataset(spec, split, _fill(data_dir[0], ctx) if data_dir else ctx["data_dir"])
  if entry == "Loader":
    return data.Loader(data.get_dataset(TINY_TASK, "test", ctx["data_dir"]), given, seed=0)
  if entry == "ladder.build":
    rung, fields = given
    if fields is None:
      return ladder.build(rung, ladder.default_config(rung).to_dict())
    config = ladder.default_config(rung) if rung in ladder.RUNGS else None
    if config is not None:
      with config.unlocked():
        for key, value in fields.items():
          config[key] = value
    return ladder.build(rung, config)
  if entry == "model":
    module, params = model
    kind, value = given.split("=")
    tokens = np.zeros((2, int(value) if kind == "length" else 8), np.int32)
    if kind == "id":
      tokens[1, 3] = int(value)
    return module.apply(params, tokens[0] if kind == "rank" else tokens)
  if entry == "gpt2.load":
    how, name, heads = given
    if how == "file":
      return gpt2.load(_fill(name, ctx), num_heads=heads)
    state = _gpt2_state()
    if how == "drop":
      del state[f"transformer.{name}"]
    if how == "reshape":
      state[f"transformer.{name}"] = np.zeros((D, D + 1), np.float32)
    return gpt2.load(state, num_heads=heads)
  if entry == "run_suite":
    return bench.run_suite(*given)
  if entry == "bench_loader.run":
    kwargs = {"spec": TINY_TASK, "batch_size": 8, "steps": 1, **given}
    return bench_loader.run(data_dir=ctx["data_dir"], **kwargs)
  raise AssertionError(entry)


# The command-line rows start a process each (after training the workdir they read): ~2 CPU
# minutes in all, so they run with `make test-slow`; the API rows run in `make test`.
ROWS = [
  pytest.param(*r, id=_id(r), marks=pytest.mark.slow if r[0] in CLI else ()) for r in CATALOGUE
]


@pytest.mark.parametrize("entry,case,given,field,code", ROWS)
def test_bad_input_fails_with_one_line_naming_the_field(
  entry, case, given, field, code, request, ctx
):
  field = _fill(field, ctx)
  if entry in CLI:
    returncode, err = request.getfixturevalue("cli_results")[_id((entry, case))]
    assert returncode == code, err[-3000:]
    if "--debug" in given:
      assert "Traceback (most recent call last)" in err and field in err.strip().splitlines()[-1]
      return
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    assert field in lines[0], lines[0]
    return
  model = request.getfixturevalue("softmax_model") if entry == "model" else None
  with pytest.raises((ValueError, OSError)) as info:
    _call(entry, given, ctx, model)
  message = str(info.value)
  assert "\n" not in message.strip() and field in message, message
