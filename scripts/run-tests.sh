#!/usr/bin/env bash
# `make test`: runs the lit suite (FileCheck tests + GoogleTest units through
# lit) of the full build, then the GoogleTest units of the runtime-only build
# (the MLIR-free configuration the GPU machine uses), then the Python suite
# (python/tests, pytest) against the package as `pip install .` installs it
# into a fresh venv, full (with torch and transformers, for moec.torch) and
# runtime-only (needs python3-venv, and PyPI or pip's cache for the pinned
# requirements), then, with a sanitizer build,
# the lit suite again under ASan + UBSan and each fuzzer from the
# checked-in corpus with a fixed seed, for MOEC_FUZZ_SECONDS
# (default 60) the bundle reader and MOEC_FUZZ_COMPILER_SECONDS (default 180:
# its 380 seeds alone take about 150 s on 2 cores) the compiler; ends with
# one line "N passed, M failed".
# Usage: scripts/run-tests.sh [build-dir] [runtime-only-build-dir]
#                             [sanitizer-build-dir]
set -uo pipefail
build=${1:-build}
runtime_build=${2:-}
asan_build=${3:-}
fuzz_seconds=${MOEC_FUZZ_SECONDS:-60}
fuzz_compiler_seconds=${MOEC_FUZZ_COMPILER_SECONDS:-180}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
passed=0
failed=0
status=0

# check-moec of one build; adds to the counts.
run_lit() {
  cmake --build "$1" --target check-moec 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} n before=$failed
  n=$(sed -n 's/^ *Passed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  passed=$((passed + ${n:-0}))
  for kind in Failed Unresolved "Unexpectedly Passed" "Timed Out"; do
    n=$(sed -n "s/^ *$kind *: *\([0-9]*\).*/\1/p" "$log" | tail -1)
    failed=$((failed + ${n:-0}))
  done
  if [[ $rc -ne 0 ]]; then
    status=$rc
    # the build or lit itself failed before counting
    [[ $failed -eq $before ]] && failed=$((failed + 1))
  fi
}

run_lit "$build"

if [[ -n $runtime_build ]]; then
  echo "== runtime-only build ($runtime_build): GoogleTest units =="
  "$runtime_build/unittests/MoecUnitTests" --gtest_brief=1 2>&1 | tee "$log"
  unit_status=${PIPESTATUS[0]}
  n=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
  passed=$((passed + ${n:-0}))
  n=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log")
  failed=$((failed + ${n:-0}))
  if [[ $unit_status -ne 0 ]]; then
    status=$unit_status
    [[ -z $n ]] && failed=$((failed + 1))
  fi
fi

# The Python suite runs against the package as pip installs it, each in a
# fresh venv, so that a file missing from the package fails here: the full
# package (compiler, runtime, CUDA launcher, commands) and the runtime-only
# one the GPU machine installs.
venvs=$(mktemp -d)
trap 'rm -rf "$log" "$venvs"' EXIT
cuda=0
grep -q '^MOEC_HAVE_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" && cuda=1

# Runs "$@", quiet; on failure shows its output and counts one failure.
quiet() {
  "$@" >"$log" 2>&1 && return 0
  tail -60 "$log"
  echo "run-tests: failed: $*"
  failed=$((failed + 1))
  status=1
  return 1
}

# A fresh venv $1 with the pinned test requirements, and moec installed
# into it from "${@:2}" (a wheel, or . and pip's options).
pip_install() {
  local venv=$1 start=$SECONDS
  shift
  quiet python3 -m venv "$venv" &&
    quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      -r python/requirements-test.txt -r python/requirements-build.txt &&
    quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      --no-build-isolation "$@" || return 1
  echo "installed in $((SECONDS - start)) s (venv and requirements included)"
}

# torch and transformers (python/requirements-torch.txt: PyPI's CUDA build
# of torch, about 5 GB installed) into venv $1, for the moec.torch tests.
install_torch() {
  local start=$SECONDS
  quiet "$1/bin/python" -m pip install -q --disable-pip-version-check \
    -r python/requirements-torch.txt || return 1
  echo "torch and transformers installed in $((SECONDS - start)) s"
}

# pytest (python/tests) with the venv's python; adds to the counts. $2:
# full or runtime, for test_package.py; $3: 1 where torch and transformers
# were installed (their tests then fail instead of skipping without them).
run_pytest() {
  local venv=$1 kind=$2 torch=${3:-0}
  echo "== Python suite (installed package: $kind) =="
  MOEC_TEST_INSTALLED="$kind" MOEC_TEST_EXPECT_CUDA=$cuda \
    MOEC_TEST_EXPECT_TORCH=$torch MOEC_TEST_BUNDLE="$bundle" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests 2>&1 |
    tee "$log"
  local rc=${PIPESTATUS[0]}
  local line n
  line=$(grep -E '^[0-9]+ (passed|failed|skipped)|^=+ .*(passed|failed|error)' "$log" | tail -1)
  n=$(sed -n 's/.*\b\([0-9][0-9]*\) passed.*/\1/p' <<<"$line")
  passed=$((passed + ${n:-0}))
  n=$(sed -n 's/.*\b\([0-9][0-9]*\) failed.*/\1/p' <<<"$line")
  failed=$((failed + ${n:-0}))
  n=$(sed -n 's/.*\b\([0-9][0-9]*\) error.*/\1/p' <<<"$line")
  failed=$((failed + ${n:-0}))
  if [[ $rc -ne 0 ]]; then
    status=$rc
    [[ -z $line ]] && failed=$((failed + 1))
  fi
}

# The full package's wheel is built from $build itself (`pip wheel .`):
# scikit-build-core configures the tree make built, keeping make's
# settings (tests on; no Python hints, site-packages or FindPython
# backport, so the cache keeps the interpreter make found and gets no
# temporary paths), so nothing compiles again. The backend runs from a venv
# kept in $build: scikit-build-core clears a build tree's CMake cache when
# its own location changes (a fresh venv each time would rebuild all).
echo "== pip: full package (wheel built from $build) =="
start=$SECONDS
build_venv=$build/pip-build-venv
bundle=$venvs/ops.moecb
if { [[ -x $build_venv/bin/python ]] || quiet python3 -m venv "$build_venv"; } &&
    quiet "$build_venv/bin/python" -m pip install -q \
      --disable-pip-version-check -r python/requirements-build.txt &&
    quiet "$build_venv/bin/python" -m pip wheel -q --disable-pip-version-check \
      --no-build-isolation --no-deps -w "$venvs/wheels" \
      --config-settings=build-dir="$build" \
      --config-settings=cmake.define.MOEC_BUILD_TESTS=ON \
      --config-settings=cmake.python-hints=false \
      --config-settings=search.site-packages=false \
      --config-settings=backport.find-python=0 . &&
    echo "wheel built in $((SECONDS - start)) s: $(ls "$venvs/wheels")" &&
    pip_install "$venvs/full" "$venvs"/wheels/moec-*.whl; then
  full_installed=1
  # The bundle the tests of loading without the compiler use, compiled by
  # the installed CLI.
  quiet "$venvs/full/bin/moec" compile test/Integration/ops.mlir \
    -o "$bundle" --target sm_90a,host
  # Only here: the runtime-only suite has no compiler for moec.torch's host
  # kernels, and a second torch would cost another 5 GB and minutes.
  install_torch "$venvs/full" && full_torch=1
fi
if [[ ! -f $bundle ]]; then
  quiet "$build/bin/moec" compile test/Integration/ops.mlir -o "$bundle" \
    --target sm_90a,host
fi
[[ -n ${full_installed:-} ]] && run_pytest "$venvs/full" full "${full_torch:-0}"

# The runtime-only package is built from scratch, in a temporary tree, with
# pip's pybind11, as on a GPU machine (about a minute on 2 cores).
if [[ -n $runtime_build ]]; then
  echo "== pip: runtime-only package (MOEC_RUNTIME_ONLY=ON pip install .) =="
  if MOEC_RUNTIME_ONLY=ON pip_install "$venvs/runtime" \
      --config-settings=build-dir="$venvs/runtime-build" .; then
    run_pytest "$venvs/runtime" runtime
  fi
fi

# One fuzzer for a fixed time and seed, on a copy of the checked-in corpus;
# a crash, leak, time-out or memory-limit hit fails it (libFuzzer exits
# nonzero and writes the input to fuzz-artifacts/).
run_fuzzer() {
  local target=$1 seconds=$2 work rc
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$target/." "$work/"
  mkdir -p "$asan_build/fuzz-artifacts"
  local args=(-seed=1 -max_total_time="$seconds" -rss_limit_mb=2048
              -print_final_stats=1
              -artifact_prefix="$asan_build/fuzz-artifacts/$target-")
  if [[ $target == compiler ]]; then
    args+=(-timeout=60 -dict=fuzz/mlir.dict -max_len=16384)
  else
    args+=(-timeout=10)
  fi
  echo "== fuzzer $target: ${seconds}s from $(ls "$work" | wc -l) inputs =="
  "$asan_build/bin/moec-fuzz-$target" "${args[@]}" "$work" >"$log" 2>&1
  rc=$?
  grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs|stat::number_of_executed_units)' \
    "$log"
  rm -rf "$work"
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1))
  else
    tail -60 "$log"
    echo "run-tests: fuzzer $target failed (exit $rc); input in" \
      "$asan_build/fuzz-artifacts/"
    failed=$((failed + 1))
    status=1
  fi
}

if [[ -n $asan_build ]]; then
  # Uninstrumented libMLIR.so / libLLVM.so share containers and allocators
  # with our instrumented code: container-overflow annotations and the
  # poisoning of BumpPtrAllocator slabs (done only on our side) misfire.
  export ASAN_OPTIONS=detect_container_overflow=0:allow_user_poisoning=0
  export UBSAN_OPTIONS=print_stacktrace=1
  echo "== sanitizer build ($asan_build): lit + GoogleTest under ASan + UBSan =="
  run_lit "$asan_build"
  run_fuzzer bundle "$fuzz_seconds"
  run_fuzzer compiler "$fuzz_compiler_seconds"
fi

echo "$passed passed, $failed failed"
exit $status
