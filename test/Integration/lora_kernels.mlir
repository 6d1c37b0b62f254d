// The LoRA forms of the grouped matmul and their gradients on the host
// backend, each entry against the float64 reference (and on a GPU by
// scripts/gpu-correctness.sh): the forward term s·(x·A_eᵀ)·B_eᵀ (gathered
// by slot, [E, N, K] weights, SwiGLU and a combine fused), the input
// gradient's transposed term s·(dy·B_e)·A_e (`transpose_lora`), and
// moe.lora_grad (dA, dB; grouped and gathered rows). Edge cases: T=1 (most
// experts empty), one expert taking every token's first choice, half the
// experts without tokens, ranks 8 and 3 (not a multiple of 16) and 4 and
// 12 (padded to 8 and 16 for the wgmma kernels), K and N not multiples of
// 16, bf16 and f32.
// RUN: moec run %s --entry lora_gather_swiglu --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_gather_swiglu --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_gather_swiglu --sym T=40 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_scatter --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_scatter --sym T=37 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_input_grad --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_input_grad --sym T=37 --sym M=74 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_input_grad --sym T=40 --sym M=80 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_gathered --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_gathered --sym T=37 --sym M=74 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_gathered --sym T=40 --sym M=80 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_gathered --sym T=40 --sym M=80 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_grouped --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_grouped --sym T=37 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_chunks --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_chunks --sym T=29 --sym M=58 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_chunks --sym T=30 --sym M=60 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_long_rows --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_aligned --sym T=0 --sym M=12 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_aligned --sym T=9 --sym M=30 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_long_rows --sym T=37 --sym M=74 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_wgmma --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_wgmma --sym T=37 --sym M=74 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_wgmma_grouped --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_rank12_gather --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_rank12_gather --sym T=37 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_rank4_input_grad --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_rank4_input_grad --sym T=40 --sym M=80 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_rank12 --sym T=1 --sym M=2 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_grad_rank12 --sym T=37 --sym M=74 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_fp8 --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry lora_fp8 --sym T=37 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// The backward moe-autodiff derives for a LoRA layer (save=inputs, so the
// gradient function recomputes its forward), with respect to everything
// and, for LoRA fine-tuning, to the adapters and x only:
// RUN: moec-opt %s -moe-autodiff="func=lora_layer save=inputs" -o %t.all.mlir
// RUN: moec run %t.all.mlir --entry lora_layer_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.all.mlir --entry lora_layer_grad --sym T=29 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec-opt %s -moe-autodiff="func=lora_layer save=inputs wrt=0,4,5,6,7" -o %t.adapters.mlir
// RUN: moec run %t.adapters.mlir --entry lora_layer_grad --sym T=29 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %t.adapters.mlir --entry lora_layer_grad --sym T=29 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// gate_up with LoRA (r = 8) on token rows gathered by slot, [E, N, K]
// weights, SwiGLU in the epilogue; k = 2 of 6 experts, K = 40, N = 2 x 20.
func.func @lora_gather_swiglu(%x: tensor<?x40xbf16>, %ids: tensor<?x2xi32>,
                              %w: tensor<6x40x40xbf16>,
                              %la: tensor<48x40xbf16>, %lb: tensor<40x48xbf16>)
    -> tensor<?x20xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %h = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%la, %lb : tensor<48x40xbf16>, tensor<40x48xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 2.0 : f32,
       activation = #moe.activation<swiglu>}
      : tensor<?x40xbf16>, tensor<6x40x40xbf16>, tensor<6xi32>
      -> tensor<?x20xbf16>
  return %h : tensor<?x20xbf16>
}

// down with LoRA (r = 3) combined back to tokens with routing weights.
func.func @lora_scatter(%x: tensor<?x24xf32>, %ids: tensor<?x2xi32>,
                        %weights: tensor<?x2xf32>, %w: tensor<6x24x20xf32>,
                        %la: tensor<18x24xf32>, %lb: tensor<20x18xf32>)
    -> tensor<?x20xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x24xf32>, tensor<?xi32>, tensor<6xi32> -> tensor<?x24xf32>
  %y = moe.grouped_matmul %rows, %w, %offsets
      lora(%la, %lb : tensor<18x24xf32>, tensor<20x18xf32>)
      scatter(%slots : tensor<?xi32>)
      scatter_weights(%weights : tensor<?x2xf32>)
      {k = 2 : i64, lora_scaling = 0.5 : f32}
      : tensor<?x24xf32>, tensor<6x24x20xf32>, tensor<6xi32> -> tensor<?x20xf32>
  return %y : tensor<?x20xf32>
}

// The input gradient of a LoRA matmul with [E, K, N] weights (K = 40,
// N = 36): dx = dy · W_eᵀ + s · (dy · B_e) · A_e, adapters as the forward
// holds them (A [E*r, 40], B [36, E*r]).
func.func @lora_input_grad(%dy: tensor<?x36xbf16> {moe.sym = "M"},
                           %ids: tensor<?x2xi32>, %w: tensor<6x40x36xbf16>,
                           %la: tensor<48x40xbf16>, %lb: tensor<36x48xbf16>)
    -> tensor<?x40xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %dx = moe.grouped_matmul %dy, %w, %offsets
      lora(%la, %lb : tensor<48x40xbf16>, tensor<36x48xbf16>)
      {transpose_rhs, transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x36xbf16>, tensor<6x40x36xbf16>, tensor<6xi32>
      -> tensor<?x40xbf16>
  return %dx : tensor<?x40xbf16>
}

// dA and dB of a gathered gate_up (k = 2 of 6 experts, r = 8, K = 40,
// N = 36), f32 gradients of bf16 adapters.
func.func @lora_grad_gathered(%x: tensor<?x40xbf16>,
                              %dy: tensor<?x36xbf16> {moe.sym = "M"},
                              %ids: tensor<?x2xi32>,
                              %la: tensor<48x40xbf16>, %lb: tensor<36x48xbf16>)
    -> (tensor<48x40xf32>, tensor<36x48xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<48x40xbf16>, tensor<36x48xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x40xbf16>, tensor<?x36xbf16>, tensor<6xi32>
      -> tensor<48x40xf32>, tensor<36x48xf32>
  return %da, %db : tensor<48x40xf32>, tensor<36x48xf32>
}

// r = 32 (two chunks of 16 rank indices per thread) of 4 experts,
// gathered (k = 2), K = 44 and N = 20 (rows read 4 elements at a time),
// bf16 gradients.
func.func @lora_grad_chunks(%x: tensor<?x44xbf16>,
                            %dy: tensor<?x20xbf16> {moe.sym = "M"},
                            %ids: tensor<?x2xi32>,
                            %la: tensor<128x44xbf16>, %lb: tensor<20x128xbf16>)
    -> (tensor<128x44xbf16>, tensor<20x128xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<128x44xbf16>, tensor<20x128xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 0.5 : f32}
      : tensor<?x44xbf16>, tensor<?x20xbf16>, tensor<4xi32>
      -> tensor<128x44xbf16>, tensor<20x128xbf16>
  return %da, %db : tensor<128x44xbf16>, tensor<20x128xbf16>
}

// Long rows, split into slices whose partial sums a second kernel adds:
// K + N = 8248 gives the u / du kernel 2 slices (K = 1036 in slices of
// 520, N = 7212 in slices of 3608, both read 4 elements at a time), and 4
// experts give the dA and dB kernels 16 and 5 slices of each expert's rows.
// r = 8, gathered (k = 2), bf16 in, f32 adapter gradients.
func.func @lora_grad_long_rows(%x: tensor<?x1036xbf16>,
                               %dy: tensor<?x7212xbf16> {moe.sym = "M"},
                               %ids: tensor<?x2xi32>,
                               %la: tensor<32x1036xbf16>,
                               %lb: tensor<7212x32xbf16>)
    -> (tensor<32x1036xf32>, tensor<7212x32xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<32x1036xbf16>, tensor<7212x32xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x1036xbf16>, tensor<?x7212xbf16>, tensor<4xi32>
      -> tensor<32x1036xf32>, tensor<7212x32xf32>
  return %da, %db : tensor<32x1036xf32>, tensor<7212x32xf32>
}

// Rows of an aligned sort (align = 4 of 4 experts, k = 2: M = 2T + 12
// grouped rows, the padding slots -1): padding rows read no lhs row, which
// matters at T = 0, where the gathered lhs has none.
func.func @lora_grad_aligned(%x: tensor<?x40xbf16>,
                             %dy: tensor<?x36xbf16> {moe.sym = "M"},
                             %ids: tensor<?x2xi32>,
                             %la: tensor<32x40xbf16>, %lb: tensor<36x32xbf16>)
    -> (tensor<32x40xf32>, tensor<36x32xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4 align = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<32x40xbf16>, tensor<36x32xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x40xbf16>, tensor<?x36xbf16>, tensor<4xi32>
      -> tensor<32x40xf32>, tensor<36x32xf32>
  return %da, %db : tensor<32x40xf32>, tensor<36x32xf32>
}

// Shapes the sm_90a wgmma kernel takes once moe-decompose-lora-grad has
// made them four grouped matmuls (on the host the fused kernel runs):
// gathered (k = 2 of 8 experts, r = 16, K = 72, N = 40, s = 2, f32
// gradients) and grouped rows (4 experts, r = 8, K = 136, N = 24, s = 1,
// bf16 gradients; K past one 128-row tile of the weight gradient).
func.func @lora_grad_wgmma(%x: tensor<?x72xbf16>,
                           %dy: tensor<?x40xbf16> {moe.sym = "M"},
                           %ids: tensor<?x2xi32>,
                           %la: tensor<128x72xbf16>, %lb: tensor<40x128xbf16>)
    -> (tensor<128x72xf32>, tensor<40x128xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<128x72xbf16>, tensor<40x128xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x72xbf16>, tensor<?x40xbf16>, tensor<8xi32>
      -> tensor<128x72xf32>, tensor<40x128xf32>
  return %da, %db : tensor<128x72xf32>, tensor<40x128xf32>
}

func.func @lora_grad_wgmma_grouped(%x: tensor<?x136xbf16>,
                                   %dy: tensor<?x24xbf16>,
                                   %ids: tensor<?x1xi32>,
                                   %la: tensor<32x136xbf16>,
                                   %lb: tensor<24x32xbf16>)
    -> (tensor<32x136xbf16>, tensor<24x32xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<32x136xbf16>, tensor<24x32xbf16>)
      : tensor<?x136xbf16>, tensor<?x24xbf16>, tensor<4xi32>
      -> tensor<32x136xbf16>, tensor<24x32xbf16>
  return %da, %db : tensor<32x136xbf16>, tensor<24x32xbf16>
}

// Ranks that are not a multiple of 8 (moe-pad-lora-rank pads the bf16
// adapters; on sm_90a the padded forms run the wgmma kernels): r = 12 on
// gathered rows (k = 2 of 6 experts, K = 40, N = 24), the input gradient
// at r = 4 ([E, K, N] weights, transpose_lora), and the adapter gradients
// at r = 12 (k = 2 of 8 experts, K = 72, N = 40: four wgmma matmuls on
// sm_90a), each expert's padded rows and columns sliced off.
func.func @lora_rank12_gather(%x: tensor<?x40xbf16>, %ids: tensor<?x2xi32>,
                              %w: tensor<6x24x40xbf16>,
                              %la: tensor<72x40xbf16>, %lb: tensor<24x72xbf16>)
    -> tensor<?x24xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%la, %lb : tensor<72x40xbf16>, tensor<24x72xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x40xbf16>, tensor<6x24x40xbf16>, tensor<6xi32>
      -> tensor<?x24xbf16>
  return %y : tensor<?x24xbf16>
}

func.func @lora_rank4_input_grad(%dy: tensor<?x32xbf16> {moe.sym = "M"},
                                 %ids: tensor<?x2xi32>,
                                 %w: tensor<6x32x40xbf16>,
                                 %la: tensor<24x40xbf16>,
                                 %lb: tensor<32x24xbf16>)
    -> tensor<?x40xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %dx = moe.grouped_matmul %dy, %w, %offsets
      lora(%la, %lb : tensor<24x40xbf16>, tensor<32x24xbf16>)
      {transpose_lora, lora_scaling = 0.5 : f32}
      : tensor<?x32xbf16>, tensor<6x32x40xbf16>, tensor<6xi32>
      -> tensor<?x40xbf16>
  return %dx : tensor<?x40xbf16>
}

func.func @lora_grad_rank12(%x: tensor<?x72xbf16>,
                            %dy: tensor<?x40xbf16> {moe.sym = "M"},
                            %ids: tensor<?x2xi32>,
                            %la: tensor<96x72xbf16>, %lb: tensor<40x96xbf16>)
    -> (tensor<96x72xf32>, tensor<40x96xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<96x72xbf16>, tensor<40x96xbf16>)
      gather(%slots : tensor<?xi32>) {k = 2 : i64, lora_scaling = 2.0 : f32}
      : tensor<?x72xbf16>, tensor<?x40xbf16>, tensor<8xi32>
      -> tensor<96x72xf32>, tensor<40x96xbf16>
  return %da, %db : tensor<96x72xf32>, tensor<40x96xbf16>
}

// dA and dB over grouped rows (k = 1, r = 3), f32 throughout.
func.func @lora_grad_grouped(%x: tensor<?x24xf32>, %dy: tensor<?x20xf32>,
                             %ids: tensor<?x1xi32>,
                             %la: tensor<18x24xf32>, %lb: tensor<20x18xf32>)
    -> (tensor<18x24xf32>, tensor<20x18xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %da, %db = moe.lora_grad %x, %dy, %offsets
      lora(%la, %lb : tensor<18x24xf32>, tensor<20x18xf32>)
      {lora_scaling = 0.5 : f32}
      : tensor<?x24xf32>, tensor<?x20xf32>, tensor<6xi32>
      -> tensor<18x24xf32>, tensor<20x18xf32>
  return %da, %db : tensor<18x24xf32>, tensor<20x18xf32>
}

// A Qwen3-style block with LoRA (r = 4, s = 2) on both expert projections:
// router (softmax, top-2, renormalized), gate_up gathered by slot with
// nn.Linear weights and SwiGLU, down, weighted combine. E = 6, H = 40,
// I = 20.
func.func @lora_layer(%x: tensor<?x40xbf16>, %gate_w: tensor<6x40xbf16>,
                      %w1: tensor<6x40x40xbf16>, %w2: tensor<6x40x20xbf16>,
                      %a1: tensor<24x40xbf16>, %b1: tensor<40x24xbf16>,
                      %a2: tensor<24x20xbf16>, %b2: tensor<40x24xbf16>)
    -> tensor<?x40xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x40xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x6xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x6xf32>)
      -> tensor<?x6xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x40xbf16>, tensor<6x40xbf16>)
      outs(%acc : tensor<?x6xf32>) -> tensor<?x6xf32>
  %weights, %ids = moe.router_topk %logits k = 2 {renormalize}
      : tensor<?x6xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %h = moe.grouped_matmul %x, %w1, %offsets gather(%slots : tensor<?xi32>)
      lora(%a1, %b1 : tensor<24x40xbf16>, tensor<40x24xbf16>)
      {k = 2 : i64, transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x40xbf16>, tensor<6x40x40xbf16>, tensor<6xi32>
      -> tensor<?x40xbf16>
  %a = moe.swiglu %h : tensor<?x40xbf16> -> tensor<?x20xbf16>
  %down = moe.grouped_matmul %a, %w2, %offsets
      lora(%a2, %b2 : tensor<24x20xbf16>, tensor<40x24xbf16>)
      {transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x20xbf16>, tensor<6x40x20xbf16>, tensor<6xi32>
      -> tensor<?x40xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 2
      weights(%weights : tensor<?x2xf32>)
      : tensor<?x40xbf16>, tensor<?xi32>, tensor<6xi32> -> tensor<?x40xbf16>
  return %y : tensor<?x40xbf16>
}

// FP8 rows with block scales and a bf16 adapter (r = 2): the adapter reads
// the rows as their codes times their scales, as the matmul does.
func.func @lora_fp8(%ids: tensor<?x1xi32>, %x: tensor<?x32xf8E4M3FN>,
                    %w: tensor<4x16x32xf8E4M3FN>, %sx: tensor<?x2xf32>,
                    %sw: tensor<4x1x2xf32>, %a: tensor<8x32xbf16>,
                    %b: tensor<16x8xbf16>) -> tensor<?x16xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%a, %b : tensor<8x32xbf16>, tensor<16x8xbf16>)
      scales(%sx, %sw : tensor<?x2xf32>, tensor<4x1x2xf32>)
      {k = 1 : i64, transpose_rhs, scale_group = 16 : i64}
      : tensor<?x32xf8E4M3FN>, tensor<4x16x32xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}
