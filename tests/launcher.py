"""The tests' command-line runs (`python -m experiments.main ...`, `python -c CODE`) forked from
one process that imported jax, flax, orbax, grain and jaxformer already.

Starting python and importing those costs ~2 s of CPU per run, more than most runs in the
tests then do. A fork server (`python -m tests.launcher`, one per test process, started on
first use) imports them once; each run is a fork of it, a process of its own with its own pid,
environment, working directory, exit code and stdout/stderr, that runs the module as
`python -m` would (runpy, `__main__`, sys.argv, sys.path[0] = its working directory; an
uncaught exception prints its traceback and exits 1, atexit handlers run). The server never
touches a device: the fork is made before any JAX backend exists (JAX's own rule for forking),
and each run reads XLA_FLAGS (its device count) when its backend starts. JAX reads its JAX_*
settings when it is imported, so a run applies the ones the tests set (ENV_CONFIG) with
jax.config.update, and refuses any other JAX setting that differs from the server's.

`Popen` and `run` take subprocess's arguments for these commands; any other command (pip,
a notebook kernel) goes to subprocess itself.
"""

import atexit
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELOAD = (
  "jax",
  "jax.numpy",
  "numpy",
  "flax.linen",
  "optax",
  "orbax.checkpoint",
  "grain",
  "ml_collections",
  "absl.app",
  "absl.flags",
  "experiments.cli",
  "experiments.configs.default",
  "jaxformer.compile_cache",
  "jaxformer.ladder",
  "jaxformer.data",
  "jaxformer.decode",
  "jaxformer.train.loop",
  "jaxformer.train.compile_only",
  "jaxformer.train.workdir",
)
# JAX settings read from the environment at import, set again in each run from its own.
ENV_CONFIG = {
  "JAX_PLATFORMS": ("jax_platforms", str),
  "JAX_COMPILATION_CACHE_DIR": ("jax_compilation_cache_dir", str),
  "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": (
    "jax_persistent_cache_min_compile_time_secs",
    float,
  ),
  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": ("jax_persistent_cache_min_entry_size_bytes", int),
}


def _server_env():
  """The server's environment: the test process's, less every JAX/XLA setting but the CPU
  platform (each run brings its own)."""
  out = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
  out.update(PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
  return out


# --- the server ------------------------------------------------------------------------------


def _serve(path):
  """Accepts one request per connection and forks a run for it; reports each run's pid, then
  its exit code. Returns the request in the forked run (which then runs it), never in the
  server, which exits when its stdin closes (the test process ended)."""
  for name in PRELOAD:
    importlib.import_module(name)
  from jax._src import xla_bridge

  assert not xla_bridge._backends, "a preloaded module started a JAX backend: forks would share it"
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(path)
  listener.listen(64)
  print("ready", flush=True)
  runs = {}  # pid -> connection
  while True:
    ready, _, _ = select.select([listener, sys.stdin], [], [], 0.02)
    if sys.stdin in ready and not sys.stdin.readline():
      for pid in runs:
        os.kill(pid, signal.SIGKILL)
      return None
    if listener in ready:
      conn, _ = listener.accept()
      with conn.makefile("r") as f:
        request = json.loads(f.readline())
      sys.stdout.flush()
      sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        listener.close()
        for other in runs.values():
          other.close()
        conn.close()
        return request
      runs[pid] = conn
      conn.sendall(f"{json.dumps({'pid': pid})}\n".encode())
    while runs:
      pid, status = os.waitpid(-1, os.WNOHANG)
      if pid == 0:
        break
      conn = runs.pop(pid)
      conn.sendall(f"{json.dumps({'returncode': os.waitstatus_to_exitcode(status)})}\n".encode())
      conn.close()


def _become(request):
  """This fork turns into the requested run: files, directory, environment, JAX settings."""
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.close(null)
  for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, fd)
    os.close(out)
  os.chdir(request["cwd"])
  before = dict(os.environ)
  os.environ.clear()
  os.environ.update(request["env"])
  import jax

  for name in set(before) | set(os.environ):
    value = os.environ.get(name)
    if not name.startswith("JAX_") or value == before.get(name):
      continue
    if name in ENV_CONFIG:
      option, kind = ENV_CONFIG[name]
      jax.config.update(option, None if value is None else kind(value))
    elif name.lower() in jax.config._value_holders:
      raise SystemExit(f"tests.launcher: {name} differs from the server's; add it to ENV_CONFIG")
  argv = request["argv"]
  sys.path[0] = os.getcwd()
  return argv


def _run(argv):
  """`python -m MODULE ARGS` or `python -c CODE ARGS`, as the interpreter runs them."""
  import runpy

  if argv[0] == "-m":
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
  else:
    sys.argv = ["-c", *argv[2:]]
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    exec(compile(argv[1], "<string>", "exec"), main.__dict__)


# --- the client ------------------------------------------------------------------------------

_lock = threading.Lock()
_server = {}


def _socket_path():
  with _lock:
    proc = _server.get("proc")
    if proc is None or proc.poll() is not None:
      root = tempfile.mkdtemp(prefix="jaxformer-launcher-")
      path = os.path.join(root, "socket")
      proc = subprocess.Popen(
        [sys.executable, "-m", "tests.launcher", path],
        env=_server_env(),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
      )
      line = proc.stdout.readline()
      if line.strip() != "ready":
        raise RuntimeError(f"tests.launcher did not start (exit {proc.wait()})")
      _server.update(proc=proc, path=path, root=root)
      atexit.register(_stop, proc, root)
    return _server["path"]


def _stop(proc, root):
  """Closes the server's stdin (it kills any run still going and exits) and waits for it."""
  proc.stdin.close()
  try:
    proc.wait(timeout=60)
  except subprocess.TimeoutExpired:
    proc.kill()
  shutil.rmtree(root, ignore_errors=True)


def forkable(cmd, env=None):
  """Whether the server can run cmd: `sys.executable -m/-c ...` importing from this tree
  only (the server's sys.path)."""
  env = os.environ if env is None else env
  python = len(cmd) >= 2 and cmd[0] == sys.executable and cmd[1] in ("-m", "-c")
  return python and env.get("PYTHONPATH") == REPO


class Process:
  """subprocess.Popen's interface (pid, poll, wait, communicate, kill, send_signal,
  returncode) for a run forked by the server; stdout/stderr are captured when PIPE."""

  def __init__(self, cmd, env=None, cwd=None, stdout=None, stderr=None, text=False):
    self.args = list(cmd)
    self._text = text
    self._dir = tempfile.mkdtemp(prefix="run-", dir=os.path.dirname(_socket_path()))
    self._out = os.path.join(self._dir, "stdout")
    self._err = os.path.join(self._dir, "stderr")
    self._pipes = (stdout == subprocess.PIPE, stderr == subprocess.PIPE)
    if stderr == subprocess.STDOUT:
      self._err = self._out
    request = {
      "argv": [str(a) for a in cmd[1:]],
      "env": {k: str(v) for k, v in (os.environ if env is None else env).items()},
      "cwd": os.fspath(cwd or os.getcwd()),
      "stdout": self._out,
      "stderr": self._err,
    }
    self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    self._conn.connect(_socket_path())
    self._conn.sendall(f"{json.dumps(request)}\n".encode())
    self._reader = self._conn.makefile("r")
    self.pid = json.loads(self._reader.readline())["pid"]
    self.returncode = None

  def poll(self):
    if self.returncode is None:
      ready, _, _ = select.select([self._conn], [], [], 0)
      if ready:
        self._finish()
    return self.returncode

  def _finish(self):
    line = self._reader.readline()
    if not line:
      raise RuntimeError(f"tests.launcher ended before run {self.pid} did")
    self.returncode = json.loads(line)["returncode"]
    self._reader.close()
    self._conn.close()

  def wait(self, timeout=None):
    if self.returncode is None:
      ready, _, _ = select.select([self._conn], [], [], timeout)
      if not ready:
        raise subprocess.TimeoutExpired(self.args, timeout)
      self._finish()
    return self.returncode

  def _read(self, path):
    with open(path, "r" if self._text else "rb") as f:
      return f.read()

  def communicate(self, timeout=None):
    self.wait(timeout)
    out = self._read(self._out) if self._pipes[0] else None
    err = self._read(self._err) if self._pipes[1] and self._err != self._out else None
    return out, err

  def send_signal(self, sig):
    if self.poll() is None:
      os.kill(self.pid, sig)

  def kill(self):
    self.send_signal(signal.SIGKILL)

  def terminate(self):
    self.send_signal(signal.SIGTERM)


def Popen(cmd, **kwargs):  # noqa: N802 (subprocess's name)
  """subprocess.Popen(cmd, env=, cwd=, stdout=, stderr=, text=) through the server when cmd
  is `sys.executable -m/-c ...`, else subprocess.Popen itself."""
  if not forkable(cmd, kwargs.get("env")):
    return subprocess.Popen(cmd, **kwargs)
  return Process(cmd, **kwargs)


def run(cmd, env=None, cwd=None, capture_output=False, text=False, timeout=None):
  """subprocess.run's CompletedProcess for cmd (through the server when forkable); on a
  timeout the run is killed and TimeoutExpired raised, as subprocess.run does."""
  pipe = subprocess.PIPE if capture_output else None
  if not forkable(cmd, env):
    return subprocess.run(
      cmd, env=env, cwd=cwd, capture_output=capture_output, text=text, timeout=timeout
    )
  proc = Process(cmd, env=env, cwd=cwd, stdout=pipe, stderr=pipe, text=text)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    raise
  return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


if __name__ == "__main__":
  request = _serve(sys.argv[1])
  if request is not None:
    _run(_become(request))
