#!/usr/bin/env bash
# The self-contained wheel (`make wheel`): the compiler, the runtime, the
# CUDA launcher and the commands in one wheel that needs no LLVM or MLIR
# installed (_compiler links them statically; python/CMakeLists.txt).
#
#   scripts/make-wheel.sh BUILD OUT [VAR=VALUE ...]
#
# 1. `pip wheel .` from the build tree BUILD: where make configured it, with
#    make's settings (tests on; no Python hints, site-packages or FindPython
#    backport, so the cache keeps the interpreter make found and gets no
#    temporary paths) and nothing compiles again; a new BUILD is configured
#    afresh for $MOEC_WHEEL_PYTHON (default python3), as the wheel for another
#    Python is built (make wheel PYTHON=python3.12). VAR=VALUE: environment
#    for the build (MOEC_RUNTIME_ONLY=ON: the runtime-only package).
# 2. `auditwheel repair`: the shared libraries outside the manylinux set
#    (libz, libzstd) grafted into the wheel, and the manylinux tag the wheel
#    really satisfies.
# Writes OUT/moec-*.whl and prints "wheel: PATH (SIZE MB, TAG)"; the wheel
# must be at most $MOEC_WHEEL_MAX_MB (default 60) to travel to a GPU machine.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: scripts/make-wheel.sh BUILD OUT [VAR=VALUE ...]" >&2
  exit 2
fi
tree=$(realpath -m "$1") out=$(realpath -m "$2")
shift 2
python=${MOEC_WHEEL_PYTHON:-python3}
max_mb=${MOEC_WHEEL_MAX_MB:-60}
cd "$(dirname "$0")/.."
# The build backend runs from a venv kept in the tree: scikit-build-core
# clears a tree's CMake cache when its own location changes (a fresh venv
# each time would rebuild everything).
build_venv=$tree/pip-build-venv
raw=$tree/wheel-raw

mkdir -p "$tree"
[[ -x $build_venv/bin/python ]] || "$python" -m venv "$build_venv"
"$build_venv/bin/python" -m pip install -q --disable-pip-version-check \
  -r python/requirements-build.txt -r python/requirements-wheel.txt

settings=()
if [[ -f $tree/CMakeCache.txt ]] &&
   grep -q '^MOEC_BUILD_TESTS:BOOL=ON' "$tree/CMakeCache.txt"; then
  settings=(--config-settings=cmake.define.MOEC_BUILD_TESTS=ON
            --config-settings=cmake.python-hints=false
            --config-settings=search.site-packages=false
            --config-settings=backport.find-python=0)
fi
rm -rf "$raw"
env "$@" "$build_venv/bin/python" -m pip wheel -q \
  --disable-pip-version-check --no-build-isolation --no-deps -w "$raw" \
  --config-settings=build-dir="$tree" "${settings[@]}" .
built=$(ls "$raw"/moec-*.whl)

mkdir -p "$out"
rm -f "$out"/"$(basename "${built%%-linux_*}")"-*.whl
PATH=$build_venv/bin:$PATH auditwheel repair -w "$out" "$built" >"$raw/repair.log" 2>&1 ||
  { cat "$raw/repair.log"; exit 1; }
wheel=$(ls -t "$out"/"$(basename "${built%%-linux_*}")"-*.whl | head -1)
bytes=$(stat -c %s "$wheel")
tag=$(basename "$wheel" .whl | sed 's/.*-//')
awk -v w="$wheel" -v b="$bytes" -v t="$tag" \
  'BEGIN { printf "wheel: %s (%.1f MB, %s)\n", w, b / 1e6, t }'
if ((bytes > max_mb * 1000000)); then
  echo "make-wheel: $wheel is over $max_mb MB" >&2
  exit 1
fi
