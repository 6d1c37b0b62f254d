// RUN: moec-opt %s -split-input-file | moec-opt -split-input-file | FileCheck %s
// Round-trip through the generic form too: the custom syntax loses nothing.
// RUN: moec-opt %s -split-input-file -mlir-print-op-generic | moec-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func @router_defaults
func.func @router_defaults(%logits: tensor<?x128xbf16>) -> (tensor<?x8xf32>, tensor<?x8xi32>) {
  // CHECK: moe.router_topk %{{.*}} k = 8 : tensor<?x128xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  %w, %ids = moe.router_topk %logits k = 8 : tensor<?x128xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  return %w, %ids : tensor<?x8xf32>, tensor<?x8xi32>
}

// -----

// CHECK-LABEL: func @router_mixtral
func.func @router_mixtral(%logits: tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>) {
  // CHECK: moe.router_topk %{{.*}} k = 2 {order = #moe.order<topk_then_softmax>} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  %w, %ids = moe.router_topk %logits k = 2 {order = #moe.order<topk_then_softmax>} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return %w, %ids : tensor<4x2xf32>, tensor<4x2xi32>
}

// -----

// CHECK-LABEL: func @router_grad
func.func @router_grad(%logits: tensor<?x128xf32>, %ids: tensor<?x8xi32>, %dw: tensor<?x8xf32>) -> (tensor<?x128xbf16>, tensor<?x128xf32>) {
  // CHECK: moe.router_topk_grad %{{.*}}, %{{.*}}, %{{.*}} {renormalize} : tensor<?x128xf32>, tensor<?x8xi32>, tensor<?x8xf32> -> tensor<?x128xbf16>
  %d = moe.router_topk_grad %logits, %ids, %dw {renormalize} : tensor<?x128xf32>, tensor<?x8xi32>, tensor<?x8xf32> -> tensor<?x128xbf16>
  // CHECK: moe.router_topk_grad {{.*}} {order = #moe.order<topk_then_softmax>, scaling_factor = 2.500000e+00 : f32}
  %m = moe.router_topk_grad %logits, %ids, %dw {order = #moe.order<topk_then_softmax>, scaling_factor = 2.5 : f32} : tensor<?x128xf32>, tensor<?x8xi32>, tensor<?x8xf32> -> tensor<?x128xf32>
  return %d, %m : tensor<?x128xbf16>, tensor<?x128xf32>
}

// -----

// CHECK-LABEL: func @router_qwen3
func.func @router_qwen3(%logits: tensor<?x128xf16>) -> (tensor<?x8xf32>, tensor<?x8xi32>) {
  // The default scoring is elided when printed.
  // CHECK: moe.router_topk %{{.*}} k = 8 {renormalize} : tensor<?x128xf16>
  %w, %ids = moe.router_topk %logits k = 8 {renormalize, scoring = #moe.scoring<softmax>} : tensor<?x128xf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  return %w, %ids : tensor<?x8xf32>, tensor<?x8xi32>
}

// -----

// DeepSeek-V3: sigmoid scores, selection bias, group-limited top-k, scaling.
// CHECK-LABEL: func @router_deepseek_v3
func.func @router_deepseek_v3(%logits: tensor<?x256xbf16>, %bias: tensor<256xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>) {
  // CHECK: moe.router_topk %{{.*}} bias(%{{.*}} : tensor<256xf32>) k = 8 {num_groups = 8 : i64, renormalize, scaling_factor = 2.500000e+00 : f32, scoring = #moe.scoring<sigmoid>, topk_groups = 4 : i64} : tensor<?x256xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<256xf32>) k = 8 {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 8 : i64, topk_groups = 4 : i64, scaling_factor = 2.5 : f32} : tensor<?x256xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  return %w, %ids : tensor<?x8xf32>, tensor<?x8xi32>
}

// -----

// CHECK-LABEL: func @sort_unaligned
func.func @sort_unaligned(%ids: tensor<16x2xi32>) -> (tensor<32xi32>, tensor<32xi32>, tensor<8xi32>) {
  // CHECK: moe.sort_by_expert %{{.*}} experts = 8 : tensor<16x2xi32> -> tensor<32xi32>, tensor<32xi32>, tensor<8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 : tensor<16x2xi32> -> tensor<32xi32>, tensor<32xi32>, tensor<8xi32>
  return %sorted, %slots, %offsets : tensor<32xi32>, tensor<32xi32>, tensor<8xi32>
}

// -----

// Aligned: capacity 16*2 + 8*(16-1) = 152.
// CHECK-LABEL: func @sort_aligned
func.func @sort_aligned(%ids: tensor<16x2xi32>, %dyn: tensor<?x8xi32>) -> (tensor<152xi32>, tensor<?xi32>) {
  // CHECK: moe.sort_by_expert %{{.*}} experts = 8 align = 16 : tensor<16x2xi32> -> tensor<152xi32>, tensor<152xi32>, tensor<8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 16 : tensor<16x2xi32> -> tensor<152xi32>, tensor<152xi32>, tensor<8xi32>
  // CHECK: moe.sort_by_expert %{{.*}} experts = 128 align = 128 : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  %s2, %sl2, %o2 = moe.sort_by_expert %dyn experts = 128 align = 128 : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  return %slots, %sl2 : tensor<152xi32>, tensor<?xi32>
}

// -----

// The optional positions result, and the ops that take it.
// CHECK-LABEL: func @positions
func.func @positions(%ids: tensor<16x2xi32>, %x: tensor<16x64xbf16>, %w: tensor<16x2xf32>) -> (tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<56x64xbf16>) {
  // CHECK: moe.sort_by_expert %{{.*}} experts = 8 align = 4 : tensor<16x2xi32> -> tensor<56xi32>, tensor<56xi32>, tensor<8xi32>, tensor<32xi32>
  %sorted, %slots, %offsets, %pos = moe.sort_by_expert %ids experts = 8 align = 4 : tensor<16x2xi32> -> tensor<56xi32>, tensor<56xi32>, tensor<8xi32>, tensor<32xi32>
  // CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 2 positions(%{{.*}} : tensor<32xi32>) probs(%{{.*}} : tensor<16x2xf32> -> tensor<56xf32>) : tensor<16x64xbf16>, tensor<56xi32>, tensor<8xi32> -> tensor<56x64xbf16>
  %rows, %probs = moe.permute %x, %slots, %offsets k = 2 positions(%pos : tensor<32xi32>) probs(%w : tensor<16x2xf32> -> tensor<56xf32>) : tensor<16x64xbf16>, tensor<56xi32>, tensor<8xi32> -> tensor<56x64xbf16>
  // CHECK: moe.unpermute %{{.*}}, %{{.*}}, %{{.*}} k = 2 positions(%{{.*}} : tensor<32xi32>) weights(%{{.*}} : tensor<16x2xf32>) : tensor<56x64xbf16>, tensor<56xi32>, tensor<8xi32> -> tensor<16x64xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 2 positions(%pos : tensor<32xi32>) weights(%w : tensor<16x2xf32>) : tensor<56x64xbf16>, tensor<56xi32>, tensor<8xi32> -> tensor<16x64xbf16>
  // CHECK: moe.permute_grad %{{.*}}, %{{.*}}, %{{.*}} k = 2 positions(%{{.*}} : tensor<32xi32>) probs(%{{.*}} : tensor<56xf32> -> tensor<16x2xf32>)
  %dx, %dw = moe.permute_grad %rows, %slots, %offsets k = 2 positions(%pos : tensor<32xi32>) probs(%probs : tensor<56xf32> -> tensor<16x2xf32>) : tensor<56x64xbf16>, tensor<56xi32>, tensor<8xi32> -> tensor<16x64xbf16>
  // CHECK: moe.unpermute_grad %{{.*}}, %{{.*}}, %{{.*}} k = 2 positions(%{{.*}} : tensor<32xi32>) :
  %dr = moe.unpermute_grad %y, %slots, %offsets k = 2 positions(%pos : tensor<32xi32>) : tensor<16x64xbf16>, tensor<56xi32>, tensor<8xi32> -> tensor<56x64xbf16>
  return %y, %dx, %dr : tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<56x64xbf16>
}

// -----

// CHECK-LABEL: func @permute_plain
func.func @permute_plain(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32>, %offsets: tensor<128xi32>) -> tensor<?x2048xbf16> {
  // CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %rows = moe.permute %x, %slots, %offsets k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %rows : tensor<?x2048xbf16>
}

// -----

// CHECK-LABEL: func @permute_probs
func.func @permute_probs(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32>, %offsets: tensor<128xi32>, %w: tensor<?x8xf32>) -> (tensor<?x2048xbf16>, tensor<?xf32>) {
  // CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 8 probs(%{{.*}} : tensor<?x8xf32> -> tensor<?xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %rows, %probs = moe.permute %x, %slots, %offsets k = 8 probs(%w : tensor<?x8xf32> -> tensor<?xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %rows, %probs : tensor<?x2048xbf16>, tensor<?xf32>
}

// -----

// FP8 tokens with per-token scales, aligned capacity 4*2 + 4*(16-1) = 68.
// CHECK-LABEL: func @permute_fp8_scales
func.func @permute_fp8_scales(%x: tensor<4x256xf8E4M3FN>, %s: tensor<4x2xf32>, %slots: tensor<68xi32>, %offsets: tensor<4xi32>) -> (tensor<68x256xf8E4M3FN>, tensor<68x2xf32>) {
  // CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 2 scales(%{{.*}} : tensor<4x2xf32> -> tensor<68x2xf32>) : tensor<4x256xf8E4M3FN>, tensor<68xi32>, tensor<4xi32> -> tensor<68x256xf8E4M3FN>
  %rows, %scales = moe.permute %x, %slots, %offsets k = 2 scales(%s : tensor<4x2xf32> -> tensor<68x2xf32>) : tensor<4x256xf8E4M3FN>, tensor<68xi32>, tensor<4xi32> -> tensor<68x256xf8E4M3FN>
  return %rows, %scales : tensor<68x256xf8E4M3FN>, tensor<68x2xf32>
}

// -----

// CHECK-LABEL: func @permute_probs_and_scales
func.func @permute_probs_and_scales(%x: tensor<4x256xf8E5M2>, %w: tensor<4x2xf32>, %s: tensor<4x2xf32>, %slots: tensor<8xi32>, %offsets: tensor<4xi32>) -> (tensor<8x256xf8E5M2>, tensor<8xf32>, tensor<8x2xf32>) {
  // CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 2 probs(%{{.*}} : tensor<4x2xf32> -> tensor<8xf32>) scales(%{{.*}} : tensor<4x2xf32> -> tensor<8x2xf32>)
  %rows, %probs, %scales = moe.permute %x, %slots, %offsets k = 2 probs(%w : tensor<4x2xf32> -> tensor<8xf32>) scales(%s : tensor<4x2xf32> -> tensor<8x2xf32>) : tensor<4x256xf8E5M2>, tensor<8xi32>, tensor<4xi32> -> tensor<8x256xf8E5M2>
  return %rows, %probs, %scales : tensor<8x256xf8E5M2>, tensor<8xf32>, tensor<8x2xf32>
}

// -----

// CHECK-LABEL: func @unpermute
func.func @unpermute(%rows: tensor<?x2048xbf16>, %slots: tensor<?xi32>, %offsets: tensor<128xi32>, %w: tensor<?x8xf32>) -> (tensor<?x2048xbf16>, tensor<?x2048xf32>) {
  // CHECK: moe.unpermute %{{.*}}, %{{.*}}, %{{.*}} k = 8 weights(%{{.*}} : tensor<?x8xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 8 weights(%w : tensor<?x8xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  // CHECK: moe.unpermute %{{.*}}, %{{.*}}, %{{.*}} k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xf32>
  %sum = moe.unpermute %rows, %slots, %offsets k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xf32>
  return %y, %sum : tensor<?x2048xbf16>, tensor<?x2048xf32>
}

// -----

// CHECK-LABEL: func @permute_grad
func.func @permute_grad(%drows: tensor<?x2048xbf16>, %slots: tensor<?xi32>, %offsets: tensor<128xi32>, %dprobs: tensor<?xf32>) -> (tensor<?x2048xbf16>, tensor<?x8xf32>, tensor<?x2048xf32>) {
  // CHECK: moe.permute_grad %{{.*}}, %{{.*}}, %{{.*}} k = 8 probs(%{{.*}} : tensor<?xf32> -> tensor<?x8xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 8 probs(%dprobs : tensor<?xf32> -> tensor<?x8xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  // CHECK: moe.permute_grad %{{.*}}, %{{.*}}, %{{.*}} k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xf32>
  %dx32 = moe.permute_grad %drows, %slots, %offsets k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xf32>
  return %dx, %dw, %dx32 : tensor<?x2048xbf16>, tensor<?x8xf32>, tensor<?x2048xf32>
}

// -----

// CHECK-LABEL: func @unpermute_grad
func.func @unpermute_grad(%dy: tensor<?x2048xbf16>, %slots: tensor<?xi32>, %offsets: tensor<128xi32>, %w: tensor<?x8xf32>, %rows: tensor<?x2048xbf16>) -> (tensor<?x2048xbf16>, tensor<?x8xf32>, tensor<?x2048xf32>) {
  // CHECK: moe.unpermute_grad %{{.*}}, %{{.*}}, %{{.*}} k = 8 weights(%{{.*}}, %{{.*}} : tensor<?x8xf32>, tensor<?x2048xbf16> -> tensor<?x8xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8 weights(%w, %rows : tensor<?x8xf32>, tensor<?x2048xbf16> -> tensor<?x8xf32>) : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  // CHECK: moe.unpermute_grad %{{.*}}, %{{.*}}, %{{.*}} k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xf32>
  %drows32 = moe.unpermute_grad %dy, %slots, %offsets k = 8 : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xf32>
  return %drows, %dw, %drows32 : tensor<?x2048xbf16>, tensor<?x8xf32>, tensor<?x2048xf32>
}

// -----

// CHECK-LABEL: func @grouped_matmul_plain
func.func @grouped_matmul_plain(%x: tensor<?x2048xbf16>, %w: tensor<128x2048x768xbf16>, %wt: tensor<128x768x2048xbf16>, %offsets: tensor<128xi32>) -> (tensor<?x768xbf16>, tensor<?x768xf32>) {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x2048xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32> -> tensor<?x768xbf16>
  %y = moe.grouped_matmul %x, %w, %offsets : tensor<?x2048xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32> -> tensor<?x768xbf16>
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {transpose_rhs} : tensor<?x2048xbf16>, tensor<128x768x2048xbf16>, tensor<128xi32> -> tensor<?x768xf32>
  %yt = moe.grouped_matmul %x, %wt, %offsets {transpose_rhs} : tensor<?x2048xbf16>, tensor<128x768x2048xbf16>, tensor<128xi32> -> tensor<?x768xf32>
  return %y, %yt : tensor<?x768xbf16>, tensor<?x768xf32>
}

// -----

// Gathered lhs, bias, LoRA, SwiGLU epilogue and per-row scale together.
// CHECK-LABEL: func @grouped_matmul_fused_prologue_epilogue
func.func @grouped_matmul_fused_prologue_epilogue(%x: tensor<?x64xbf16>, %slots: tensor<?xi32>, %w: tensor<8x128x64xbf16>, %offsets: tensor<8xi32>, %bias: tensor<8x128xf32>, %a: tensor<32x64xbf16>, %b: tensor<128x32xbf16>, %scale: tensor<?xf32>) -> tensor<?x64xbf16> {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) bias(%{{.*}} : tensor<8x128xf32>) lora(%{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<128x32xbf16>) row_scale(%{{.*}} : tensor<?xf32>) {activation = #moe.activation<swiglu>, k = 2 : i64, lora_scaling = 5.000000e-01 : f32, transpose_rhs} : tensor<?x64xbf16>, tensor<8x128x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>) bias(%bias : tensor<8x128xf32>) lora(%a, %b : tensor<32x64xbf16>, tensor<128x32xbf16>) row_scale(%scale : tensor<?xf32>) {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>, lora_scaling = 0.5 : f32} : tensor<?x64xbf16>, tensor<8x128x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Scattered output combined in token order (the down projection + unpermute).
// CHECK-LABEL: func @grouped_matmul_scatter
func.func @grouped_matmul_scatter(%h: tensor<?x768xbf16>, %w: tensor<128x2048x768xbf16>, %offsets: tensor<128xi32>, %slots: tensor<?xi32>, %weights: tensor<?x8xf32>) -> (tensor<?x2048xbf16>, tensor<?x2048xbf16>, tensor<?x2048xbf16>) {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(%{{.*}} : tensor<?xi32>) scatter_weights(%{{.*}} : tensor<?x8xf32>) {k = 8 : i64, transpose_rhs} : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32> -> tensor<?x2048xbf16>
  %y = moe.grouped_matmul %h, %w, %offsets scatter(%slots : tensor<?xi32>) scatter_weights(%weights : tensor<?x8xf32>) {k = 8 : i64, transpose_rhs} : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32> -> tensor<?x2048xbf16>
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(%{{.*}} : tensor<?xi32>) {k = 8 : i64, transpose_rhs}
  %s = moe.grouped_matmul %h, %w, %offsets scatter(%slots : tensor<?xi32>) {k = 8 : i64, transpose_rhs} : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32> -> tensor<?x2048xbf16>
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scatter(%{{.*}} : tensor<?xi32>) scatter_positions(%{{.*}} : tensor<?xi32>) {k = 8 : i64, transpose_rhs}
  %p = moe.grouped_matmul %h, %w, %offsets scatter(%slots : tensor<?xi32>) scatter_positions(%slots : tensor<?xi32>) {k = 8 : i64, transpose_rhs} : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %y, %s, %p : tensor<?x2048xbf16>, tensor<?x2048xbf16>, tensor<?x2048xbf16>
}

// -----

// CHECK-LABEL: func @grouped_weight_grad
func.func @grouped_weight_grad(%x: tensor<?x2048xbf16>, %dy: tensor<?x768xbf16>, %offsets: tensor<128xi32>, %tokens: tensor<?x2048xbf16>, %slots: tensor<?xi32>) -> (tensor<128x2048x768xf32>, tensor<128x2048x768xbf16>) {
  // CHECK: moe.grouped_weight_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x2048x768xf32>
  %dw = moe.grouped_weight_grad %x, %dy, %offsets : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x2048x768xf32>
  // CHECK: moe.grouped_weight_grad %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) {k = 8 : i64}
  %dwg = moe.grouped_weight_grad %tokens, %dy, %offsets gather(%slots : tensor<?xi32>) {k = 8 : i64} : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x2048x768xbf16>
  return %dw, %dwg : tensor<128x2048x768xf32>, tensor<128x2048x768xbf16>
}

// -----

// transpose_rhs: the gradient of [E, N, K] weights in that layout, the
// token rows gathered by slot.
// CHECK-LABEL: func @grouped_weight_grad_transposed
func.func @grouped_weight_grad_transposed(%tokens: tensor<?x2048xbf16>, %dy: tensor<?x768xbf16>, %offsets: tensor<128xi32>, %slots: tensor<?xi32>) -> tensor<128x768x2048xbf16> {
  // CHECK: moe.grouped_weight_grad %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) {k = 8 : i64, transpose_rhs} : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x768x2048xbf16>
  %dw = moe.grouped_weight_grad %tokens, %dy, %offsets gather(%slots : tensor<?xi32>) {k = 8 : i64, transpose_rhs} : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x768x2048xbf16>
  return %dw : tensor<128x768x2048xbf16>
}

// -----

// accumulate: the weight gradient added to a given one (an f32 main
// gradient).
// CHECK-LABEL: func @grouped_weight_grad_accumulate
func.func @grouped_weight_grad_accumulate(%tokens: tensor<?x2048xbf16>, %dy: tensor<?x768xbf16>, %offsets: tensor<128xi32>, %slots: tensor<?xi32>, %main: tensor<128x768x2048xf32>) -> tensor<128x768x2048xf32> {
  // CHECK: moe.grouped_weight_grad %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) accumulate(%{{.*}} : tensor<128x768x2048xf32>) {k = 8 : i64, transpose_rhs} : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x768x2048xf32>
  %dw = moe.grouped_weight_grad %tokens, %dy, %offsets gather(%slots : tensor<?xi32>) accumulate(%main : tensor<128x768x2048xf32>) {k = 8 : i64, transpose_rhs} : tensor<?x2048xbf16>, tensor<?x768xbf16>, tensor<128xi32> -> tensor<128x768x2048xf32>
  return %dw : tensor<128x768x2048xf32>
}

// -----

// experts_in_columns: a LoRA B adapter [N, E*r] as [N, E, r] weights, and a
// weight gradient written in that layout.
// CHECK-LABEL: func @grouped_matmul_experts_in_columns
func.func @grouped_matmul_experts_in_columns(%dy: tensor<?x2048xbf16>, %b: tensor<2048x128x16xbf16>, %offsets: tensor<128xi32>, %u: tensor<?x16xbf16>) -> (tensor<?x16xbf16>, tensor<2048x128x16xf32>) {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {experts_in_columns} : tensor<?x2048xbf16>, tensor<2048x128x16xbf16>, tensor<128xi32> -> tensor<?x16xbf16>
  %du = moe.grouped_matmul %dy, %b, %offsets {experts_in_columns} : tensor<?x2048xbf16>, tensor<2048x128x16xbf16>, tensor<128xi32> -> tensor<?x16xbf16>
  // CHECK: moe.grouped_weight_grad %{{.*}}, %{{.*}}, %{{.*}} {experts_in_columns} : tensor<?x2048xbf16>, tensor<?x16xbf16>, tensor<128xi32> -> tensor<2048x128x16xf32>
  %db = moe.grouped_weight_grad %dy, %u, %offsets {experts_in_columns} : tensor<?x2048xbf16>, tensor<?x16xbf16>, tensor<128xi32> -> tensor<2048x128x16xf32>
  return %du, %db : tensor<?x16xbf16>, tensor<2048x128x16xf32>
}

// -----

// FP8 with DeepSeek-V3 block scales: 1x128 on activations, 128x128 on weights.
// CHECK-LABEL: func @grouped_matmul_fp8
func.func @grouped_matmul_fp8(%x: tensor<?x2048xf8E4M3FN>, %sx: tensor<?x16xf32>, %w: tensor<128x768x2048xf8E4M3FN>, %sw: tensor<128x6x16xf32>, %offsets: tensor<128xi32>, %wn: tensor<128x2048x768xf8E5M2>, %xn: tensor<?x2048xf8E5M2>, %swn: tensor<128x32x12xf32>, %sxn: tensor<?x32xf32>) -> (tensor<?x768xbf16>, tensor<?x768xf32>) {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<128x6x16xf32>) {transpose_rhs} : tensor<?x2048xf8E4M3FN>, tensor<128x768x2048xf8E4M3FN>, tensor<128xi32> -> tensor<?x768xbf16>
  %y = moe.grouped_matmul %x, %w, %offsets scales(%sx, %sw : tensor<?x16xf32>, tensor<128x6x16xf32>) {transpose_rhs} : tensor<?x2048xf8E4M3FN>, tensor<128x768x2048xf8E4M3FN>, tensor<128xi32> -> tensor<?x768xbf16>
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}} : tensor<?x32xf32>, tensor<128x32x12xf32>) {scale_group = 64 : i64} : tensor<?x2048xf8E5M2>, tensor<128x2048x768xf8E5M2>, tensor<128xi32> -> tensor<?x768xf32>
  %z = moe.grouped_matmul %xn, %wn, %offsets scales(%sxn, %swn : tensor<?x32xf32>, tensor<128x32x12xf32>) {scale_group = 64 : i64} : tensor<?x2048xf8E5M2>, tensor<128x2048x768xf8E5M2>, tensor<128xi32> -> tensor<?x768xf32>
  return %y, %z : tensor<?x768xbf16>, tensor<?x768xf32>
}

// -----

// CHECK-LABEL: func @swiglu
func.func @swiglu(%h: tensor<?x1536xbf16>, %hi: tensor<4x6xf32>, %dy: tensor<?x768xbf16>) -> (tensor<?x768xbf16>, tensor<4x3xf32>, tensor<?x1536xbf16>) {
  // CHECK: moe.swiglu %{{.*}} : tensor<?x1536xbf16> -> tensor<?x768xbf16>
  %a = moe.swiglu %h : tensor<?x1536xbf16> -> tensor<?x768xbf16>
  // CHECK: moe.swiglu %{{.*}} {layout = #moe.layout<interleaved>} : tensor<4x6xf32> -> tensor<4x3xf32>
  %b = moe.swiglu %hi {layout = #moe.layout<interleaved>} : tensor<4x6xf32> -> tensor<4x3xf32>
  // CHECK: moe.swiglu_grad %{{.*}}, %{{.*}} : tensor<?x1536xbf16>, tensor<?x768xbf16> -> tensor<?x1536xbf16>
  %dh = moe.swiglu_grad %h, %dy : tensor<?x1536xbf16>, tensor<?x768xbf16> -> tensor<?x1536xbf16>
  return %a, %b, %dh : tensor<?x768xbf16>, tensor<4x3xf32>, tensor<?x1536xbf16>
}

// -----

// CHECK-LABEL: func @swiglu_grad_interleaved
func.func @swiglu_grad_interleaved(%h: tensor<4x6xf32>, %dy: tensor<4x3xf32>) -> tensor<4x6xf32> {
  // CHECK: moe.swiglu_grad %{{.*}}, %{{.*}} {layout = #moe.layout<interleaved>} : tensor<4x6xf32>, tensor<4x3xf32> -> tensor<4x6xf32>
  %dh = moe.swiglu_grad %h, %dy {layout = #moe.layout<interleaved>} : tensor<4x6xf32>, tensor<4x3xf32> -> tensor<4x6xf32>
  return %dh : tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func @quantize_rowwise
func.func @quantize_rowwise(%x: tensor<?x2048xbf16>, %y: tensor<4x200xf32>) -> (tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>, tensor<4x200xf8E5M2>, tensor<4x2xf32>) {
  // CHECK: moe.quantize %{{.*}} group_size = 128 : tensor<?x2048xbf16> -> tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>
  %q, %s = moe.quantize %x group_size = 128 : tensor<?x2048xbf16> -> tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>
  // A partial last group: ceil(200 / 128) = 2 scales per row.
  // CHECK: moe.quantize %{{.*}} group_size = 128 {pow2_scale} : tensor<4x200xf32> -> tensor<4x200xf8E5M2>, tensor<4x2xf32>
  %q2, %s2 = moe.quantize %y group_size = 128 {pow2_scale} : tensor<4x200xf32> -> tensor<4x200xf8E5M2>, tensor<4x2xf32>
  return %q, %s, %q2, %s2 : tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>, tensor<4x200xf8E5M2>, tensor<4x2xf32>
}

// -----

// Column-wise over expert groups: (256 + 8*127) / 128 = 9 scale rows.
// CHECK-LABEL: func @quantize_colwise
func.func @quantize_colwise(%x: tensor<256x64xbf16>, %offsets: tensor<8xi32>) -> (tensor<256x64xf8E4M3FN>, tensor<9x64xf32>) {
  // CHECK: moe.quantize %{{.*}} offsets(%{{.*}} : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>, pow2_scale} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<9x64xf32>
  %q, %s = moe.quantize %x offsets(%offsets : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>, pow2_scale} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<9x64xf32>
  return %q, %s : tensor<256x64xf8E4M3FN>, tensor<9x64xf32>
}

// -----

// Expert weights in 128x128 blocks, as they are and transposed (partial
// blocks: 264 = 2 * 128 + 8, 136 = 128 + 8).
// CHECK-LABEL: func @quantize_blocks
func.func @quantize_blocks(%w: tensor<4x264x136xbf16>) -> (tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>) {
  // CHECK: moe.quantize %{{.*}} group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>
  // CHECK: moe.quantize %{{.*}} group_size = 128 {axis = #moe.axis<blocks>, transpose} : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>
  %qt, %st = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>, transpose} : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>
  return %q, %s, %qt, %st : tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>
}

// -----

// Both layouts from one read: the plain data and scales, then the
// transposed ones.
// CHECK-LABEL: func @quantize_blocks_both
func.func @quantize_blocks_both(%w: tensor<4x264x136xbf16>) -> (tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>) {
  // CHECK: %data, %scales, %transposed_data, %transposed_scales = moe.quantize %{{.*}} group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
  %q, %s, %t, %ts = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
  return %q, %s, %t, %ts : tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func @dequantize_fp8
func.func @dequantize_fp8(%q: tensor<?x2048xf8E4M3FN>, %s: tensor<?x16xf32>, %qc: tensor<256x64xf8E5M2>, %sc: tensor<9x64xf32>, %offsets: tensor<8xi32>) -> (tensor<?x2048xbf16>, tensor<256x64xf32>) {
  // CHECK: moe.dequantize %{{.*}}, %{{.*}} group_size = 128 : tensor<?x2048xf8E4M3FN>, tensor<?x16xf32> -> tensor<?x2048xbf16>
  %x = moe.dequantize %q, %s group_size = 128 : tensor<?x2048xf8E4M3FN>, tensor<?x16xf32> -> tensor<?x2048xbf16>
  // CHECK: moe.dequantize %{{.*}}, %{{.*}} offsets(%{{.*}} : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E5M2>, tensor<9x64xf32> -> tensor<256x64xf32>
  %y = moe.dequantize %qc, %sc offsets(%offsets : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E5M2>, tensor<9x64xf32> -> tensor<256x64xf32>
  return %x, %y : tensor<?x2048xbf16>, tensor<256x64xf32>
}

// -----

// NF4: [E, K, N/2] packed bytes, absmax per 64-element block.
// CHECK-LABEL: func @dequantize_nf4
func.func @dequantize_nf4(%packed: tensor<128x2048x384xui8>, %absmax: tensor<128x24576xf32>, %codebook: tensor<16xf32>, %active: tensor<8xi32>) -> (tensor<8x2048x768xbf16>, tensor<128x2048x768xf16>) {
  // CHECK: moe.dequantize %{{.*}}, %{{.*}} codebook(%{{.*}} : tensor<16xf32>) experts(%{{.*}} : tensor<8xi32>) group_size = 64 : tensor<128x2048x384xui8>, tensor<128x24576xf32> -> tensor<8x2048x768xbf16>
  %w = moe.dequantize %packed, %absmax codebook(%codebook : tensor<16xf32>) experts(%active : tensor<8xi32>) group_size = 64 : tensor<128x2048x384xui8>, tensor<128x24576xf32> -> tensor<8x2048x768xbf16>
  // CHECK: moe.dequantize %{{.*}}, %{{.*}} codebook(%{{.*}} : tensor<16xf32>) group_size = 64 : tensor<128x2048x384xui8>, tensor<128x24576xf32> -> tensor<128x2048x768xf16>
  %all = moe.dequantize %packed, %absmax codebook(%codebook : tensor<16xf32>) group_size = 64 : tensor<128x2048x384xui8>, tensor<128x24576xf32> -> tensor<128x2048x768xf16>
  return %w, %all : tensor<8x2048x768xbf16>, tensor<128x2048x768xf16>
}

// -----

// A tile configuration rides on any op as the discardable attribute
// `moe.tile`; its parameters parse in any order and print as m, n, k, threads.
// CHECK-LABEL: func @tile_attr
func.func @tile_attr(%x: tensor<?x64xbf16>, %w: tensor<8x64x64xbf16>, %o: tensor<8xi32>) -> tensor<?x32xbf16> {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>} : tensor<?x64xbf16>, tensor<8x64x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %h = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<threads = 256, k = 32, m = 16, n = 16>} : tensor<?x64xbf16>, tensor<8x64x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  // One row per block, 96 threads (m*n = 1 divides any thread count).
  // CHECK: moe.swiglu %{{.*}} {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 96>} : tensor<?x64xbf16> -> tensor<?x32xbf16>
  %a = moe.swiglu %h {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 96>} : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %a : tensor<?x32xbf16>
}

// -----

// Split reduction: more threads than outputs; and the largest block.
// CHECK-LABEL: func @tile_attr_bounds
func.func @tile_attr_bounds(%x: tensor<?x64xf32>, %w: tensor<8x64x64xf32>, %o: tensor<8xi32>) -> tensor<?x64xf32> {
  // CHECK: moe.grouped_matmul {{.*}} {moe.tile = #moe.tile<m = 4, n = 8, k = 512, threads = 1024>}
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 4, n = 8, k = 512, threads = 1024>} : tensor<?x64xf32>, tensor<8x64x64xf32>, tensor<8xi32> -> tensor<?x64xf32>
  // CHECK: moe.grouped_matmul {{.*}} {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 32>}
  %z = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 32>} : tensor<?x64xf32>, tensor<8x64x64xf32>, tensor<8xi32> -> tensor<?x64xf32>
  %s = arith.addf %y, %z : tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// -----

// The lowering's choices: a module's target and an op's strategy and tile.
// CHECK: module attributes {moe.target = #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 232448>}
// CHECK-LABEL: func @kernel_attrs
module attributes {moe.target = #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 232448>} {
  func.func @kernel_attrs(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
    // CHECK: moe.swiglu %{{.*}} {moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 256>>}
    %a = moe.swiglu %x {moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 256>>} : tensor<?x64xbf16> -> tensor<?x32xbf16>
    return %a : tensor<?x32xbf16>
  }
}

// -----

// LoRA gradients: the input gradient's transposed adapter and lora_grad
// (gathered and grouped rows).
// CHECK-LABEL: func @lora_gradients
func.func @lora_gradients(%x: tensor<?x64xbf16>, %dy: tensor<?x128xbf16>, %slots: tensor<?xi32>, %w: tensor<8x128x64xbf16>, %offsets: tensor<8xi32>, %a: tensor<32x64xbf16>, %b: tensor<128x32xbf16>) -> (tensor<?x64xbf16>, tensor<32x64xf32>, tensor<128x32xf32>, tensor<32x64xbf16>, tensor<128x32xbf16>) {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} lora(%{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<128x32xbf16>) {lora_scaling = 2.000000e+00 : f32, transpose_lora} : tensor<?x128xbf16>, tensor<8x128x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %dx = moe.grouped_matmul %dy, %w, %offsets lora(%a, %b : tensor<32x64xbf16>, tensor<128x32xbf16>) {transpose_lora, lora_scaling = 2.0 : f32} : tensor<?x128xbf16>, tensor<8x128x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  // CHECK: moe.lora_grad %{{.*}}, %{{.*}}, %{{.*}} lora(%{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<128x32xbf16>) gather(%{{.*}} : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.000000e+00 : f32} : tensor<?x64xbf16>, tensor<?x128xbf16>, tensor<8xi32> -> tensor<32x64xf32>, tensor<128x32xf32>
  %da, %db = moe.lora_grad %x, %dy, %offsets lora(%a, %b : tensor<32x64xbf16>, tensor<128x32xbf16>) gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32} : tensor<?x64xbf16>, tensor<?x128xbf16>, tensor<8xi32> -> tensor<32x64xf32>, tensor<128x32xf32>
  // CHECK: moe.lora_grad %{{.*}}, %{{.*}}, %{{.*}} lora(%{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<128x32xbf16>) : tensor<?x64xbf16>, tensor<?x128xbf16>, tensor<8xi32> -> tensor<32x64xbf16>, tensor<128x32xbf16>
  %da2, %db2 = moe.lora_grad %x, %dy, %offsets lora(%a, %b : tensor<32x64xbf16>, tensor<128x32xbf16>) : tensor<?x64xbf16>, tensor<?x128xbf16>, tensor<8xi32> -> tensor<32x64xbf16>, tensor<128x32xbf16>
  return %dx, %da, %db, %da2, %db2 : tensor<?x64xbf16>, tensor<32x64xf32>, tensor<128x32xf32>, tensor<32x64xbf16>, tensor<128x32xbf16>
}
