"""The smaller faults, each as a user meets it: one line and exit 2 (or a clean stop), never a
traceback, a hang or a silent exit 0.

  - a task longer than model.max_len, or sizes beyond the machine's memory: refused before
    any data is prepared (a 4M-token task used to prepare 12 MB and reach 0.9 GB first);
  - a config file with a syntax error or whose get_config raises: the file and the line;
  - a mixer file that calls sys.exit(0) at import: named, exit 2 (main used to exit 0);
  - a mixer whose __call__ never returns: the contract check's time limit names it;
  - SIGTERM after the restore, before the first step compiles: saved, `preempted`, exit 0.
"""

import concurrent.futures
import os
import time

import flax.linen as nn
import pytest

from jaxformer import data, ladder
from jaxformer.mixers import plug
from jaxformer.train import program as program_lib
from tests.reliability import helpers as h
from tests.train.train_helpers import REPO, main_command, tiny_config

DEFAULT = f"{REPO}/experiments/configs/default.py"
EXITS = "import sys\nsys.exit(0)\n"
SYNTAX = "def get_config(arg=None):\n  x = = 1\n"
RAISES = "def get_config(arg=None):\n  return dict(a=1) / 0\n"


def _rows(tmp):
  return {
    "seq_len 4M": (
      ["--config.task=mqar:seq_len=4194304"],
      "task seq_len=4194304 > model.max_len=16",
    ),
    "max_len beyond memory": (
      ["--config.model.max_len=1000000000000"],
      "model.max_len=1000000000000: a [max_len, d_model] table alone would take",
    ),
    "config syntax error": ([f"--config={tmp}/syntax.py"], f"{tmp}/syntax.py:2: SyntaxError"),
    "get_config raises": (
      [f"--config={tmp}/raises.py"],
      f"{tmp}/raises.py:2: TypeError: unsupported operand",
    ),
    "mixer calls sys.exit": (
      [f"--config={DEFAULT}:rung=custom", f"--config.model.mixer={tmp}/exits.py:M"],
      f"model.mixer: mixer '{tmp}/exits.py:M': importing {tmp}/exits.py called sys.exit(0)",
    ),
  }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("small")
  for name, text in (("exits", EXITS), ("syntax", SYNTAX), ("raises", RAISES)):
    (tmp / f"{name}.py").write_text(text)

  def run(item):
    i, (case, (args, _)) = item
    cmd = main_command(tmp / f"run{i}", rung="softmax")
    for arg in args:
      if arg.startswith("--config="):
        cmd[3] = arg
      else:
        cmd.append(arg)
    data_dir = tmp / f"data{i}"
    code, _, err = h.finish(h.start(cmd, str(data_dir)))
    return case, (code, err, data_dir)

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return tmp, dict(pool.map(run, enumerate(_rows(tmp).items())))


@pytest.mark.parametrize("case", list(_rows("T")))
def test_one_line_and_exit_2(case, results):
  tmp, got = results
  code, err, data_dir = got[case]
  want = _rows(tmp)[case][1]
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1, err[-3000:]
  assert lines[0].startswith(f"error: {want}"), lines[0]
  if case in ("seq_len 4M", "max_len beyond memory"):  # refused before preparing any data
    assert not data_dir.exists() or not os.listdir(data_dir), os.listdir(data_dir)


def test_sizes_are_bounded_by_the_machine_memory():
  c = tiny_config("softmax")
  _, params = data.parse_spec(c.task)
  program_lib.check_sizes(c, "mqar", params, memory=2**30)  # the tiny config fits in 1 GiB
  with c.unlocked():
    c.model.max_len = 10**7  # 10M x 32 x 4 bytes x 3 = 3.6 GiB
  with pytest.raises(ladder.ConfigError, match=r"model.max_len=10000000: .* 3.58 GiB"):
    program_lib.check_sizes(c, "mqar", params, memory=2**30)


class Hangs(nn.Module):
  """A __call__ that does not return within the check's limit (it gives up after 20 s, so the
  test leaves no thread spinning)."""

  width: int

  def __call__(self, x):
    end = time.monotonic() + 20
    while time.monotonic() < end:
      time.sleep(0.05)
    return x


def test_a_mixer_that_never_returns_is_stopped_by_the_check_time_limit():
  start = time.monotonic()
  with pytest.raises(plug.MixerError, match=r"mixer Hangs: the contract check did not finish"):
    plug.check(Hangs, {}, 8, timeout=1)
  assert time.monotonic() - start < 10


def test_sigterm_before_the_first_step_saves_and_exits_0(tmp_path):
  data_dir, workdir, cache = str(tmp_path / "data"), tmp_path / "run", str(tmp_path / "c")
  code, _, err = h.train(workdir, data_dir, cache_dir=cache, fault="saved:3")
  assert code == -9, err[-3000:]
  code, out, err = h.train(workdir, data_dir, cache_dir=cache, fault="term:3")
  assert code == 0 and "fault injected: SIGTERM at term:3" in err, (code, err[-3000:])
  assert "preempted before step 4: saving step 3, exiting" in out
  assert "preempted at step 3: checkpoint saved" in out
  assert h.complete_steps(workdir) == [3]


def test_damaged_gpt2_files_are_one_line_naming_the_file(tmp_path):
  import numpy as np
  from safetensors.numpy import save_file

  from jaxformer.interop import gpt2
  from tests.interop.gpt2_reference import random_state

  state = random_state(np.random.default_rng(0), vocab=20, positions=8, width=8, layers=1)
  weights = tmp_path / "model.safetensors"
  save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(weights))
  (tmp_path / "config.json").write_text('{"n_head": 2}')
  assert gpt2.load(str(tmp_path))[0].d_model == 8  # the intact pair loads

  (tmp_path / "config.json").write_text('{"n_head": 2')  # cut short
  with pytest.raises(ValueError) as e:
    gpt2.load(str(tmp_path))
  assert str(e.value).startswith(f"{tmp_path / 'config.json'}: not valid JSON (")
  assert "\n" not in str(e.value)

  (tmp_path / "config.json").write_text('{"n_head": 2}')
  os.truncate(weights, os.path.getsize(weights) // 2)
  with pytest.raises(ValueError) as e:
    gpt2.load(str(tmp_path))
  assert str(e.value).startswith(f"{weights}: not a readable safetensors file (")
  assert str(e.value).endswith("download it again") and "\n" not in str(e.value)


def test_a_compile_for_another_device_leaves_the_model_out_of_the_host_bound():
  # a 24 GiB embedding is the device's to judge (jaxformer.train.compile_only), not the host's
  c = tiny_config("softmax")
  _, params = data.parse_spec(c.task)
  with c.unlocked():
    c.model.vocab_size = 2**20
    c.model.d_model = 2048
  with pytest.raises(ladder.ConfigError, match="model.vocab_size=1048576"):
    program_lib.check_sizes(c, "mqar", params, memory=2**30)
  program_lib.check_sizes(c, "mqar", params, memory=2**30, model_on_host=False)
