#!/usr/bin/env bash
# `make test`: runs the lit suite (FileCheck tests + GoogleTest units through
# lit) of the full build, then the GoogleTest units of the runtime-only build
# (the MLIR-free configuration the GPU machine uses), then the Python suite
# (python/tests, pytest) against both builds' packages, and ends with one
# line "N passed, M failed".
# Usage: scripts/run-tests.sh [build-dir] [runtime-only-build-dir]
set -uo pipefail
build=${1:-build}
runtime_build=${2:-}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

cmake --build "$build" --target check-moec 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

passed=$(sed -n 's/^ *Passed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
passed=${passed:-0}
failed=0
for kind in Failed Unresolved "Unexpectedly Passed" "Timed Out"; do
  n=$(sed -n "s/^ *$kind *: *\([0-9]*\).*/\1/p" "$log" | tail -1)
  failed=$((failed + ${n:-0}))
done
if [[ $status -ne 0 && $failed -eq 0 ]]; then
  failed=1  # the build or lit itself failed before counting
fi

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

# pytest over one build's package; adds to the counts.
run_pytest() {
  local package_dir=$1 label=$2
  if [[ ! -d $package_dir ]]; then
    echo "== Python suite ($label): $package_dir missing (pybind11 not found?)"
    failed=$((failed + 1))
    status=1
    return
  fi
  echo "== Python suite ($label) =="
  PYTHONPATH="$package_dir" MOEC_TEST_BUNDLE="$bundle" \
    python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee "$log"
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

# A bundle compiled by the CLI, for the tests of the runtime-only package.
bundle=$(mktemp --suffix=.moecb)
trap 'rm -f "$log" "$bundle"' EXIT
if ! "$build/bin/moec" compile test/Integration/ops.mlir -o "$bundle" \
    --target sm_90a,host >/dev/null; then
  echo "run-tests: compiling the test bundle failed"
  failed=$((failed + 1))
  status=1
fi
run_pytest "$build/python_packages" "full build"
if [[ -n $runtime_build ]]; then
  run_pytest "$runtime_build/python_packages" "runtime-only build"
fi

echo "$passed passed, $failed failed"
exit $status
