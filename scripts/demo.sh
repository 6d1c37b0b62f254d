#!/usr/bin/env bash
# `make demo`: compiles the example Qwen3-30B-A3B MoE layer for every target
# and runs it against the float64 reference.
# Usage: scripts/demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
moec="$build/bin/moec"
example=examples/qwen3_moe_layer.mlir
out="$build/demo"
mkdir -p "$out"

cat <<'MSG'
== moec demo: the Qwen3-30B-A3B MoE layer (E=128, H=2048, I=768, top-8) ==
The layer is written in the moe dialect. The pipeline fuses the permute into
a gathered gate_up matmul with SwiGLU in its epilogue, and the unpermute into
a scattered, weighted down projection. It then emits kernels for the H200
(sm_90a cubin), AMD MI300 (gfx942 HSACO) and the host CPU. On sm_90a the
routing is warp-level and the matmuls are warp-specialized wgmma kernels fed
by TMA (bench/results/grouped-gemm-h200.md: the layer runs about 3x a torch
composition on an H200); the other targets get simpler kernels.
MSG
echo
echo "\$ $moec compile $example -o $out/qwen3.moecb --target sm_90a,gfx942,host"
"$moec" compile "$example" -o "$out/qwen3.moecb" --target sm_90a,gfx942,host
echo
echo "\$ $moec inspect $out/qwen3.moecb   (launches of the sm_90a entry)"
"$moec" inspect "$out/qwen3.moecb" | sed -n '/\[sm_90a\]/,/reference ops/p' |
  grep -E "entry|_k[0-9]+_"
echo
runner="$build-runtime/bin/moec-runner"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   [[ -x $runner ]]; then
  echo "A GPU is present: checking the cubin on it (T=256)."
  echo "\$ $runner $out/qwen3.moecb --sym T=256 --no-end-to-end"
  "$runner" "$out/qwen3.moecb" --sym T=256 --no-end-to-end
else
  echo "No GPU here: running the same kernels on the host backend (T=8)."
  echo "The float64 reference converts all 128 experts' weights, so this takes"
  echo "about a minute."
  echo "\$ $moec run $example --sym T=8 --iters 1"
  "$moec" run "$example" --sym T=8 --iters 1
fi
