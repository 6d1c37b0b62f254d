#!/usr/bin/env bash
# Prints one line "sha256  what" per lowering output of every kernel source
# the project ships (examples/, bench/kernels/, test/Integration/) and every
# lit input of the conversion: the kernel-stage IR of convert-moe-to-kernels
# for each of its targets, and the bundle and PTX of `moec compile` for
# sm_90a, sm_90 (the nvvm kernels), sm_80 (generic), gfx942 and host. A change to the lowering that must not
# change what is generated (a restructure) is checked by running this before
# and after it and diffing the two outputs:
#   scripts/lowering-digests.sh build > /tmp/before.txt
#   ... change, rebuild ...
#   scripts/lowering-digests.sh build > /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt
# A "bundle" line covers the whole file, the host IR's text included; its
# "launches" line only what `moec inspect --params` shows: buffers, launches,
# parameters, reference ops.
# A restructure that renames kernels (an op's new name is in its kernels'
# names) compares the outputs with the names mapped: MOEC_DIGEST_SED, a sed
# -E script, is applied to every output before it is hashed, e.g.
#   MOEC_DIGEST_SED='s/grouped_matmul_weight_grad|grouped_weight_grad|grouped_matmul/GMM/g'
# (a binary's string table still changes with a name's length: compare the
# ir and asm lines then).
# Usage: scripts/lowering-digests.sh [build-dir]
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"

sources=(examples/*.mlir bench/kernels/*.mlir test/Integration/*.mlir)
lit_inputs=(test/Conversion/convert-moe-to-kernels*.mlir)

digest() {  # what file
  printf '%s  %s\n' \
    "$(sed -E -e "${MOEC_DIGEST_SED:-}" <"$2" | sha256sum | cut -c1-16)" "$1"
}

# Kernel-stage IR: the fusion pipeline moec runs, then the conversion.
for src in "${sources[@]}" "${lit_inputs[@]}"; do
  for target in generic nvvm sm90a rocdl host; do
    out=$work/ir.mlir
    if "$build/bin/moec-opt" --split-input-file "$src" \
         -moe-fuse-permute -moe-fuse-epilogue -moe-fuse-combine -moe-tile \
         "--convert-moe-to-kernels=target=$target" >"$out" 2>&1; then
      digest "ir $target $src" "$out"
    else
      # Failures are outputs too (their diagnostics must not change).
      digest "ir-error $target $src" "$out"
    fi
  done
done

# Bundles (and PTX) of the compiler driver.
for src in "${sources[@]}"; do
  for target in sm_90a sm_90 sm_80 gfx942 host; do
    dir=$work/asm
    rm -rf "$dir"
    if "$build/bin/moec" compile "$src" -o "$work/out.moecb" \
         --target "$target" --emit-asm "$dir" >"$work/log" 2>&1; then
      digest "bundle $target $src" "$work/out.moecb"
      # What the runtime reads, apart from the host source text the bundle
      # also carries: a change to the host IR's form keeps this line.
      "$build/bin/moec" inspect --params "$work/out.moecb" >"$work/inspect" 2>&1
      digest "launches $target $src" "$work/inspect"
      for asm in "$dir"/*; do
        [[ -f $asm ]] && digest "asm $target $src $(basename "$asm")" "$asm"
      done
    else
      digest "bundle-error $target $src" "$work/log"
    fi
  done
done
