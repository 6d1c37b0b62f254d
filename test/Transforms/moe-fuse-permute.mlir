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

// Not fused: the permute carries quantization scales.
// CHECK-LABEL: func @no_fuse_scales
func.func @no_fuse_scales(%x: tensor<4x128xf8E4M3FN>, %sx: tensor<4x1xf32>, %w: tensor<4x128x128xf8E4M3FN>, %sw: tensor<4x1x1xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<8x128xbf16> {
  // CHECK: %[[ROWS:.*]], %[[SCALES:.*]] = moe.permute
  // CHECK: moe.grouped_matmul %[[ROWS]], %{{.*}}, %{{.*}} scales(%[[SCALES]], %{{.*}} :
  %rows, %scales = moe.permute %x, %slots, %o k = 2 scales(%sx : tensor<4x1xf32> -> tensor<8x1xf32>) : tensor<4x128xf8E4M3FN>, tensor<8xi32>, tensor<4xi32> -> tensor<8x128xf8E4M3FN>
  %y = moe.grouped_matmul %rows, %w, %o scales(%scales, %sw : tensor<8x1xf32>, tensor<4x1x1xf32>) : tensor<8x128xf8E4M3FN>, tensor<4x128x128xf8E4M3FN>, tensor<4xi32> -> tensor<8x128xbf16>
  return %y : tensor<8x128xbf16>
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
  // CHECK: moe.grouped_matmul %[[ROWS]]
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  %dw = moe.grouped_matmul %rows, %dy, %o {mode = #moe.mode<weight_grad>} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
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
