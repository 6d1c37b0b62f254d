// RUN: moec-opt %s -split-input-file -moe-transpose-lora-adapters | FileCheck %s
// RUN: moec-opt %s -split-input-file -moe-transpose-lora-adapters \
// RUN:   --convert-moe-to-kernels=target=sm90a | FileCheck %s --check-prefix=SM90

// The input gradient's transposed adapter (A [E*r, N], B [K, E*r]) becomes
// the forward form on Bᵀ [E*r, K] and Aᵀ [N, E*r]; everything else is kept.
// CHECK-LABEL: func @input_grad
// CHECK-SAME: (%[[DY:.*]]: tensor<?x36xbf16>, %[[W:.*]]: tensor<6x40x36xbf16>, %[[O:.*]]: tensor<6xi32>, %[[A:.*]]: tensor<48x40xbf16>, %[[B:.*]]: tensor<36x48xbf16>)
func.func @input_grad(%dy: tensor<?x36xbf16>, %w: tensor<6x40x36xbf16>, %o: tensor<6xi32>, %a: tensor<48x40xbf16>, %b: tensor<36x48xbf16>) -> tensor<?x40xbf16> {
  // CHECK: %[[E1:.*]] = tensor.empty() : tensor<48x36xbf16>
  // CHECK: %[[BT:.*]] = linalg.transpose ins(%[[B]] : tensor<36x48xbf16>) outs(%[[E1]] : tensor<48x36xbf16>) permutation = [1, 0]
  // CHECK: %[[E2:.*]] = tensor.empty() : tensor<40x48xbf16>
  // CHECK: %[[AT:.*]] = linalg.transpose ins(%[[A]] : tensor<48x40xbf16>) outs(%[[E2]] : tensor<40x48xbf16>) permutation = [1, 0]
  // CHECK: %[[DX:.*]] = moe.grouped_matmul %[[DY]], %[[W]], %[[O]] lora(%[[BT]], %[[AT]] : tensor<48x36xbf16>, tensor<40x48xbf16>) {lora_scaling = 2.000000e+00 : f32, transpose_rhs} : tensor<?x36xbf16>, tensor<6x40x36xbf16>, tensor<6xi32> -> tensor<?x40xbf16>
  // CHECK-NOT: transpose_lora
  // CHECK: return %[[DX]]
  %dx = moe.grouped_matmul %dy, %w, %o
      lora(%a, %b : tensor<48x40xbf16>, tensor<36x48xbf16>)
      {transpose_rhs, transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x36xbf16>, tensor<6x40x36xbf16>, tensor<6xi32> -> tensor<?x40xbf16>
  return %dx : tensor<?x40xbf16>
}

// -----

// A dynamic adapter size (the reduction K here) is read with tensor.dim; a
// forward adapter is left alone.
// CHECK-LABEL: func @dynamic_and_forward
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<8x32xf32>, %[[B:[a-z0-9]+]]: tensor<?x8xf32>, %[[FA:[a-z0-9]+]]: tensor<8x?xf32>, %[[FB:[a-z0-9]+]]: tensor<32x8xf32>)
func.func @dynamic_and_forward(%x: tensor<?x?xf32>, %w: tensor<4x?x32xf32>, %o: tensor<4xi32>, %a: tensor<8x32xf32>, %b: tensor<?x8xf32>, %fa: tensor<8x?xf32>, %fb: tensor<32x8xf32>) -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  // CHECK: %[[C0:.*]] = arith.constant 0 : index
  // CHECK: %[[DB:.*]] = tensor.dim %[[B]], %[[C0]] : tensor<?x8xf32>
  // CHECK: %[[E1:.*]] = tensor.empty(%[[DB]]) : tensor<8x?xf32>
  // CHECK: %[[BT:.*]] = linalg.transpose ins(%[[B]] : tensor<?x8xf32>) outs(%[[E1]] : tensor<8x?xf32>)
  // CHECK: %[[E2:.*]] = tensor.empty() : tensor<32x8xf32>
  // CHECK: %[[AT:.*]] = linalg.transpose ins(%[[A]] : tensor<8x32xf32>) outs(%[[E2]] : tensor<32x8xf32>)
  // CHECK: moe.grouped_matmul {{.*}} lora(%[[BT]], %[[AT]] : tensor<8x?xf32>, tensor<32x8xf32>) :
  // CHECK: moe.grouped_matmul {{.*}} lora(%[[FA]], %[[FB]] : tensor<8x?xf32>, tensor<32x8xf32>) :
  // CHECK-NOT: linalg.transpose
  %dx = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x32xf32>, tensor<?x8xf32>) {transpose_lora}
      : tensor<?x?xf32>, tensor<4x?x32xf32>, tensor<4xi32> -> tensor<?x32xf32>
  %y = moe.grouped_matmul %x, %w, %o lora(%fa, %fb : tensor<8x?xf32>, tensor<32x8xf32>)
      : tensor<?x?xf32>, tensor<4x?x32xf32>, tensor<4xi32> -> tensor<?x32xf32>
  return %dx, %y : tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

// The point of the pass: on sm_90a the input gradient of a rank-16 LoRA
// matmul (the down projection's, [E, K, N] weights) runs the fused wgmma
// kernel after two small transposes, each a block per 128 x 128 tile
// (Vector/Transpose.cpp: a thread's 8 vector loads of input rows, its 8 x 8
// block through workgroup memory, 8 vector stores of output row pieces).
// CHECK-LABEL: func @down_input_grad
// SM90: gpu.func @down_input_grad_k0_transpose_tiles(
// SM90-COUNT-8: vector.load {{.*}} : memref<2048x128xbf16>, vector<8xbf16>
// SM90: gpu.barrier
// SM90-COUNT-8: vector.store {{.*}} : memref<128x2048xbf16>, vector<8xbf16>
// SM90-LABEL: func.func @down_input_grad(
// SM90: gpu.launch_func @down_input_grad_kernels::@down_input_grad_k0_transpose_tiles
// SM90: gpu.launch_func @down_input_grad_kernels::@down_input_grad_k1_transpose_tiles
// SM90: gpu.launch_func @down_input_grad_kernels::@down_input_grad_k2_grouped_matmul_wgmma
// SM90-NOT: gpu.launch_func
func.func @down_input_grad(%dy: tensor<?x2048xbf16>, %w: tensor<8x768x2048xbf16>, %o: tensor<8xi32>, %a: tensor<128x768xbf16>, %b: tensor<2048x128xbf16>) -> tensor<?x768xbf16> {
  %dx = moe.grouped_matmul %dy, %w, %o lora(%a, %b : tensor<128x768xbf16>, tensor<2048x128xbf16>)
      {transpose_rhs, transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x2048xbf16>, tensor<8x768x2048xbf16>, tensor<8xi32> -> tensor<?x768xbf16>
  return %dx : tensor<?x768xbf16>
}
