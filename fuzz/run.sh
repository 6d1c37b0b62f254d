#!/usr/bin/env bash
# Runs one fuzzer of build-asan/ from the checked-in corpus.
# Usage: fuzz/run.sh compiler|bundle SECONDS [JOBS]
# New inputs go to build-asan/fuzz-corpus/TARGET/, crashes to
# build-asan/fuzz-artifacts/. See fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz/run.sh compiler|bundle SECONDS [JOBS]}
seconds=${2:?usage: fuzz/run.sh compiler|bundle SECONDS [JOBS]}
jobs=${3:-1}
build=${MOEC_ASAN_BUILD:-build-asan}
binary="$build/bin/moec-fuzz-$target"
[[ -x $binary ]] || { echo "fuzz/run.sh: $binary missing (make sanitize)" >&2; exit 1; }
mkdir -p "$build/fuzz-corpus/$target" "$build/fuzz-artifacts"
args=(-max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1
      -artifact_prefix="$build/fuzz-artifacts/$target-")
# A compiler input may take seconds (LLVM code generation for two targets);
# a bundle, milliseconds.
if [[ $target == compiler ]]; then
  args+=(-timeout=60 -dict=fuzz/mlir.dict -max_len=16384)
else
  args+=(-timeout=10)
fi
if [[ $jobs -gt 1 ]]; then
  args+=(-jobs="$jobs" -workers="$jobs")
fi
# Container annotations and allocator poisoning misfire across the
# uninstrumented libMLIR.so (scripts/run-tests.sh says more).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_container_overflow=0:allow_user_poisoning=0}
exec "$binary" "${args[@]}" "$build/fuzz-corpus/$target" "fuzz/corpus/$target"
