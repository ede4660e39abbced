"""What the absl entry points (main, sample, evaluate) share: usage errors as one line.

A usage error (a bad or unknown flag, a config field, a workdir that holds no run, ...) prints
one `error: ...` line naming the field and exits 2; `--debug` shows the traceback instead.
"""

import contextlib
import os
import re
import sys
import traceback

from absl import flags, logging

from jaxformer import data, ladder
from jaxformer.mixers import plug
from jaxformer.train import checkpoint

USAGE = 2  # exit code of a usage error
FAILED = 1

USAGE_ERRORS = (ladder.ConfigError, data.DataError, checkpoint.CheckpointError, plug.MixerError)


@contextlib.contextmanager
def usage_errors(argv, debug, hint=""):
  """The body of an entry point's main(argv): leftover arguments and USAGE_ERRORS become one
  `error:` line and exit 2 (a traceback with debug); Orbax's INFO logs are hidden."""
  quiet(debug)
  try:
    if len(argv) > 1:
      raise ladder.ConfigError(f"unexpected arguments {argv[1:]}{hint}")
    yield
  except USAGE_ERRORS as e:
    fail(first_line(e), USAGE, debug)


def fail(message, code, debug):
  """Exits with `code` after one `error:` line; re-raises the handled exception if debug."""
  if debug:
    raise
  print(f"error: {message}", file=sys.stderr)
  sys.exit(code)


def first_line(error):
  return str(error).strip().splitlines()[0]


def quiet(debug):
  if not debug:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every file it reads or writes at INFO
    # A failed save is reported in one `error:` line; Orbax's own error logs repeat it with
    # a traceback per thread.
    checkpoint.quiet_orbax_errors()


def parse_flags(argv, before=None, after=None):
  """absl parsing, with any flag error reported as one line and exit code 2.

  before(argv) runs first and after() once the flags are parsed; errors they raise (a
  ConfigError, DataError, flags.Error, ...) are reported the same way.
  """
  debug = "--debug" in argv
  try:
    if before is not None:
      before(argv)
    rest = flags.FLAGS(argv)
    if after is not None:
      after()
    return rest
  except (flags.Error, AttributeError, KeyError, TypeError, OSError, ValueError) as e:
    if debug:
      raise
    line = None if _usage_error_in(e) else config_file_error(e, argv)
    print(f"error: {line or flag_error_message(e, argv)}", file=sys.stderr)
    sys.exit(USAGE)
  except (SyntaxError, Exception) as e:  # a config file that fails to compile or to run
    line = config_file_error(e, argv)
    if debug or line is None:
      raise
    print(f"error: {line}", file=sys.stderr)
    sys.exit(USAGE)


def _usage_error_in(e):
  while e is not None:
    if isinstance(e, ladder.ConfigError | data.DataError):
      return True
    e = e.__cause__ or e.__context__
  return False


def _config_paths(argv):
  out = []
  for i, arg in enumerate(argv):
    value = arg.split("=", 1)[1] if arg.startswith("--config=") else None
    if arg == "--config" and i + 1 < len(argv):
      value = argv[i + 1]
    if value:
      out.append(os.path.abspath(value.split(":", 1)[0]))
  return out


def config_file_error(e, argv):
  """`--config=FILE: FILE:LINE: Type: message` for an error raised by the config file's own
  code (a syntax error, or get_config raising), else None."""
  paths = _config_paths(argv)
  if not paths:
    return None
  chain, inner = [], e
  while inner is not None and inner not in chain:
    chain.append(inner)
    inner = inner.__cause__ or inner.__context__
  for exc in reversed(chain):  # innermost first
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) in paths:
      return f"{exc.filename}:{exc.lineno}: SyntaxError: {exc.msg}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in paths]
    if frames and "Error whilst parsing" not in str(exc):
      return f"{frames[-1].filename}:{frames[-1].lineno}: {_one_line(exc)}"
  # ml_collections re-raises get_config's error with its traceback as text
  text = "\n".join(str(x) for x in chain)
  found = re.findall(r'File "([^"]+)", line (\d+)', text)
  found = [(f, n) for f, n in found if os.path.abspath(f) in paths]
  if found and "Traceback" in text:
    last = [ln.strip() for ln in text.strip().splitlines() if ln.strip()][-1]
    return f"{found[-1][0]}:{found[-1][1]}: {last}"
  return None


def _one_line(e):
  lines = str(e).strip().splitlines()
  return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def flag_error_message(e, argv):
  """One line: the innermost ConfigError / DataError if any, else the unknown field or e."""
  inner = e
  while inner is not None:
    if isinstance(inner, ladder.ConfigError | data.DataError):
      lines = str(inner).strip().splitlines()
      if "Traceback" in str(inner):  # config_flags re-raises get_config's error with its trace
        return lines[-1].split(": ", 1)[-1]
      return lines[0]
    inner = inner.__cause__ or inner.__context__
  if isinstance(e, AttributeError | KeyError):
    # ml_collections raises AttributeError(KeyError("'name'" + for a near miss a newline and
    # 'Did you mean ...')); str() of a KeyError is the repr of that text, so unwrap it.
    text = e.args[0] if e.args else str(e)
    if isinstance(text, KeyError) and text.args:
      text = text.args[0]
    text = str(text)
    first, _, hint = text.partition("\n")
    field = first.strip("\"'")
    given = [a.split("=", 1)[0] for a in argv if a.startswith("--config.") and field in a]
    hint = hint.strip().split(" instead of ")[0].lower()
    return f"{given[0] if given else field}: unknown config field {field!r}" + (
      f"; {hint}?" if hint else ""
    )
  lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
  return lines[0] if lines else type(e).__name__


def check_workdir_given(workdir):
  if not workdir:
    raise ladder.ConfigError("--workdir is required (the directory a training run wrote)")
  return workdir
