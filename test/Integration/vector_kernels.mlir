// The vectorized kernels (lib/Conversion/MoeToKernels/Vector/) at
// shapes they accept (row lengths that 16-byte vectors divide), E = 8: each
// entry checked against the float64 reference on the host backend here and
// on the H200 by scripts/gpu-correctness.sh. Edge cases: T=1 (most experts
// empty), one expert taking every token's first choice, half the experts
// without tokens, alignment padding, a short last row-wise group (K = 136,
// groups of 64) and short column-wise blocks (groups of 8 rows inside
// expert groups).
// RUN: moec run %s --entry permute_fp8 --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_fp8 --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_fp8 --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_bf16 --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_bf16 --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry own_slot_map --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry own_slot_map --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry swiglu_vec --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry swiglu_vec --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_rowwise_vec --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_rowwise_vec --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_rowwise_warp --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_vec --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_vec --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_vec --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_vec --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_block --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_block --sym T=70 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_transposed --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_transposed --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_transposed --sym T=70 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise_transposed --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dequantize_rowwise_vec --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dequantize_nf4_vec --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry transpose_tiles_batched --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// FP8 tokens with their 1x32 scales, permuted with probabilities into
// groups padded to 4 rows.
func.func @permute_fp8(%x: tensor<?x64xf8E4M3FN>, %s: tensor<?x2xf32>,
                       %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>)
    -> (tensor<?x64xf8E4M3FN>, tensor<?xf32>, tensor<?x2xf32>, tensor<8xi32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows, %probs, %scales = moe.permute %x, %slots, %offsets k = 2
      probs(%w : tensor<?x2xf32> -> tensor<?xf32>)
      scales(%s : tensor<?x2xf32> -> tensor<?x2xf32>)
      : tensor<?x64xf8E4M3FN>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xf8E4M3FN>
  return %rows, %probs, %scales, %offsets
      : tensor<?x64xf8E4M3FN>, tensor<?xf32>, tensor<?x2xf32>, tensor<8xi32>
}

// Weighted combine back to token order, in bf16.
func.func @unpermute_bf16(%x: tensor<?x64xbf16>, %ids: tensor<?x3xi32>,
                          %w: tensor<?x3xf32>) -> tensor<?x64xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 3
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 3 weights(%w : tensor<?x3xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// permute and unpermute that build the slot-to-row map themselves, as they
// do for slots passed in from elsewhere: their offsets come from a second
// sort, so moe-share-positions does not give them the first sort's
// positions. Unaligned rows, so permute's padding kernel runs with nothing
// to zero.
func.func @own_slot_map(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>,
                        %w: tensor<?x2xf32>)
    -> (tensor<?x64xbf16>, tensor<?xf32>, tensor<?x64xbf16>) {
  %s1, %slots, %o1 = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %s2, %sl2, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows, %probs = moe.permute %x, %slots, %offsets k = 2
      probs(%w : tensor<?x2xf32> -> tensor<?xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 2 weights(%w : tensor<?x2xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  return %rows, %probs, %y : tensor<?x64xbf16>, tensor<?xf32>, tensor<?x64xbf16>
}

// SwiGLU in both layouts and its gradient.
func.func @swiglu_vec(%x: tensor<?x128xbf16>, %dy: tensor<?x64xbf16>)
    -> (tensor<?x64xbf16>, tensor<?x64xf32>, tensor<?x128xbf16>, tensor<?x128xf32>) {
  %y = moe.swiglu %x : tensor<?x128xbf16> -> tensor<?x64xbf16>
  %yi = moe.swiglu %x {layout = #moe.layout<interleaved>}
      : tensor<?x128xbf16> -> tensor<?x64xf32>
  %g = moe.swiglu_grad %x, %dy : tensor<?x128xbf16>, tensor<?x64xbf16>
      -> tensor<?x128xbf16>
  %gi = moe.swiglu_grad %x, %dy {layout = #moe.layout<interleaved>}
      : tensor<?x128xbf16>, tensor<?x64xbf16> -> tensor<?x128xf32>
  return %y, %yi, %g, %gi
      : tensor<?x64xbf16>, tensor<?x64xf32>, tensor<?x128xbf16>, tensor<?x128xf32>
}

// Row-wise groups of 64 over K = 136 (the last group holds 8), from f32 to
// e5m2, and from bf16 to e4m3 with power-of-two scales.
func.func @quantize_rowwise_vec(%x: tensor<?x136xf32>, %xb: tensor<?x136xbf16>)
    -> (tensor<?x136xf8E5M2>, tensor<?x3xf32>, tensor<?x136xf8E4M3FN>, tensor<?x3xf32>) {
  %d, %s = moe.quantize %x group_size = 64
      : tensor<?x136xf32> -> tensor<?x136xf8E5M2>, tensor<?x3xf32>
  %db, %sb = moe.quantize %xb group_size = 64 {pow2_scale}
      : tensor<?x136xbf16> -> tensor<?x136xf8E4M3FN>, tensor<?x3xf32>
  return %d, %s, %db, %sb
      : tensor<?x136xf8E5M2>, tensor<?x3xf32>, tensor<?x136xf8E4M3FN>, tensor<?x3xf32>
}

// Whole groups (128 bf16, 32 f32, 8 bf16): on GPUs 16 elements per thread
// (one 16-byte FP8 store; 8 for the groups of 8), amax across the group's
// lanes by warp shuffles.
func.func @quantize_rowwise_warp(%x: tensor<?x256xbf16>, %xf: tensor<?x128xf32>,
                                 %xs: tensor<?x64xbf16>)
    -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>, tensor<?x128xf8E5M2>, tensor<?x4xf32>,
        tensor<?x64xf8E4M3FN>, tensor<?x8xf32>) {
  %d, %s = moe.quantize %x group_size = 128
      : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  %df, %sf = moe.quantize %xf group_size = 32 {pow2_scale}
      : tensor<?x128xf32> -> tensor<?x128xf8E5M2>, tensor<?x4xf32>
  %ds, %ss = moe.quantize %xs group_size = 8
      : tensor<?x64xbf16> -> tensor<?x64xf8E4M3FN>, tensor<?x8xf32>
  return %d, %s, %df, %sf, %ds, %ss
      : tensor<?x256xf8E4M3FN>, tensor<?x2xf32>, tensor<?x128xf8E5M2>, tensor<?x4xf32>,
        tensor<?x64xf8E4M3FN>, tensor<?x8xf32>
}

// Column-wise groups of 8 rows inside expert groups (padded to 4), bf16 to
// e4m3 and back; rows past the last group are zero.
func.func @quantize_colwise_vec(%x: tensor<?x32xbf16>, %ids: tensor<?x2xi32>)
    -> (tensor<?x32xf8E4M3FN>, tensor<?x32xf32>, tensor<?x32xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x32xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x32xbf16>
  %d, %s = moe.quantize %rows offsets(%offsets : tensor<8xi32>) group_size = 8
      {axis = #moe.axis<colwise>}
      : tensor<?x32xbf16> -> tensor<?x32xf8E4M3FN>, tensor<?x32xf32>
  %y = moe.dequantize %d, %s offsets(%offsets : tensor<8xi32>) group_size = 8
      {axis = #moe.axis<colwise>}
      : tensor<?x32xf8E4M3FN>, tensor<?x32xf32> -> tensor<?x32xbf16>
  return %d, %s, %y : tensor<?x32xf8E4M3FN>, tensor<?x32xf32>, tensor<?x32xbf16>
}

// Column-wise groups of 32 rows with the GPU block kernel (group a
// multiple of 16): 200 bf16 columns are one whole and one partial tile of
// 128; f32 rows of 100 columns, 16-row groups to e5m2 with power-of-two
// scales, one whole and one partial tile of 64.
func.func @quantize_colwise_block(%x: tensor<?x200xbf16>, %xf: tensor<?x100xf32>,
                                  %ids: tensor<?x2xi32>)
    -> (tensor<?x200xf8E4M3FN>, tensor<?x200xf32>, tensor<?x200xbf16>,
        tensor<?x100xf8E5M2>, tensor<?x100xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x200xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x200xbf16>
  %d, %s = moe.quantize %rows offsets(%offsets : tensor<8xi32>) group_size = 32
      {axis = #moe.axis<colwise>}
      : tensor<?x200xbf16> -> tensor<?x200xf8E4M3FN>, tensor<?x200xf32>
  %y = moe.dequantize %d, %s offsets(%offsets : tensor<8xi32>) group_size = 32
      {axis = #moe.axis<colwise>}
      : tensor<?x200xf8E4M3FN>, tensor<?x200xf32> -> tensor<?x200xbf16>
  %rf = moe.permute %xf, %slots, %offsets k = 2
      : tensor<?x100xf32>, tensor<?xi32>, tensor<8xi32> -> tensor<?x100xf32>
  %df, %sf = moe.quantize %rf offsets(%offsets : tensor<8xi32>) group_size = 16
      {axis = #moe.axis<colwise>, pow2_scale}
      : tensor<?x100xf32> -> tensor<?x100xf8E5M2>, tensor<?x100xf32>
  return %d, %s, %y, %df, %sf : tensor<?x200xf8E4M3FN>, tensor<?x200xf32>,
      tensor<?x200xbf16>, tensor<?x100xf8E5M2>, tensor<?x100xf32>
}

// The transposed column-wise layout (the FP8 weight gradient's operands)
// with the GPU block kernel, each expert's rows padded to whole groups:
// 128-row groups of 264 bf16 columns (a whole tile of 256 and a partial
// one: 8 runs of 16 rows per column), 32-row groups of 100 f32 columns to
// e5m2 with power-of-two scales (2 runs), and 16-row groups of 200 bf16
// columns (1 run).
func.func @quantize_colwise_transposed(%x: tensor<?x264xbf16>,
                                       %xf: tensor<?x100xf32>,
                                       %xs: tensor<?x200xbf16>,
                                       %ids: tensor<?x2xi32>)
    -> (tensor<264x?xf8E4M3FN>, tensor<?x264xf32>, tensor<100x?xf8E5M2>,
        tensor<?x100xf32>, tensor<200x?xf8E4M3FN>, tensor<?x200xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x264xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x264xbf16>
  %d, %s = moe.quantize %rows offsets(%offsets : tensor<8xi32>) group_size = 128
      {axis = #moe.axis<colwise>, transpose}
      : tensor<?x264xbf16> -> tensor<264x?xf8E4M3FN>, tensor<?x264xf32>
  %rf = moe.permute %xf, %slots, %offsets k = 2
      : tensor<?x100xf32>, tensor<?xi32>, tensor<8xi32> -> tensor<?x100xf32>
  %df, %sf = moe.quantize %rf offsets(%offsets : tensor<8xi32>) group_size = 32
      {axis = #moe.axis<colwise>, transpose, pow2_scale}
      : tensor<?x100xf32> -> tensor<100x?xf8E5M2>, tensor<?x100xf32>
  %rs = moe.permute %xs, %slots, %offsets k = 2
      : tensor<?x200xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x200xbf16>
  %ds, %ss = moe.quantize %rs offsets(%offsets : tensor<8xi32>) group_size = 16
      {axis = #moe.axis<colwise>, transpose}
      : tensor<?x200xbf16> -> tensor<200x?xf8E4M3FN>, tensor<?x200xf32>
  return %d, %s, %df, %sf, %ds, %ss : tensor<264x?xf8E4M3FN>, tensor<?x264xf32>,
      tensor<100x?xf8E5M2>, tensor<?x100xf32>, tensor<200x?xf8E4M3FN>,
      tensor<?x200xf32>
}

// Row-wise FP8 dequantization, 1x32 groups, to f32.
func.func @dequantize_rowwise_vec(%d: tensor<?x64xf8E4M3FN>, %s: tensor<?x2xf32>)
    -> tensor<?x64xf32> {
  %y = moe.dequantize %d, %s group_size = 32
      : tensor<?x64xf8E4M3FN>, tensor<?x2xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// NF4 for 3 of 4 experts, 32-element absmax blocks.
func.func @dequantize_nf4_vec(%packed: tensor<4x6x16xui8>, %absmax: tensor<4x6xf32>,
                              %cb: tensor<16xf32>, %ids: tensor<3xi32>)
    -> tensor<3x6x32xbf16> {
  %w = moe.dequantize %packed, %absmax codebook(%cb : tensor<16xf32>)
      experts(%ids : tensor<3xi32>) group_size = 32
      : tensor<4x6x16xui8>, tensor<4x6xf32> -> tensor<3x6x32xbf16>
  return %w : tensor<3x6x32xbf16>
}

// The tiled 16-bit transpose of the last two dimensions (Vector/Transpose.cpp
// on GPUs): a batch of 3, 136 x 264 -> 264 x 136, so that the 128 x 128
// tiles are partial in both dimensions (blocks of 8 x 8 past the edges).
func.func @transpose_tiles_batched(%a: tensor<3x136x264xbf16>)
    -> tensor<3x264x136xbf16> {
  %e = tensor.empty() : tensor<3x264x136xbf16>
  %t = linalg.transpose ins(%a : tensor<3x136x264xbf16>)
      outs(%e : tensor<3x264x136xbf16>) permutation = [0, 2, 1]
  return %t : tensor<3x264x136xbf16>
}
