// The backward that moe-autodiff derives, run on the host backend with
// every op checked against the float64 reference (`moec run`): whole MoE
// layers differentiated with respect to every weight and the input, with
// `save=inputs` so that the gradient function recomputes its forward from
// the random inputs (saved routing tensors would need a forward run first:
// python/tests/test_autodiff.py drives @f_fwd then @f_grad and checks them
// against finite differences). Also router_topk_grad alone, for each
// scoring. Edge cases: T=1 (most experts empty), every token's first choice
// on one expert, half the experts without tokens; sizes that are not
// multiples of 16 (H = 48, E = 6).
// RUN: moec-opt %s -moe-autodiff="func=qwen3_layer save=inputs" -o %t.qwen3.mlir
// RUN: moec run %t.qwen3.mlir --entry qwen3_layer_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.qwen3.mlir --entry qwen3_layer_grad --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.qwen3.mlir --entry qwen3_layer_grad --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.qwen3.mlir --entry qwen3_layer_grad --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// Frozen experts (the input's gradient only): moe-fuse-permute takes
// unpermute_grad into the down projection's input gradient (gathered dy, the
// routing weights as row scale, SwiGLU's gradient in the epilogue).
// RUN: moec-opt %s -moe-autodiff="func=qwen3_layer save=inputs wrt=0" -o %t.input.mlir
// RUN: moec-opt %t.input.mlir -moe-optimize | FileCheck %s --check-prefix=FUSED
// RUN: moec run %t.input.mlir --entry qwen3_layer_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.input.mlir --entry qwen3_layer_grad --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.input.mlir --entry qwen3_layer_grad --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// FUSED-LABEL: func.func @qwen3_layer_grad
// FUSED: moe.permute_probs
// FUSED: moe.unpermute_grad {{.*}} : tensor<?x48xbf16>, tensor<?xi32>, tensor<6xi32>{{$}}
// FUSED: moe.grouped_matmul {{.*}} gather({{.*}}) row_scale({{.*}}) activation_input({{.*}}) {activation = #moe.activation<swiglu_grad>
// Gradient accumulation: both expert weights' gradients added to given f32
// main gradients in the weight gradients' epilogue.
// RUN: moec-opt %s -moe-autodiff="func=qwen3_layer save=inputs accumulate=2,3" -o %t.acc.mlir
// RUN: moec run %t.acc.mlir --entry qwen3_layer_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.acc.mlir --entry qwen3_layer_grad --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec-opt %s -moe-autodiff="func=gathered_layer save=inputs" -o %t.gathered.mlir
// RUN: moec run %t.gathered.mlir --entry gathered_layer_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.gathered.mlir --entry gathered_layer_grad --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.gathered.mlir --entry gathered_layer_grad --sym T=37 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec-opt %s -moe-autodiff="func=gathered_nk save=inputs" -o %t.nk.mlir
// RUN: moec run %t.nk.mlir --entry gathered_nk_grad --sym T=29 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.nk.mlir --entry gathered_nk_grad --sym T=29 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// The same gradient in FP8 (moe-fp8-recipe after moe-autodiff): every
// expert matmul, of the forward it recomputes and of the backward, reads
// e4m3 with DeepSeek-V3's block scales; the router's matmuls stay bf16.
// Each op is checked against float64 on its own inputs; the end-to-end
// comparison is informational, and there FP8's rounding turns the
// kernels' last-bit differences into 1-2 % ones.
// RUN: moec-opt %s -moe-autodiff="func=qwen3_layer save=inputs" -moe-fp8-recipe -o %t.fp8.mlir
// RUN: FileCheck %s --check-prefix=FP8 < %t.fp8.mlir
// RUN: moec run %t.fp8.mlir --entry qwen3_layer_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.fp8.mlir --entry qwen3_layer_grad --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.fp8.mlir --entry qwen3_layer_grad --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// FP8-LABEL: func.func @qwen3_layer_grad
// FP8-NOT: {{moe\.grouped_(matmul|weight_grad) .* : tensor<[?0-9x]+xbf16>}}
// FP8: moe.quantize {{.*}} {axis = #moe.axis<blocks>, transpose}
// FP8-NOT: {{moe\.grouped_(matmul|weight_grad) .* : tensor<[?0-9x]+xbf16>}}
// FP8: moe.quantize {{.*}} {axis = #moe.axis<colwise>, transpose}
// FP8-NOT: {{moe\.grouped_(matmul|weight_grad) .* : tensor<[?0-9x]+xbf16>}}
// FP8: moe.grouped_weight_grad {{.*}} scales(
// FP8-NOT: {{moe\.grouped_(matmul|weight_grad) .* : tensor<[?0-9x]+xbf16>}}
// FP8: return
// RUN: moec run %s --entry router_grad_softmax --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry router_grad_mixtral --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry router_grad_sigmoid --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// Qwen3's block at small sizes: router (softmax, top-2, renormalized),
// permute, gate_up + SwiGLU, down, weighted combine; nn.Linear weights.
func.func @qwen3_layer(%x: tensor<?x48xbf16>, %gate_w: tensor<6x48xbf16>,
                       %w_gate_up: tensor<6x40x48xbf16>,
                       %w_down: tensor<6x48x20xbf16>) -> tensor<?x48xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x48xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x6xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x6xf32>)
      -> tensor<?x6xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x48xbf16>, tensor<6x48xbf16>)
      outs(%acc : tensor<?x6xf32>) -> tensor<?x6xf32>
  %weights, %ids = moe.router_topk %logits k = 2 {renormalize}
      : tensor<?x6xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x48xbf16>, tensor<?xi32>, tensor<6xi32> -> tensor<?x48xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x48xbf16>, tensor<6x40x48xbf16>, tensor<6xi32>
      -> tensor<?x40xbf16>
  %a = moe.swiglu %h : tensor<?x40xbf16> -> tensor<?x20xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x20xbf16>, tensor<6x48x20xbf16>, tensor<6xi32>
      -> tensor<?x48xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 2
      weights(%weights : tensor<?x2xf32>)
      : tensor<?x48xbf16>, tensor<?xi32>, tensor<6xi32> -> tensor<?x48xbf16>
  return %y : tensor<?x48xbf16>
}

// Mixtral's routing (top-2 of the logits, then softmax) with the permute in
// the gate_up matmul's prologue and [E, K, N] weights: the weight gradients
// read the lhs by slot.
func.func @gathered_layer(%x: tensor<?x48xbf16>, %gate_w: tensor<6x48xbf16>,
                          %w1: tensor<6x48x40xbf16>, %w2: tensor<6x20x48xbf16>)
    -> tensor<?x48xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x48xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x6xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x6xf32>)
      -> tensor<?x6xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x48xbf16>, tensor<6x48xbf16>)
      outs(%acc : tensor<?x6xf32>) -> tensor<?x6xf32>
  %weights, %ids = moe.router_topk %logits k = 2
      {order = #moe.order<topk_then_softmax>}
      : tensor<?x6xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %h = moe.grouped_matmul %x, %w1, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64}
      : tensor<?x48xbf16>, tensor<6x48x40xbf16>, tensor<6xi32>
      -> tensor<?x40xbf16>
  %a = moe.swiglu %h : tensor<?x40xbf16> -> tensor<?x20xbf16>
  %down = moe.grouped_matmul %a, %w2, %offsets
      : tensor<?x20xbf16>, tensor<6x20x48xbf16>, tensor<6xi32>
      -> tensor<?x48xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 2
      weights(%weights : tensor<?x2xf32>)
      : tensor<?x48xbf16>, tensor<?xi32>, tensor<6xi32> -> tensor<?x48xbf16>
  return %y : tensor<?x48xbf16>
}

// A gathered matmul with nn.Linear weights ([E, N, K]): the weight gradient
// in its transpose_rhs form reads the token rows by slot (no permuted
// copy). DeepSeek-V3's routing:
// sigmoid scores, selection bias, renormalized and scaled.
func.func @gathered_nk(%x: tensor<?x32xbf16>, %logits: tensor<?x8xf32>,
                       %bias: tensor<8xf32>, %w: tensor<8x24x32xbf16>)
    -> tensor<?x24xbf16> {
  %weights, %ids = moe.router_topk %logits bias(%bias : tensor<8xf32>) k = 3
      {scoring = #moe.scoring<sigmoid>, renormalize, scaling_factor = 2.5 : f32}
      : tensor<?x8xf32> -> tensor<?x3xf32>, tensor<?x3xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %h = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 3 : i64, transpose_rhs}
      : tensor<?x32xbf16>, tensor<8x24x32xbf16>, tensor<8xi32>
      -> tensor<?x24xbf16>
  %y = moe.unpermute %h, %slots, %offsets k = 3
      weights(%weights : tensor<?x3xf32>)
      : tensor<?x24xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x24xbf16>
  return %y : tensor<?x24xbf16>
}

// router_topk_grad for each scoring, on the ids router_topk picks.
func.func @router_grad_softmax(%logits: tensor<?x16xf32>, %dw: tensor<?x4xf32>)
    -> (tensor<?x4xf32>, tensor<?x16xf32>) {
  %w, %ids = moe.router_topk %logits k = 4 {renormalize}
      : tensor<?x16xf32> -> tensor<?x4xf32>, tensor<?x4xi32>
  %d = moe.router_topk_grad %logits, %ids, %dw {renormalize}
      : tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4xf32> -> tensor<?x16xf32>
  return %w, %d : tensor<?x4xf32>, tensor<?x16xf32>
}

func.func @router_grad_mixtral(%logits: tensor<?x8xbf16>, %dw: tensor<?x2xf32>)
    -> (tensor<?x2xf32>, tensor<?x8xbf16>) {
  %w, %ids = moe.router_topk %logits k = 2
      {order = #moe.order<topk_then_softmax>}
      : tensor<?x8xbf16> -> tensor<?x2xf32>, tensor<?x2xi32>
  %d = moe.router_topk_grad %logits, %ids, %dw
      {order = #moe.order<topk_then_softmax>}
      : tensor<?x8xbf16>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xbf16>
  return %w, %d : tensor<?x2xf32>, tensor<?x8xbf16>
}

func.func @router_grad_sigmoid(%logits: tensor<?x12xf32>, %bias: tensor<12xf32>,
                               %dw: tensor<?x3xf32>)
    -> (tensor<?x3xf32>, tensor<?x12xf32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<12xf32>) k = 3
      {scoring = #moe.scoring<sigmoid>, renormalize, scaling_factor = 2.5 : f32,
       num_groups = 4 : i64, topk_groups = 2 : i64}
      : tensor<?x12xf32> -> tensor<?x3xf32>, tensor<?x3xi32>
  %d = moe.router_topk_grad %logits, %ids, %dw
      {scoring = #moe.scoring<sigmoid>, renormalize, scaling_factor = 2.5 : f32}
      : tensor<?x12xf32>, tensor<?x3xi32>, tensor<?x3xf32> -> tensor<?x12xf32>
  return %w, %d : tensor<?x3xf32>, tensor<?x12xf32>
}
