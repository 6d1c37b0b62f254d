// RUN: moec-opt %s -split-input-file -moe-fuse-permute | FileCheck %s

// The permuted rows are gathered by the matmul; the permute goes away.
// CHECK-LABEL: func @fuse
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xbf16>, %[[W:.*]]: tensor<4x16x32xbf16>, %[[S:.*]]: tensor<8xi32>, %[[O:.*]]: tensor<4xi32>)
func.func @fuse(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<8x32xbf16> {
  // CHECK-NOT: moe.permute
  // CHECK: %[[Y:.*]] = moe.grouped_matmul %[[X]], %[[W]], %[[O]] gather(%[[S]] : tensor<8xi32>) {k = 2 : i64} : tensor<4x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  // CHECK: return %[[Y]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return %y : tensor<8x32xbf16>
}

// -----

// Dynamic token counts, and every other operand and attribute is kept.
// CHECK-LABEL: func @fuse_keeps_operands
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xbf16>, %[[W:.*]]: tensor<4x64x16xbf16>, %[[S:.*]]: tensor<?xi32>, %[[O:.*]]: tensor<4xi32>, %[[B:.*]]: tensor<4x64xf32>, %[[R:.*]]: tensor<?xf32>)
func.func @fuse_keeps_operands(%x: tensor<?x16xbf16>, %w: tensor<4x64x16xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>, %b: tensor<4x64xf32>, %r: tensor<?xf32>) -> tensor<?x32xf32> {
  // CHECK-NOT: moe.permute
  // CHECK: moe.grouped_matmul %[[X]], %[[W]], %[[O]] gather(%[[S]] : tensor<?xi32>) bias(%[[B]] : tensor<4x64xf32>) row_scale(%[[R]] : tensor<?xf32>) {activation = #moe.activation<swiglu>, k = 8 : i64, moe.tile = #moe.tile<m = 32, n = 16, k = 64, threads = 512>, transpose_rhs} : tensor<?x16xbf16>, tensor<4x64x16xbf16>, tensor<4xi32> -> tensor<?x32xf32>
  %rows = moe.permute %x, %slots, %o k = 8 : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o bias(%b : tensor<4x64xf32>) row_scale(%r : tensor<?xf32>) {transpose_rhs, activation = #moe.activation<swiglu>, moe.tile = #moe.tile<m = 32, n = 16, k = 64, threads = 512>} : tensor<?x16xbf16>, tensor<4x64x16xbf16>, tensor<4xi32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// Gate and up projections read the same permute: both gather, and the permute
// goes away with its last user.
// CHECK-LABEL: func @fuse_two_users
func.func @fuse_two_users(%x: tensor<4x16xbf16>, %wg: tensor<4x16x32xbf16>, %wu: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<8x32xbf16>, tensor<8x32xbf16>) {
  // CHECK-NOT: moe.permute
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<8xi32>) {k = 2 : i64}
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<8xi32>) {k = 2 : i64}
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %g = moe.grouped_matmul %rows, %wg, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  %u = moe.grouped_matmul %rows, %wu, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return %g, %u : tensor<8x32xbf16>, tensor<8x32xbf16>
}

// -----

// The permute stays for its other user.
// CHECK-LABEL: func @keep_permute_for_other_user
func.func @keep_permute_for_other_user(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<8x32xbf16>, tensor<8x16xbf16>) {
  // CHECK: %[[ROWS:.*]] = moe.permute
  // CHECK: %[[Y:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<8xi32>) {k = 2 : i64} : tensor<4x16xbf16>
  // CHECK: return %[[Y]], %[[ROWS]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return %y, %rows : tensor<8x32xbf16>, tensor<8x16xbf16>
}

// -----

// A matmul that scatters with the same k gathers too (the whole layer in one
// op).
// CHECK-LABEL: func @fuse_with_scatter
func.func @fuse_with_scatter(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<4x32xbf16> {
  // CHECK-NOT: moe.permute
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<8xi32>) scatter(%{{.*}} : tensor<8xi32>) {k = 2 : i64} : tensor<4x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o scatter(%slots : tensor<8xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return %y : tensor<4x32xbf16>
}

// -----

// Not fused: scatter with another k.
// CHECK-LABEL: func @no_fuse_scatter_other_k
func.func @no_fuse_scatter_other_k(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<8x32xbf16> {
  // CHECK: moe.permute
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(%{{.*}} : tensor<8xi32>) {k = 1 : i64}
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o scatter(%slots : tensor<8xi32>) {k = 1 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return %y : tensor<8x32xbf16>
}

// -----

// Not fused: scatter to another token count than the permute's tokens.
// CHECK-LABEL: func @no_fuse_scatter_other_tokens
func.func @no_fuse_scatter_other_tokens(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<3x32xbf16> {
  // CHECK: moe.permute
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o scatter(%slots : tensor<8xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<3x32xbf16>
  return %y : tensor<3x32xbf16>
}

// -----

// Not fused: the permute carries routing weights.
// CHECK-LABEL: func @no_fuse_probs
func.func @no_fuse_probs(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<4x2xf32>) -> tensor<8x32xbf16> {
  // CHECK: %[[ROWS:.*]], %[[PROBS:.*]] = moe.permute
  // CHECK: moe.grouped_matmul %[[ROWS]], %{{.*}}, %{{.*}} row_scale(%[[PROBS]] : tensor<8xf32>) :
  %rows, %probs = moe.permute %x, %slots, %o k = 2 probs(%p : tensor<4x2xf32> -> tensor<8xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o row_scale(%probs : tensor<8xf32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return %y : tensor<8x32xbf16>
}

// -----

// Fused: FP8 token rows permuted with their scales, which the matmul reads
// as its lhs scales (moe-fp8-recipe's form): the matmul gathers the FP8
// tokens and takes the tokens' scales.
// CHECK-LABEL: func @fuse_token_scales
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4x128xf8E4M3FN>, %[[SX:[^:]*]]: tensor<4x1xf32>, %[[W:[^:]*]]: tensor<4x128x128xf8E4M3FN>, %[[SW:[^:]*]]: tensor<4x1x1xf32>, %[[S:[^:]*]]: tensor<8xi32>, %[[O:[^:]*]]: tensor<4xi32>)
func.func @fuse_token_scales(%x: tensor<4x128xf8E4M3FN>, %sx: tensor<4x1xf32>, %w: tensor<4x128x128xf8E4M3FN>, %sw: tensor<4x1x1xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<8x128xbf16> {
  // CHECK-NOT: moe.permute
  // CHECK: moe.grouped_matmul %[[X]], %[[W]], %[[O]] gather(%[[S]] : tensor<8xi32>) scales(%[[SX]], %[[SW]] : tensor<4x1xf32>, tensor<4x1x1xf32>) {k = 2 : i64} : tensor<4x128xf8E4M3FN>,
  %rows, %scales = moe.permute %x, %slots, %o k = 2 scales(%sx : tensor<4x1xf32> -> tensor<8x1xf32>) : tensor<4x128xf8E4M3FN>, tensor<8xi32>, tensor<4xi32> -> tensor<8x128xf8E4M3FN>
  %y = moe.grouped_matmul %rows, %w, %o scales(%scales, %sw : tensor<8x1xf32>, tensor<4x1x1xf32>) : tensor<8x128xf8E4M3FN>, tensor<4x128x128xf8E4M3FN>, tensor<4xi32> -> tensor<8x128xbf16>
  return %y : tensor<8x128xbf16>
}

// -----

// Not fused: the permute carries scales that the matmul does not read (its
// lhs scales are per permuted row, from elsewhere).
// CHECK-LABEL: func @no_fuse_other_scales
func.func @no_fuse_other_scales(%x: tensor<4x128xf8E4M3FN>, %sx: tensor<4x1xf32>, %sr: tensor<8x1xf32>, %w: tensor<4x128x128xf8E4M3FN>, %sw: tensor<4x1x1xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<8x128xbf16>, tensor<8x1xf32>) {
  // CHECK: %[[ROWS:.*]], %[[SCALES:.*]] = moe.permute
  // CHECK: moe.grouped_matmul %[[ROWS]], %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}} :
  %rows, %scales = moe.permute %x, %slots, %o k = 2 scales(%sx : tensor<4x1xf32> -> tensor<8x1xf32>) : tensor<4x128xf8E4M3FN>, tensor<8xi32>, tensor<4xi32> -> tensor<8x128xf8E4M3FN>
  %y = moe.grouped_matmul %rows, %w, %o scales(%sr, %sw : tensor<8x1xf32>, tensor<4x1x1xf32>) : tensor<8x128xf8E4M3FN>, tensor<4x128x128xf8E4M3FN>, tensor<4xi32> -> tensor<8x128xbf16>
  return %y, %scales : tensor<8x128xbf16>, tensor<8x1xf32>
}

// -----

// Not fused: FP8 block scales of the permuted rows (a gathered matmul needs
// them per token).
// CHECK-LABEL: func @no_fuse_lhs_scales
func.func @no_fuse_lhs_scales(%x: tensor<4x128xf8E4M3FN>, %sx: tensor<8x1xf32>, %w: tensor<4x128x128xf8E4M3FN>, %sw: tensor<4x1x1xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<8x128xbf16> {
  // CHECK: %[[ROWS:.*]] = moe.permute
  // CHECK: moe.grouped_matmul %[[ROWS]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x128xf8E4M3FN>, tensor<8xi32>, tensor<4xi32> -> tensor<8x128xf8E4M3FN>
  %y = moe.grouped_matmul %rows, %w, %o scales(%sx, %sw : tensor<8x1xf32>, tensor<4x1x1xf32>) : tensor<8x128xf8E4M3FN>, tensor<4x128x128xf8E4M3FN>, tensor<4xi32> -> tensor<8x128xbf16>
  return %y : tensor<8x128xbf16>
}

// -----

// Not fused: the matmul groups its rows by other offsets.
// CHECK-LABEL: func @no_fuse_other_offsets
func.func @no_fuse_other_offsets(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %o2: tensor<4xi32>) -> tensor<8x32xbf16> {
  // CHECK: %[[ROWS:.*]] = moe.permute
  // CHECK: moe.grouped_matmul %[[ROWS]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.grouped_matmul %rows, %w, %o2 : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return %y : tensor<8x32xbf16>
}

// -----

// Not fused: weight gradients.
// CHECK-LABEL: func @no_fuse_weight_grad
func.func @no_fuse_weight_grad(%x: tensor<4x16xbf16>, %dy: tensor<8x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<4x16x32xf32> {
  // CHECK: %[[ROWS:.*]] = moe.permute
  // CHECK: moe.grouped_weight_grad %[[ROWS]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %dw = moe.grouped_weight_grad %rows, %dy, %o : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return %dw : tensor<4x16x32xf32>
}

// -----

// Not fused: the matmul already gathers (its lhs is then the token matrix).
// CHECK-LABEL: func @no_fuse_already_gathers
func.func @no_fuse_already_gathers(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<16x32xbf16> {
  // CHECK: %[[ROWS:.*]] = moe.permute
  // CHECK: moe.grouped_matmul %[[ROWS]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %s2 = tensor.empty() : tensor<16xi32>
  %y = moe.grouped_matmul %rows, %w, %o gather(%s2 : tensor<16xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<16x32xbf16>
  return %y : tensor<16x32xbf16>
}

// -----

// unpermute_grad into the down projection's input gradient: the matmul
// gathers dy by slot and scales by the routing weights; the unpermute_grad
// is left with the weights' gradient.
// CHECK-LABEL: func @fuse_unpermute_grad
// CHECK-SAME: (%[[DY:.*]]: tensor<?x16xbf16>, %[[W:.*]]: tensor<?x2xf32>, %[[Y:.*]]: tensor<?x16xbf16>, %[[WD:.*]]: tensor<4x16x8xbf16>, %[[S:.*]]: tensor<?xi32>, %[[O:.*]]: tensor<4xi32>, %[[P:.*]]: tensor<?xi32>)
func.func @fuse_unpermute_grad(%dy: tensor<?x16xbf16>, %w: tensor<?x2xf32>, %y: tensor<?x16xbf16>, %wd: tensor<4x16x8xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>, %pos: tensor<?xi32>) -> (tensor<?x8xbf16>, tensor<?x2xf32>) {
  // CHECK: %[[WS:.*]] = moe.permute_probs %[[W]], %[[S]], %[[O]] k = 2 : tensor<?x2xf32>, tensor<?xi32>, tensor<4xi32> -> tensor<?xf32>
  // CHECK: %[[DW:.*]] = moe.unpermute_grad %[[DY]], %[[S]], %[[O]] k = 2 positions(%[[P]] : tensor<?xi32>) weights(%[[W]], %[[Y]] : tensor<?x2xf32>, tensor<?x16xbf16> -> tensor<?x2xf32>) : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32>{{$}}
  // CHECK: %[[DA:.*]] = moe.grouped_matmul %[[DY]], %[[WD]], %[[O]] gather(%[[S]] : tensor<?xi32>) row_scale(%[[WS]] : tensor<?xf32>) {k = 2 : i64} : tensor<?x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
  // CHECK: return %[[DA]], %[[DW]]
  %dr, %dw = moe.unpermute_grad %dy, %slots, %o k = 2 positions(%pos : tensor<?xi32>) weights(%w, %y : tensor<?x2xf32>, tensor<?x16xbf16> -> tensor<?x2xf32>) : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  %da = moe.grouped_matmul %dr, %wd, %o : tensor<?x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
  return %da, %dw : tensor<?x8xbf16>, tensor<?x2xf32>
}

// -----

// Without weights the rows are the token gradients as they are: the matmul
// only gathers, and the unpermute_grad goes away.
// CHECK-LABEL: func @fuse_unweighted_unpermute_grad
func.func @fuse_unweighted_unpermute_grad(%dy: tensor<4x16xbf16>, %wd: tensor<4x16x8xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<8x8xbf16> {
  // CHECK-NOT: moe.unpermute_grad
  // CHECK-NOT: moe.permute_probs
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<8xi32>) {k = 2 : i64} : tensor<4x16xbf16>
  %dr = moe.unpermute_grad %dy, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %da = moe.grouped_matmul %dr, %wd, %o : tensor<8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<8x8xbf16>
  return %da : tensor<8x8xbf16>
}

// -----

// LoRA on the down projection as moe-decompose-lora-grad leaves it on sm90a:
// the input gradient and du = dy · B_e take the weights (du's constant
// scale s = 2 multiplied in); dB = Σ dyᵀ u gathers dy and the weights go
// to u's rows (with its s).
// CHECK-LABEL: func @fuse_unpermute_grad_lora
// CHECK-SAME: (%[[DY:.*]]: tensor<?x16xbf16>, %[[W:.*]]: tensor<?x2xf32>, %[[Y:.*]]: tensor<?x16xbf16>, %[[A:.*]]: tensor<?x8xbf16>, %[[WD:.*]]: tensor<4x16x8xbf16>, %[[LA:.*]]: tensor<4x4x8xbf16>, %[[LB:.*]]: tensor<4x4x16xbf16>, %[[S:.*]]: tensor<?xi32>, %[[O:.*]]: tensor<4xi32>)
func.func @fuse_unpermute_grad_lora(%dy: tensor<?x16xbf16>, %w: tensor<?x2xf32>, %y: tensor<?x16xbf16>, %a: tensor<?x8xbf16>, %wd: tensor<4x16x8xbf16>, %la: tensor<4x4x8xbf16>, %lbt: tensor<4x4x16xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>) -> (tensor<?x8xbf16>, tensor<4x16x4xf32>, tensor<4x4x8xf32>, tensor<?x2xf32>) {
  // CHECK-DAG: %[[WS1:.*]] = moe.permute_probs %[[W]], %[[S]], %[[O]] k = 2 : tensor<?x2xf32>, tensor<?xi32>, tensor<4xi32> -> tensor<?xf32>
  // CHECK-DAG: %[[WS2:.*]] = moe.permute_probs %[[W]], %[[S]], %[[O]] k = 2 {scale = 2.000000e+00 : f32}
  // CHECK-DAG: %[[DW:.*]] = moe.unpermute_grad %[[DY]], %[[S]], %[[O]] k = 2 weights(%[[W]], %[[Y]] : tensor<?x2xf32>, tensor<?x16xbf16> -> tensor<?x2xf32>) : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32>{{$}}
  // CHECK-DAG: %[[DA:.*]] = moe.grouped_matmul %[[DY]], %[[WD]], %[[O]] gather(%[[S]] : tensor<?xi32>) row_scale(%[[WS1]] : tensor<?xf32>) {k = 2 : i64}
  // CHECK-DAG: %[[U:.*]] = moe.grouped_matmul %[[A]], %[[LA]], %[[O]] row_scale(%[[WS2]] : tensor<?xf32>) {transpose_rhs}
  // CHECK-DAG: %[[DU:.*]] = moe.grouped_matmul %[[DY]], %[[LB]], %[[O]] gather(%[[S]] : tensor<?xi32>) row_scale(%[[WS2]] : tensor<?xf32>) {k = 2 : i64, transpose_rhs}
  // CHECK-DAG: %[[DB:.*]] = moe.grouped_weight_grad %[[DY]], %[[U]], %[[O]] gather(%[[S]] : tensor<?xi32>) {k = 2 : i64}
  // CHECK-DAG: %[[DAA:.*]] = moe.grouped_weight_grad %[[DU]], %[[A]], %[[O]]
  // CHECK: return %[[DA]], %[[DB]], %[[DAA]], %[[DW]]
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  %dr, %dw = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<?x2xf32>, tensor<?x16xbf16> -> tensor<?x2xf32>) : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  %da = moe.grouped_matmul %dr, %wd, %o : tensor<?x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
  %m = tensor.dim %dr, %c0 : tensor<?x16xbf16>
  %e = tensor.empty(%m) : tensor<?xf32>
  %s = linalg.fill ins(%two : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  %u = moe.grouped_matmul %a, %la, %o row_scale(%s : tensor<?xf32>) {transpose_rhs} : tensor<?x8xbf16>, tensor<4x4x8xbf16>, tensor<4xi32> -> tensor<?x4xbf16>
  %du = moe.grouped_matmul %dr, %lbt, %o row_scale(%s : tensor<?xf32>) {transpose_rhs} : tensor<?x16xbf16>, tensor<4x4x16xbf16>, tensor<4xi32> -> tensor<?x4xbf16>
  %db = moe.grouped_weight_grad %dr, %u, %o : tensor<?x16xbf16>, tensor<?x4xbf16>, tensor<4xi32> -> tensor<4x16x4xf32>
  %daa = moe.grouped_weight_grad %du, %a, %o : tensor<?x4xbf16>, tensor<?x8xbf16>, tensor<4xi32> -> tensor<4x4x8xf32>
  return %da, %db, %daa, %dw : tensor<?x8xbf16>, tensor<4x16x4xf32>, tensor<4x4x8xf32>, tensor<?x2xf32>
}

// -----

// A full fine-tune's down projection: the weight gradient reads the saved
// SwiGLU output (not a matmul), so the rows stay, for both readers.
// CHECK-LABEL: func @keep_unpermute_grad_full_weight_grad
func.func @keep_unpermute_grad_full_weight_grad(%dy: tensor<4x16xbf16>, %w: tensor<4x2xf32>, %y: tensor<8x16xbf16>, %a: tensor<8x8xbf16>, %wd: tensor<4x16x8xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<8x8xbf16>, tensor<4x16x8xf32>, tensor<4x2xf32>) {
  // CHECK: %[[DR:.*]], %{{.*}} = moe.unpermute_grad
  // CHECK-NOT: moe.permute_probs
  // CHECK: moe.grouped_matmul %[[DR]]
  // CHECK: moe.grouped_weight_grad %[[DR]]
  %dr, %dw = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %da = moe.grouped_matmul %dr, %wd, %o : tensor<8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<8x8xbf16>
  %dwd = moe.grouped_weight_grad %dr, %a, %o : tensor<8x16xbf16>, tensor<8x8xbf16>, tensor<4xi32> -> tensor<4x16x8xf32>
  return %da, %dwd, %dw : tensor<8x8xbf16>, tensor<4x16x8xf32>, tensor<4x2xf32>
}

// -----

// Not fused: a bias (not scaled by the routing weight), a non-linear
// activation, a row scale that is not a constant, the rows returned.
// CHECK-LABEL: func @keep_unpermute_grad
func.func @keep_unpermute_grad(%dy: tensor<4x16xbf16>, %w: tensor<4x2xf32>, %y: tensor<8x16xbf16>, %wd: tensor<4x16x8xbf16>, %b: tensor<4x8xf32>, %r: tensor<8xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<8x8xbf16>, tensor<8x4xbf16>, tensor<8x8xbf16>, tensor<8x16xbf16>) {
  // CHECK-NOT: moe.permute_probs
  // CHECK-NOT: gather
  %dr1, %dw1 = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %biased = moe.grouped_matmul %dr1, %wd, %o bias(%b : tensor<4x8xf32>) : tensor<8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<8x8xbf16>
  %dr2, %dw2 = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %act = moe.grouped_matmul %dr2, %wd, %o {activation = #moe.activation<swiglu>} : tensor<8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<8x4xbf16>
  %dr3, %dw3 = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %scaled = moe.grouped_matmul %dr3, %wd, %o row_scale(%r : tensor<8xf32>) : tensor<8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<8x8xbf16>
  %dr4 = moe.unpermute_grad %dy, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return %biased, %act, %scaled, %dr4 : tensor<8x8xbf16>, tensor<8x4xbf16>, tensor<8x8xbf16>, tensor<8x16xbf16>
}

// -----

// Not fused: a weight gradient whose rhs reads the rows too (the product
// carries the weight twice), a rhs computed before the unpermute_grad (the
// weights would not dominate it), a row scale that is not finite.
// CHECK-LABEL: func @keep_unpermute_grad_scaled_twice
// CHECK-NOT: moe.permute_probs
func.func @keep_unpermute_grad_scaled_twice(%dy: tensor<?x16xbf16>, %w: tensor<?x2xf32>, %y: tensor<?x16xbf16>, %wd: tensor<4x16x4xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>) -> (tensor<4x16x4xf32>, tensor<?x2xf32>) {
  %dr, %dw = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<?x2xf32>, tensor<?x16xbf16> -> tensor<?x2xf32>) : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  %t = moe.grouped_matmul %dr, %wd, %o : tensor<?x16xbf16>, tensor<4x16x4xbf16>, tensor<4xi32> -> tensor<?x4xbf16>
  %db = moe.grouped_weight_grad %dr, %t, %o : tensor<?x16xbf16>, tensor<?x4xbf16>, tensor<4xi32> -> tensor<4x16x4xf32>
  return %db, %dw : tensor<4x16x4xf32>, tensor<?x2xf32>
}

// -----

// CHECK-LABEL: func @keep_unpermute_grad_rhs_before
// CHECK-NOT: moe.permute_probs
func.func @keep_unpermute_grad_rhs_before(%dy: tensor<?x16xbf16>, %w: tensor<?x2xf32>, %y: tensor<?x16xbf16>, %a: tensor<?x8xbf16>, %la: tensor<4x4x8xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>) -> (tensor<4x16x4xf32>, tensor<?x2xf32>) {
  %u = moe.grouped_matmul %a, %la, %o {transpose_rhs} : tensor<?x8xbf16>, tensor<4x4x8xbf16>, tensor<4xi32> -> tensor<?x4xbf16>
  %dr, %dw = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<?x2xf32>, tensor<?x16xbf16> -> tensor<?x2xf32>) : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  %db = moe.grouped_weight_grad %dr, %u, %o : tensor<?x16xbf16>, tensor<?x4xbf16>, tensor<4xi32> -> tensor<4x16x4xf32>
  return %db, %dw : tensor<4x16x4xf32>, tensor<?x2xf32>
}

// -----

// CHECK-LABEL: func @keep_unpermute_grad_inf_scale
// CHECK-NOT: moe.permute_probs
func.func @keep_unpermute_grad_inf_scale(%dy: tensor<4x16xbf16>, %w: tensor<4x2xf32>, %y: tensor<8x16xbf16>, %wd: tensor<4x16x8xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<8x8xbf16>, tensor<4x2xf32>) {
  %inf = arith.constant 0x7F800000 : f32
  %e = tensor.empty() : tensor<8xf32>
  %s = linalg.fill ins(%inf : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %dr, %dw = moe.unpermute_grad %dy, %slots, %o k = 2 weights(%w, %y : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %da = moe.grouped_matmul %dr, %wd, %o row_scale(%s : tensor<8xf32>) : tensor<8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<8x8xbf16>
  return %da, %dw : tensor<8x8xbf16>, tensor<4x2xf32>
}
