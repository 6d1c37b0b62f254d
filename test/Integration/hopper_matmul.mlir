// Grouped matmuls at the shapes of the sm_90a wgmma kernel
// (Hopper/HopperKernel.h: 16-bit lhs and rhs, rhs [E, N, K] or, for the dX
// of a backward, [E, K, N]; K and N multiples of 8). The host runs the scalar kernels on these entries, so the checks
// below pin the reference semantics; scripts/gpu-correctness.sh runs the
// same entries through the wgmma kernel on the H200. The shapes leave
// partial tiles everywhere: K = 200 and 136 are not multiples of the 64-wide
// K slice, N = 264 and I = 72 not multiples of the 128-wide n-tile, and
// K = 1096 needs more slices than the pipeline has stages. Edge cases: T=1
// (most experts empty), every token's first choice one expert, half the
// experts without tokens, padding rows of an aligned sort.
// RUN: moec run %s --entry gmm_swiglu_gather --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_gather --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_f16_row_scale --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_aligned_long_k --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_staged --sym T=20 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_tile_buckets --sym T=40 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_swiglu_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_row_scale --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_aligned_long_k --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cl_swiglu_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cl_row_scale --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cl_aligned_long_k --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_kn_row_scale --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_kn_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_kn_cl_swiglu --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dense_kn --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_rows --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_gather_ws --sym T=30 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_ws_bulk --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_gather --sym T=45 --sym M=90 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dense_at_b --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dense_at_b_narrow --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dense_at_b_router --sym T=300 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_narrow_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_narrow_bb --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_narrow_kn --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dense_narrow --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_narrow --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_narrow_bb --sym T=30 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cols_bb --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cols_bb --sym T=40 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cols_ws_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_cols_cl_swiglu --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_cols_bb --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_cols_ws --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_cols_ws --sym T=37 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_t_rows --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_t_ws --sym T=130 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_t_gather_ws --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_t_gather_ws --sym T=30 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_t_gather --sym T=45 --sym M=90 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_acc_rows --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_acc_rows --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_acc_ws --sym T=37 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_acc_ws_bulk --sym T=30 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_acc_split2 --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_ws_split4 --sym T=40 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_rows_ws_split4 --sym T=70 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_wgrad_acc_layouts --sym T=45 --sym M=90 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_swiglu_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_kn_r8 --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_long_k_r64 --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_staged --sym T=20 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_lora_swiglu_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_lora_long_k_r64 --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_lora_runs_swiglu --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_ws_lora_runs_kn --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_input_grad --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_input_grad --sym T=33 --sym M=66 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_r128_swiglu --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_r128_swiglu --sym T=21 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_lora_r72_input_grad --sym T=13 --sym M=26 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_ws --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_ws --sym T=45 --sym M=90 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_staged --sym T=30 --sym M=60 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_lora --sym T=33 --sym M=66 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_ws --sym T=45 --sym M=100 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_lora --sym T=33 --sym M=80 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_gather --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_swiglu_grad_gather --sym T=45 --sym M=90 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// gate_up + SwiGLU fused, gathered rows (k = 2), bias: E = 8, K = 200,
// I = 72.
func.func @gmm_swiglu_gather(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                             %w: tensor<8x144x200xbf16>,
                             %b: tensor<8x144xf32>) -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      bias(%b : tensor<8x144xf32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x200xbf16>, tensor<8x144x200xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

// f16 rows in expert order with a per-row scale, f16 out: E = 16,
// K = 136, N = 264 (two 256-wide n-tiles, the last partial).
func.func @gmm_f16_row_scale(%x: tensor<?x136xf16>, %ids: tensor<?x1xi32>,
                             %w: tensor<16x264x136xf16>, %s: tensor<?xf32>)
    -> tensor<?x264xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xf16>
  %y = moe.grouped_matmul %rows, %w, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs}
      : tensor<?x136xf16>, tensor<16x264x136xf16>, tensor<16xi32>
      -> tensor<?x264xf16>
  return %y : tensor<?x264xf16>
}

// Groups padded to 16 rows (padding rows gather nothing and come out
// zero), K = 1096 (18 slices through a 5-stage pipeline): E = 8, N = 128,
// k = 4.
func.func @gmm_aligned_long_k(%x: tensor<?x1096xbf16>, %ids: tensor<?x4xi32>,
                              %w: tensor<8x128x1096xbf16>)
    -> tensor<?x128xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 4 : i64, transpose_rhs}
      : tensor<?x1096xbf16>, tensor<8x128x1096xbf16>, tensor<8xi32>
      -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}

// A plain epilogue, stored through the shared-memory staging tile (bf16
// rows 16 bytes apart, then 16-byte row stores): E = 16, K = 576, N = 256
// (staging takes whole column tiles and K slices only, and the kernel with
// block barriers: the tile asks for it, n = 256 would otherwise be
// warp-specialized).
// The rows are the input as it is, grouped by the sorted ids' offsets (a
// permute in front would be fused into a gather, which is not staged).
func.func @gmm_staged(%x: tensor<?x576xbf16>, %ids: tensor<?x1xi32>,
                      %w: tensor<16x256x576xbf16>) -> tensor<?x256xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %y = moe.grouped_matmul %x, %w, %offsets
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256>}
      : tensor<?x576xbf16>, tensor<16x256x576xbf16>, tensor<16xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// Tuned tiles by row count (moe.tile_buckets): up to 64 rows (T <= 32)
// n = 128 with 6 stages, up to 2048 rows n = 256 with 3 stages and bands of
// 16 m-tiles, more rows the op's tile (n = 128, 4 stages, bands of 2).
// E = 8, K = 200, N = 264, k = 2: every variant has partial tiles.
func.func @gmm_tile_buckets(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                            %w: tensor<8x264x200xbf16>) -> tensor<?x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256,
                            stages = 4, band_m = 2>,
       moe.tile_buckets = [
         #moe.tile_bucket<max_rows = 64, tile = #moe.tile<m = 128, n = 128,
             k = 64, threads = 256, stages = 6>>,
         #moe.tile_bucket<max_rows = 2048, tile = #moe.tile<m = 128,
             n = 256, k = 64, threads = 256, stages = 3, band_m = 16>>]}
      : tensor<?x200xbf16>, tensor<8x264x200xbf16>, tensor<8xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}

// Warp-specialized (a producer warpgroup copies, two MMA warpgroups wait
// on mbarriers): the shapes of gmm_swiglu_gather, gmm_f16_row_scale and
// gmm_aligned_long_k. K = 1096 with 3 stages makes the stages go round 6
// times per tile, so the barriers' phases flip within and across tiles.
func.func @gmm_ws_swiglu_gather(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                                %w: tensor<8x144x200xbf16>,
                                %b: tensor<8x144xf32>) -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      bias(%b : tensor<8x144xf32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x200xbf16>, tensor<8x144x200xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

func.func @gmm_ws_row_scale(%x: tensor<?x136xf16>, %ids: tensor<?x1xi32>,
                            %w: tensor<16x264x136xf16>, %s: tensor<?xf32>)
    -> tensor<?x264xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %y = moe.grouped_matmul %x, %w, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x136xf16>, tensor<16x264x136xf16>, tensor<16xi32>
      -> tensor<?x264xf16>
  return %y : tensor<?x264xf16>
}

func.func @gmm_ws_aligned_long_k(%x: tensor<?x1096xbf16>, %ids: tensor<?x4xi32>,
                                 %w: tensor<8x128x1096xbf16>)
    -> tensor<?x128xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 4 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 384,
                            producers = 128, stages = 3>}
      : tensor<?x1096xbf16>, tensor<8x128x1096xbf16>, tensor<8xi32>
      -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}

// Clusters of 2 (each block multicasts half of the weight tile to both):
// the warp-specialized shapes again. An expert with an odd number of
// m-tiles leaves the second block of its last pair without rows (T=1,
// T=300 with one expert); SwiGLU splits gate and up rows between the
// blocks; rows in order come by TMA (row_scale), gathered ones by cp.async.
func.func @gmm_cl_swiglu_gather(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                                %w: tensor<8x144x200xbf16>,
                                %b: tensor<8x144xf32>) -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      bias(%b : tensor<8x144xf32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 384,
                            producers = 128, cluster = 2>}
      : tensor<?x200xbf16>, tensor<8x144x200xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

func.func @gmm_cl_row_scale(%x: tensor<?x136xf16>, %ids: tensor<?x1xi32>,
                            %w: tensor<16x264x136xf16>, %s: tensor<?xf32>)
    -> tensor<?x264xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %y = moe.grouped_matmul %x, %w, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, cluster = 2>}
      : tensor<?x136xf16>, tensor<16x264x136xf16>, tensor<16xi32>
      -> tensor<?x264xf16>
  return %y : tensor<?x264xf16>
}

func.func @gmm_cl_aligned_long_k(%x: tensor<?x1096xbf16>, %ids: tensor<?x4xi32>,
                                 %w: tensor<8x256x1096xbf16>)
    -> tensor<?x256xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 4 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, stages = 3, cluster = 2>}
      : tensor<?x1096xbf16>, tensor<8x256x1096xbf16>, tensor<8xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// rhs [E, K, N] (no transpose_rhs: the dX of a forward with [E, N, K]
// weights), read N-major and transposed by wgmma. Rows in order with a row
// scale, the default tile (warp-specialized, n = 256: TMA for both
// operands, four 64-column boxes per stage): E = 16, K = 136, N = 264.
func.func @gmm_kn_row_scale(%x: tensor<?x136xf16>, %ids: tensor<?x1xi32>,
                            %w: tensor<16x136x264xf16>, %s: tensor<?xf32>)
    -> tensor<?x264xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xf16>
  %y = moe.grouped_matmul %rows, %w, %offsets row_scale(%s : tensor<?xf32>)
      : tensor<?x136xf16>, tensor<16x136x264xf16>, tensor<16xi32>
      -> tensor<?x264xf16>
  return %y : tensor<?x264xf16>
}

// rhs [E, K, N], gathered rows (k = 2), block barriers at n = 128
// (cp.async for the weights' K rows): E = 8, K = 200, N = 200.
func.func @gmm_kn_gather(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                         %w: tensor<8x200x200xbf16>) -> tensor<?x200xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256>}
      : tensor<?x200xbf16>, tensor<8x200x200xbf16>, tensor<8xi32>
      -> tensor<?x200xf32>
  return %y : tensor<?x200xf32>
}

// rhs [E, K, N] with SwiGLU in clusters of 2 (each block multicasts the
// gate or the up column blocks), K = 1096 through 3 stages: E = 8, I = 72.
func.func @gmm_kn_cl_swiglu(%x: tensor<?x1096xbf16>, %ids: tensor<?x4xi32>,
                            %w: tensor<8x1096x144xbf16>)
    -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 4 : i64, activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 384,
                            producers = 128, stages = 3, cluster = 2>}
      : tensor<?x1096xbf16>, tensor<8x1096x144xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

// A dense A·B with B [K, N] (linalg.matmul, plain maps): the dX of a
// dense layer. K = 200, N = 264.
func.func @dense_kn(%x: tensor<?x200xbf16>, %w: tensor<200x264xbf16>)
    -> tensor<?x264xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x200xbf16>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x264xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?x264xf32>)
      -> tensor<?x264xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x200xbf16>, tensor<200x264xbf16>)
      outs(%acc : tensor<?x264xf32>) -> tensor<?x264xf32>
  return %y : tensor<?x264xf32>
}

// A dense Aᵀ·B (A read transposed, as (k, m)): the weight gradient of a
// dense layer such as the router's, on the weight gradient's kernel. Its
// few output tiles split the T rows into chunks (the kernel's groups, f32
// partial sums that a second kernel adds). M = 136 (a partial 128-row
// tile), N = 264.
func.func @dense_at_b(%dl: tensor<?x136xbf16>, %x: tensor<?x264xbf16>)
    -> tensor<136x264xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<136x264xbf16>
  %acc = linalg.fill ins(%zero : bf16) outs(%e : tensor<136x264xbf16>)
      -> tensor<136x264xbf16>
  %y = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x136xbf16>, tensor<?x264xbf16>)
      outs(%acc : tensor<136x264xbf16>) -> tensor<136x264xbf16>
  return %y : tensor<136x264xbf16>
}

// Qwen3-30B-A3B's router gradient (128 x 2048, f32 out): 16 chunks at
// n = 256, so 128 x 128 tiles in 8 chunks.
func.func @dense_at_b_router(%dl: tensor<?x128xbf16>, %x: tensor<?x2048xbf16>)
    -> tensor<128x2048xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x2048xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<128x2048xf32>)
      -> tensor<128x2048xf32>
  %y = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x128xbf16>, tensor<?x2048xbf16>)
      outs(%acc : tensor<128x2048xf32>) -> tensor<128x2048xf32>
  return %y : tensor<128x2048xf32>
}

// The same with 8 output rows (Mixtral's 8 experts), f32 out.
func.func @dense_at_b_narrow(%dl: tensor<?x8xbf16>, %x: tensor<?x512xbf16>)
    -> tensor<8x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<8x512xf32>)
      -> tensor<8x512xf32>
  %y = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x8xbf16>, tensor<?x512xbf16>)
      outs(%acc : tensor<8x512xf32>) -> tensor<8x512xf32>
  return %y : tensor<8x512xf32>
}

// The weight gradient (moe.grouped_weight_grad): out[e] = X_eᵀ · dY_e, tiles over
// (expert, 128 K columns, n columns) reducing over the expert's rows, both
// operands read N-major (transposed A and B). Rows in order, f32 out, block
// barriers: E = 16, K = 136 (a partial K tile), N = 264; experts without
// rows get zeros.
func.func @gmm_wgrad_rows(%x: tensor<?x136xbf16>, %dy: tensor<?x264xbf16>,
                          %ids: tensor<?x1xi32>) -> tensor<16x136x264xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x136x264xf32>
  return %g : tensor<16x136x264xf32>
}

// The warp-specialized weight gradient with rows in order and a bf16
// output, stored by bulk copies from a staging tile: K = 520 (a last row
// tile of 8 rows), N = 264 (a last column tile of 8 columns, one 16-byte
// copy per row), E = 16: 160 tiles, so that blocks of the 132-block grid
// take a second tile and write the staging tile again.
func.func @gmm_wgrad_ws_bulk(%x: tensor<?x520xbf16>, %dy: tensor<?x264xbf16>,
                             %ids: tensor<?x1xi32>)
    -> tensor<16x520x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x520xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x520xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x520xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x520x264xbf16>
  return %g : tensor<16x520x264xbf16>
}

// The weight gradient with gathered lhs rows (by slot, no permuted copy),
// warp-specialized (cp.async producers) at n = 256, bf16 out (bulk stores too): E = 8,
// K = 200, N = 200.
func.func @gmm_wgrad_gather_ws(%x: tensor<?x200xbf16>, %dy: tensor<?x200xbf16>,
                               %ids: tensor<?x1xi32>) -> tensor<8x200x200xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {k = 1 : i64,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, row_splits = 1>}
      : tensor<?x200xbf16>, tensor<?x200xbf16>, tensor<8xi32>
      -> tensor<8x200x200xbf16>
  return %g : tensor<8x200x200xbf16>
}

// The same at the default tile (block barriers; gathered rows looked up per
// slice: the state carried between tiles holds none), k = 2, N = 40: the
// gate_up weight gradient of a small layer's derived backward.
func.func @gmm_wgrad_gather(%x: tensor<?x48xbf16>, %dy: tensor<?x40xbf16>
                                {moe.sym = "M"},
                            %ids: tensor<?x2xi32>) -> tensor<6x48x40xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64}
      : tensor<?x48xbf16>, tensor<?x40xbf16>, tensor<6xi32>
      -> tensor<6x48x40xbf16>
  return %g : tensor<6x48x40xbf16>
}

// Outputs of at most 64 columns run n = 64 tiles (HopperPlan's
// kNarrowBlockN): the rank-wide products of moe-decompose-lora-grad, a
// router's experts, with block barriers unless the tile asks for a
// producer warpgroup. Warp-specialized (cp.async producers): gathered rows
// (k = 2), E = 8, K = 200, N = 40 (a partial n-tile).
func.func @gmm_narrow_gather(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                             %w: tensor<8x40x200xbf16>) -> tensor<?x40xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x200xbf16>, tensor<8x40x200xbf16>, tensor<8xi32>
      -> tensor<?x40xbf16>
  return %y : tensor<?x40xbf16>
}

// The default plan (n = 64, block barriers), rows in order, K = 1096 (more
// slices than stages), N = 56, f32 out: E = 16.
func.func @gmm_narrow_bb(%x: tensor<?x1096xbf16>, %ids: tensor<?x1xi32>,
                         %w: tensor<16x56x1096xbf16>) -> tensor<?x56xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x1096xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x1096xbf16>
  %y = moe.grouped_matmul %rows, %w, %offsets
      {transpose_rhs}
      : tensor<?x1096xbf16>, tensor<16x56x1096xbf16>, tensor<16xi32>
      -> tensor<?x56xf32>
  return %y : tensor<?x56xf32>
}

// n = 64 warp-specialized with the weights [E, K, N] (one N-major column
// block by TMA), f16 with a row scale: E = 16, K = 136, N = 64.
func.func @gmm_narrow_kn(%x: tensor<?x136xf16>, %ids: tensor<?x1xi32>,
                         %w: tensor<16x136x64xf16>, %s: tensor<?xf32>)
    -> tensor<?x64xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xf16>
  %y = moe.grouped_matmul %rows, %w, %offsets row_scale(%s : tensor<?xf32>)
      {moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x136xf16>, tensor<16x136x64xf16>, tensor<16xi32>
      -> tensor<?x64xf16>
  return %y : tensor<?x64xf16>
}

// A router's logits, a dense A·Bᵀ with 8 output columns (Mixtral's
// experts) at the default plan: K = 264.
func.func @dense_narrow(%x: tensor<?x264xbf16>, %w: tensor<8x264xbf16>)
    -> tensor<?x8xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x264xbf16>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?x8xf32>)
      -> tensor<?x8xf32>
  %y = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %w : tensor<?x264xbf16>, tensor<8x264xbf16>)
      outs(%acc : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// The narrow weight gradient, warp-specialized (bulk stores of 48-byte
// rows): K = 520, N = 24, bf16 out, E = 16.
func.func @gmm_wgrad_narrow(%x: tensor<?x520xbf16>, %dy: tensor<?x24xbf16>,
                            %ids: tensor<?x1xi32>) -> tensor<16x520x24xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x520xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x520xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {
       moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 384,
                            producers = 128, row_splits = 1>}
      : tensor<?x520xbf16>, tensor<?x24xbf16>, tensor<16xi32>
      -> tensor<16x520x24xbf16>
  return %g : tensor<16x520x24xbf16>
}

// The same at its default plan (block barriers at n = 64), f32 out:
// K = 136, N = 64.
func.func @gmm_wgrad_narrow_bb(%x: tensor<?x136xbf16>, %dy: tensor<?x64xbf16>,
                               %ids: tensor<?x1xi32>) -> tensor<16x136x64xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      
      : tensor<?x136xbf16>, tensor<?x64xbf16>, tensor<16xi32>
      -> tensor<16x136x64xf32>
  return %g : tensor<16x136x64xf32>
}

// experts_in_columns: weights [K, E, N] (a LoRA B adapter [N, E*r] as
// moe-decompose-lora-grad reads it for du) and weight gradients written as
// [K, E, N] (its dB). The default plan (n = 64, block barriers, cp.async
// rows E*N apart) with a row scale: E = 16, K = 136, N = 24.
func.func @gmm_cols_bb(%x: tensor<?x136xbf16>, %ids: tensor<?x1xi32>,
                       %w: tensor<136x16x24xbf16>, %s: tensor<?xf32>)
    -> tensor<?x24xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %y = moe.grouped_matmul %rows, %w, %offsets row_scale(%s : tensor<?xf32>)
      {experts_in_columns}
      : tensor<?x136xbf16>, tensor<136x16x24xbf16>, tensor<16xi32>
      -> tensor<?x24xbf16>
  return %y : tensor<?x24xbf16>
}

// The default plan at N = 264 (n = 256, warp-specialized, the weights by
// TMA through a [K, E, N] map: one expert by 64 columns by 64 K rows per
// box), gathered rows (k = 2), f16: E = 8, K = 200.
func.func @gmm_cols_ws_gather(%x: tensor<?x200xf16>, %ids: tensor<?x2xi32>,
                              %w: tensor<200x8x264xf16>) -> tensor<?x264xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, experts_in_columns}
      : tensor<?x200xf16>, tensor<200x8x264xf16>, tensor<8xi32>
      -> tensor<?x264xf16>
  return %y : tensor<?x264xf16>
}

// [K, E, N] weights in a cluster of 2 with SwiGLU: each block of the pair
// loads half of the stage's column blocks (gate then up columns, one expert
// wide) and multicasts them; gathered rows of an aligned sort (k = 4),
// K = 1096, I = 72: E = 8.
func.func @gmm_cols_cl_swiglu(%x: tensor<?x1096xbf16>, %ids: tensor<?x4xi32>,
                              %w: tensor<1096x8x144xbf16>)
    -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 4 : i64, experts_in_columns,
       activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 384,
                            producers = 128, stages = 3, cluster = 2>}
      : tensor<?x1096xbf16>, tensor<1096x8x144xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

// The weight gradient into [K, E, N] at its default plan (block barriers,
// n = 64), f32 out: E = 16, K = 136, N = 24.
func.func @gmm_wgrad_cols_bb(%x: tensor<?x136xbf16>, %dy: tensor<?x24xbf16>,
                             %ids: tensor<?x1xi32>) -> tensor<136x16x24xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {experts_in_columns}
      : tensor<?x136xbf16>, tensor<?x24xbf16>, tensor<16xi32>
      -> tensor<136x16x24xf32>
  return %g : tensor<136x16x24xf32>
}

// The same warp-specialized with bulk stores (rows of 80 bytes, E*N apart),
// bf16 out: E = 8, K = 520, N = 40.
func.func @gmm_wgrad_cols_ws(%x: tensor<?x520xbf16>, %dy: tensor<?x40xbf16>,
                             %ids: tensor<?x1xi32>) -> tensor<520x8x40xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x520xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x520xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {experts_in_columns, 
       moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x520xbf16>, tensor<?x40xbf16>, tensor<8xi32>
      -> tensor<520x8x40xbf16>
  return %g : tensor<520x8x40xbf16>
}

// The weight gradient of [E, N, K] weights (transpose_rhs): out [E, N, K]
// = Σ dyᵀ · x, the kernel's A the output gradient and B the rows. Rows in
// order, f32 out, block barriers: E = 16, N = 264 (3 row tiles, the last
// of 8 rows), K = 136 (a partial column tile).
func.func @gmm_wgrad_t_rows(%x: tensor<?x136xbf16>, %dy: tensor<?x264xbf16>,
                            %ids: tensor<?x1xi32>) -> tensor<16x264x136xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {transpose_rhs}
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x264x136xf32>
  return %g : tensor<16x264x136xf32>
}

// The same warp-specialized with bulk stores, bf16 out: dy's and x's whole
// 64-row slices by TMA, a partial last slice by cp.async.
func.func @gmm_wgrad_t_ws(%x: tensor<?x136xbf16>, %dy: tensor<?x264xbf16>,
                          %ids: tensor<?x1xi32>) -> tensor<16x264x136xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x264x136xbf16>
  return %g : tensor<16x264x136xbf16>
}

// The same with the token rows gathered by slot (B's rows looked up per
// slice), warp-specialized with bulk stores, bf16 out: E = 8, N = 200,
// K = 520 (a last column tile of 8).
func.func @gmm_wgrad_t_gather_ws(%x: tensor<?x520xbf16>, %dy: tensor<?x200xbf16>,
                                 %ids: tensor<?x1xi32>)
    -> tensor<8x200x520xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {transpose_rhs, k = 1 : i64,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, row_splits = 1>}
      : tensor<?x520xbf16>, tensor<?x200xbf16>, tensor<8xi32>
      -> tensor<8x200x520xbf16>
  return %g : tensor<8x200x520xbf16>
}

// Gathered with k = 2 at the default tile (n = 64, block barriers), the
// grouped gradient's T*k rows the symbol M: the gate_up weight gradient of
// a small layer with checkpoint-layout weights, E = 6, N = 40, K = 48.
func.func @gmm_wgrad_t_gather(%x: tensor<?x48xbf16>, %dy: tensor<?x40xbf16>
                                  {moe.sym = "M"},
                              %ids: tensor<?x2xi32>) -> tensor<6x40x48xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {transpose_rhs, k = 2 : i64}
      : tensor<?x48xbf16>, tensor<?x40xbf16>, tensor<6xi32>
      -> tensor<6x40x48xbf16>
  return %g : tensor<6x40x48xbf16>
}

// Gradient accumulation (`accumulate`): the weight gradient added to a
// given one in the epilogue. Rows in order, an f32 main gradient, block
// barriers (pair stores): E = 16, K = 136, N = 264 (partial tiles both
// ways); experts without rows keep the given gradient.
func.func @gmm_wgrad_acc_rows(%x: tensor<?x136xbf16>, %dy: tensor<?x264xbf16>,
                              %ids: tensor<?x1xi32>,
                              %main: tensor<16x136x264xf32>)
    -> tensor<16x136x264xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      accumulate(%main : tensor<16x136x264xf32>)
      {
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256,
                            row_splits = 1>}
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x136x264xf32>
  return %g : tensor<16x136x264xf32>
}

// The same without a tile: up to 512 rows per expert on average (8192
// here) the default row bucket takes the warp-specialized kernel, its f32
// pairs stored by the MMA threads. That is on 16 SMs (--sm-count 16); on
// 132 its 64 output tiles split each expert's rows into 16 chunks of f32
// partial sums, and the main gradient is added where they are summed.
func.func @gmm_wgrad_acc_ws(%x: tensor<?x136xbf16>, %dy: tensor<?x264xbf16>,
                            %ids: tensor<?x1xi32>,
                            %main: tensor<16x136x264xf32>)
    -> tensor<16x136x264xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      accumulate(%main : tensor<16x136x264xf32>)
      
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x136x264xf32>
  return %g : tensor<16x136x264xf32>
}

// Warp-specialized with bulk stores and a bf16 gradient added to: the
// pairs go through the staging tile after the add. K = 520, N = 264,
// E = 16 (160 tiles: blocks take a second tile).
func.func @gmm_wgrad_acc_ws_bulk(%x: tensor<?x520xbf16>,
                                 %dy: tensor<?x264xbf16>,
                                 %ids: tensor<?x1xi32>,
                                 %main: tensor<16x520x264xbf16>)
    -> tensor<16x520x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x520xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x520xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      accumulate(%main : tensor<16x520x264xbf16>)
      {
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x520xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x520x264xbf16>
  return %g : tensor<16x520x264xbf16>
}

// A tile asking for 2 row chunks per expert (row_splits, as a tuning
// cache may) where the kernel alone would not split (160 output tiles):
// 320 chunk tiles over the grid, a bf16 gradient added to where the f32
// partial sums are summed. K = 520, N = 264, E = 16.
func.func @gmm_wgrad_acc_split2(%x: tensor<?x520xbf16>,
                                %dy: tensor<?x264xbf16>,
                                %ids: tensor<?x1xi32>,
                                %main: tensor<16x520x264xbf16>)
    -> tensor<16x520x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x520xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x520xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      accumulate(%main : tensor<16x520x264xbf16>)
      {
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256,
                            row_splits = 2>}
      : tensor<?x520xbf16>, tensor<?x264xbf16>, tensor<16xi32>
      -> tensor<16x520x264xbf16>
  return %g : tensor<16x520x264xbf16>
}

// The warp-specialized kernel split 4 ways (a tuning cache's tile under
// skewed routing): gathered rows, f32 partial sums stored in pairs by the
// MMA threads (no bulk copies of f32), summed into bf16. E = 8, K = 200,
// N = 200.
func.func @gmm_wgrad_ws_split4(%x: tensor<?x200xbf16>, %dy: tensor<?x200xbf16>,
                               %ids: tensor<?x1xi32>) -> tensor<8x200x200xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {k = 1 : i64,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, row_splits = 4>}
      : tensor<?x200xbf16>, tensor<?x200xbf16>, tensor<8xi32>
      -> tensor<8x200x200xbf16>
  return %g : tensor<8x200x200xbf16>
}

// The same with the rows in order (permuted first): each chunk's whole
// 64-row slices by TMA, its partial last one by cp.async.
func.func @gmm_wgrad_rows_ws_split4(%x: tensor<?x200xbf16>,
                                    %dy: tensor<?x200xbf16>,
                                    %ids: tensor<?x1xi32>)
    -> tensor<8x200x200xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x200xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x200xbf16>
  %g = moe.grouped_weight_grad %rows, %dy, %offsets
      {
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, row_splits = 4>}
      : tensor<?x200xbf16>, tensor<?x200xbf16>, tensor<8xi32>
      -> tensor<8x200x200xbf16>
  return %g : tensor<8x200x200xbf16>
}

// Gathered rows, [E, N, K] weights (transpose_rhs) and [K, E, N]
// (experts_in_columns) gradients added to, f32, default tiles (n = 64):
// the two other output layouts. E = 6, k = 2, N = 40, K = 48.
func.func @gmm_wgrad_acc_layouts(%x: tensor<?x48xbf16>, %dy: tensor<?x40xbf16>
                                     {moe.sym = "M"},
                                 %ids: tensor<?x2xi32>,
                                 %main_t: tensor<6x40x48xf32>,
                                 %main_c: tensor<48x6x40xf32>)
    -> (tensor<6x40x48xf32>, tensor<48x6x40xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %gt = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main_t : tensor<6x40x48xf32>)
      {transpose_rhs, k = 2 : i64}
      : tensor<?x48xbf16>, tensor<?x40xbf16>, tensor<6xi32>
      -> tensor<6x40x48xf32>
  %gc = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main_c : tensor<48x6x40xf32>)
      {experts_in_columns, k = 2 : i64}
      : tensor<?x48xbf16>, tensor<?x40xbf16>, tensor<6xi32>
      -> tensor<48x6x40xf32>
  return %gt, %gc : tensor<6x40x48xf32>, tensor<48x6x40xf32>
}

// LoRA fused into the wgmma kernel (block barriers: x · A_eᵀ in the K
// loop, s · U · B_eᵀ as one more product before the epilogue). gate_up +
// SwiGLU on gathered rows with r = 16: E = 8, K = 200, I = 72.
func.func @gmm_lora_swiglu_gather(%x: tensor<?x200xbf16>, %ids: tensor<?x2xi32>,
                                  %w: tensor<8x144x200xbf16>,
                                  %la: tensor<128x200xbf16>,
                                  %lb: tensor<144x128xbf16>)
    -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%la, %lb : tensor<128x200xbf16>, tensor<144x128xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 2.0 : f32,
       activation = #moe.activation<swiglu>}
      : tensor<?x200xbf16>, tensor<8x144x200xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

// r = 8 (the U tile padded to 16 columns), rhs [E, K, N], f16: E = 16,
// K = 136, N = 264 (two n-tiles, the last partial). n = 256 by default:
// the warp-specialized kernel.
func.func @gmm_lora_kn_r8(%x: tensor<?x136xf16>, %ids: tensor<?x1xi32>,
                          %w: tensor<16x136x264xf16>,
                          %la: tensor<128x136xf16>, %lb: tensor<264x128xf16>)
    -> tensor<?x264xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x136xf16>
  %y = moe.grouped_matmul %rows, %w, %offsets
      lora(%la, %lb : tensor<128x136xf16>, tensor<264x128xf16>)
      {lora_scaling = 0.5 : f32}
      : tensor<?x136xf16>, tensor<16x136x264xf16>, tensor<16xi32>
      -> tensor<?x264xf16>
  return %y : tensor<?x264xf16>
}

// r = 64 over K = 1096 (more slices than stages), with a row scale (the
// permuted probabilities) and an f32 output: E = 8, N = 128.
func.func @gmm_lora_long_k_r64(%x: tensor<?x1096xbf16>, %ids: tensor<?x4xi32>,
                               %p: tensor<?x4xf32>, %w: tensor<8x128x1096xbf16>,
                               %la: tensor<512x1096xbf16>,
                               %lb: tensor<128x512xbf16>)
    -> tensor<?x128xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows, %s = moe.permute %x, %slots, %offsets k = 4
      probs(%p : tensor<?x4xf32> -> tensor<?xf32>)
      : tensor<?x1096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x1096xbf16>
  %y = moe.grouped_matmul %rows, %w, %offsets
      lora(%la, %lb : tensor<512x1096xbf16>, tensor<128x512xbf16>)
      row_scale(%s : tensor<?xf32>) {transpose_rhs}
      : tensor<?x1096xbf16>, tensor<8x128x1096xbf16>, tensor<8xi32>
      -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// A plain epilogue staged through the stages after the LoRA product
// (r = 32; block barriers asked for): E = 16, K = 576, N = 256.
func.func @gmm_lora_staged(%x: tensor<?x576xbf16>, %ids: tensor<?x1xi32>,
                           %w: tensor<16x256x576xbf16>,
                           %la: tensor<512x576xbf16>, %lb: tensor<256x512xbf16>)
    -> tensor<?x256xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x576xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x576xbf16>
  %y = moe.grouped_matmul %rows, %w, %offsets
      lora(%la, %lb : tensor<512x576xbf16>, tensor<256x512xbf16>)
      {transpose_rhs, lora_scaling = 1.5 : f32,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256>}
      : tensor<?x576xbf16>, tensor<16x256x576xbf16>, tensor<16xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// LoRA in the warp-specialized kernel: the A_e rows come by the producer's
// cp.async into each stage, s · U and B_e go through tiles of their own
// after the stages. Gathered lhs rows (cp.async), SwiGLU, r = 16, the
// shapes of gmm_lora_swiglu_gather on an n = 256 tile.
func.func @gmm_ws_lora_swiglu_gather(%x: tensor<?x200xbf16>,
                                     %ids: tensor<?x2xi32>,
                                     %w: tensor<8x144x200xbf16>,
                                     %la: tensor<128x200xbf16>,
                                     %lb: tensor<144x128xbf16>)
    -> tensor<?x72xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%la, %lb : tensor<128x200xbf16>, tensor<144x128xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 2.0 : f32,
       activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128>}
      : tensor<?x200xbf16>, tensor<8x144x200xbf16>, tensor<8xi32>
      -> tensor<?x72xbf16>
  return %y : tensor<?x72xbf16>
}

// The warp-specialized default at N = 264 with the lhs rows in order (TMA)
// and r = 64 over K = 1096 (the stages go round several times per tile,
// the B_e tile once per tile), a row scale and an f32 output: E = 8.
func.func @gmm_ws_lora_long_k_r64(%x: tensor<?x1096xbf16>,
                                  %ids: tensor<?x4xi32>, %p: tensor<?x4xf32>,
                                  %w: tensor<8x264x1096xbf16>,
                                  %la: tensor<512x1096xbf16>,
                                  %lb: tensor<264x512xbf16>)
    -> tensor<?x264xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x4xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows, %s = moe.permute %x, %slots, %offsets k = 4
      probs(%p : tensor<?x4xf32> -> tensor<?xf32>)
      : tensor<?x1096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x1096xbf16>
  %y = moe.grouped_matmul %rows, %w, %offsets
      lora(%la, %lb : tensor<512x1096xbf16>, tensor<264x512xbf16>)
      row_scale(%s : tensor<?xf32>) {transpose_rhs, lora_scaling = 0.5 : f32}
      : tensor<?x1096xbf16>, tensor<8x264x1096xbf16>, tensor<8xi32>
      -> tensor<?x264xf32>
  return %y : tensor<?x264xf32>
}

// LoRA runs (HopperPlan::loraRunTiles): a block computes 3 n-tiles of one
// m-tile in a row and only the first accumulates U. SwiGLU over 696
// output columns (6 n-tiles of 128, the last partial: two runs per
// m-tile), gathered rows, r = 24 (U padded to 32 ranks): E = 8, K = 200.
// Runs need at least as many runs as blocks: T = 9000 on 132 blocks (2
// whole rounds, then runs left over as single tiles), or a bundle compiled
// with --sm-count 16 at T = 300 and 3000 (scripts/gpu-correctness.sh runs
// both; this file's host runs check the reference semantics only).
func.func @gmm_ws_lora_runs_swiglu(%x: tensor<?x200xbf16>,
                                   %ids: tensor<?x2xi32>,
                                   %w: tensor<8x1392x200xbf16>,
                                   %la: tensor<192x200xbf16>,
                                   %lb: tensor<1392x192xbf16>)
    -> tensor<?x696xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%la, %lb : tensor<192x200xbf16>, tensor<1392x192xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 1.5 : f32,
       activation = #moe.activation<swiglu>}
      : tensor<?x200xbf16>, tensor<8x1392x200xbf16>, tensor<8xi32>
      -> tensor<?x696xbf16>
  return %y : tensor<?x696xbf16>
}

// LoRA runs of 4 n-tiles (N = 2000: 8 n-tiles, the last one 208 wide),
// rows in order (TMA), [E, K, N] weights, r = 8, f16: E = 4, K = 328.
// Runs at T = 9000 (132 blocks) and 3000 (16 blocks).
func.func @gmm_ws_lora_runs_kn(%x: tensor<?x328xf16>, %ids: tensor<?x1xi32>,
                               %w: tensor<4x328x2000xf16>,
                               %la: tensor<32x328xf16>,
                               %lb: tensor<2000x32xf16>)
    -> tensor<?x2000xf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x328xf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x328xf16>
  %y = moe.grouped_matmul %rows, %w, %offsets
      lora(%la, %lb : tensor<32x328xf16>, tensor<2000x32xf16>)
      {lora_scaling = 0.5 : f32}
      : tensor<?x328xf16>, tensor<4x328x2000xf16>, tensor<4xi32>
      -> tensor<?x2000xf16>
  return %y : tensor<?x2000xf16>
}

// A LoRA matmul's input gradient as moe-autodiff derives it: [E, K, N]
// weights and the adapter transposed, s · (dy · B_e) · A_e (r = 16, E = 8,
// K = 256, N = 200). The pipeline's moe-transpose-lora-adapters turns it
// into the forward adapter form on transposed copies, which the wgmma
// kernel fuses. k = 2: the gradient has M = 2T grouped rows.
func.func @gmm_lora_input_grad(%dy: tensor<?x256xbf16> {moe.sym = "M"},
                               %ids: tensor<?x2xi32>,
                               %w: tensor<8x256x200xbf16>,
                               %la: tensor<128x200xbf16>,
                               %lb: tensor<256x128xbf16>)
    -> tensor<?x200xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %dx = moe.grouped_matmul %dy, %w, %offsets
      lora(%la, %lb : tensor<128x200xbf16>, tensor<256x128xbf16>)
      {transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x256xbf16>, tensor<8x256x200xbf16>, tensor<8xi32>
      -> tensor<?x200xbf16>
  return %dx : tensor<?x200xbf16>
}

// Ranks past 64 go through the last stage in passes of 64 rank columns
// (n = 128 tiles): r = 128 on a gathered gate_up + SwiGLU (E = 8, K = 264,
// I = 144).
func.func @gmm_lora_r128_swiglu(%x: tensor<?x264xbf16>, %ids: tensor<?x2xi32>,
                                %w: tensor<8x288x264xbf16>,
                                %la: tensor<1024x264xbf16>,
                                %lb: tensor<288x1024xbf16>)
    -> tensor<?x144xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%la, %lb : tensor<1024x264xbf16>, tensor<288x1024xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 0.5 : f32,
       activation = #moe.activation<swiglu>}
      : tensor<?x264xbf16>, tensor<8x288x264xbf16>, tensor<8xi32>
      -> tensor<?x144xbf16>
  return %y : tensor<?x144xbf16>
}

// r = 72 (R = 80: passes of 64 and 16 columns, zeros past 72) on the
// input-gradient form ([E, K, N] weights, transpose_lora; E = 4, K = 136,
// N = 200; M = 2T grouped rows).
func.func @gmm_lora_r72_input_grad(%dy: tensor<?x136xbf16> {moe.sym = "M"},
                                   %ids: tensor<?x2xi32>,
                                   %w: tensor<4x136x200xbf16>,
                                   %la: tensor<288x200xbf16>,
                                   %lb: tensor<136x288xbf16>)
    -> tensor<?x200xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %dx = moe.grouped_matmul %dy, %w, %offsets
      lora(%la, %lb : tensor<288x200xbf16>, tensor<136x288xbf16>)
      {transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x136xbf16>, tensor<4x136x200xbf16>, tensor<4xi32>
      -> tensor<?x200xbf16>
  return %dx : tensor<?x200xbf16>
}

// A backward's down-projection input gradient with SwiGLU's gradient
// (written unfused: moe-fuse-epilogue folds it into the matmul, which then
// writes [M, 2N] from the saved gate_up rows %h), routing weights as a row
// scale: rhs [E, K, N] at the default tile (warp-specialized, n = 256, a
// partial second n-tile): E = 8, K = 200, N = 264; M = 2T grouped rows,
// or more (the RUN lines with M > 2T): rows past the last group, zeros in
// both halves.
func.func @gmm_swiglu_grad_ws(%dy: tensor<?x200xbf16> {moe.sym = "M"},
                              %ids: tensor<?x2xi32>,
                              %w: tensor<8x200x264xbf16>,
                              %h: tensor<?x528xbf16> {moe.sym = "M"},
                              %s: tensor<?xf32> {moe.sym = "M"})
    -> tensor<?x528xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %da = moe.grouped_matmul %dy, %w, %offsets row_scale(%s : tensor<?xf32>)
      : tensor<?x200xbf16>, tensor<8x200x264xbf16>, tensor<8xi32>
      -> tensor<?x264xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x528xbf16>, tensor<?x264xbf16> -> tensor<?x528xbf16>
  return %dh : tensor<?x528xbf16>
}

// The fused form on the block-barrier kernel (tile n = 128), f16 operands,
// an f32 saved input and output: E = 16, K = 136, N = 72 (rhs [E, N, K]).
func.func @gmm_swiglu_grad_staged(%dy: tensor<?x136xf16> {moe.sym = "M"},
                                  %ids: tensor<?x2xi32>,
                                  %w: tensor<16x72x136xf16>,
                                  %h: tensor<?x144xf32> {moe.sym = "M"})
    -> tensor<?x144xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %dh = moe.grouped_matmul %dy, %w, %offsets
      activation_input(%h : tensor<?x144xf32>)
      {transpose_rhs, activation = #moe.activation<swiglu_grad>,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256>}
      : tensor<?x136xf16>, tensor<16x72x136xf16>, tensor<16xi32>
      -> tensor<?x144xf32>
  return %dh : tensor<?x144xf32>
}

// LoRA fine-tuning's down dX (r = 16, transpose_lora: the adapters are
// transposed first) into SwiGLU's gradient, warp-specialized with the
// adapter's product: E = 4, K = 136, N = 264.
func.func @gmm_swiglu_grad_lora(%dy: tensor<?x136xbf16> {moe.sym = "M"},
                                %ids: tensor<?x2xi32>,
                                %w: tensor<4x136x264xbf16>,
                                %la: tensor<64x264xbf16>,
                                %lb: tensor<136x64xbf16>,
                                %h: tensor<?x528xbf16> {moe.sym = "M"})
    -> tensor<?x528xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da = moe.grouped_matmul %dy, %w, %offsets
      lora(%la, %lb : tensor<64x264xbf16>, tensor<136x64xbf16>)
      {transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x136xbf16>, tensor<4x136x264xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x528xbf16>, tensor<?x264xbf16> -> tensor<?x528xbf16>
  return %dh : tensor<?x528xbf16>
}

// The down dX as moe-fuse-permute and moe-fuse-epilogue leave it in a
// frozen-experts or LoRA backward: dy gathered by slot, the routing weights
// as row scale (moe.permute_probs), SwiGLU's gradient in the
// warp-specialized kernel's pair epilogue (N = 256, K = 192); unpermute_grad
// keeps the weights' gradient. E = 8, k = 2: M = 2T.
func.func @gmm_swiglu_grad_gather(%dy: tensor<?x192xbf16>,
                                       %w: tensor<?x2xf32>,
                                       %ids: tensor<?x2xi32>,
                                       %y: tensor<?x192xbf16> {moe.sym = "M"},
                                       %wd: tensor<8x192x256xbf16>,
                                       %h: tensor<?x512xbf16> {moe.sym = "M"})
    -> (tensor<?x512xbf16>, tensor<?x2xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %dr, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 2
      weights(%w, %y : tensor<?x2xf32>, tensor<?x192xbf16> -> tensor<?x2xf32>)
      : tensor<?x192xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x192xbf16>
  %da = moe.grouped_matmul %dr, %wd, %offsets
      {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            stages = 3, producers = 128>}
      : tensor<?x192xbf16>, tensor<8x192x256xbf16>, tensor<8xi32>
      -> tensor<?x256xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x512xbf16>, tensor<?x256xbf16> -> tensor<?x512xbf16>
  return %dh, %dw : tensor<?x512xbf16>, tensor<?x2xf32>
}
