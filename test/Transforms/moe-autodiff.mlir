// RUN: moec-opt %s -split-input-file -moe-autodiff | FileCheck %s
// RUN: moec-opt %s -split-input-file -moe-autodiff="save=matmuls" | FileCheck %s --check-prefix=MATMULS
// RUN: moec-opt %s -split-input-file -moe-autodiff="save=inputs" | FileCheck %s --check-prefix=INPUTS
// RUN: moec-opt %s -split-input-file -moe-autodiff="wrt=2,3" | FileCheck %s --check-prefix=WEIGHTS

// The transposed-A map of the router weight's gradient (checked below).
// CHECK-DAG: #[[AT:map[0-9]+]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG: #[[BT:map[0-9]+]] = affine_map<(d0, d1, d2) -> (d2, d1)>

// An MoE block (router, permute, gate_up, SwiGLU, down, weighted combine).
// @layer stays as it is; @layer_fwd returns what @layer_grad reads.
// CHECK-LABEL: func.func @layer(
// CHECK:         moe.sort_by_expert %{{.*}} experts = 4 : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>{{$}}
// CHECK:         return %{{.*}} : tensor<?x16xbf16>
// CHECK-LABEL: func.func @layer_fwd(
// CHECK:         %[[LOGITS:.*]] = linalg.matmul
// CHECK:         %[[W:.*]], %[[IDS:.*]] = moe.router_topk %[[LOGITS]]
// CHECK:         %{{.*}}, %[[SLOTS:.*]], %[[OFFS:.*]], %[[POS:.*]] = moe.sort_by_expert
// CHECK:         %[[ROWS:.*]] = moe.permute
// CHECK:         %[[H:.*]] = moe.grouped_matmul %[[ROWS]]
// CHECK:         %[[A:.*]] = moe.swiglu %[[H]]
// CHECK:         %[[DOWN:.*]] = moe.grouped_matmul %[[A]]
// CHECK:         %[[Y:.*]] = moe.unpermute %[[DOWN]]
// CHECK:         return %[[Y]], %[[LOGITS]], %[[W]], %[[IDS]], %[[SLOTS]], %[[OFFS]], %[[POS]], %[[ROWS]], %[[H]], %[[A]], %[[DOWN]] :
// CHECK-LABEL: func.func @layer_grad(
// CHECK-SAME:    %[[X:[a-z0-9]+]]: tensor<?x16xbf16>, %[[GW:[a-z0-9]+]]: tensor<4x16xbf16>, %[[WGU:[a-z0-9]+]]: tensor<4x24x16xbf16>, %[[WD:[a-z0-9]+]]: tensor<4x16x12xbf16>,
// CHECK-SAME:    %[[SLOGITS:[a-z0-9]+]]: tensor<?x4xf32> {moe.name = "saved0", moe.sym = "T"}, %[[SW:[a-z0-9]+]]: tensor<?x2xf32> {moe.name = "saved1", moe.sym = "T"}, %[[SIDS:[a-z0-9]+]]: tensor<?x2xi32> {moe.name = "saved2", moe.sym = "T"},
// CHECK-SAME:    %[[SSLOTS:[a-z0-9]+]]: tensor<?xi32> {moe.name = "saved3", moe.sym = "rows0"}, %[[SOFFS:[a-z0-9]+]]: tensor<4xi32> {moe.name = "saved4"}, %[[SPOS:[a-z0-9]+]]: tensor<?xi32> {moe.name = "saved5", moe.sym = "rows1"},
// CHECK-SAME:    %[[SROWS:[a-z0-9]+]]: tensor<?x16xbf16> {moe.name = "saved6", moe.sym = "rows0"}, %[[SH:[a-z0-9]+]]: tensor<?x24xbf16> {moe.name = "saved7", moe.sym = "rows0"}, %[[SA:[a-z0-9]+]]: tensor<?x12xbf16> {moe.name = "saved8", moe.sym = "rows0"}, %[[SDOWN:[a-z0-9]+]]: tensor<?x16xbf16> {moe.name = "saved9", moe.sym = "rows0"},
// CHECK-SAME:    %[[DY:[a-z0-9]+]]: tensor<?x16xbf16> {moe.name = "grad_result0", moe.sym = "T"})
// CHECK-SAME:    -> (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x12xbf16>)
// CHECK-SAME:    attributes {moe.grad_of = "layer", moe.saved_results = array<i64: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10>, moe.wrt = array<i64: 0, 1, 2, 3>}
// CHECK-NOT:     moe.router_topk %
// CHECK:         %[[DROWS:.*]], %[[DW:.*]] = moe.unpermute_grad %[[DY]], %[[SSLOTS]], %[[SOFFS]] k = 2 positions(%[[SPOS]] : tensor<?xi32>) weights(%[[SW]], %[[SDOWN]] :
// CHECK:         %[[DA:.*]] = moe.grouped_matmul %[[DROWS]], %[[WD]], %[[SOFFS]] : tensor<?x16xbf16>, tensor<4x16x12xbf16>, tensor<4xi32> -> tensor<?x12xbf16>
// CHECK:         %[[DWD:.*]] = moe.grouped_weight_grad %[[DROWS]], %[[SA]], %[[SOFFS]] : tensor<?x16xbf16>, tensor<?x12xbf16>, tensor<4xi32> -> tensor<4x16x12xbf16>
// CHECK:         %[[DH:.*]] = moe.swiglu_grad %[[SH]], %[[DA]]
// CHECK:         %[[DR:.*]] = moe.grouped_matmul %[[DH]], %[[WGU]], %[[SOFFS]] : tensor<?x24xbf16>, tensor<4x24x16xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
// CHECK:         %[[DWGU:.*]] = moe.grouped_weight_grad %[[DH]], %[[SROWS]], %[[SOFFS]]
// CHECK:         %[[DT:.*]] = moe.permute_grad %[[DR]], %[[SSLOTS]], %[[SOFFS]] k = 2 positions(%[[SPOS]] : tensor<?xi32>)
// The logits were accumulated in f32 from bf16 operands: their gradient is
// bf16, so the router's backward matmuls take like operands.
// CHECK:         %[[DL:.*]] = moe.router_topk_grad %[[SLOGITS]], %[[SIDS]], %[[DW]] {renormalize} : tensor<?x4xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x4xbf16>
// The router's input gradient dlogits · gate_w, summed with the experts'.
// CHECK:         %[[DXR:.*]] = linalg.matmul ins(%[[DL]], %[[GW]] : tensor<?x4xbf16>, tensor<4x16xbf16>)
// CHECK:         %[[DX:.*]] = linalg.add ins(%[[DT]], %[[DXR]] : tensor<?x16xbf16>, tensor<?x16xbf16>)
// The router weight's gradient dlogitsᵀ · x: A read transposed.
// CHECK:         %[[DGW:.*]] = linalg.matmul indexing_maps = [#[[AT]], #[[BT]], #{{map[0-9]*}}] ins(%[[DL]], %[[X]] : tensor<?x4xbf16>, tensor<?x16xbf16>) outs(%{{.*}} : tensor<4x16xbf16>)
// CHECK:         return %[[DX]], %[[DGW]], %[[DWGU]], %[[DWD]]

// save=matmuls keeps matmul and routing results and recomputes SwiGLU in
// the backward. The permuted rows are never made: the permute becomes
// gate_up's gather before differentiating, and gate_up's weight gradient
// reads x by slot (its transpose_rhs form).
// MATMULS-LABEL: func.func @layer_fwd(
// MATMULS-NOT:     moe.permute %
// MATMULS:         moe.grouped_matmul %arg0, %arg2, %offsets gather(%slots : tensor<?xi32>) {k = 2 : i64, transpose_rhs}
// MATMULS:         return %{{[0-9]+}}, %{{[0-9]+}}, %weights, %ids, %slots, %offsets, %positions, %{{[0-9]+}}, %{{[0-9]+}} :
// MATMULS-LABEL: func.func @layer_grad(
// MATMULS-SAME:    moe.saved_results = array<i64: 1, 2, 3, 4, 5, 6, 7, 8>
// MATMULS-NOT:     moe.permute %
// MATMULS:         moe.swiglu %
// MATMULS:         moe.unpermute_grad
// MATMULS:         moe.grouped_weight_grad %arg0, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64, transpose_rhs}

// save=inputs: the backward takes the forward's inputs and the output
// gradient only, and recomputes the forward.
// INPUTS-LABEL: func.func @layer_grad(
// INPUTS-SAME:    %arg0: tensor<?x16xbf16>, %arg1: tensor<4x16xbf16>, %arg2: tensor<4x24x16xbf16>, %arg3: tensor<4x16x12xbf16>, %arg4: tensor<?x16xbf16> {moe.name = "grad_result0", moe.sym = "T"})
// INPUTS-SAME:    moe.saved_results = array<i64>
// INPUTS:         moe.router_topk
// INPUTS:         moe.sort_by_expert
// INPUTS:         moe.unpermute_grad

// wrt=2,3 (LoRA-free expert fine-tuning with a frozen router and no input
// gradient): only the weight gradients, no router or permute gradient.
// WEIGHTS-LABEL: func.func @layer_grad(
// WEIGHTS-SAME:    -> (tensor<4x24x16xbf16>, tensor<4x16x12xbf16>)
// WEIGHTS-SAME:    moe.wrt = array<i64: 2, 3>
// WEIGHTS-NOT:     moe.router_topk_grad
// WEIGHTS-NOT:     moe.permute_grad
// WEIGHTS-NOT:     linalg.matmul
// WEIGHTS:         return
func.func @layer(%x: tensor<?x16xbf16>, %gate_w: tensor<4x16xbf16>,
                 %w_gate_up: tensor<4x24x16xbf16>, %w_down: tensor<4x16x12xbf16>)
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

// -----

// Gathered lhs. The weight gradient gathers x by slot, with [E, K, N]
// weights and with [E, N, K] (its transpose_rhs form): no permuted copy.
// The input gradient of a gathered matmul goes back to tokens through
// permute_grad. Arguments marked moe.wrt choose what is differentiated.
// CHECK-LABEL: func.func @gathered_grad(
// CHECK-SAME:    -> (tensor<?x16xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>)
// CHECK-SAME:    moe.wrt = array<i64: 1, 2, 3>
// CHECK:         moe.grouped_matmul %{{.*}}, %arg3, %{{.*}} : tensor<?x8xbf16>, tensor<4x8x16xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
// CHECK-NOT:     moe.permute {{.*}}%arg1
// CHECK:         moe.grouped_weight_grad %arg1, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64, transpose_rhs} : tensor<?x16xbf16>, tensor<?x8xbf16>, tensor<4xi32> -> tensor<4x8x16xbf16>
// CHECK:         moe.grouped_matmul %{{.*}}, %arg2, %{{.*}} {transpose_rhs} : tensor<?x8xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
// CHECK:         moe.permute_grad
// CHECK:         linalg.add
// CHECK:         moe.grouped_weight_grad %arg1, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64} : tensor<?x16xbf16>, tensor<?x8xbf16>, tensor<4xi32> -> tensor<4x16x8xbf16>
func.func @gathered(%ids: tensor<?x2xi32>, %x: tensor<?x16xbf16> {moe.wrt},
                    %w1: tensor<4x16x8xbf16> {moe.wrt},
                    %w2: tensor<4x8x16xbf16> {moe.wrt})
    -> (tensor<?x8xbf16>, tensor<?x8xbf16>) {
  %sorted, %slots, %offsets, %positions = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>, tensor<?xi32>
  %a = moe.grouped_matmul %x, %w1, %offsets gather(%slots : tensor<?xi32>) {k = 2 : i64}
      : tensor<?x16xbf16>, tensor<4x16x8xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
  %b = moe.grouped_matmul %x, %w2, %offsets gather(%slots : tensor<?xi32>) {k = 2 : i64, transpose_rhs}
      : tensor<?x16xbf16>, tensor<4x8x16xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
  %sum = moe.unpermute %a, %slots, %offsets k = 2 positions(%positions : tensor<?xi32>)
      : tensor<?x8xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x8xbf16>
  return %sum, %b : tensor<?x8xbf16>, tensor<?x8xbf16>
}

// -----

// An op without a rule is fine where no differentiable argument reaches it
// (a quantized copy of a frozen input returned next to the result).
// CHECK-LABEL: func.func @frozen_side_grad(
// CHECK-SAME:    -> tensor<?x24xbf16>
// CHECK-SAME:    moe.wrt = array<i64: 2>
// CHECK-NOT:     moe.quantize
// CHECK:         moe.swiglu_grad
func.func @frozen_side(%y: tensor<?x256xbf16>, %c: tensor<?x24xbf16>,
                       %x: tensor<?x24xbf16> {moe.wrt}, %z: tensor<?x24xbf16>)
    -> (tensor<?x12xbf16>, tensor<?x12xbf16>, tensor<?x256xf8E4M3FN>,
        tensor<?x2xf32>) {
  %a = moe.swiglu %x : tensor<?x24xbf16> -> tensor<?x12xbf16>
  %b = moe.swiglu %z : tensor<?x24xbf16> -> tensor<?x12xbf16>
  %q, %s = moe.quantize %y group_size = 128 : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  return %a, %b, %q, %s : tensor<?x12xbf16>, tensor<?x12xbf16>, tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
}

// -----

// LoRA fine-tuning: only the adapters are differentiated (moe.wrt), the
// base weights and x are frozen. The gathered gate_up's adapters get their
// gradients from moe.lora_grad reading x by slot; the down projection's
// from its rows; the input gradient of down (needed on the way to gate_up's
// adapters) carries the transposed adapter. No weight gradient of W, no
// gradient of x.
// CHECK-LABEL: func.func @lora_experts_grad(
// CHECK-SAME:    -> (tensor<8x16xbf16>, tensor<24x8xbf16>, tensor<8x12xbf16>, tensor<16x8xbf16>)
// CHECK-SAME:    moe.wrt = array<i64: 4, 5, 6, 7>
// CHECK-NOT:     moe.grouped_weight_grad
// CHECK-NOT:     moe.permute_grad
// CHECK:         moe.grouped_matmul %{{.*}}, %arg3, %{{.*}} lora(%arg6, %arg7 : tensor<8x12xbf16>, tensor<16x8xbf16>) {lora_scaling = 2.000000e+00 : f32, transpose_lora} : tensor<?x16xbf16>, tensor<4x16x12xbf16>, tensor<4xi32> -> tensor<?x12xbf16>
// CHECK:         %[[DA2:.*]], %[[DB2:.*]] = moe.lora_grad %{{.*}}, %{{.*}}, %{{.*}} lora(%arg6, %arg7 : tensor<8x12xbf16>, tensor<16x8xbf16>) {lora_scaling = 2.000000e+00 : f32} : tensor<?x12xbf16>, tensor<?x16xbf16>, tensor<4xi32> -> tensor<8x12xbf16>, tensor<16x8xbf16>
// CHECK:         moe.swiglu_grad
// CHECK:         %[[DA1:.*]], %[[DB1:.*]] = moe.lora_grad %arg1, %{{.*}}, %{{.*}} lora(%arg4, %arg5 : tensor<8x16xbf16>, tensor<24x8xbf16>) gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.000000e+00 : f32} : tensor<?x16xbf16>, tensor<?x24xbf16>, tensor<4xi32> -> tensor<8x16xbf16>, tensor<24x8xbf16>
// CHECK-NOT:     moe.grouped_weight_grad
// CHECK:         return %[[DA1]], %[[DB1]], %[[DA2]], %[[DB2]]
func.func @lora_experts(%ids: tensor<?x2xi32>, %x: tensor<?x16xbf16>,
                        %w1: tensor<4x16x24xbf16>, %w2: tensor<4x16x12xbf16>,
                        %a1: tensor<8x16xbf16> {moe.wrt},
                        %b1: tensor<24x8xbf16> {moe.wrt},
                        %a2: tensor<8x12xbf16> {moe.wrt},
                        %b2: tensor<16x8xbf16> {moe.wrt})
    -> tensor<?x16xbf16> {
  %sorted, %slots, %offsets, %positions = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>, tensor<?xi32>
  %h = moe.grouped_matmul %x, %w1, %offsets gather(%slots : tensor<?xi32>)
      lora(%a1, %b1 : tensor<8x16xbf16>, tensor<24x8xbf16>)
      {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x16xbf16>, tensor<4x16x24xbf16>, tensor<4xi32> -> tensor<?x24xbf16>
  %a = moe.swiglu %h : tensor<?x24xbf16> -> tensor<?x12xbf16>
  %d = moe.grouped_matmul %a, %w2, %offsets
      lora(%a2, %b2 : tensor<8x12xbf16>, tensor<16x8xbf16>)
      {transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x12xbf16>, tensor<4x16x12xbf16>, tensor<4xi32> -> tensor<?x16xbf16>
  %y = moe.unpermute %d, %slots, %offsets k = 2 positions(%positions : tensor<?xi32>)
      : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}
