#!/usr/bin/env bash
# Checks compiled bundles on a GPU machine against the float64 reference:
# every entry of test/Integration/ops.mlir over token counts and routing
# edge cases, and the Qwen3-30B-A3B layer of examples/. Needs a runtime-only
# build (moec-runner) and the bundles compiled where MLIR is:
#   build/bin/moec compile test/Integration/ops.mlir -o DIR/ops.moecb --target sm_90a
#   build/bin/moec compile examples/qwen3_moe_layer.mlir -o DIR/qwen3.moecb --target sm_90a
#   build/bin/moec compile test/Integration/vector_kernels.mlir -o DIR/vector.moecb --target sm_90a
#   build/bin/moec compile test/Integration/routing_kernels.mlir -o DIR/routing.moecb --target sm_90a
#   build/bin/moec compile test/Integration/hopper_matmul.mlir -o DIR/hopper.moecb --target sm_90a
#   build/bin/moec compile test/Integration/hopper_matmul.mlir -o DIR/hopper_sm16.moecb --target sm_90a --sm-count 16
#   build/bin/moec compile test/Integration/backward_kernels.mlir -o DIR/backward.moecb --target sm_90a
#   build/bin/moec compile test/Integration/lora_kernels.mlir -o DIR/lora.moecb --target sm_90a
#   build/bin/moec compile test/Target/sm90a-hand-plan.mlir -o DIR/hand_plan.moecb --target sm_90a
#   build/bin/moec compile test/Integration/fp8_matmul.mlir -o DIR/fp8.moecb --target sm_90a
# Usage: scripts/gpu-correctness.sh RUNNER DIR
# With GPU_CHECK_ONLY=REGEX only the runs of entries matching the bash
# regular expression, with GPU_CHECK_SKIP=REGEX all but those (the whole
# script takes over 9 minutes: one REGEX as ONLY in one run and as SKIP in
# another covers it in two). An entry whose bundle DIR lacks is reported
# ABSENT (not run) and fails the script, with the bundles listed at the end.
set -uo pipefail
runner=$1 dir=$2
only=${GPU_CHECK_ONLY:-} skip=${GPU_CHECK_SKIP:-}
fail=0 absent=""
run() {  # entry T routing [extra args]
  local bundle=$1 entry=$2 t=$3 routing=$4; shift 4
  [[ -n $only && ! $entry =~ $only ]] && return 0
  [[ -n $skip && $entry =~ $skip ]] && return 0
  if [[ ! -f $dir/$bundle ]]; then
    printf '| %-20s | %6s | %-12s | %-10s | %-9s | %s |\n' "$entry" "$t" \
      "$routing" - - ABSENT
    [[ " $absent " == *" $bundle "* ]] || absent="$absent $bundle"
    fail=1
    return 0
  fi
  local out
  local sym=(--sym T="$t"); [[ $t == - ]] && sym=()
  out=$("$runner" "$dir/$bundle" --entry "$entry" "${sym[@]}" \
        --routing "$routing" "$@" 2>&1)
  local rc=$?
  local verdict=PASS; [[ $rc -ne 0 ]] && { verdict=FAIL; fail=1; }
  local worst median
  worst=$(echo "$out" | awk '/ (PASS|FAIL)$/ && $3 ~ /e[-+]/ {print $3}' |
          sort -g | tail -1)
  median=$(echo "$out" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' | head -1)
  printf '| %-20s | %6s | %-12s | %-10s | %-9s | %s |\n' "$entry" "$t" \
    "$routing" "${worst:--}" "${median:--}" "$verdict"
  [[ $rc -ne 0 ]] && echo "$out" >&2
}
echo "| entry                |      T | routing      | worst err  | median ms | result |"
echo "|----------------------|--------|--------------|------------|-----------|--------|"
for entry in route_sort_aligned route_grouped route_k1 route_all_experts \
             permute_unpermute gmm_bias_lora gmm_weight_grad swiglu_fwd_bwd \
             moe_layer quantize_rowwise quantize_colwise gmm_fp8; do
  for t in 1 37 1000; do
    run ops.moecb $entry $t uniform --iters 5
  done
done
for routing in one-expert half-experts; do
  for entry in route_sort_aligned permute_unpermute gmm_bias_lora moe_layer; do
    run ops.moecb $entry 300 $routing --iters 5
  done
done
run ops.moecb dequantize_nf4 - uniform --iters 5
run ops.moecb quantize_blocks - uniform --iters 5
for t in 1 37 1000; do
  run ops.moecb fp8_block_weights $t uniform --iters 5
done
for routing in one-expert half-experts; do
  run ops.moecb fp8_block_weights 300 $routing --iters 5
done
for entry in permute_fp8 unpermute_bf16 own_slot_map swiglu_vec quantize_rowwise_vec quantize_rowwise_warp \
             quantize_colwise_vec quantize_colwise_block quantize_colwise_transposed dequantize_rowwise_vec; do
  for t in 1 45 3000; do
    run vector.moecb $entry $t uniform --iters 5
  done
done
for routing in one-expert half-experts; do
  for entry in permute_fp8 unpermute_bf16 own_slot_map quantize_colwise_vec quantize_colwise_block quantize_colwise_transposed; do
    run vector.moecb $entry 300 $routing --iters 5
  done
done
run vector.moecb dequantize_nf4_vec - uniform --iters 5
run vector.moecb transpose_tiles_batched - uniform --iters 5
# Warp routing kernels: T=3000 and 9000 span several 2048-slot sort chunks.
for entry in route_bf16_aligned route_grouped_bias route_topk_then_softmax \
             route_single_expert_groups route_512 route_kept_groups_128 \
             route_kept_groups_512 sort_odd_experts; do
  for t in 1 45 3000 9000; do
    run routing.moecb $entry $t uniform --iters 5
  done
done
for routing in one-expert half-experts; do
  for entry in route_bf16_aligned route_grouped_bias route_kept_groups_128 sort_odd_experts; do
    run routing.moecb $entry 3000 $routing --iters 5
  done
done
# The wgmma grouped matmul: T=3000 gives hundreds of tiles per block
# count for the forward entries, so the persistent blocks take several tiles
# each (a weight gradient's tile count depends on K, N and E only:
# gmm_wgrad_ws_bulk has 160). gmm_tile_buckets runs a different tuned kernel
# at each T (bucket bounds 64 and 2048 rows).
for entry in gmm_swiglu_gather gmm_f16_row_scale gmm_aligned_long_k gmm_staged \
             gmm_tile_buckets gmm_ws_swiglu_gather gmm_ws_row_scale \
             gmm_ws_aligned_long_k gmm_cl_swiglu_gather gmm_cl_row_scale \
             gmm_cl_aligned_long_k gmm_kn_row_scale gmm_kn_gather \
             gmm_kn_cl_swiglu dense_kn gmm_wgrad_rows gmm_wgrad_gather_ws gmm_wgrad_ws_bulk \
             dense_at_b dense_at_b_narrow gmm_narrow_gather gmm_narrow_bb \
             gmm_narrow_kn dense_narrow gmm_wgrad_narrow gmm_wgrad_narrow_bb \
             gmm_cols_bb gmm_cols_ws_gather gmm_cols_cl_swiglu gmm_wgrad_cols_bb \
             gmm_wgrad_cols_ws gmm_wgrad_t_rows gmm_wgrad_t_ws gmm_wgrad_t_gather_ws \
             gmm_wgrad_acc_rows gmm_wgrad_acc_ws gmm_wgrad_acc_ws_bulk \
             gmm_wgrad_acc_split2 gmm_wgrad_ws_split4 gmm_wgrad_rows_ws_split4 \
             gmm_lora_swiglu_gather gmm_lora_kn_r8 \
             gmm_lora_long_k_r64 gmm_lora_staged gmm_lora_r128_swiglu \
             gmm_ws_lora_swiglu_gather gmm_ws_lora_long_k_r64 \
             gmm_ws_lora_runs_swiglu gmm_ws_lora_runs_kn; do
  for t in 1 45 3000; do
    run hopper.moecb $entry $t uniform --iters 5
  done
  for routing in one-expert half-experts; do
    run hopper.moecb $entry 300 $routing --iters 5
  done
done
# A hand-written #moe.wgmma_plan (block_n = 128 with a producer warpgroup,
# 3 stages, a 224 / 56 register split), and the chosen plan of the same op.
for entry in hand chosen; do
  for t in 1 45 3000; do
    run hand_plan.moecb $entry $t uniform --iters 5
  done
  run hand_plan.moecb $entry 300 one-expert --iters 5
done
# FP8 operands with block scales (the wgmma kernel's FP8 mode): partial
# K slices and n-tiles, SwiGLU's up rows inside a scale block, rows in
# order by TMA, e5m2 at block_n = 64, a cluster of 2; T = 1, one expert,
# half the experts empty, and T = 3000 (many tiles per block).
# n = 256 blocks, each slice as two 128-column halves (fp8_gather, and
# fp8_n256_*, fp8_cl_n256 in a cluster of 2), and n = 128 (fp8_gather_n128).
# The FP8 weight gradient (fp8_wgrad_*): transposed, padded operands by
# TMA, per-block row and column scales.
for entry in fp8_gather fp8_swiglu_gather fp8_rows_row_scale fp8_e5m2_narrow \
             fp8_cl_gather fp8_cl_n256 fp8_gather_n128 fp8_n256_swiglu fp8_n256_rows \
             fp8_wgrad_t fp8_wgrad_acc fp8_wgrad_narrow; do
  for t in 1 45 3000; do
    run fp8.moecb $entry $t uniform --iters 5
  done
  for routing in one-expert half-experts; do
    run fp8.moecb $entry 300 $routing --iters 5
  done
done
# The dense Aᵀ·B (router gradient) splits its rows into chunks (64-row
# multiples, at least 256 rows), 16 on 132 SMs (8 of 128 x 128 tiles for
# dense_at_b_router), 2 to 8 on 16: chunks left without rows (T <= 3000),
# and long reductions with full chunks and a short last one (T = 9000,
# 40000), on both grids.
for entry in dense_at_b dense_at_b_narrow dense_at_b_router; do
  for t in 9000 40000; do
    run hopper.moecb $entry $t uniform --iters 5
  done
  for t in 1 45 3000 40000; do
    run hopper_sm16.moecb $entry $t uniform --iters 5
  done
done
# Grouped weight gradients with fewer output tiles than SMs split each
# expert's rows into chunks (gmm_wgrad_rows: 16 per expert on 132 SMs; the
# loops above cover chunks without rows and experts without any): long
# reductions with full chunks (T = 9000, 40000), and every row on one
# expert (T = 9000: that expert's chunks all full, the others' empty);
# unsplit on 16 SMs (gmm_wgrad_acc_ws there: the warp-specialized row
# bucket at T = 3000, block barriers at 9000).
# gmm_wgrad_acc_split2 asks for 2 chunks (row_splits) where 132 SMs alone
# would not split, gmm_wgrad_ws_split4 for 4 on the warp-specialized kernel.
# gmm_wgrad_ws_bulk, gmm_wgrad_t_ws and gmm_wgrad_rows_ws_split4 (rows in
# order, warp-specialized) load whole 64-row slices by TMA and an expert's
# (or chunk's) partial last slice by cp.async: long reductions of both
# kinds of slice here.
for entry in gmm_wgrad_rows gmm_wgrad_t_rows gmm_wgrad_acc_ws \
             gmm_wgrad_narrow_bb gmm_wgrad_acc_split2 gmm_wgrad_ws_split4 \
             gmm_wgrad_ws_bulk gmm_wgrad_t_ws gmm_wgrad_rows_ws_split4; do
  for t in 9000 40000; do
    run hopper.moecb $entry $t uniform --iters 5
  done
  run hopper.moecb $entry 9000 one-expert --iters 5
  for t in 3000 9000; do
    run hopper_sm16.moecb $entry $t uniform --iters 5
  done
done
for entry in gmm_wgrad_gather gmm_wgrad_t_gather gmm_wgrad_acc_layouts; do
  run hopper.moecb $entry 9000 uniform --sym M=18000 --iters 5
  run hopper.moecb $entry 9000 one-expert --sym M=18000 --iters 5
done
# The warp-specialized LoRA kernels over several B_e rounds per block, and
# (T = 9000: more runs than blocks) in LoRA runs that share U across
# n-tiles (the two _runs_ entries; the others have single tiles).
for entry in gmm_ws_lora_swiglu_gather gmm_ws_lora_long_k_r64 \
             gmm_ws_lora_runs_swiglu gmm_ws_lora_runs_kn gmm_lora_kn_r8; do
  run hopper.moecb $entry 9000 uniform --iters 5
done
# LoRA runs with the routing edge cases (and two LoRA entries of single
# tiles, N = 264): the same entries compiled for a 16-block grid
# (hopper_sm16.moecb: --sm-count 16), where 3000 tokens (and 300 for the
# SwiGLU entry) give whole rounds of runs and runs left over as single
# tiles, and T = 1 only the latter.
for entry in gmm_ws_lora_runs_swiglu gmm_ws_lora_runs_kn gmm_lora_kn_r8 \
             gmm_ws_lora_long_k_r64; do
  run hopper_sm16.moecb $entry 1 uniform --iters 5
  run hopper_sm16.moecb $entry 300 uniform --iters 5
  for routing in uniform one-expert half-experts; do
    run hopper_sm16.moecb $entry 3000 $routing --iters 5
  done
done
# Input gradients whose grouped gradient rows are an input (symbol M = 2T):
# the LoRA input gradient (moe-transpose-lora-adapters, then the fused
# kernel; r = 16 and 72) and the down projection's dX with SwiGLU's
# gradient in its epilogue (activation = swiglu_grad: pair stores with a
# row scale, warp-specialized, or an f32 output, block barriers; the
# quad-gathered version with LoRA; a gathered lhs with the routing weights
# as row scale, unpermute_grad fused in). T = 9000: several tiles per block.
for entry in gmm_lora_input_grad gmm_lora_r72_input_grad gmm_swiglu_grad_ws \
             gmm_swiglu_grad_staged gmm_swiglu_grad_lora \
             gmm_swiglu_grad_gather; do
  for t in 1 45 3000 9000; do
    run hopper.moecb $entry $t uniform --sym M=$((2 * t)) --iters 5
  done
  for routing in one-expert half-experts; do
    run hopper.moecb $entry 300 $routing --sym M=600 --iters 5
  done
done
# Rows past the last group (M > 2T): zeros, in both halves for swiglu_grad.
for entry in gmm_swiglu_grad_ws gmm_swiglu_grad_staged gmm_swiglu_grad_lora; do
  run hopper.moecb $entry 300 uniform --sym M=700 --iters 5
done
# The gathered weight gradients at the default tile ([E, K, N], and
# [E, N, K] with the rows as B; both and [K, E, N] added to a given
# gradient): the grouped gradient has T*k rows (symbol M).
for entry in gmm_wgrad_gather gmm_wgrad_t_gather gmm_wgrad_acc_layouts; do
  for t in 1 45 3000; do
    run hopper.moecb $entry $t uniform --sym M=$((2 * t)) --iters 5
  done
  run hopper.moecb $entry 300 one-expert --sym M=600 --iters 5
done
# permute / unpermute backward: the row gradients are inputs of the aligned
# capacity M = T*k + E*(align-1) (3T+8 for k=3 of 8 experts padded to 2,
# 8T+48 for k=8 of 16 padded to 4).
backward_m() {  # entry T
  case $1 in
    unpermute_grad_vec|unpermute_grad_weights_only) echo $((8 * $2 + 48)) ;;
    fused_down_grad_lora) echo $((2 * $2)) ;;  # k = 2, no alignment
    *) echo $((3 * $2 + 8)) ;;
  esac
}
for entry in permute_grad_vec permute_grad_scalar unpermute_grad_vec \
             unpermute_grad_mixed unpermute_grad_scalar \
             unpermute_grad_weights_only unpermute_grad_weights_only_scalar \
             fused_down_grad_lora; do
  for t in 1 45 3000; do
    run backward.moecb $entry $t uniform --iters 5 --sym M=$(backward_m $entry $t)
  done
  for routing in one-expert half-experts; do
    run backward.moecb $entry 300 $routing --iters 5 --sym M=$(backward_m $entry 300)
  done
done

# LoRA forward, its transposed input-gradient form and lora_grad (the
# _wgmma entries as four wgmma matmuls, moe-decompose-lora-grad; k = 2:
# the output gradients have M = 2T rows, 2T + 12 with the aligned sort).
lora_m() {  # entry T: the M of the entries that take output gradients
  case $1 in lora_input_grad|lora_grad_gathered|lora_grad_chunks|lora_grad_long_rows|lora_grad_wgmma|\
           lora_rank4_input_grad|lora_grad_rank12) echo --sym M=$((2 * $2)) ;;
    lora_grad_aligned) echo --sym M=$((2 * $2 + 12)) ;; esac
}
for entry in lora_gather_swiglu lora_scatter lora_input_grad lora_grad_gathered lora_grad_chunks \
             lora_grad_long_rows lora_grad_aligned \
             lora_grad_grouped lora_grad_wgmma lora_grad_wgmma_grouped \
             lora_rank12_gather lora_rank4_input_grad lora_grad_rank12; do
  for t in 1 45 3000; do
    run lora.moecb $entry $t uniform --iters 5 $(lora_m $entry $t)
  done
  for routing in one-expert half-experts; do
    run lora.moecb $entry 300 $routing --iters 5 $(lora_m $entry 300)
  done
done
run qwen3.moecb qwen3_moe_layer 1 uniform --iters 5
run qwen3.moecb qwen3_moe_layer 256 uniform --iters 5 --no-end-to-end
run qwen3.moecb qwen3_moe_layer 256 one-expert --iters 5 --no-end-to-end
[[ -n $absent ]] && echo "not in $dir (compile them as the header says):$absent" >&2
exit $fail
