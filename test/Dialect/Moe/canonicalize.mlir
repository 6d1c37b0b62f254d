// RUN: moec-opt %s -split-input-file -canonicalize | FileCheck %s

// A softmax over the k selected logits already sums to one.
// CHECK-LABEL: func @router_drop_redundant_renormalize
func.func @router_drop_redundant_renormalize(%l: tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  // CHECK: moe.router_topk %{{.*}} k = 2 {order = #moe.order<topk_then_softmax>} :
  // CHECK-NOT: renormalize
  %w, %ids = moe.router_topk %l k = 2 {order = #moe.order<topk_then_softmax>, renormalize} : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  return %w, %ids : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

// After softmax over all experts, renormalizing the selected k is not a no-op.
// CHECK-LABEL: func @router_keep_renormalize
func.func @router_keep_renormalize(%l: tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  // CHECK: moe.router_topk %{{.*}} k = 2 {renormalize} :
  %w, %ids = moe.router_topk %l k = 2 {renormalize} : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  return %w, %ids : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

// Padding every group to a multiple of one is no padding.
// CHECK-LABEL: func @sort_drop_align_one
func.func @sort_drop_align_one(%ids: tensor<?x2xi32>) -> tensor<?xi32> {
  // CHECK: moe.sort_by_expert %{{.*}} experts = 8 : tensor<?x2xi32>
  %s, %slots, %o = moe.sort_by_expert %ids experts = 8 align = 1 : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  return %slots : tensor<?xi32>
}

// -----

// CHECK-LABEL: func @sort_keep_align
func.func @sort_keep_align(%ids: tensor<?x2xi32>) -> tensor<?xi32> {
  // CHECK: moe.sort_by_expert %{{.*}} experts = 8 align = 16 :
  %s, %slots, %o = moe.sort_by_expert %ids experts = 8 align = 16 : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  return %slots : tensor<?xi32>
}

// -----

// A LoRA adapter scaled by zero contributes nothing: its operands go.
// CHECK-LABEL: func @grouped_matmul_drop_zero_lora
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xbf16>, %[[W:.*]]: tensor<4x16x32xbf16>, %[[O:.*]]: tensor<4xi32>
func.func @grouped_matmul_drop_zero_lora(%x: tensor<?x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) -> tensor<?x32xbf16> {
  // CHECK: moe.grouped_matmul %[[X]], %[[W]], %[[O]] : tensor<?x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) {lora_scaling = 0.0 : f32} : tensor<?x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// CHECK-LABEL: func @grouped_matmul_keep_lora
func.func @grouped_matmul_keep_lora(%x: tensor<?x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) -> tensor<?x32xbf16> {
  // CHECK: lora(%{{.*}}, %{{.*}} : tensor<8x16xbf16>, tensor<32x8xbf16>) {lora_scaling = 2.000000e+00 : f32}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) {lora_scaling = 2.0 : f32} : tensor<?x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// Every moe op is Pure: unused results are erased.
// CHECK-LABEL: func @dead_ops_erased
func.func @dead_ops_erased(%l: tensor<?x8xf32>, %h: tensor<?x32xbf16>) {
  // CHECK-NOT: moe.
  %w, %ids = moe.router_topk %l k = 2 : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %a = moe.swiglu %h : tensor<?x32xbf16> -> tensor<?x16xbf16>
  return
}
