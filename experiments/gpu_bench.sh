#!/usr/bin/env bash
# The attention, decode and train suites on one GPU, within 10 minutes; writes a Markdown table
# and the raw JSON of each suite.
#
#   experiments/gpu_bench.sh prepare      # here, on the CPU machine: pure-Python deps -> .whl/pylib
#   experiments/gpu_bench.sh [OUT_DIR]    # on the GPU machine (default OUT_DIR: $OUT or runs/gpu_bench)
#   SMOKE=1 experiments/gpu_bench.sh DIR  # tiny sizes: checks the script itself on a CPU
#
# The GPU machine has jax (CUDA), flax, optax, orbax, chex, numpy but not ml_collections (which
# jaxformer.ladder and the configs import) nor PyYAML (which ml_collections imports). Both are
# pure Python: `prepare` copies them from this machine's environment into .whl/pylib (ignored by
# git), and the device run carries that folder (run(..., carry=[".whl"])) and puts it on
# PYTHONPATH only when the machine lacks them. Nothing else on the bench path needs them
# (no tensorflow-datasets, no grain: the suites make their own random tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ "${1:-}" = "prepare" ]; then
  mkdir -p .whl/pylib
  "$PYTHON" - <<'PY'
import os, shutil, ml_collections, yaml
for module in (ml_collections, yaml):
  src = os.path.dirname(module.__file__)
  dst = os.path.join(".whl/pylib", os.path.basename(src))
  shutil.rmtree(dst, ignore_errors=True)
  # Python sources only: yaml falls back to its pure-Python parser without the C extension
  shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "__pycache__", "tests"))
  print("copied", src, "->", dst)
PY
  exit 0
fi

OUT_DIR=${1:-${OUT:-runs/gpu_bench}}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import ml_collections" 2>/dev/null; then
  export PYTHONPATH="$PYTHONPATH:$PWD/.whl/pylib"
  "$PYTHON" -c "import ml_collections" || {
    echo "ml_collections is missing: run '$0 prepare' on the CPU machine and carry .whl" >&2
    exit 2
  }
fi
"$PYTHON" -c "import jax; print('jax', jax.__version__, jax.devices())"

# Budget (seconds): compile + run of each suite, 10 minutes in all with room to spare.
run_suite() {  # name, timeout, extra args
  local name=$1 limit=$2
  shift 2
  echo "== $name (timeout ${limit}s)"
  if ! timeout "$limit" "$PYTHON" -m experiments.bench "$name" "$@" --json >"$OUT_DIR/$name.json" \
    2>"$OUT_DIR/$name.log"; then
    echo "$name failed or ran out of time; see $OUT_DIR/$name.log" >&2
    tail -5 "$OUT_DIR/$name.log" >&2 || true
  fi
}
if [ "${SMOKE:-0}" = "1" ]; then  # a quick check of this script on a CPU
  run_suite attention 300 --size small --lengths 256
  run_suite decode 300 --size tiny
  run_suite train 300 --size tiny
else
  run_suite attention 180 --size medium
  run_suite decode 150 --size gpt_small
  run_suite train 180 --size gpt2_small
fi

"$PYTHON" - "$OUT_DIR" <<'PY'
import json, os, sys
from experiments.bench import SUITES
from jaxformer.bench import format_table

out = sys.argv[1]
lines, machine = ["# GPU benchmarks", ""], {}
for name in ("attention", "decode", "train"):
  path = os.path.join(out, f"{name}.json")
  try:
    with open(path) as f:
      result = json.load(f)
  except (OSError, ValueError):
    lines += [f"## {name}: no result (see {name}.log)", ""]
    continue
  suite = result["suites"][name]
  lines += [f"## {name} ({suite['size']}): {SUITES[name].description}", "", "```"]
  lines += [format_table(suite["rows"], SUITES[name].columns), "```", ""]
  machine = result["machine"]
lines.append("machine: " + ", ".join(f"{k}={v}" for k, v in machine.items()))
table = "\n".join(lines) + "\n"
with open(os.path.join(out, "benchmarks_gpu.md"), "w") as f:
  f.write(table)
print(table)
PY
