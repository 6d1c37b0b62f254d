// moe-autodiff's `accumulate` option: the backward adds the named weights'
// gradients to f32 gradients it is given, in the weight gradients' epilogue.
// RUN: moec-opt %s -moe-autodiff="func=layer accumulate=3,2" | FileCheck %s
// RUN: moec-opt %s -moe-autodiff="func=layer save=matmuls accumulate=2" | FileCheck %s --check-prefix=GATHER
// RUN: not moec-opt %s -moe-autodiff="func=layer accumulate=1" 2>&1 | FileCheck %s --check-prefix=ROUTER
// RUN: not moec-opt %s -moe-autodiff="func=layer wrt=0,3 accumulate=2" 2>&1 | FileCheck %s --check-prefix=NOGRAD
// RUN: not moec-opt %s -moe-autodiff="func=shared accumulate=1" 2>&1 | FileCheck %s --check-prefix=SHARED
// ROUTER: error: 'func.func' op moe-autodiff: option 'accumulate' names argument 1, whose gradient is not one moe.grouped_weight_grad
// NOGRAD: error: 'func.func' op moe-autodiff: option 'accumulate' names argument 2, whose gradient the backward does not return
// SHARED: error: 'func.func' op moe-autodiff: option 'accumulate' names argument 1, whose gradient is not one moe.grouped_weight_grad

// The main gradients come after the result's gradient, in argument order
// (the option's order does not matter), f32 and named after the weights;
// the two weight gradients return them plus their sums, in f32.
// CHECK-LABEL: func.func @layer_grad(
// CHECK-SAME:    %{{[a-z0-9]+}}: tensor<?x16xbf16> {moe.name = "grad_result0", moe.sym = "T"},
// CHECK-SAME:    %[[MGU:[a-z0-9]+]]: tensor<4x24x16xf32> {moe.name = "w_gate_up_main_grad"}, %[[MD:[a-z0-9]+]]: tensor<4x16x12xf32> {moe.name = "w_down_main_grad"})
// CHECK-SAME:    -> (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4x24x16xf32>, tensor<4x16x12xf32>)
// CHECK-SAME:    attributes {moe.accumulated = array<i64: 2, 3>, moe.grad_of = "layer"
// CHECK:         %[[DWD:.*]] = moe.grouped_weight_grad %{{.*}} accumulate(%[[MD]] : tensor<4x16x12xf32>) : tensor<?x16xbf16>, tensor<?x12xbf16>, tensor<4xi32> -> tensor<4x16x12xf32>
// CHECK:         %[[DWGU:.*]] = moe.grouped_weight_grad %{{.*}} accumulate(%[[MGU]] : tensor<4x24x16xf32>) : tensor<?x24xbf16>, tensor<?x16xbf16>, tensor<4xi32> -> tensor<4x24x16xf32>
// CHECK:         return %{{.*}}, %{{.*}}, %[[DWGU]], %[[DWD]] :

// save=matmuls: gate_up's weight gradient reads x by slot (transpose_rhs
// form) and still accumulates.
// GATHER-LABEL: func.func @layer_grad(
// GATHER-SAME:    %[[M:[a-z0-9]+]]: tensor<4x24x16xf32> {moe.name = "w_gate_up_main_grad"})
// GATHER-SAME:    -> (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4x24x16xf32>, tensor<4x16x12xbf16>)
// GATHER:         moe.grouped_weight_grad %arg0, %{{.*}} gather(%{{.*}}) accumulate(%[[M]] : tensor<4x24x16xf32>) {k = 2 : i64, transpose_rhs}
func.func @layer(%x: tensor<?x16xbf16> {moe.name = "x"},
                 %gate_w: tensor<4x16xbf16> {moe.name = "gate_w"},
                 %w_gate_up: tensor<4x24x16xbf16> {moe.name = "w_gate_up"},
                 %w_down: tensor<4x16x12xbf16> {moe.name = "w_down"})
    -> tensor<?x16xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x16xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x4xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x4xf32>) -> tensor<?x4xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x16xbf16>, tensor<4x16xbf16>)
      outs(%acc : tensor<?x4xf32>) -> tensor<?x4xf32>
  %weights, %ids = moe.router_topk %logits k = 2 {renormalize}
      : tensor<?x4xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x16xbf16>, tensor<4x24x16xbf16>, tensor<4xi32> -> tensor<?x24xbf16>
  %a = moe.swiglu %h : tensor<?x24xbf16> -> tensor<?x12xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x12xbf16>, tensor<4x16x12xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 2 weights(%weights : tensor<?x2xf32>)
      : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}

// One weight read by two matmuls: its gradient is a sum (linalg.add) of
// two weight gradients, which is not fused.
func.func @shared(%x: tensor<?x16xbf16>, %w: tensor<4x16x16xbf16>,
                  %offsets: tensor<4xi32>) -> tensor<?x16xbf16> {
  %h = moe.grouped_matmul %x, %w, %offsets
      : tensor<?x16xbf16>, tensor<4x16x16xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
  %y = moe.grouped_matmul %h, %w, %offsets
      : tensor<?x16xbf16>, tensor<4x16x16xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}
