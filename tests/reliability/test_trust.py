"""Opening someone else's run never runs their code: a custom rung's workdir names a mixer
file, and sampling, evaluating or `workdir.load` import it only with an explicit trust flag,
and then only if its sha256 is the one the run recorded in mixer.json. Resuming training
with a changed mixer file is refused too.

The mixer file appends to a marker file each time it is imported, so "not run" is observed,
not assumed.
"""

import json
import shutil
import subprocess
import sys

import pytest

from experiments.configs import default
from jaxformer import ladder
from jaxformer.train import loop
from jaxformer.train import workdir as workdir_lib
from jaxformer.train.checkpoint import CheckpointError
from tests import launcher
from tests.reliability import helpers as h
from tests.train.train_helpers import REPO, TINY_TASK, env

MIXER = """
import flax.linen as nn
import jax.numpy as jnp

with open(__file__ + ".ran", "a") as marker:
  marker.write("imported\\n")


class Shift(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.width)(x + jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1])
"""


def _config(mixer, data_dir):
  c = default.get_config("rung=custom")
  with c.unlocked():
    c.task, c.data_dir, c.model.mixer = TINY_TASK, data_dir, mixer
    c.model.vocab_size, c.model.max_len = 32, 16
    c.model.d_model, c.model.d_ff, c.model.num_layers = 32, 64, 1
    c.batch_size, c.total_steps, c.warmup_steps, c.checkpoint_every = 16, 2, 1, 2
    c.eval_every, c.log_every, c.peak_flops_per_device = 100, 1, 1e11
  return c


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """(workdir, mixer file, data_dir) of a finished 2-step custom run."""
  root = tmp_path_factory.mktemp("trust")
  mixer = root / "mine.py"
  mixer.write_text(MIXER)
  data_dir, workdir = str(root / "data"), root / "run"
  assert loop.train(_config(f"{mixer}:Shift", data_dir), str(workdir))["final_step"] == 2
  code = json.loads((workdir / "mixer.json").read_text())
  assert code["file"] == str(mixer) and len(code["sha256"]) == 64
  return workdir, mixer, data_dir


def _ran(mixer):
  marker = mixer.with_name(mixer.name + ".ran")
  return marker.read_text().count("imported") if marker.exists() else 0


def _reset(mixer):
  mixer.with_name(mixer.name + ".ran").unlink(missing_ok=True)


def _start(module, workdir, data_dir, *flags):
  return launcher.Popen(
    [sys.executable, "-m", f"experiments.{module}", f"--workdir={workdir}", *flags],
    env=env(data_dir),
    cwd=REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def test_readers_refuse_a_custom_run_without_the_trust_flag(trained, tmp_path):
  workdir, mixer, data_dir = trained
  # A workdir as someone could hand it over: config and task, no checkpoint at all.
  crafted = tmp_path / "crafted"
  crafted.mkdir()
  for name in ("config.json", "task.json", "mixer.json"):
    shutil.copy(workdir / name, crafted / name)
  _reset(mixer)
  procs = [_start("sample", crafted, data_dir), _start("evaluate", workdir, data_dir)]
  for proc in procs:
    out, err = proc.communicate(timeout=h.TIMEOUT)
    assert proc.returncode == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    assert "custom mixer" in lines[0] and "--trust_mixer" in lines[0], lines
  with pytest.raises(CheckpointError, match="trust_code=True"):
    workdir_lib.load(workdir)
  assert _ran(mixer) == 0  # nothing imported the file


def test_trusted_readers_run_the_recorded_file_only(trained, tmp_path):
  workdir, mixer, data_dir = trained
  _reset(mixer)
  proc = _start("evaluate", workdir, data_dir, "--trust_mixer")
  out, err = proc.communicate(timeout=h.TIMEOUT)
  assert proc.returncode == 0 and out.startswith("step 2: eval_loss="), err[-3000:]
  assert _ran(mixer) == 1

  # The file changed since the run: refused before it is imported.
  changed = tmp_path / "changed"
  shutil.copytree(workdir, changed)
  text = mixer.read_text()
  mixer.write_text(text + "\n# edited\n")
  try:
    _reset(mixer)
    proc = _start("sample", changed, data_dir, "--trust_mixer")
    out, err = proc.communicate(timeout=h.TIMEOUT)
    assert proc.returncode == 2 and "refusing to run it" in err, err[-3000:]
    assert len(err.strip().splitlines()) == 1, err[-3000:]
    assert _ran(mixer) == 0
    # Resuming training with the edited file is refused, naming the field.
    with pytest.raises(ladder.ConfigError, match="model.mixer=.*not the file this workdir"):
      loop.train(_config(f"{mixer}:Shift", data_dir), str(changed))
  finally:
    mixer.write_text(text)
