"""What every entry point shares: absl flags, `--help`, usage errors as one line.

main, sample and evaluate define their flags on absl's global FLAGS and run under app.run
(parse_flags below). The others (run_all and each experiment, scorecard, bench, gpu_bench,
designs, tables) are also imported as libraries, several into one process, so each defines its
flags on a FlagValues of its own (command_line below) and its main(argv) can be called in
process. Everywhere: `--help` prints the command's usage and flags and exits 0; a usage
error (a bad or unknown flag, a config field, a workdir that holds no run, ...) prints one
`error: ...` line naming the field and exits 2; `--debug` shows the traceback instead.
"""

import contextlib
import difflib
import os
import re
import sys
import traceback

from absl import flags, logging
from ml_collections import config_dict, config_flags

# jaxformer (and with it jax and Orbax) is imported where it is needed: `--help` and a bad
# flag of the entry points that do not train answer in a fraction of a second.

USAGE = 2  # exit code of a usage error
FAILED = 1


class UsageError(ValueError):
  """A bad command line that absl's own checks do not catch (an unknown config field, ...)."""


def usage_error_types():
  """The errors an entry point reports as a usage error (one line, exit 2)."""
  from jaxformer import data, ladder
  from jaxformer.mixers import plug
  from jaxformer.train import checkpoint

  return (
    UsageError,
    ladder.ConfigError,
    data.DataError,
    checkpoint.CheckpointError,
    plug.MixerError,
  )


@contextlib.contextmanager
def usage_errors(argv, debug, hint=""):
  """The body of an entry point's main(argv): leftover arguments and usage_error_types()
  become one `error:` line and exit 2 (a traceback with debug); Orbax's INFO logs are hidden."""
  quiet(debug)
  try:
    if len(argv) > 1:
      raise UsageError(f"unexpected arguments {argv[1:]}{hint}")
    yield
  except usage_error_types() as e:
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
  from jaxformer.train import checkpoint

  if not debug:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every file it reads or writes at INFO
    # A failed save is reported in one `error:` line; Orbax's own error logs repeat it with
    # a traceback per thread.
    checkpoint.quiet_orbax_errors()


HELP = ("-h", "--help", "--helpfull", "-?")


def command_line(doc, define, argv=None):
  """(flag values, positional arguments) of an entry point's command line.

  define(flag_values, argv) defines the entry point's flags on a fresh absl FlagValues (argv
  with the program name first: config flags read their overrides from it). argv: the
  arguments after the program name (None: sys.argv's). `--help` prints `doc` and the flags
  and exits 0; a bad or unknown flag, or a UsageError raised while defining, prints one
  `error:` line and exits 2 (with --debug, the traceback).
  """
  args = sys.argv[1:] if argv is None else list(argv)
  full = [sys.argv[0] if argv is None else "prog", *args]
  values = flags.FlagValues()
  try:
    define(values, full)
    if any(a in HELP for a in args):
      print_help(doc, values)
    rest = values(full)
  except (flags.Error, UsageError) as e:
    fail(first_line(e), USAGE, "--debug" in args)
  return values, rest[1:]


def definer(values):
  """define(kind, name, default, help_string, *args, **kwargs): flags.DEFINE_<kind>(name,
  default, *args, help_string, **kwargs) on `values` (args: an enum's choices; kwargs: a
  lower_bound, ...)."""

  def define(kind, name, default, help_string, *args, **kwargs):
    define_kind = getattr(flags, f"DEFINE_{kind}")
    define_kind(name, default, *args, help_string, flag_values=values, **kwargs)

  return define


def flag_help(values, modules=None):
  """The help of every flag defined on `values` by `modules` (default: all but absl's own)."""
  if modules is None:
    modules = [m for m in values.flags_by_module_dict() if m != "absl.flags"]
  return "\n".join(values.module_help(m).strip().split("\n", 1)[-1] for m in modules)


def print_help(doc, values, modules=None):
  """`--help`: the command's docstring and its flags on stdout, then exit 0."""
  print(f"{doc.strip()}\n\nflags:\n{flag_help(values, modules)}")
  sys.exit(0)


def usage_error(message):
  """One `error:` line and exit 2 (an entry point's bad command line found after parsing)."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(USAGE)


DEVICE_COUNT_FLAG = "xla_force_host_platform_device_count"


def cpu_devices(count, flag):
  """XLA flags for `count` CPU devices (`flag`: the option that asked, for its error); must
  run before jax starts its backend (nothing has been computed yet when a main() parses its
  flags). They share the machine's cores."""
  if count < 1:
    usage_error(f"{flag}={count}: expected a positive integer")
  if DEVICE_COUNT_FLAG in os.environ.get("XLA_FLAGS", ""):
    usage_error(f"{flag}: XLA_FLAGS already sets a device count")
  xla = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{xla} --{DEVICE_COUNT_FLAG}={count}".strip()


def pre_parse(argv, name, default, choices):
  """The value of flag --name in argv before the full parse (the size, which decides a config
  flag's defaults); `default` when absent or not one of `choices` (the full parse then
  reports it)."""
  values = flags.FlagValues()
  flags.DEFINE_string(name, default, "", flag_values=values)
  try:
    values(argv, known_only=True)
  except flags.Error:
    return default
  return values[name].value if values[name].value in choices else default


def config_flag(values, argv, name, config, help_string, new_fields=False):
  """An ml_collections config flag --name over `config` (--name.FIELD=VALUE sets a field).

  An override of a field `config` lacks is a ConfigError naming it (with the nearest field),
  unless new_fields (then any field is accepted: VALUE is a Python literal, else a string).
  """
  if not new_fields:
    for arg in argv[1:]:
      match = re.match(rf"--?(?:no)?{re.escape(name)}\.([^=]+)", arg)
      if match:
        _check_field(config, name, match.group(1))
  return config_flags.DEFINE_config_dict(
    name,
    config,
    help_string,
    flag_values=values,
    lock_config=not new_fields,
    accept_new_attributes=new_fields,
    sys_argv=argv,
  )


def _check_field(config, name, path):
  node = config
  for i, key in enumerate(path.split(".")):
    if not isinstance(node, config_dict.ConfigDict) or key not in node:
      keys = list(node.keys()) if isinstance(node, config_dict.ConfigDict) else []
      near = difflib.get_close_matches(key, keys, n=1)
      where = ".".join([name, *path.split(".")[:i]])
      raise UsageError(
        f"--{name}.{path}: unknown field {key!r} of {where}"
        + (f"; did you mean {near[0]!r}?" if near else "")
      )
    node = node[key]


def parse_flags(argv, before=None, after=None):
  """absl parsing, with any flag error reported as one line and exit code 2.

  before(argv) runs first and after() once the flags are parsed; errors they raise (a
  ConfigError, DataError, flags.Error, ...) are reported the same way. `--help` prints the
  __main__ module's docstring and flags and exits 0 (absl's own --help exits 1).
  """
  debug = "--debug" in argv
  if any(a in HELP for a in argv[1:]):
    print_help(sys.modules["__main__"].__doc__ or "", flags.FLAGS, [argv[0]])
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
  from jaxformer import data, ladder

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
  from jaxformer import data, ladder

  inner = e
  while inner is not None:
    if isinstance(inner, ladder.ConfigError | data.DataError):
      lines = str(inner).strip().splitlines()
      if "Traceback" in str(inner):  # config_flags re-raises get_config's error with its trace
        return lines[-1].split(": ", 1)[-1]
      return lines[0]
    inner = inner.__cause__ or inner.__context__
  missing = missing_config_field(e)
  if missing is not None:
    field, hint = missing
    given = [a.split("=", 1)[0] for a in argv if a.startswith("--config.") and field in a]
    return f"{given[0] if given else field}: unknown config field {field!r}" + (
      f"; {hint}?" if hint else ""
    )
  lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
  return lines[0] if lines else type(e).__name__


def missing_config_field(error):
  """(field, 'did you mean ...' or '') of the error ml_collections raises for an override of a
  field a loaded config file lacks, else None.

  ml_collections has no public form of that error: it raises AttributeError(KeyError(text)),
  text being "'name'" and, for a near miss, a newline and "Did you mean 'x' instead of 'name'?".
  tests/experiments/test_cli.py fails when that text changes. (The entry points whose config
  is not a file check their overrides before ml_collections sees them: config_flag.)
  """
  if not isinstance(error, AttributeError | KeyError):
    return None
  text = error.args[0] if error.args else str(error)
  if isinstance(text, KeyError) and text.args:
    text = text.args[0]
  first, _, hint = str(text).partition("\n")
  return first.strip("\"'"), hint.strip().split(" instead of ")[0].lower()


def check_workdir_given(workdir):
  if not workdir:
    raise UsageError("--workdir is required (the directory a training run wrote)")
  return workdir
