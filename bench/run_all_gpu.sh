#!/usr/bin/env bash
# Every GPU bench script once, at small sizes: a smoke run that shows a
# broken script on the GPU machine in one device call (the numbers are not
# results: too few iterations and shapes to compare with bench/results).
#
#   bench/run_all_gpu.sh compile [BUILD] [DIR]    here, where MLIR is
#     The bundles the run needs into DIR (default .device/bench), from
#     BUILD's moec and moec-opt (default build): small ones (Qwen3 only
#     where a script's bundle would hold every model; about 8 MB, 3 min on
#     2 busy cores). The expert-parallel bundles need moec.ep, so torch:
#     $MOEC_PYTHON, default BUILD/torch-venv/bin/python (make test makes
#     it), else python3.
#
#   bench/run_all_gpu.sh run [DIR] [OUT]          on the GPU machine
#     Builds the runtime-only package into /tmp/rt if `import moec` fails,
#     then runs each script of `list` on DIR's bundles; writes
#     OUT/summary.txt (one line per script: status, seconds, command) and
#     OUT/logs.tar.gz (each script's log and JSON). Exits 1 if one failed.
#     expert_parallel runs only where there are 2 GPUs or more.
#     From here, one device call (carry DIR):
#       bench/run_all_gpu.sh run .device/bench $OUT
#
#   bench/run_all_gpu.sh list [DIR]               the commands, one a line
#
# Host-runnable scripts (the plots, python_compile_cache, the --emit-mlir
# paths) run in make check / make test (python/tests/test_bench_scripts.py),
# which also checks that every GPU script has a line here.
set -uo pipefail
mode=${1:-}
here=$(cd "$(dirname "$0")/.." && pwd)

# name|command (run from the repository root; $D: the bundles' folder,
# $J: where the script writes its JSON)
commands() {
  local D=$1 J=$2
  cat <<EOF
ceilings|python3 bench/ceilings.py --mib 64 --iters 3 --json $J/ceilings.json
memory_bound|python3 bench/memory_bound.py $D/memory_bound.moecb --models qwen3 --tokens 2048 --iters 3 --json $J/memory_bound.json
permute_destinations|python3 bench/permute_destinations.py $D/memory_bound.moecb --iters 3
permute_ncu|python3 bench/permute_ncu.py $D/memory_bound.moecb
grouped_gemm|python3 bench/grouped_gemm.py $D/grouped_gemm.moecb --layer-bundle $D/qwen3_layer.moecb --models qwen3 --tokens 512 --iters 3 --json $J/grouped_gemm.json
power_probe|python3 bench/power_probe.py $D/grouped_gemm.moecb --tokens 2048 --seconds 0.5 --reps 1 --log $J/power_probe_smi.csv
training_kernels|python3 bench/training_kernels.py $D/training_kernels.moecb --models qwen3 --tokens 2048 --iters 3 --json $J/training_kernels.json
lora_kernels|python3 bench/lora_kernels.py $D/lora_kernels.moecb --models qwen3 --tokens 2048 --ranks 16 --iters 3 --json $J/lora_kernels.json
small_wgrad|python3 bench/small_wgrad.py $D/small_wgrad.moecb --models qwen3 --tokens 8192 --skews 0 --iters 3 --json $J/small_wgrad.json
training_step|python3 bench/training_step.py $D/training_step.moecb --models qwen3 --tokens 2048 --ranks 0,16 --iters 3 --json $J/training_step.json
main_grad_step|python3 bench/main_grad_step.py $D/main_grad_step.moecb --models qwen3 --tokens 1,2048 --iters 3 --json $J/main_grad_step.json
fp8_kernels|python3 bench/fp8_kernels.py $D/fp8_kernels.moecb --models qwen3 --tokens 2048 --iters 3 --json $J/fp8_kernels.json
fp8_accumulation|python3 bench/fp8_accumulation.py --bundles $D/acc --models qwen3 --tokens 2048 --micro-batches 2 --steps 2 --json $J/fp8_accumulation.json
entry_overhead|python3 bench/entry_overhead.py $D/memory_bound.moecb --entry swiglu_qwen3 --sym T=16384 --calls 20 --repeats 1
expert_parallel|NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node 2 bench/expert_parallel.py $D/ep --models qwen3 --tokens 2048 --iters 3 --json $J/expert_parallel.json
EOF
}

compile_bundles() {
  local build=${1:-build} dir=${2:-.device/bench}
  local moec=$build/bin/moec opt=$build/bin/moec-opt
  mkdir -p "$dir/ep"
  set -e
  for k in memory_bound grouped_gemm training_kernels small_wgrad; do
    "$moec" compile "bench/kernels/$k.mlir" -o "$dir/$k.moecb" --target sm_90a
  done
  "$moec" compile examples/qwen3_moe_layer.mlir -o "$dir/qwen3_layer.moecb" \
    --target sm_90a
  python3 bench/lora_kernels.py --emit-mlir "$dir/lora_kernels.mlir" \
    --models qwen3 --ranks 16
  "$moec" compile "$dir/lora_kernels.mlir" -o "$dir/lora_kernels.moecb" \
    --target sm_90a
  python3 bench/fp8_kernels.py --emit-mlir "$dir/fp8_kernels.mlir" \
    --models qwen3
  "$moec" compile "$dir/fp8_kernels.mlir" -o "$dir/fp8_kernels.moecb" \
    --target sm_90a
  # The Qwen3 layers alone, full fine-tuning and LoRA r = 16, with their
  # derived backward (the commands of training_step.py's docstring).
  (cd bench && python3 -c "
import common
m = common.MODELS['qwen3']
print(common.layer_mlir('qwen3', m) + common.layer_mlir('qwen3', m, 16))
") >"$dir/training_step.mlir"
  "$opt" "$dir/training_step.mlir" -moe-autodiff=func=layer_qwen3 |
    "$opt" '-moe-autodiff=func=layer_qwen3_lora16 wrt=0,4,5,6,7' \
      -o "$dir/training_step_grad.mlir"
  "$moec" compile "$dir/training_step_grad.mlir" \
    -o "$dir/training_step.moecb" --target sm_90a
  # main_grad_step.py's Qwen3 pair: without and with accumulate=2,3.
  (cd bench && python3 -c "
import common
layer = common.layer_mlir('qwen3', common.MODELS['qwen3'])
print(layer + layer.replace('@layer_qwen3(', '@layer_qwen3_mg('))
") >"$dir/main_grad_step.mlir"
  "$opt" "$dir/main_grad_step.mlir" -moe-autodiff=func=layer_qwen3 |
    "$opt" '-moe-autodiff=func=layer_qwen3_mg accumulate=2,3' \
      -o "$dir/main_grad_step_grad.mlir"
  "$moec" compile "$dir/main_grad_step_grad.mlir" \
    -o "$dir/main_grad_step.moecb" --target sm_90a
  local python=${MOEC_PYTHON:-$build/torch-venv/bin/python}
  [[ -x $python ]] || python=python3
  PYTHONPATH="$PWD/$build/python_packages${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" bench/expert_parallel.py "$dir/ep" --emit-bundles --world 2 \
    --models qwen3
  # moec.torch.MoE's Qwen3 bundles, bf16 and FP8 (fp8_accumulation.py).
  PYTHONPATH="$PWD/$build/python_packages${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" bench/fp8_accumulation.py --emit-bundles "$dir/acc" \
    --models qwen3
  rm -f "$dir"/*.mlir
  set +e
  du -sh "$dir"
}

# The runtime-only package, where the machine has none (the GPU machine
# has CUDA, cmake, ninja and torch, and no MLIR).
ensure_runtime() {
  python3 -c "import moec" 2>/dev/null && return 0
  if [[ ! -d /tmp/rt/python_packages/moec ]]; then
    cmake -G Ninja -S . -B /tmp/rt -DMOEC_RUNTIME_ONLY=ON \
      -DMOEC_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="$(command -v python3)" \
      >/tmp/rt-configure.log 2>&1 &&
      cmake --build /tmp/rt >/tmp/rt-build.log 2>&1 ||
      { tail -30 /tmp/rt-configure.log /tmp/rt-build.log; return 1; }
  fi
  export PYTHONPATH=/tmp/rt/python_packages${PYTHONPATH:+:$PYTHONPATH}
}

run_all() {
  local dir=${1:-.device/bench} out=${2:-bench-gpu-logs}
  local logs failed=0 gpus name cmd start rc
  mkdir -p "$out"
  logs=$(mktemp -d)
  ensure_runtime || exit 1
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
  : >"$out/summary.txt"
  while IFS='|' read -r name cmd; do
    if [[ $name == expert_parallel && $gpus -lt 2 ]]; then
      echo "skipped  0 s  $name (needs 2 GPUs, $gpus here)" |
        tee -a "$out/summary.txt"
      continue
    fi
    start=$SECONDS
    bash -c "$cmd" >"$logs/$name.log" 2>&1
    rc=$?
    if [[ $rc -eq 0 ]]; then
      status=ok
    else
      status="FAILED($rc)"
      failed=1
      tail -20 "$logs/$name.log"
    fi
    echo "$status  $((SECONDS - start)) s  $name: $cmd" |
      tee -a "$out/summary.txt"
  done < <(commands "$dir" "$logs")
  tar -czf "$out/logs.tar.gz" -C "$logs" .
  rm -rf "$logs"
  return $failed
}

cd "$here" || exit 2
case $mode in
  compile) compile_bundles "${2:-}" "${3:-}" ;;
  run) run_all "${2:-}" "${3:-}" ;;
  list) commands "${2:-.device/bench}" "${3:-.}" ;;
  *) sed -n '2,27p' "$0" >&2; exit 2 ;;
esac
