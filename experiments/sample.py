r"""Sample from a trained run: reads the workdir's config and only its params, prints text.

  python -m experiments.sample --workdir=/tmp/jaxformer/text --prompt="ROMEO:" \
    [--num_tokens=200 --temperature=0.8 --top_k=40 --top_p=0.95 --seed=0 --num_samples=1 \
     --stop=TEXT --trust_mixer --debug]

Text tasks print the prompt followed by the sampled text (several samples apart by a line
of dashes); other tasks take and print token ids (`--prompt="3 17 5"`). The default prompt
is a newline where the task has one, else token 0. A sample longer than the model's max_len
continues from its last max_len // 2 tokens, one chunk at a time (the model has no positions
past max_len).
`--stop` ends a sample at that token (one character of a char-level task, text that is one
token of a BPE-level one, which decodes with the tokenizer the workdir keeps). A usage error
(a bad flag, a prompt the task cannot encode, a workdir without a run) prints one line
naming the flag and exits 2. A run of the custom rung names a mixer file, which sampling
would import and run: it is refused unless `--trust_mixer` is given, and then only if the
file's sha256 is the one the run recorded.
"""

import math
import sys

import numpy as np
from absl import app, flags

from experiments import cli
from jaxformer import data, ladder

_WORKDIR = flags.DEFINE_string("workdir", None, "The directory a training run wrote.")
_PROMPT = flags.DEFINE_string("prompt", None, "Text (ids for non-text tasks) to continue.")
_NUM_TOKENS = flags.DEFINE_integer(
  "num_tokens", None, "Tokens to sample (default: up to the model's max_len).", lower_bound=1
)
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Softmax temperature, > 0.")
_TOP_K = flags.DEFINE_integer(
  "top_k", None, "Sample among the k most likely tokens.", lower_bound=1
)
_TOP_P = flags.DEFINE_float("top_p", None, "Sample within the nucleus of probability p, (0, 1].")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.", lower_bound=0)
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "Samples drawn at once.", lower_bound=1)
_STOP = flags.DEFINE_string(
  "stop", None, "End a sample at this token (text: one character, or one BPE token)."
)
_DEBUG = flags.DEFINE_bool("debug", False, "Show tracebacks of usage errors.")
_TRUST_MIXER = flags.DEFINE_bool(
  "trust_mixer",
  False,
  "Import and run the custom mixer file the workdir's config names (only if its sha256 is the "
  "one the run recorded). Without it a custom run is refused: its file is someone's code.",
)

flags.register_validator(
  "temperature", lambda t: math.isfinite(t) and t > 0, "must be a finite number > 0"
)
flags.register_validator("top_p", lambda p: p is None or 0 < p <= 1, "must be in (0, 1]")


def encode(task, text, flag):
  """Text (a text task) or space-separated ids (any other task) -> int32 ids."""
  if task.is_text:
    ids = task.encode(text, field=flag)
  else:
    try:
      ids = np.array([int(t) for t in text.split()], np.int32)
    except ValueError:
      raise data.DataError(f"{flag}: {task.spec} is not a text task; give token ids") from None
    data.check_tokens(ids, task.vocab_size, field=flag)
  if ids.size == 0:
    raise data.DataError(f"{flag}: empty")
  return ids


def default_prompt(task):
  """A newline where the task can encode one, else token 0."""
  try:
    return task.encode("\n") if task.is_text else np.zeros(1, np.int32)
  except data.DataError:
    return np.zeros(1, np.int32)


def decode(task, ids):
  return task.decode(ids) if task.is_text else " ".join(str(int(i)) for i in ids)


def main(argv):
  with cli.usage_errors(argv, _DEBUG.value):
    from jaxformer.train import workdir as workdir_lib

    workdir = cli.check_workdir_given(_WORKDIR.value)
    task = workdir_lib.read_task(workdir)
    if _PROMPT.value is not None:
      prompt_ids = encode(task, _PROMPT.value, f"--prompt={_PROMPT.value!r}")
    else:
      prompt_ids = default_prompt(task)
    stop_id = None
    if _STOP.value is not None:
      stop_ids = encode(task, _STOP.value, f"--stop={_STOP.value!r}")
      if len(stop_ids) != 1:
        raise data.DataError(f"--stop={_STOP.value!r}: must be one token, got {len(stop_ids)}")
      stop_id = int(stop_ids[0])
    if _TOP_K.value is not None and _TOP_K.value > task.vocab_size:
      raise ladder.ConfigError(f"--top_k={_TOP_K.value}: the vocabulary has {task.vocab_size}")
    run = workdir_lib.load(workdir, trust_code=_TRUST_MIXER.value)
    if len(prompt_ids) >= run.model.max_len:
      raise ladder.ConfigError(
        f"--prompt: {len(prompt_ids)} tokens; the model reads at most "
        f"max_len - 1 = {run.model.max_len - 1}"
      )
    import jax

    from jaxformer import decode as decode_lib

    samples = decode_lib.generate_long(
      run.model,
      run.params,
      np.repeat(prompt_ids[None], _NUM_SAMPLES.value, axis=0),
      num_tokens=_NUM_TOKENS.value or run.model.max_len - len(prompt_ids),
      rng=jax.random.key(_SEED.value),
      stop_token=stop_id,
      temperature=_TEMPERATURE.value,
      top_k=_TOP_K.value,
      top_p=_TOP_P.value,
    )
  print(f"step {run.step} of {workdir}", file=sys.stderr)
  sep = "" if task.is_text else " "
  texts = [decode(task, prompt_ids) + sep + decode(task, row) for row in samples]
  print(("\n" + "-" * 40 + "\n").join(texts), flush=True)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
