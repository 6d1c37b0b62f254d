#!/usr/bin/env bash
# `make demo`: shows the moe dialect on the example Qwen3-30B-A3B MoE layer.
# Usage: scripts/demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
opt="$build/bin/moec-opt"
example=examples/qwen3_moe_layer.mlir

cat <<'MSG'
== moec demo: the Qwen3-30B-A3B MoE layer in the moe dialect ==
What this shows today: the layer (E=128, H=2048, I=768, top-8) written in the
moe dialect, parsed, verified and printed back by moec-opt, then put through
the canonicalizer. Lowering to GPU kernels (NVVM/PTX/cubin), the runtime and
timings come with the compiler pipeline, which has not landed yet: nothing
below runs on a GPU or computes numbers.
MSG
echo
echo "\$ $opt $example"
"$opt" "$example"
echo
echo "\$ $opt $example --canonicalize --mlir-print-op-generic | grep -c '\"moe\.'"
count=$("$opt" "$example" --canonicalize --mlir-print-op-generic | grep -c '"moe\.')
echo "$count"
echo
echo "The layer verifies and round-trips; $count moe ops survive canonicalization."
echo "Op reference: docs/dialects/moe.md. Guide: docs/README.md."
