#!/usr/bin/env bash
# fixed_memory's and the scorecard's recall sweeps at Zoology's task on one GPU machine that
# reaches no package registry (experiments/device_recall.py, within its 540 s budget), with that
# machine's own Python 3.12 and its jax, flax, optax, orbax-checkpoint, chex and matplotlib.
#
#   bash experiments/device_recall.sh --wheels [DIR]    # where the registry is reachable: the
#       wheels such a machine lacks, at this project's pins (requirements.txt's ml_collections,
#       grain, array_record and tensorflow-datasets, and the versions pip resolved for what
#       they import, TRANSITIVE below), for CPython 3.12 on manylinux x86_64 (~11 MB), into
#       DIR (default .whl, which git ignores)
#   bash experiments/device_recall.sh OUT_DIR [FLAGS]   # on the GPU machine, with the checkout
#       and its .whl copied there: when one of those modules is missing, installs .whl into
#       /tmp/device_recall_site first; then python3 -m experiments.device_recall OUT_DIR FLAGS
#       (PYTHON overrides python3; `python3 -m experiments.device_recall --help`: the flags)
#
# Exit status: device_recall's, or 2 for a bad command line or a module no wheel provides.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

DIRECT="ml_collections grain array_record tensorflow-datasets"  # pinned in requirements.txt
TRANSITIVE="dm-tree==0.1.10 docstring-parser==0.18.0 googleapis-common-protos==1.76.0
  immutabledict==4.3.1 portpicker==1.6.0 promise==2.3 simple-parsing==0.1.9
  tensorflow-metadata==1.21.0 termcolor==3.3.0 toml==0.10.2"
MODULES="ml_collections grain array_record tensorflow_datasets"
PLATFORMS="manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
  manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64"

REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") echo "error: OUT_DIR or --wheels [DIR] expected" >&2; exit 2 ;;
  --wheels)
    DIR=${2:-$REPO/.whl}
    mkdir -p "$DIR"
    pins=()
    for name in $DIRECT; do
      pin=$(grep -i -E "^${name//[-_]/[-_]}==" "$REPO/requirements.txt") || {
        echo "error: requirements.txt pins no $name" >&2; exit 2; }
      pins+=("$pin")
    done
    binary=() sources=()
    for pin in "${pins[@]}" $TRANSITIVE; do
      [[ $pin == promise==* ]] && sources+=("$pin") || binary+=("$pin")  # promise: no wheel
    done
    args=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d "$DIR")
    for p in $PLATFORMS; do args+=(--platform "$p"); done
    "$PY" -m pip download -q "${args[@]}" "${binary[@]}"
    "$PY" -m pip wheel -q --no-deps -w "$DIR" "${sources[@]}"
    ls "$DIR"
    exit 0
    ;;
esac

if ! "$PY" -c "import $(echo $MODULES | tr ' ' ',')" 2>/dev/null; then
  if ! ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
    echo "error: $PY lacks one of $MODULES and there is no $REPO/.whl (see --wheels)" >&2
    exit 2
  fi
  SITE=/tmp/device_recall_site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$REPO"/.whl/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" -m experiments.device_recall "$@"
