#!/usr/bin/env bash
# The train (bf16), sweep, attention and decode suites on one NVIDIA GPU (under 10 minutes, plus
# the first install), on a fresh Linux x86_64 machine that reaches the package registry.
#
#   bash experiments/gpu_bench.sh [OUT_DIR]            # default OUT_DIR: runs/gpu_bench
#   bash experiments/gpu_bench.sh --dry-run [OUT_DIR]  # the same Python at tiny sizes on this
#                                                      # machine (CPU), without the GPU check
#
# The real run creates its own virtual environment (GPU_BENCH_VENV, default .venv-gpu) from
# PYTHON (default python3, 3.11 or newer) with requirements.txt and the jax CUDA 12 wheels of
# requirements-gpu.txt (NVIDIA driver >= 525.60.13), reinstalling only when those files change.
# The dry run uses GPU_BENCH_PYTHON (default .venv/bin/python, made by `make` when missing).
# Then experiments/gpu_bench.py asserts jax.default_backend() == 'gpu' (not in the dry run),
# times windows of at least 20 steps, and writes OUT_DIR/gpu_bench.json (command, device kind,
# driver, jax and jaxlib versions, each suite's status and result), each suite's JSON and log,
# and OUT_DIR/benchmarks_gpu.md. Exit status: 0 when every suite ran, 1 when the backend check
# or any suite failed, 2 for a bad command line or Python.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

COMMAND="$0${*:+ $*}"
DRY_RUN=0
OUT_DIR=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "error: unknown option $arg (expected [--dry-run] [OUT_DIR])" >&2; exit 2 ;;
    *)
      if [ -n "$OUT_DIR" ]; then
        echo "error: one OUT_DIR expected, got '$OUT_DIR' and '$arg'" >&2
        exit 2
      fi
      OUT_DIR=$arg
      ;;
  esac
done
if [ -n "$OUT_DIR" ]; then  # relative to where the script was started
  mkdir -p "$OUT_DIR"
  OUT_DIR=$(cd "$OUT_DIR" && pwd)
fi
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-$PWD/runs/gpu_bench}

if [ "$DRY_RUN" = 1 ]; then
  if [ -z "${GPU_BENCH_PYTHON:-}" ] && [ ! -x .venv/bin/python ]; then
    make .venv/.installed
  fi
  PY=${GPU_BENCH_PYTHON:-.venv/bin/python}
else
  BASE=${PYTHON:-python3}
  if ! "$BASE" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: PYTHON=$BASE is not Python 3.11 or newer, which jax 0.10.2 needs" >&2
    exit 2
  fi
  VENV=${GPU_BENCH_VENV:-.venv-gpu}
  WANT=$(cat requirements.txt requirements-gpu.txt | sha256sum | cut -d' ' -f1)
  if [ ! -x "$VENV/bin/python" ]; then
    "$BASE" -m venv "$VENV"
  fi
  if [ "$(cat "$VENV/.gpu-bench-installed" 2>/dev/null || true)" != "$WANT" ]; then
    "$VENV/bin/python" -m pip install --upgrade pip
    "$VENV/bin/python" -m pip install -r requirements.txt -r requirements-gpu.txt
    echo "$WANT" >"$VENV/.gpu-bench-installed"
  fi
  PY=$VENV/bin/python
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
ARGS=("$OUT_DIR" "--command=$COMMAND")
if [ "$DRY_RUN" = 1 ]; then
  ARGS+=(--dry-run)
fi
exec "$PY" -m experiments.gpu_bench "${ARGS[@]}"
