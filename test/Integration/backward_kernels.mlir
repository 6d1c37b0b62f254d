// The backward of permute and unpermute (Vector/Permute.cpp, and the scalar
// kernels of Scalar/ where the row length has no 16-byte vectors), each
// entry checked against the float64 reference on the host backend here and
// on the H200 by scripts/gpu-correctness.sh. The gradients of the grouped
// rows are inputs of their own size M (`moe.sym`), the capacity of the
// aligned sort: M = T*k + E*(align-1), so that padding rows and rows past
// the last group hold values the kernels must ignore. Edge cases: T=1 (most
// experts empty), one expert taking every token's first choice, half the
// experts without tokens, alignment padding, k = 8, mixed element types, a
// row length (36 bf16) that 16-byte vectors do not divide (scalar kernels).
// RUN: moec run %s --entry permute_grad_vec --sym T=1 --sym M=11 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_grad_vec --sym T=45 --sym M=143 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_grad_vec --sym T=45 --sym M=143 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_grad_scalar --sym T=1 --sym M=11 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_grad_scalar --sym T=45 --sym M=143 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_vec --sym T=1 --sym M=56 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_vec --sym T=45 --sym M=408 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_vec --sym T=45 --sym M=408 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_mixed --sym T=1 --sym M=11 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_mixed --sym T=45 --sym M=143 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_scalar --sym T=1 --sym M=11 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_scalar --sym T=45 --sym M=143 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_weights_only --sym T=1 --sym M=56 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_weights_only --sym T=45 --sym M=408 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry unpermute_grad_weights_only_scalar --sym T=45 --sym M=143 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fused_down_grad_lora --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fused_down_grad_lora --sym T=45 --sym M=90 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fused_down_grad_lora --sym T=45 --sym M=90 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fused_down_grad_lora --sym T=45 --sym M=90 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// Row gradients back to tokens (the vectorized combine) with the gradient
// of the permuted probabilities; k = 3 of 8 experts, groups padded to 2.
func.func @permute_grad_vec(%drows: tensor<?x64xbf16> {moe.sym = "M"},
                            %dprobs: tensor<?xf32> {moe.sym = "M"},
                            %ids: tensor<?x3xi32>)
    -> (tensor<?x64xbf16>, tensor<?x3xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 3
      probs(%dprobs : tensor<?xf32> -> tensor<?x3xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  return %dx, %dw : tensor<?x64xbf16>, tensor<?x3xf32>
}

// 36 bf16 columns: the scalar kernels, into f32.
func.func @permute_grad_scalar(%drows: tensor<?x36xbf16> {moe.sym = "M"},
                               %dprobs: tensor<?xf32> {moe.sym = "M"},
                               %ids: tensor<?x3xi32>)
    -> (tensor<?x36xf32>, tensor<?x3xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 3
      probs(%dprobs : tensor<?xf32> -> tensor<?x3xf32>)
      : tensor<?x36xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x36xf32>
  return %dx, %dw : tensor<?x36xf32>, tensor<?x3xf32>
}

// Token gradients to the grouped rows, weighted, with the weight gradient
// (the warp kernel on GPUs: 64 chunks, two per lane), and unweighted into
// f32; k = 8 of 16 experts, groups padded to 4.
func.func @unpermute_grad_vec(%dy: tensor<?x512xbf16>, %w: tensor<?x8xf32>,
                              %rows: tensor<?x512xbf16> {moe.sym = "M"},
                              %ids: tensor<?x8xi32>)
    -> (tensor<?x512xbf16>, tensor<?x8xf32>, tensor<?x512xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16 align = 4
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8
      weights(%w, %rows : tensor<?x8xf32>, tensor<?x512xbf16> -> tensor<?x8xf32>)
      : tensor<?x512xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x512xbf16>
  %plain = moe.unpermute_grad %dy, %slots, %offsets k = 8
      : tensor<?x512xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x512xf32>
  return %drows, %dw, %plain
      : tensor<?x512xbf16>, tensor<?x8xf32>, tensor<?x512xf32>
}

// f32 token gradients, bf16 forward rows, f16 row gradients: chunks of 8
// (the bf16 / f16 width), fewer than a warp's lanes.
func.func @unpermute_grad_mixed(%dy: tensor<?x64xf32>, %w: tensor<?x3xf32>,
                                %rows: tensor<?x64xbf16> {moe.sym = "M"},
                                %ids: tensor<?x3xi32>)
    -> (tensor<?x64xf16>, tensor<?x3xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 3
      weights(%w, %rows : tensor<?x3xf32>, tensor<?x64xbf16> -> tensor<?x3xf32>)
      : tensor<?x64xf32>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xf16>
  return %drows, %dw : tensor<?x64xf16>, tensor<?x3xf32>
}

// 36 bf16 columns: the scalar kernels.
func.func @unpermute_grad_scalar(%dy: tensor<?x36xbf16>, %w: tensor<?x3xf32>,
                                 %rows: tensor<?x36xbf16> {moe.sym = "M"},
                                 %ids: tensor<?x3xi32>)
    -> (tensor<?x36xbf16>, tensor<?x3xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 3
      weights(%w, %rows : tensor<?x3xf32>, tensor<?x36xbf16> -> tensor<?x3xf32>)
      : tensor<?x36xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x36xbf16>
  return %drows, %dw : tensor<?x36xbf16>, tensor<?x3xf32>
}

// The weights' gradient alone (the form moe-fuse-permute leaves), and the
// routing weight of each grouped row times 2 (moe.permute_probs): padding
// rows and rows past the last group get 0.
func.func @unpermute_grad_weights_only(%dy: tensor<?x512xbf16>,
                                       %w: tensor<?x8xf32>,
                                       %rows: tensor<?x512xbf16> {moe.sym = "M"},
                                       %ids: tensor<?x8xi32>)
    -> (tensor<?x8xf32>, tensor<?xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16 align = 4
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8
      weights(%w, %rows : tensor<?x8xf32>, tensor<?x512xbf16> -> tensor<?x8xf32>)
      : tensor<?x512xbf16>, tensor<?xi32>, tensor<16xi32>
  %ws = moe.permute_probs %w, %slots, %offsets k = 8 {scale = 2.0 : f32}
      : tensor<?x8xf32>, tensor<?xi32>, tensor<16xi32> -> tensor<?xf32>
  return %dw, %ws : tensor<?x8xf32>, tensor<?xf32>
}

// 36 bf16 columns: the scalar kernel.
func.func @unpermute_grad_weights_only_scalar(%dy: tensor<?x36xbf16>,
    %w: tensor<?x3xf32>, %rows: tensor<?x36xbf16> {moe.sym = "M"},
    %ids: tensor<?x3xi32>) -> tensor<?x3xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %dw = moe.unpermute_grad %dy, %slots, %offsets k = 3
      weights(%w, %rows : tensor<?x3xf32>, tensor<?x36xbf16> -> tensor<?x3xf32>)
      : tensor<?x36xbf16>, tensor<?xi32>, tensor<8xi32>
  return %dw : tensor<?x3xf32>
}

// The backward of a down projection with LoRA (r = 8, scaling 2) in the form
// moe-decompose-lora-grad leaves on sm90a, written out: moe-fuse-permute
// removes the row gradients (see test/Transforms/moe-fuse-permute.mlir), so
// this runs the fused kernels: the input gradient (with SwiGLU's gradient,
// moe-fuse-epilogue) and du gathering dy with permute_probs as row scale, u
// scaled by the weights, dB gathering dy.
func.func @fused_down_grad_lora(%dy: tensor<?x40xbf16>, %w: tensor<?x2xf32>,
                                %ids: tensor<?x2xi32>,
                                %y: tensor<?x40xbf16> {moe.sym = "M"},
                                %a: tensor<?x24xbf16> {moe.sym = "M"},
                                %h: tensor<?x48xbf16> {moe.sym = "M"},
                                %w_down: tensor<6x40x24xbf16>,
                                %la: tensor<6x8x24xbf16>,
                                %lbt: tensor<6x8x40xbf16>)
    -> (tensor<?x48xbf16>, tensor<6x40x8xf32>, tensor<6x8x24xf32>,
        tensor<?x2xf32>) {
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %dr, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 2
      weights(%w, %y : tensor<?x2xf32>, tensor<?x40xbf16> -> tensor<?x2xf32>)
      : tensor<?x40xbf16>, tensor<?xi32>, tensor<6xi32> -> tensor<?x40xbf16>
  %da = moe.grouped_matmul %dr, %w_down, %offsets
      : tensor<?x40xbf16>, tensor<6x40x24xbf16>, tensor<6xi32>
      -> tensor<?x24xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x48xbf16>, tensor<?x24xbf16> -> tensor<?x48xbf16>
  %m = tensor.dim %dr, %c0 : tensor<?x40xbf16>
  %e = tensor.empty(%m) : tensor<?xf32>
  %s = linalg.fill ins(%two : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  %u = moe.grouped_matmul %a, %la, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs}
      : tensor<?x24xbf16>, tensor<6x8x24xbf16>, tensor<6xi32>
      -> tensor<?x8xbf16>
  %du = moe.grouped_matmul %dr, %lbt, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs}
      : tensor<?x40xbf16>, tensor<6x8x40xbf16>, tensor<6xi32>
      -> tensor<?x8xbf16>
  %db = moe.grouped_weight_grad %dr, %u, %offsets
      : tensor<?x40xbf16>, tensor<?x8xbf16>, tensor<6xi32> -> tensor<6x40x8xf32>
  %dla = moe.grouped_weight_grad %du, %a, %offsets
      : tensor<?x8xbf16>, tensor<?x24xbf16>, tensor<6xi32> -> tensor<6x8x24xf32>
  return %dh, %db, %dla, %dw
      : tensor<?x48xbf16>, tensor<6x40x8xf32>, tensor<6x8x24xf32>, tensor<?x2xf32>
}
