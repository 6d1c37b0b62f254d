// moe-decompose-lora-grad: on sm90a, moe.lora_grad becomes four grouped
// matmuls (u and du forward with s as a row scale, dB and dA as weight
// gradients). B [N, E*r] and dB stay in the adapter's layout
// (experts_in_columns), dA is written as A's [E*r, K] (gathered x through
// the weight gradient's transpose_rhs form): no copies.
// Elsewhere, and where the wgmma kernel would not take the matmuls (f32,
// N not a multiple of 8), the op stays. The rewritten functions then run
// on the host against the float64 reference (every op, the copies
// included), and on sm90a lower to four wgmma kernels.
// RUN: moec-opt %s --moe-decompose-lora-grad=target=sm90a | FileCheck %s
// RUN: moec-opt %s --moe-decompose-lora-grad=target=host | FileCheck %s --check-prefix=HOST
// RUN: moec-opt %s --moe-decompose-lora-grad=target=sm90a -o %t.mlir
// RUN: moec run %t.mlir --entry gathered --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.mlir --entry gathered --sym T=37 --sym M=74 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.mlir --entry gathered --sym T=40 --sym M=80 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.mlir --entry aligned --sym T=0 --sym M=12 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.mlir --entry aligned --sym T=9 --sym M=30 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.mlir --entry grouped --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.mlir --entry grouped --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec compile %s -o %t.moecb --target sm_90a
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=SM90

// PASS: PASS

// CHECK-LABEL: func.func @gathered
// CHECK: tensor.dim %arg1, %c0
// CHECK: %[[S:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<?xf32>)
// CHECK: %[[A3:.*]] = tensor.expand_shape %arg3 {{\[\[}}0, 1], [2]] output_shape [4, 16, 64] : tensor<64x64xbf16> into tensor<4x16x64xbf16>
// CHECK: %[[U:.*]] = moe.grouped_matmul %arg0, %[[A3]], %{{.*}} gather(%{{.*}} : tensor<?xi32>) row_scale(%[[S]] : tensor<?xf32>) {k = 2 : i64, transpose_rhs} : tensor<?x64xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
// CHECK: %[[B3:.*]] = tensor.expand_shape %arg4 {{\[\[}}0], [1, 2]] output_shape [48, 4, 16] : tensor<48x64xbf16> into tensor<48x4x16xbf16>
// CHECK: %[[DU:.*]] = moe.grouped_matmul %arg1, %[[B3]], %{{.*}} row_scale(%[[S]] : tensor<?xf32>) {experts_in_columns} : tensor<?x48xbf16>, tensor<48x4x16xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
// CHECK: %[[DB3:.*]] = moe.grouped_weight_grad %arg1, %[[U]], %{{.*}} {experts_in_columns} : tensor<?x48xbf16>, tensor<?x16xbf16>, tensor<4xi32> -> tensor<48x4x16xf32>
// CHECK: %[[DB:.*]] = tensor.collapse_shape %[[DB3]] {{\[\[}}0], [1, 2]] : tensor<48x4x16xf32> into tensor<48x64xf32>
// CHECK: %[[DA3:.*]] = moe.grouped_weight_grad %arg0, %[[DU]], %{{.*}} gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64, transpose_rhs} : tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<4xi32> -> tensor<4x16x64xf32>
// CHECK-NOT: linalg.transpose
// CHECK: %[[DA:.*]] = tensor.collapse_shape %[[DA3]] {{\[\[}}0, 1], [2]] : tensor<4x16x64xf32> into tensor<64x64xf32>
// CHECK-NOT: moe.lora_grad
// CHECK: return %[[DA]], %[[DB]]

// s = 1: no row scale. Grouped rows: dA straight from du and x.
// CHECK-LABEL: func.func @grouped
// CHECK-NOT: linalg.fill
// CHECK: moe.grouped_matmul %arg0, %{{.*}}, %{{.*}} {transpose_rhs} : tensor<?x40xbf16>, tensor<3x8x40xbf16>, tensor<3xi32> -> tensor<?x8xbf16>
// CHECK: %[[DA3:.*]] = moe.grouped_weight_grad %{{.*}}, %arg0, %{{.*}} : tensor<?x8xbf16>, tensor<?x40xbf16>, tensor<3xi32> -> tensor<3x8x40xbf16>
// CHECK: tensor.collapse_shape %[[DA3]] {{\[\[}}0, 1], [2]] : tensor<3x8x40xbf16> into tensor<24x40xbf16>

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: moe.lora_grad

// HOST-COUNT-5: moe.lora_grad
// HOST-NOT: moe.grouped_matmul

// On sm_90a: four wgmma matmuls and nothing else (no transpose, gathered
// x included). The reshapes are views that copy nothing: A [E*r, K] and B [N, E*r] read as [E, r, K] and
// [N, E, r], and the two weight gradients written straight into the
// outputs (dB [N, E*r] through its [N, E, r] view, dA [E*r, K] through
// [E, r, K]).
// SM90-LABEL: entry gathered [sm_90a]
// SM90: 3 arg3 input bf16 [64, 64]
// SM90: 4 arg4 input bf16 [48, 64]
// SM90: 5 result0 output f32 [64, 64]
// SM90: 6 result1 output f32 [48, 64]
// SM90: view bf16 [4, 16, 64] of buffer 3
// SM90: view bf16 [48, 4, 16] of buffer 4
// SM90: view f32 [48, 4, 16] of buffer 6
// SM90: view f32 [4, 16, 64] of buffer 5
// SM90-NOT: lora_grad
// SM90-NOT: _shape grid
// SM90: gathered_k3_fill
// SM90-NEXT: grouped_matmul_wgmma grid
// SM90-NEXT: grouped_matmul_wgmma grid
// SM90-NEXT: grouped_weight_grad_wgmma grid
// SM90-NEXT: grouped_weight_grad_wgmma grid
// SM90-NOT: _transpose
// SM90-NOT: lora_grad
// SM90-NOT: _shape grid
// SM90-LABEL: entry grouped [sm_90a]
// SM90-NOT: _transpose
// SM90: reference ops:
// SM90-LABEL: entry kept [sm_90a]
// SM90: kept_k3_lora_grad_rows

// Gathered gate_up-like rows (k = 2 of 4 experts, r = 16, K = 64, N = 48),
// s = 2, f32 gradients of bf16 adapters.
func.func @gathered(%x: tensor<?x64xbf16>, %dy: tensor<?x48xbf16> {moe.sym = "M"},
                    %ids: tensor<?x2xi32>,
                    %la: tensor<64x64xbf16>, %lb: tensor<48x64xbf16>)
    -> (tensor<64x64xf32>, tensor<48x64xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<64x64xbf16>, tensor<48x64xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x64xbf16>, tensor<?x48xbf16>, tensor<4xi32>
      -> tensor<64x64xf32>, tensor<48x64xf32>
  return %da, %db : tensor<64x64xf32>, tensor<48x64xf32>
}

// An aligned sort (padding slots -1 read no row), T = 0 included.
func.func @aligned(%x: tensor<?x64xbf16>, %dy: tensor<?x48xbf16> {moe.sym = "M"},
                   %ids: tensor<?x2xi32>,
                   %la: tensor<64x64xbf16>, %lb: tensor<48x64xbf16>)
    -> (tensor<64x64xf32>, tensor<48x64xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4 align = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<64x64xbf16>, tensor<48x64xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 0.5 : f32}
      : tensor<?x64xbf16>, tensor<?x48xbf16>, tensor<4xi32>
      -> tensor<64x64xf32>, tensor<48x64xf32>
  return %da, %db : tensor<64x64xf32>, tensor<48x64xf32>
}

// Grouped rows (k = 1 of 3 experts, r = 8, K = 40, N = 24), s = 1, bf16
// gradients.
func.func @grouped(%x: tensor<?x40xbf16>, %dy: tensor<?x24xbf16>,
                   %ids: tensor<?x1xi32>,
                   %la: tensor<24x40xbf16>, %lb: tensor<24x24xbf16>)
    -> (tensor<24x40xbf16>, tensor<24x24xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 3
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<3xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<24x40xbf16>, tensor<24x24xbf16>)
      : tensor<?x40xbf16>, tensor<?x24xbf16>, tensor<3xi32>
      -> tensor<24x40xbf16>, tensor<24x24xbf16>
  return %da, %db : tensor<24x40xbf16>, tensor<24x24xbf16>
}

// Not for the wgmma kernel: f32 operands; N = 20 (not a multiple of 8).
func.func @kept(%x: tensor<?x24xf32>, %dy: tensor<?x20xf32>,
                %ids: tensor<?x1xi32>,
                %la: tensor<24x24xf32>, %lb: tensor<20x24xf32>,
                %xb: tensor<?x24xbf16>, %dyb: tensor<?x20xbf16>,
                %lab: tensor<24x24xbf16>, %lbb: tensor<20x24xbf16>)
    -> (tensor<24x24xf32>, tensor<20x24xf32>, tensor<24x24xf32>,
        tensor<20x24xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 3
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<3xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<24x24xf32>, tensor<20x24xf32>)
      : tensor<?x24xf32>, tensor<?x20xf32>, tensor<3xi32>
      -> tensor<24x24xf32>, tensor<20x24xf32>
  %da2, %db2 = moe.lora_grad %xb, %dyb, %offsets
      lora(%lab, %lbb : tensor<24x24xbf16>, tensor<20x24xbf16>)
      : tensor<?x24xbf16>, tensor<?x20xbf16>, tensor<3xi32>
      -> tensor<24x24xf32>, tensor<20x24xf32>
  return %da, %db, %da2, %db2 : tensor<24x24xf32>, tensor<20x24xf32>,
      tensor<24x24xf32>, tensor<20x24xf32>
}
