// RUN: moec-opt %s -split-input-file -moe-fuse-combine | FileCheck %s

// The weighted combine becomes the matmul's scatter epilogue.
// CHECK-LABEL: func @fuse
// CHECK-SAME: (%[[A:.*]]: tensor<8x32xbf16>, %[[W:.*]]: tensor<4x32x16xbf16>, %[[S:.*]]: tensor<8xi32>, %[[O:.*]]: tensor<4xi32>, %[[P:.*]]: tensor<4x2xf32>)
func.func @fuse(%a: tensor<8x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<4x2xf32>) -> tensor<4x16xbf16> {
  // CHECK-NEXT: %[[Y:.*]] = moe.grouped_matmul %[[A]], %[[W]], %[[O]] scatter(%[[S]] : tensor<8xi32>) scatter_weights(%[[P]] : tensor<4x2xf32>) {k = 2 : i64} : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<4x16xbf16>
  // CHECK-NEXT: return %[[Y]]
  %d = moe.grouped_matmul %a, %w, %o : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 2 weights(%p : tensor<4x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// The unpermute's slot positions come along as the scatter's.
// CHECK-LABEL: func @fuse_positions
func.func @fuse_positions(%a: tensor<8x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<4x2xf32>, %pos: tensor<8xi32>) -> tensor<4x16xbf16> {
  // CHECK-NEXT: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(%{{.*}} : tensor<8xi32>) scatter_weights(%{{.*}} : tensor<4x2xf32>) scatter_positions(%{{.*}} : tensor<8xi32>) {k = 2 : i64} : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<4x16xbf16>
  %d = moe.grouped_matmul %a, %w, %o : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 2 positions(%pos : tensor<8xi32>) weights(%p : tensor<4x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// Without weights (already applied by row_scale), dynamic token counts, and
// the unpermute's result type (f32) wins.
// CHECK-LABEL: func @fuse_unweighted
func.func @fuse_unweighted(%a: tensor<?x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>, %r: tensor<?xf32>) -> tensor<?x16xf32> {
  // CHECK-NEXT: %[[Y:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} row_scale(%{{.*}} : tensor<?xf32>) scatter(%{{.*}} : tensor<?xi32>) {k = 8 : i64} : tensor<?x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<?x16xf32>
  // CHECK-NEXT: return %[[Y]]
  %d = moe.grouped_matmul %a, %w, %o row_scale(%r : tensor<?xf32>) : tensor<?x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 8 : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Gather and scatter with the same k: the whole expert MLP step in one op.
// CHECK-LABEL: func @fuse_gathered
func.func @fuse_gathered(%x: tensor<4x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<4x2xf32>) -> tensor<4x16xbf16> {
  // CHECK-NEXT: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<8xi32>) scatter(%{{.*}} : tensor<8xi32>) scatter_weights(%{{.*}} : tensor<4x2xf32>) {k = 2 : i64} : tensor<4x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<4x16xbf16>
  %d = moe.grouped_matmul %x, %w, %o gather(%slots : tensor<8xi32>) {k = 2 : i64} : tensor<4x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 2 weights(%p : tensor<4x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// The weights are computed after the matmul: the matmul moves down to the
// combine so that they dominate it. Its tile stays.
// CHECK-LABEL: func @fuse_moves_matmul
func.func @fuse_moves_matmul(%a: tensor<8x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %logits: tensor<4x4xf32>) -> tensor<4x16xbf16> {
  // CHECK-NEXT: %[[P:.*]], %{{.*}} = moe.router_topk
  // CHECK-NEXT: %[[Y:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(%{{.*}} : tensor<8xi32>) scatter_weights(%[[P]] : tensor<4x2xf32>) {k = 2 : i64, moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>}
  // CHECK-NEXT: return %[[Y]]
  %d = moe.grouped_matmul %a, %w, %o {moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>} : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %p, %ids = moe.router_topk %logits k = 2 : tensor<4x4xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  %y = moe.unpermute %d, %slots, %o k = 2 weights(%p : tensor<4x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// Not fused: the gather's k differs from the combine's.
// CHECK-LABEL: func @no_fuse_other_k
func.func @no_fuse_other_k(%x: tensor<4x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<4x16xbf16> {
  // CHECK: moe.grouped_matmul
  // CHECK: moe.unpermute
  %d = moe.grouped_matmul %x, %w, %o gather(%slots : tensor<8xi32>) {k = 2 : i64} : tensor<4x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 1 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// Not fused: the gathered tokens are not the combined ones.
// CHECK-LABEL: func @no_fuse_other_tokens
func.func @no_fuse_other_tokens(%x: tensor<4x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> tensor<3x16xbf16> {
  // CHECK: moe.grouped_matmul
  // CHECK: moe.unpermute
  %d = moe.grouped_matmul %x, %w, %o gather(%slots : tensor<8xi32>) {k = 2 : i64} : tensor<4x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<3x16xbf16>
  return %y : tensor<3x16xbf16>
}

// -----

// Not fused: other offsets.
// CHECK-LABEL: func @no_fuse_other_offsets
func.func @no_fuse_other_offsets(%a: tensor<8x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %o2: tensor<4xi32>) -> tensor<4x16xbf16> {
  // CHECK: moe.grouped_matmul
  // CHECK: moe.unpermute
  %d = moe.grouped_matmul %a, %w, %o : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o2 k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// Not fused: the per-slot rows have another user.
// CHECK-LABEL: func @no_fuse_other_user
func.func @no_fuse_other_user(%a: tensor<8x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) -> (tensor<4x16xbf16>, tensor<8x16xbf16>) {
  // CHECK: moe.grouped_matmul
  // CHECK: moe.unpermute
  %d = moe.grouped_matmul %a, %w, %o : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %y = moe.unpermute %d, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %y, %d : tensor<4x16xbf16>, tensor<8x16xbf16>
}

// -----

// Not fused: the combine runs in another block than the matmul.
// CHECK-LABEL: func @no_fuse_other_block
func.func @no_fuse_other_block(%a: tensor<8x32xbf16>, %w: tensor<4x32x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %c: i1) -> tensor<4x16xbf16> {
  // CHECK: moe.grouped_matmul
  // CHECK: scf.if
  // CHECK: moe.unpermute
  %d = moe.grouped_matmul %a, %w, %o : tensor<8x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32> -> tensor<8x16xbf16>
  %r = scf.if %c -> tensor<4x16xbf16> {
    %y = moe.unpermute %d, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
    scf.yield %y : tensor<4x16xbf16>
  } else {
    %z = tensor.empty() : tensor<4x16xbf16>
    scf.yield %z : tensor<4x16xbf16>
  }
  return %r : tensor<4x16xbf16>
}
