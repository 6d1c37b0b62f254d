#!/usr/bin/env bash
# Regenerates the fuzzers' seed candidates from the tests, then keeps those
# that add coverage (libFuzzer -merge=1) in fuzz/corpus/{compiler,bundle}.
# Usage: fuzz/make-seeds.sh [sanitizer-build-dir]   (default build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/compiler" "$tmp/bundle" fuzz/corpus/compiler fuzz/corpus/bundle

# Compiler: every split of every test and example .mlir, without the RUN and
# CHECK lines (comments the parser skips anyway).
python3 - "$tmp/compiler" <<'PY'
import glob, hashlib, re, sys
out = sys.argv[1]
for path in sorted(glob.glob("test/**/*.mlir", recursive=True) +
                   glob.glob("examples/*.mlir")):
    for piece in open(path).read().split("// -----"):
        text = "\n".join(l for l in piece.splitlines()
                         if not re.match(r"\s*//", l)).strip() + "\n"
        if "func.func" in text or "module" in text:
            name = hashlib.sha1(text.encode()).hexdigest()[:16]
            open(f"{out}/{name}.mlir", "w").write(text)
PY

# Bundle: bundles `moec compile` writes for single test cases (sm_90a and
# host), those under 64 KiB: small inputs mutate fast.
n=0
for piece in "$tmp"/compiler/*.mlir; do
  for target in sm_90a host; do
    out="$tmp/bundle/$(basename "$piece" .mlir)-$target.moecb"
    if "$build/bin/moec" compile "$piece" -o "$out" --target "$target" \
        >/dev/null 2>&1 && [[ $(stat -c %s "$out") -lt 65536 ]]; then
      n=$((n + 1))
    else
      rm -f "$out"
    fi
  done
  [[ $n -ge 60 ]] && break
done

export ASAN_OPTIONS=detect_container_overflow=0:allow_user_poisoning=0
for kind in compiler bundle; do
  "$build/bin/moec-fuzz-$kind" -merge=1 -rss_limit_mb=2048 -timeout=60 \
    -artifact_prefix="$tmp/" \
    "fuzz/corpus/$kind" "$tmp/$kind" 2>&1 | tail -1
done
