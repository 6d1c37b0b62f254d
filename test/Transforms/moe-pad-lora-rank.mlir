// RUN: moec-opt %s -split-input-file -moe-pad-lora-rank | FileCheck %s
// RUN: moec-opt %s -split-input-file -moe-pad-lora-rank \
// RUN:   -moe-decompose-lora-grad=target=sm90a -moe-tile \
// RUN:   -moe-select-kernel=target=sm90a | FileCheck %s --check-prefix=SM90

// r = 12 of 4 experts: each expert's 12 rows of A and columns of B get 4
// zero ones (A [48, 64] -> [64, 64], B [32, 48] -> [32, 64]); the matmul
// reads the padded adapters, everything else is kept.
// CHECK-LABEL: func @forward
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<48x64xbf16>, %[[B:[a-z0-9]+]]: tensor<32x48xbf16>)
// CHECK: %[[A3:.*]] = tensor.expand_shape %[[A]] {{\[}}[0, 1], [2]] output_shape [4, 12, 64]
// CHECK: %[[ZA:.*]] = arith.constant 0.000000e+00 : bf16
// CHECK: %[[AP:.*]] = tensor.pad %[[A3]] low[0, 0, 0] high[0, 4, 0]
// CHECK: tensor.yield %[[ZA]] : bf16
// CHECK: } : tensor<4x12x64xbf16> to tensor<4x16x64xbf16>
// CHECK: %[[A2:.*]] = tensor.collapse_shape %[[AP]] {{\[}}[0, 1], [2]] : tensor<4x16x64xbf16> into tensor<64x64xbf16>
// CHECK: %[[B3:.*]] = tensor.expand_shape %[[B]] {{\[}}[0], [1, 2]] output_shape [32, 4, 12]
// CHECK: %[[BP:.*]] = tensor.pad %[[B3]] low[0, 0, 0] high[0, 0, 4]
// CHECK: } : tensor<32x4x12xbf16> to tensor<32x4x16xbf16>
// CHECK: %[[B2:.*]] = tensor.collapse_shape %[[BP]] {{\[}}[0], [1, 2]] : tensor<32x4x16xbf16> into tensor<32x64xbf16>
// CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} lora(%[[A2]], %[[B2]] : tensor<64x64xbf16>, tensor<32x64xbf16>) {lora_scaling = 2.000000e+00 : f32, transpose_rhs} : tensor<?x64xbf16>, tensor<4x32x64xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
// On sm_90a the padded forward is the fused wgmma kernel; pads are copies.
// SM90-LABEL: func @forward
// SM90: } {moe.kernel = #moe.kernel<strategy = scalar{{.*}}to tensor<4x16x64xbf16>
// SM90: moe.grouped_matmul {{.*}}strategy = sm90_wgmma
func.func @forward(%x: tensor<?x64xbf16>, %w: tensor<4x32x64xbf16>, %o: tensor<4xi32>, %a: tensor<48x64xbf16>, %b: tensor<32x48xbf16>) -> tensor<?x32xbf16> {
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<48x64xbf16>, tensor<32x48xbf16>)
      {transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x64xbf16>, tensor<4x32x64xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// The input gradient's form (transpose_lora: A [E*r, N], B [K, E*r]) pads
// the same dimensions, r = 3 to 8.
// CHECK-LABEL: func @input_grad
// CHECK: tensor.pad %{{.*}} low[0, 0, 0] high[0, 5, 0]
// CHECK: } : tensor<2x3x64xf16> to tensor<2x8x64xf16>
// CHECK: tensor.pad %{{.*}} low[0, 0, 0] high[0, 0, 5]
// CHECK: } : tensor<32x2x3xf16> to tensor<32x2x8xf16>
// CHECK: moe.grouped_matmul {{.*}} lora(%{{.*}}, %{{.*}} : tensor<16x64xf16>, tensor<32x16xf16>) {lora_scaling = 5.000000e-01 : f32, transpose_lora}
func.func @input_grad(%dy: tensor<?x32xf16>, %w: tensor<2x32x64xf16>, %o: tensor<2xi32>, %a: tensor<6x64xf16>, %b: tensor<32x6xf16>) -> tensor<?x64xf16> {
  %dx = moe.grouped_matmul %dy, %w, %o lora(%a, %b : tensor<6x64xf16>, tensor<32x6xf16>)
      {transpose_lora, lora_scaling = 0.5 : f32}
      : tensor<?x32xf16>, tensor<2x32x64xf16>, tensor<2xi32> -> tensor<?x64xf16>
  return %dx : tensor<?x64xf16>
}

// -----

// moe.lora_grad (r = 4 of 4 experts) runs on padded adapters and its
// gradients are sliced back to each expert's first 4 rows of dA and
// columns of dB (the result types are kept: f32 dA, bf16 dB).
// CHECK-LABEL: func @adapter_grads
// CHECK: %[[DA:.*]], %[[DB:.*]] = moe.lora_grad {{.*}} lora(%{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<32x32xbf16>) gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64, lora_scaling = 5.000000e-01 : f32} : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<4xi32> -> tensor<32x64xf32>, tensor<32x32xbf16>
// CHECK: %[[DA3:.*]] = tensor.expand_shape %[[DA]] {{\[}}[0, 1], [2]] output_shape [4, 8, 64]
// CHECK: %[[DAS:.*]] = tensor.extract_slice %[[DA3]][0, 0, 0] [4, 4, 64] [1, 1, 1] : tensor<4x8x64xf32> to tensor<4x4x64xf32>
// CHECK: %[[DA2:.*]] = tensor.collapse_shape %[[DAS]] {{\[}}[0, 1], [2]] : tensor<4x4x64xf32> into tensor<16x64xf32>
// CHECK: %[[DB3:.*]] = tensor.expand_shape %[[DB]] {{\[}}[0], [1, 2]] output_shape [32, 4, 8]
// CHECK: %[[DBS:.*]] = tensor.extract_slice %[[DB3]][0, 0, 0] [32, 4, 4] [1, 1, 1] : tensor<32x4x8xbf16> to tensor<32x4x4xbf16>
// CHECK: %[[DB2:.*]] = tensor.collapse_shape %[[DBS]] {{\[}}[0], [1, 2]] : tensor<32x4x4xbf16> into tensor<32x16xbf16>
// CHECK: return %[[DA2]], %[[DB2]]
// On sm_90a the padded adapter gradients decompose into wgmma matmuls.
// SM90-LABEL: func @adapter_grads
// SM90-NOT: moe.lora_grad
// SM90-COUNT-4: moe.grouped_matmul {{.*}}strategy = sm90_wgmma
// SM90: tensor.extract_slice {{.*}}strategy = scalar
func.func @adapter_grads(%x: tensor<?x64xbf16>, %dy: tensor<?x32xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>, %a: tensor<16x64xbf16>, %b: tensor<32x16xbf16>) -> (tensor<16x64xf32>, tensor<32x16xbf16>) {
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<16x64xbf16>, tensor<32x16xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 0.5 : f32}
      : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<4xi32> -> tensor<16x64xf32>, tensor<32x16xbf16>
  return %da, %db : tensor<16x64xf32>, tensor<32x16xbf16>
}

// -----

// A backward's input gradient and adapter gradients read the same adapters:
// each is padded once, after its definition, and both ops take the copies.
// CHECK-LABEL: func @backward_shares
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<40x64xbf16>, %[[B:[a-z0-9]+]]: tensor<32x40xbf16>)
// CHECK: %[[AP:.*]] = tensor.collapse_shape {{.*}} into tensor<64x64xbf16>
// CHECK: %[[BP:.*]] = tensor.collapse_shape {{.*}} into tensor<32x64xbf16>
// CHECK-NOT: tensor.pad
// CHECK: moe.grouped_matmul {{.*}} lora(%[[AP]], %[[BP]] : tensor<64x64xbf16>, tensor<32x64xbf16>) {transpose_lora}
// CHECK: moe.lora_grad {{.*}} lora(%[[AP]], %[[BP]] : tensor<64x64xbf16>, tensor<32x64xbf16>)
func.func @backward_shares(%x: tensor<?x64xbf16>, %dy: tensor<?x32xbf16>, %w: tensor<8x32x64xbf16>, %o: tensor<8xi32>, %a: tensor<40x64xbf16>, %b: tensor<32x40xbf16>) -> (tensor<?x64xbf16>, tensor<40x64xbf16>, tensor<32x40xbf16>) {
  %dx = moe.grouped_matmul %dy, %w, %o lora(%a, %b : tensor<40x64xbf16>, tensor<32x40xbf16>)
      {transpose_lora} : tensor<?x32xbf16>, tensor<8x32x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<40x64xbf16>, tensor<32x40xbf16>)
      : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<8xi32> -> tensor<40x64xbf16>, tensor<32x40xbf16>
  return %dx, %da, %db : tensor<?x64xbf16>, tensor<40x64xbf16>, tensor<32x40xbf16>
}

// -----

// The same 48 adapter rows are 4 experts x 12 for one matmul and 8 x 6 for
// another: two paddings.
// CHECK-LABEL: func @shared_other_experts
// CHECK-DAG: } : tensor<4x12x64xbf16> to tensor<4x16x64xbf16>
// CHECK-DAG: } : tensor<8x6x64xbf16> to tensor<8x8x64xbf16>
func.func @shared_other_experts(%x: tensor<?x64xbf16>, %w4: tensor<4x32x64xbf16>, %w8: tensor<8x32x64xbf16>, %o4: tensor<4xi32>, %o8: tensor<8xi32>, %a: tensor<48x64xbf16>, %b: tensor<32x48xbf16>) -> (tensor<?x32xbf16>, tensor<?x32xbf16>) {
  %y4 = moe.grouped_matmul %x, %w4, %o4 lora(%a, %b : tensor<48x64xbf16>, tensor<32x48xbf16>)
      {transpose_rhs} : tensor<?x64xbf16>, tensor<4x32x64xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  %y8 = moe.grouped_matmul %x, %w8, %o8 lora(%a, %b : tensor<48x64xbf16>, tensor<32x48xbf16>)
      {transpose_rhs} : tensor<?x64xbf16>, tensor<8x32x64xbf16>, tensor<8xi32> -> tensor<?x32xbf16>
  return %y4, %y8 : tensor<?x32xbf16>, tensor<?x32xbf16>
}

// -----

// Left alone: ranks that are multiples of 8, f32 adapters (the wgmma kernel
// fuses 16-bit ones only) and dynamic adapter shapes.
// CHECK-LABEL: func @kept
// CHECK-NOT: tensor.pad
// CHECK: return
func.func @kept(%x: tensor<?x64xbf16>, %w: tensor<4x32x64xbf16>, %o: tensor<4xi32>, %a: tensor<32x64xbf16>, %b: tensor<32x32xbf16>,
                %xf: tensor<?x64xf32>, %wf: tensor<4x32x64xf32>, %af: tensor<12x64xf32>, %bf: tensor<32x12xf32>, %ad: tensor<12x?xbf16>)
    -> (tensor<?x32xbf16>, tensor<?x32xf32>, tensor<?x32xbf16>) {
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<32x64xbf16>, tensor<32x32xbf16>)
      {transpose_rhs} : tensor<?x64xbf16>, tensor<4x32x64xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  %yf = moe.grouped_matmul %xf, %wf, %o lora(%af, %bf : tensor<12x64xf32>, tensor<32x12xf32>)
      {transpose_rhs} : tensor<?x64xf32>, tensor<4x32x64xf32>, tensor<4xi32> -> tensor<?x32xf32>
  %bd = tensor.empty() : tensor<32x12xbf16>
  %yd = moe.grouped_matmul %x, %w, %o lora(%ad, %bd : tensor<12x?xbf16>, tensor<32x12xbf16>)
      {transpose_rhs} : tensor<?x64xbf16>, tensor<4x32x64xbf16>, tensor<4xi32> -> tensor<?x32xbf16>
  return %y, %yf, %yd : tensor<?x32xbf16>, tensor<?x32xf32>, tensor<?x32xbf16>
}
