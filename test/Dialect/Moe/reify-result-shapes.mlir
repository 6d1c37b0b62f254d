// RUN: moec-opt %s -split-input-file --resolve-ranked-shaped-type-result-dims | FileCheck %s
// Each moe op's result sizes follow from its operands through
// ReifyRankedShapedTypeOpInterface (lib/Dialect/Moe/IR/MoeResultShapes.cpp),
// the one definition convert-moe-to-kernels sizes buffers by. The upstream
// pass replaces a tensor.dim of a result with that expression.

// Sorted rows: T·k slots plus each expert's worst padding, E·(align − 1).
// CHECK-LABEL: func.func @sort_capacity
// CHECK-DAG: %[[PAD:.*]] = arith.constant 1920 : index
// CHECK-DAG: %[[K:.*]] = arith.constant 8 : index
// CHECK: %[[T:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x8xi32>
// CHECK: %[[SLOTS:.*]] = arith.muli %[[T]], %[[K]] : index
// CHECK: %[[ROWS:.*]] = arith.addi %[[SLOTS]], %[[PAD]] : index
// CHECK: return %[[ROWS]]
func.func @sort_capacity(%ids: tensor<?x8xi32>) -> index {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128 align = 16
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %sorted, %c0 : tensor<?xi32>
  return %n : index
}

// -----

// A permute has a row per slot; a combine has the routing weights' tokens.
// CHECK-LABEL: func.func @permute_unpermute
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xbf16>, %[[SLOTS:.*]]: tensor<?xi32>, %{{.*}}: tensor<8xi32>, %[[W:.*]]: tensor<?x2xf32>)
// CHECK-DAG: %[[ROWS:.*]] = tensor.dim %[[SLOTS]], %{{.*}} : tensor<?xi32>
// CHECK-DAG: %[[TOKENS:.*]] = tensor.dim %[[W]], %{{.*}} : tensor<?x2xf32>
// CHECK: return %[[ROWS]], %[[TOKENS]]
func.func @permute_unpermute(%x: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                             %offsets: tensor<8xi32>, %w: tensor<?x2xf32>)
    -> (index, index) {
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 2 weights(%w : tensor<?x2xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  %c0 = arith.constant 0 : index
  %a = tensor.dim %rows, %c0 : tensor<?x64xbf16>
  %b = tensor.dim %y, %c0 : tensor<?x64xbf16>
  return %a, %b : index, index
}

// -----

// Without weights the token count is not in the operands: the dim stays
// (and convert-moe-to-kernels reports why, convert-moe-to-kernels-invalid).
// CHECK-LABEL: func.func @combine_without_weights
// CHECK: %[[Y:.*]] = moe.unpermute
// CHECK: tensor.dim %[[Y]]
func.func @combine_without_weights(%rows: tensor<?x64xbf16>,
                                   %slots: tensor<?xi32>,
                                   %offsets: tensor<8xi32>) -> index {
  %y = moe.unpermute %rows, %slots, %offsets k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %y, %c0 : tensor<?x64xf32>
  return %n : index
}

// -----

// Without weights but with the sort's positions (one per slot, T·k of
// them): the token count is their size over k. The same for a scatter.
// CHECK-LABEL: func.func @combine_with_positions
// CHECK-SAME: %[[POS:[^:]*]]: tensor<?xi32>)
// CHECK-DAG: %[[K:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[S:.*]] = tensor.dim %[[POS]], %{{.*}} : tensor<?xi32>
// CHECK: %[[T:.*]] = arith.divui %[[S]], %[[K]] : index
// CHECK: %[[S2:.*]] = tensor.dim %[[POS]]
// CHECK: %[[T2:.*]] = arith.divui %[[S2]], %[[K]] : index
// CHECK: return %[[T]], %[[T2]]
func.func @combine_with_positions(%rows: tensor<?x64xbf16>,
                                  %slots: tensor<?xi32>,
                                  %offsets: tensor<8xi32>,
                                  %w: tensor<8x64x32xbf16>,
                                  %positions: tensor<?xi32>) -> (index, index) {
  %y = moe.unpermute %rows, %slots, %offsets k = 2
      positions(%positions : tensor<?xi32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xf32>
  %z = moe.grouped_matmul %rows, %w, %offsets scatter(%slots : tensor<?xi32>)
      scatter_positions(%positions : tensor<?xi32>) {k = 2 : i64}
      : tensor<?x64xbf16>, tensor<8x64x32xbf16>, tensor<8xi32>
      -> tensor<?x32xbf16>
  %c0 = arith.constant 0 : index
  %a = tensor.dim %y, %c0 : tensor<?x64xf32>
  %b = tensor.dim %z, %c0 : tensor<?x32xbf16>
  return %a, %b : index, index
}

// -----

// Column-wise FP8 scales: (M + min(E, M)·(g − 1)) floordiv g blocks.
// CHECK-LABEL: func.func @colwise_scales
// CHECK-DAG: %[[E:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[GM1:.*]] = arith.constant 127 : index
// CHECK-DAG: %[[G:.*]] = arith.constant 128 : index
// CHECK: %[[M:.*]] = tensor.dim %arg0
// CHECK: %[[MIN:.*]] = arith.minui %[[M]], %[[E]]
// CHECK: %[[PAD:.*]] = arith.muli %[[MIN]], %[[GM1]]
// CHECK: %[[SUM:.*]] = arith.addi %[[M]], %[[PAD]]
// CHECK: %[[BLOCKS:.*]] = arith.divui %[[SUM]], %[[G]]
// CHECK: return %[[BLOCKS]]
func.func @colwise_scales(%x: tensor<?x64xbf16>, %offsets: tensor<8xi32>)
    -> index {
  %q, %s = moe.quantize %x offsets(%offsets : tensor<8xi32>) group_size = 128
      {axis = #moe.axis<colwise>}
      : tensor<?x64xbf16> -> tensor<?x64xf8E4M3FN>, tensor<?x64xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %s, %c0 : tensor<?x64xf32>
  return %n : index
}

// -----

// Blocks of [E, N, K] weights, transposed: data [E, K, N], scales
// [E, ceil(K/128), ceil(N/128)].
// CHECK-LABEL: func.func @blocks_transposed
// CHECK-SAME:    (%[[W:.*]]: tensor<?x?x136xbf16>)
// CHECK-DAG:     %[[C128:.*]] = arith.constant 128 : index
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK:         %[[N:.*]] = tensor.dim %[[W]], %[[C1]]
// CHECK:         %[[B:.*]] = arith.ceildivui %[[N]], %[[C128]]
// CHECK:         return %[[B]]
func.func @blocks_transposed(%w: tensor<?x?x136xbf16>) -> index {
  %q, %s = moe.quantize %w group_size = 128
      {axis = #moe.axis<blocks>, transpose}
      : tensor<?x?x136xbf16> -> tensor<?x136x?xf8E4M3FN>, tensor<?x2x?xf32>
  %c2 = arith.constant 2 : index
  %n = tensor.dim %s, %c2 : tensor<?x2x?xf32>
  return %n : index
}

// -----

// The weight gradient: K from the lhs's columns, N from grad_out's;
// transpose_rhs writes [E, N, K].
// CHECK-LABEL: func.func @weight_grad_dims
// CHECK-SAME: (%[[X:[^:]*]]: tensor<?x?xf32>, %[[DY:[^:]*]]: tensor<?x?xf32>
// CHECK-DAG: %[[N:.*]] = tensor.dim %[[DY]], %{{.*}} : tensor<?x?xf32>
// CHECK-DAG: %[[K:.*]] = tensor.dim %[[X]], %{{.*}} : tensor<?x?xf32>
// CHECK: return %[[N]], %[[K]]
func.func @weight_grad_dims(%x: tensor<?x?xf32>, %dy: tensor<?x?xf32>,
                            %offsets: tensor<4xi32>) -> (index, index) {
  %dw = moe.grouped_weight_grad %x, %dy, %offsets {transpose_rhs}
      : tensor<?x?xf32>, tensor<?x?xf32>, tensor<4xi32> -> tensor<4x?x?xf32>
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %n = tensor.dim %dw, %c1 : tensor<4x?x?xf32>
  %k = tensor.dim %dw, %c2 : tensor<4x?x?xf32>
  return %n, %k : index, index
}
