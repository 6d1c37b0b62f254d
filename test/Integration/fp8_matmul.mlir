// FP8 grouped matmuls at the shapes of the sm_90a wgmma kernel's FP8 mode
// (Hopper/HopperKernel.h: e4m3 or e5m2 operands with 1x128 lhs and 128x128
// weight scales, weights [E, N, K], each 128-deep K slice promoted into f32
// with its scales). The host runs the scalar kernels on these entries, so
// the checks below pin the reference semantics; scripts/gpu-correctness.sh
// runs the same entries through the wgmma kernel on the H200. Partial
// tiles everywhere: K = 528 and 1104 are not multiples of the 128-deep
// slice (and 1104 needs more slices than there are stages), N = 264 and
// 136 not multiples of the 128-wide n-tile; SwiGLU's up rows start at 192,
// in the middle of a 128-row scale block. Edge cases (gpu-correctness.sh):
// T = 1 (most experts empty), every token's first choice one expert, half
// the experts without tokens.
// RUN: moec run %s --entry fp8_gather --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_gather --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_swiglu_gather --sym T=30 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_rows_row_scale --sym T=40 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_e5m2_narrow --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_cl_gather --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_cl_n256 --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_gather_n128 --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_n256_swiglu --sym T=30 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_n256_rows --sym T=40 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_wgrad_t --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_wgrad_t --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_wgrad_acc --sym T=300 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_wgrad_narrow --sym T=40 --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// Gathered rows (k = 2) by cp.async, weights by TMA; n = 256 (264
// columns: the second n-tile holds 8, its second half none).
func.func @fp8_gather(%x: tensor<?x528xf8E4M3FN>, %sx: tensor<?x5xf32>,
                      %ids: tensor<?x2xi32>, %w: tensor<8x264x528xf8E4M3FN>,
                      %sw: tensor<8x3x5xf32>) -> tensor<?x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x5xf32>, tensor<8x3x5xf32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x528xf8E4M3FN>, tensor<8x264x528xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}

// SwiGLU in the epilogue: a block's gate rows and up rows are two scale
// segments, the up rows 192 on (half a scale block).
func.func @fp8_swiglu_gather(%x: tensor<?x256xf8E4M3FN>, %sx: tensor<?x2xf32>,
                             %ids: tensor<?x2xi32>,
                             %w: tensor<8x384x256xf8E4M3FN>,
                             %sw: tensor<8x3x2xf32>) -> tensor<?x192xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x2xf32>, tensor<8x3x2xf32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x256xf8E4M3FN>, tensor<8x384x256xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x192xbf16>
  return %y : tensor<?x192xbf16>
}

// Rows in order (TMA for both operands), a row scale, an f32 output, more
// slices than stages.
func.func @fp8_rows_row_scale(%x: tensor<?x1104xf8E4M3FN>, %sx: tensor<?x9xf32>,
                              %ids: tensor<?x1xi32>,
                              %w: tensor<16x136x1104xf8E4M3FN>,
                              %sw: tensor<16x2x9xf32>, %s: tensor<?xf32>)
    -> tensor<?x136xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %y = moe.grouped_matmul %x, %w, %offsets row_scale(%s : tensor<?xf32>)
      scales(%sx, %sw : tensor<?x9xf32>, tensor<16x2x9xf32>)
      {transpose_rhs}
      : tensor<?x1104xf8E4M3FN>, tensor<16x136x1104xf8E4M3FN>, tensor<16xi32>
      -> tensor<?x136xf32>
  return %y : tensor<?x136xf32>
}

// e5m2 (gradients' format) and a 64-wide output: block_n = 64.
func.func @fp8_e5m2_narrow(%x: tensor<?x256xf8E5M2>, %sx: tensor<?x2xf32>,
                           %ids: tensor<?x2xi32>, %w: tensor<8x64x256xf8E5M2>,
                           %sw: tensor<8x1x2xf32>) -> tensor<?x64xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x2xf32>, tensor<8x1x2xf32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x256xf8E5M2>, tensor<8x64x256xf8E5M2>, tensor<8xi32>
      -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// Clusters of 2 (each block multicasts half of the weight tile to both).
func.func @fp8_cl_gather(%x: tensor<?x528xf8E4M3FN>, %sx: tensor<?x5xf32>,
                         %ids: tensor<?x2xi32>, %w: tensor<8x264x528xf8E4M3FN>,
                         %sw: tensor<8x3x5xf32>) -> tensor<?x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x5xf32>, tensor<8x3x5xf32>)
      {k = 2 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 128, k = 128, threads = 384,
                            producers = 128, cluster = 2>}
      : tensor<?x528xf8E4M3FN>, tensor<8x264x528xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}

// A cluster of 2 at n = 256 (each block multicasts half of the 256-row
// weight tile to both, each half-slice's wgmmas reading its 128 rows).
func.func @fp8_cl_n256(%x: tensor<?x528xf8E4M3FN>, %sx: tensor<?x5xf32>,
                       %ids: tensor<?x2xi32>, %w: tensor<8x264x528xf8E4M3FN>,
                       %sw: tensor<8x3x5xf32>) -> tensor<?x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x5xf32>, tensor<8x3x5xf32>)
      {k = 2 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 128, threads = 384,
                            producers = 128, cluster = 2>}
      : tensor<?x528xf8E4M3FN>, tensor<8x264x528xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}

// The gathered rows of @fp8_gather at n = 128 (its default is n = 256,
// each slice as two 128-column halves: HopperPlan::partialN).
func.func @fp8_gather_n128(%x: tensor<?x528xf8E4M3FN>, %sx: tensor<?x5xf32>,
                           %ids: tensor<?x2xi32>,
                           %w: tensor<8x264x528xf8E4M3FN>,
                           %sw: tensor<8x3x5xf32>) -> tensor<?x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x5xf32>, tensor<8x3x5xf32>)
      {k = 2 : i64, transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 128, k = 128, threads = 384,
                            producers = 128>}
      : tensor<?x528xf8E4M3FN>, tensor<8x264x528xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}

func.func @fp8_n256_swiglu(%x: tensor<?x256xf8E4M3FN>, %sx: tensor<?x2xf32>,
                           %ids: tensor<?x2xi32>,
                           %w: tensor<8x512x256xf8E4M3FN>,
                           %sw: tensor<8x4x2xf32>) -> tensor<?x256xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x2xf32>, tensor<8x4x2xf32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 256, k = 128, threads = 384,
                            producers = 128>}
      : tensor<?x256xf8E4M3FN>, tensor<8x512x256xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// Rows in order (TMA for both operands) at n = 256, more slices than
// stages, 392 columns (the second n-tile's second half 8 wide).
func.func @fp8_n256_rows(%x: tensor<?x1104xf8E4M3FN>, %sx: tensor<?x9xf32>,
                         %ids: tensor<?x1xi32>,
                         %w: tensor<16x392x1104xf8E4M3FN>,
                         %sw: tensor<16x4x9xf32>) -> tensor<?x392xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %y = moe.grouped_matmul %x, %w, %offsets
      scales(%sx, %sw : tensor<?x9xf32>, tensor<16x4x9xf32>)
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 128, threads = 384,
                            producers = 128>}
      : tensor<?x1104xf8E4M3FN>, tensor<16x392x1104xf8E4M3FN>, tensor<16xi32>
      -> tensor<?x392xbf16>
  return %y : tensor<?x392xbf16>
}

// dW of [E, N, K] weights (transpose_rhs: dy is A, x is B), e4m3 x e5m2,
// bf16 out (bulk stores).
func.func @fp8_wgrad_t(%x: tensor<?x264xbf16>, %dy: tensor<?x136xbf16>,
                       %ids: tensor<?x1xi32>) -> tensor<16x136x264xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x264xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x264xbf16>
  %xq, %xs = moe.quantize %rows offsets(%offsets : tensor<16xi32>)
      group_size = 128 {axis = #moe.axis<colwise>, transpose}
      : tensor<?x264xbf16> -> tensor<264x?xf8E4M3FN>, tensor<?x264xf32>
  %dq, %ds = moe.quantize %dy offsets(%offsets : tensor<16xi32>)
      group_size = 128 {axis = #moe.axis<colwise>, transpose}
      : tensor<?x136xbf16> -> tensor<136x?xf8E5M2>, tensor<?x136xf32>
  %g = moe.grouped_weight_grad %xq, %dq, %offsets
      scales(%xs, %ds : tensor<?x264xf32>, tensor<?x136xf32>) {transpose_rhs}
      : tensor<264x?xf8E4M3FN>, tensor<136x?xf8E5M2>, tensor<16xi32>
      -> tensor<16x136x264xbf16>
  return %g : tensor<16x136x264xbf16>
}

// dW [E, K, N] of e4m3 operands added to an f32 gradient (accumulate).
func.func @fp8_wgrad_acc(%x: tensor<?x136xbf16>, %dy: tensor<?x200xbf16>,
                         %ids: tensor<?x1xi32>, %main: tensor<8x136x200xf32>)
    -> tensor<8x136x200xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x136xbf16>
  %xq, %xs = moe.quantize %rows offsets(%offsets : tensor<8xi32>)
      group_size = 128 {axis = #moe.axis<colwise>, transpose}
      : tensor<?x136xbf16> -> tensor<136x?xf8E4M3FN>, tensor<?x136xf32>
  %dq, %ds = moe.quantize %dy offsets(%offsets : tensor<8xi32>)
      group_size = 128 {axis = #moe.axis<colwise>, transpose}
      : tensor<?x200xbf16> -> tensor<200x?xf8E4M3FN>, tensor<?x200xf32>
  %g = moe.grouped_weight_grad %xq, %dq, %offsets
      accumulate(%main : tensor<8x136x200xf32>)
      scales(%xs, %ds : tensor<?x136xf32>, tensor<?x200xf32>)
      : tensor<136x?xf8E4M3FN>, tensor<200x?xf8E4M3FN>, tensor<8xi32>
      -> tensor<8x136x200xf32>
  return %g : tensor<8x136x200xf32>
}

// A 64-wide output (block_n = 64), f32.
func.func @fp8_wgrad_narrow(%x: tensor<?x256xbf16>, %dy: tensor<?x64xbf16>,
                            %ids: tensor<?x1xi32>) -> tensor<8x256x64xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x256xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x256xbf16>
  %xq, %xs = moe.quantize %rows offsets(%offsets : tensor<8xi32>)
      group_size = 128 {axis = #moe.axis<colwise>, transpose}
      : tensor<?x256xbf16> -> tensor<256x?xf8E4M3FN>, tensor<?x256xf32>
  %dq, %ds = moe.quantize %dy offsets(%offsets : tensor<8xi32>)
      group_size = 128 {axis = #moe.axis<colwise>, transpose}
      : tensor<?x64xbf16> -> tensor<64x?xf8E4M3FN>, tensor<?x64xf32>
  %g = moe.grouped_weight_grad %xq, %dq, %offsets
      scales(%xs, %ds : tensor<?x256xf32>, tensor<?x64xf32>)
      : tensor<256x?xf8E4M3FN>, tensor<64x?xf8E4M3FN>, tensor<8xi32>
      -> tensor<8x256x64xf32>
  return %g : tensor<8x256x64xf32>
}
