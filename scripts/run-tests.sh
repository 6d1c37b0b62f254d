#!/usr/bin/env bash
# moec's test suites, in two tiers with one meaning each:
#
#   scripts/run-tests.sh check BUILD                        (make check)
#     The edit-test loop: the lit suite of BUILD (FileCheck tests and the
#     GoogleTest units), then the Python suite on the host backend against
#     BUILD's package (BUILD/python_packages, nothing installed; the
#     moec.torch tests run where python3 has torch, else they skip).
#
#   scripts/run-tests.sh test BUILD RUNTIME_BUILD ASAN_BUILD (make test, CI)
#     Everything: the lit suite of BUILD; the units of the MLIR-free
#     RUNTIME_BUILD; the Python suite against the packages as pip installs
#     them into fresh venvs, the full one (with torch and transformers) and
#     the runtime-only one; the lit suite again under ASan + UBSan
#     (ASAN_BUILD); each fuzzer over its checked-in corpus.
#
# Each stage prints its time, and the run ends with a table of them and the
# line "N passed, M failed". Fuzzing (test only): each fuzzer's corpus is
# split over $MOEC_FUZZ_JOBS processes (default 2) that each run for
# $MOEC_FUZZ_SECONDS (bundle reader, default 20) or
# $MOEC_FUZZ_COMPILER_SECONDS (compiler, default 60) by libFuzzer's clock:
# the replay of the whole corpus always completes (it is what catches
# regressions, about 75 s for the compiler on 2 cores), the rest of the time
# goes to mutations. Long fuzzing is `make fuzz` (fuzz/README.md).
set -uo pipefail
mode=${1:-}
build=${2:-build}
runtime_build=${3:-}
asan_build=${4:-}
if [[ $mode != check && $mode != test ]] ||
   [[ $mode == test && ( -z $runtime_build || -z $asan_build ) ]]; then
  echo "usage: scripts/run-tests.sh check BUILD" >&2
  echo "       scripts/run-tests.sh test BUILD RUNTIME_BUILD ASAN_BUILD" >&2
  exit 2
fi
fuzz_seconds=${MOEC_FUZZ_SECONDS:-20}
fuzz_compiler_seconds=${MOEC_FUZZ_COMPILER_SECONDS:-60}
fuzz_jobs=${MOEC_FUZZ_JOBS:-2}
log=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$log" "$work"' EXIT
passed=0
failed=0
status=0
stages=()
stage_name=
stage_start=0

# Stage bookkeeping: `stage NAME` starts one (ending the one before).
stage() {
  end_stage
  stage_name=$1
  stage_start=$SECONDS
  echo "== $stage_name =="
}
end_stage() {
  [[ -z $stage_name ]] && return
  local took=$((SECONDS - stage_start))
  stages+=("$(printf '%5d s  %s' "$took" "$stage_name")")
  echo "== $stage_name: ${took} s =="
  stage_name=
}

# Counts one failure (and shows why) unless "$@" succeeds; quiet otherwise.
quiet() {
  "$@" >"$log" 2>&1 && return 0
  tail -60 "$log"
  echo "run-tests: failed: $*"
  failed=$((failed + 1))
  status=1
  return 1
}

# check-moec of one build (lit tests and GoogleTest units); adds to the
# counts.
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

# GoogleTest binary $1; adds to the counts.
run_units() {
  "$1" --gtest_brief=1 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} n
  n=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
  passed=$((passed + ${n:-0}))
  n=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log")
  failed=$((failed + ${n:-0}))
  if [[ $rc -ne 0 ]]; then
    status=$rc
    [[ -z $n ]] && failed=$((failed + 1))
  fi
}

# pytest (python/tests) with python $1; adds to the counts. $2: full,
# runtime or build (test_package.py checks an installed package, not the
# build tree's); $3: 1 where torch and transformers must be there (their
# tests then fail instead of skipping without them); $4: 1 where
# matplotlib must be (the bench plot scripts' tests); $5: a command that
# runs pytest (without_llvm).
run_pytest() {
  local python=$1 kind=$2 torch=${3:-0} plots=${4:-0} installed=$2
  local wrapper=${5:-}
  [[ $kind == build ]] && installed=
  MOEC_TEST_INSTALLED="$installed" MOEC_TEST_EXPECT_CUDA=$cuda \
    MOEC_TEST_EXPECT_TORCH=$torch MOEC_TEST_EXPECT_MATPLOTLIB=$plots \
    MOEC_TEST_BUNDLE="$bundle" \
    $wrapper "$python" -m pytest -q -p no:cacheprovider python/tests 2>&1 |
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

cuda=0
grep -q '^MOEC_HAVE_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" && cuda=1
# The bundle the tests of loading without the compiler use.
bundle=$work/ops.moecb

stage "lit + GoogleTest units ($build)"
run_lit "$build"

if [[ $mode == check ]]; then
  stage "Python suite (host backend, $build/python_packages)"
  if quiet "$build/bin/moec" compile test/Integration/ops.mlir -o "$bundle" \
      --target sm_90a,host; then
    torch=0
    python3 -c "import torch, transformers, peft" 2>/dev/null && torch=1
    PYTHONPATH="$PWD/$build/python_packages${PYTHONPATH:+:$PYTHONPATH}" \
      run_pytest python3 build "$torch"
  fi
fi

if [[ $mode == test ]]; then
  stage "GoogleTest units ($runtime_build, runtime only)"
  run_units "$runtime_build/unittests/MoecUnitTests"

  # The wheel of build tree $1 (scripts/make-wheel.sh: `pip wheel .` in
  # the tree make built, so nothing compiles again, then auditwheel repair;
  # it fails where the wheel is over 60 MB); the rest: environment for the
  # build. Sets $wheel to the wheel's path.
  build_wheel() {
    local tree=$1
    shift
    quiet scripts/make-wheel.sh "$tree" "$work/wheels-$(basename "$tree")" \
      "$@" && wheel=$(sed -n 's/^wheel: \(.*\.whl\) .*/\1/p' "$log") &&
      echo "wheel: $(sed -n 's/^wheel: //p' "$log")"
  }

  # "$@" with /usr/lib/llvm-22 hidden (an empty directory mounted over it in
  # a private mount namespace), as on a machine without LLVM; where that
  # cannot be done (not root, no unshare), "$@" as it is, with a note.
  without_llvm() {
    local empty=$work/empty
    mkdir -p "$empty"
    if [[ -d /usr/lib/llvm-22 ]] && unshare -m sh -c \
        'mount --bind "$0" /usr/lib/llvm-22' "$empty" 2>/dev/null; then
      unshare -m sh -c 'mount --bind "$0" /usr/lib/llvm-22 && exec "$@"' \
        "$empty" "$@"
    else
      echo "run-tests: note: /usr/lib/llvm-22 not hidden (needs root, unshare" \
        "and mount); the suite runs with LLVM installed"
      "$@"
    fi
  }

  # A fresh venv $1 with the pinned test requirements and the wheel $2.
  install_fresh() {
    quiet python3 -m venv "$1" &&
      quiet "$1/bin/python" -m pip install -q --disable-pip-version-check \
        -r python/requirements-test.txt &&
      quiet "$1/bin/python" -m pip install -q --disable-pip-version-check \
        --no-deps "$2"
  }

  # torch, transformers and peft (python/requirements-torch.txt: PyPI's
  # CUDA build of torch, about 5 GB installed) in a venv kept in $build and
  # made again only when the requirements change; the fresh venv $1 sees it
  # through a .pth file, after its own site-packages (so moec and the
  # pinned numpy are the fresh venv's).
  add_torch() {
    local torch_venv=$build/torch-venv stamp
    stamp=$(cat python/requirements-test.txt python/requirements-torch.txt |
            sha256sum | cut -c1-16)
    if [[ $(cat "$torch_venv/stamp" 2>/dev/null) != "$stamp" ]]; then
      rm -rf "$torch_venv"
      quiet python3 -m venv "$torch_venv" &&
        quiet "$torch_venv/bin/python" -m pip install -q \
          --disable-pip-version-check -r python/requirements-test.txt \
          -r python/requirements-torch.txt &&
        echo "$stamp" >"$torch_venv/stamp" || return 1
      echo "torch and transformers installed into $torch_venv"
    fi
    local purelib="import sysconfig; print(sysconfig.get_path('purelib'))"
    local site own
    site=$("$torch_venv/bin/python" -c "$purelib") &&
      own=$("$1/bin/python" -c "$purelib") &&
      echo "$site" >"$own/moec-test-torch.pth"
  }

  stage "pip: full package (wheel from $build), torch"
  full_ok=
  if build_wheel "$build" && install_fresh "$work/full" "$wheel"; then
    full_ok=1
    # compiled by the installed CLI
    quiet "$work/full/bin/moec" compile test/Integration/ops.mlir \
      -o "$bundle" --target sm_90a,host
    # Only here: the runtime-only suite has no compiler for moec.torch's
    # host kernels.
    add_torch "$work/full" && full_torch=1
    # matplotlib for the bench plot scripts (python/requirements-bench.txt)
    quiet "$work/full/bin/python" -m pip install -q \
      --disable-pip-version-check -r python/requirements-bench.txt &&
      full_plots=1
  fi
  [[ -f $bundle ]] || quiet "$build/bin/moec" compile \
    test/Integration/ops.mlir -o "$bundle" --target sm_90a,host
  if [[ -n $full_ok ]]; then
    # The wheel is self-contained: its suite runs where no LLVM is.
    stage "Python suite (installed package: full; no LLVM installed)"
    run_pytest "$work/full/bin/python" full "${full_torch:-0}" \
      "${full_plots:-0}" without_llvm
  fi

  # The runtime-only package as a GPU machine installs it
  # (MOEC_RUNTIME_ONLY=ON pip install .), from the tree make configured.
  stage "pip + Python suite: runtime-only package (wheel from $runtime_build)"
  if build_wheel "$runtime_build" MOEC_RUNTIME_ONLY=ON &&
      install_fresh "$work/runtime" "$wheel"; then
    run_pytest "$work/runtime/bin/python" runtime
  fi

  # One fuzzer for its time limit and a fixed seed, its checked-in corpus
  # split over $fuzz_jobs processes; a crash, leak, time-out or memory-limit
  # hit fails it (libFuzzer exits nonzero and writes the input to
  # fuzz-artifacts/).
  run_fuzzer() {
    local target=$1 seconds=$2 rc=0 i pids=()
    local args=(-seed=1 -max_total_time="$seconds" -rss_limit_mb=2048
                -print_final_stats=1
                -artifact_prefix="$asan_build/fuzz-artifacts/$target-")
    if [[ $target == compiler ]]; then
      args+=(-timeout=60 -dict=fuzz/mlir.dict -max_len=16384)
    else
      args+=(-timeout=10)
    fi
    mkdir -p "$asan_build/fuzz-artifacts"
    i=0
    for input in fuzz/corpus/"$target"/*; do
      mkdir -p "$work/fuzz-$target-$((i % fuzz_jobs))"
      cp "$input" "$work/fuzz-$target-$((i % fuzz_jobs))/"
      i=$((i + 1))
    done
    echo "fuzzer $target: $i inputs over $fuzz_jobs processes, ${seconds} s each"
    for ((j = 0; j < fuzz_jobs; ++j)); do
      "$asan_build/bin/moec-fuzz-$target" "${args[@]}" \
        "$work/fuzz-$target-$j" >"$log.$target.$j" 2>&1 &
      pids+=($!)
    done
    for ((j = 0; j < fuzz_jobs; ++j)); do
      wait "${pids[$j]}" || rc=$?
      grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs)' "$log.$target.$j"
    done
    if [[ $rc -eq 0 ]]; then
      passed=$((passed + 1))
    else
      for ((j = 0; j < fuzz_jobs; ++j)); do tail -40 "$log.$target.$j"; done
      echo "run-tests: fuzzer $target failed (exit $rc); input in" \
        "$asan_build/fuzz-artifacts/"
      failed=$((failed + 1))
      status=1
    fi
    rm -f "$log.$target".*
  }

  # Uninstrumented libMLIR.so / libLLVM.so share containers and allocators
  # with our instrumented code: container-overflow annotations and the
  # poisoning of BumpPtrAllocator slabs (done only on our side) misfire.
  export ASAN_OPTIONS=detect_container_overflow=0:allow_user_poisoning=0
  export UBSAN_OPTIONS=print_stacktrace=1
  stage "lit + GoogleTest units under ASan + UBSan ($asan_build)"
  run_lit "$asan_build"
  stage "fuzzers (corpus replay + mutations)"
  run_fuzzer bundle "$fuzz_seconds"
  run_fuzzer compiler "$fuzz_compiler_seconds"
fi

end_stage
echo "== stages =="
printf '%s\n' "${stages[@]}"
echo "$passed passed, $failed failed"
exit $status
