#!/usr/bin/env bash
# `make test`: runs the lit suite (FileCheck tests + GoogleTest units through
# lit) of the full build, then the GoogleTest units of the runtime-only build
# (the MLIR-free configuration the GPU machine uses), then the Python suite
# (python/tests, pytest) against both builds' packages, then, with a
# sanitizer build, the lit suite again under ASan + UBSan and each fuzzer
# from the checked-in corpus with a fixed seed, for MOEC_FUZZ_SECONDS
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
