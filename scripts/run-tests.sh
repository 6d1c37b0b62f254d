#!/usr/bin/env bash
# `make test`: runs the lit suite (FileCheck tests + GoogleTest units through
# lit) of the full build, then the GoogleTest units of the runtime-only build
# (the MLIR-free configuration the GPU machine uses), and ends with one line
# "N passed, M failed".
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

echo "$passed passed, $failed failed"
exit $status
