// Every lowered op and its variants at small sizes (E = 8 experts, K and N
// not multiples of the 16x16 tile). `moec run --entry NAME --sym T=N` checks
// one function against the float64 reference on the host backend; the same
// file compiled for sm_90a is checked on the H200 with moec-runner.
// T=1 and a T that fills no tile evenly, then the routing edge cases: every
// token's first choice one expert, and half the experts without tokens.
// RUN: moec run %s --entry route_sort_aligned --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_sort_aligned --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_grouped --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_grouped --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_k1 --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_k1 --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_all_experts --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_all_experts --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_unpermute --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_unpermute --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_bias_lora --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_bias_lora --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_weight_grad --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_weight_grad --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry swiglu_fwd_bwd --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry swiglu_fwd_bwd --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry moe_layer --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry moe_layer --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_sort_aligned --sym T=50 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_sort_aligned --sym T=50 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_unpermute --sym T=50 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry permute_unpermute --sym T=50 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_bias_lora --sym T=50 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_bias_lora --sym T=50 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry moe_layer --sym T=50 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry moe_layer --sym T=50 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_rowwise --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_rowwise --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_colwise --sym T=50 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry dequantize_nf4 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_fp8 --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry gmm_fp8 --sym T=37 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry quantize_blocks --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_block_weights --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry fp8_block_weights --sym T=37 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// Softmax routing, renormalized; sort with alignment 4.
func.func @route_sort_aligned(%logits: tensor<?x8xf32>)
    -> (tensor<?x2xf32>, tensor<?x2xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<8xi32>) {
  %w, %ids = moe.router_topk %logits k = 2 {renormalize}
      : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  return %w, %ids, %sorted, %slots, %offsets
      : tensor<?x2xf32>, tensor<?x2xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<8xi32>
}

// DeepSeek-V3 style: sigmoid scores, selection bias, group-limited top-k,
// scaling factor; k = 1 and k = E variants.
func.func @route_grouped(%logits: tensor<?x8xf32>, %bias: tensor<8xf32>)
    -> (tensor<?x3xf32>, tensor<?x3xi32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<8xf32>) k = 3
      {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 4,
       topk_groups = 2, scaling_factor = 2.5 : f32}
      : tensor<?x8xf32> -> tensor<?x3xf32>, tensor<?x3xi32>
  return %w, %ids : tensor<?x3xf32>, tensor<?x3xi32>
}
func.func @route_k1(%logits: tensor<?x8xbf16>) -> (tensor<?x1xf32>, tensor<?x1xi32>) {
  %w, %ids = moe.router_topk %logits k = 1
      : tensor<?x8xbf16> -> tensor<?x1xf32>, tensor<?x1xi32>
  return %w, %ids : tensor<?x1xf32>, tensor<?x1xi32>
}
func.func @route_all_experts(%logits: tensor<?x8xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>) {
  %w, %ids = moe.router_topk %logits k = 8 {order = #moe.order<topk_then_softmax>}
      : tensor<?x8xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  return %w, %ids : tensor<?x8xf32>, tensor<?x8xi32>
}

// permute with probabilities, then unpermute with weights (no fusion: the
// permuted rows are returned).
func.func @permute_unpermute(%x: tensor<?x40xbf16>, %ids: tensor<?x2xi32>,
                             %w: tensor<?x2xf32>)
    -> (tensor<?x40xbf16>, tensor<?xf32>, tensor<?x40xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows, %probs = moe.permute %x, %slots, %offsets k = 2
      probs(%w : tensor<?x2xf32> -> tensor<?xf32>)
      : tensor<?x40xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x40xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 2 weights(%w : tensor<?x2xf32>)
      : tensor<?x40xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x40xf32>
  return %rows, %probs, %y : tensor<?x40xbf16>, tensor<?xf32>, tensor<?x40xf32>
}

// Grouped matmul with bias and LoRA (rank 2), rhs [E, K, N].
func.func @gmm_bias_lora(%x: tensor<?x24xf32>, %ids: tensor<?x1xi32>,
                         %w: tensor<8x24x20xf32>, %b: tensor<8x20xf32>,
                         %la: tensor<16x24xf32>, %lb: tensor<20x16xf32>)
    -> tensor<?x20xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 1
      : tensor<?x24xf32>, tensor<?xi32>, tensor<8xi32> -> tensor<?x24xf32>
  %y = moe.grouped_matmul %rows, %w, %offsets bias(%b : tensor<8x20xf32>)
      lora(%la, %lb : tensor<16x24xf32>, tensor<20x16xf32>)
      {lora_scaling = 0.5 : f32}
      : tensor<?x24xf32>, tensor<8x24x20xf32>, tensor<8xi32> -> tensor<?x20xf32>
  return %y : tensor<?x20xf32>
}

// Weight gradient over groups, and swiglu / swiglu_grad standalone.
func.func @gmm_weight_grad(%x: tensor<?x24xbf16>, %dy: tensor<?x20xbf16>,
                           %ids: tensor<?x1xi32>) -> tensor<8x24x20xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %g = moe.grouped_weight_grad %x, %dy, %offsets
      : tensor<?x24xbf16>, tensor<?x20xbf16>, tensor<8xi32>
      -> tensor<8x24x20xf32>
  return %g : tensor<8x24x20xf32>
}
func.func @swiglu_fwd_bwd(%x: tensor<?x36xbf16>, %dy: tensor<?x18xbf16>)
    -> (tensor<?x18xbf16>, tensor<?x36xf32>) {
  %y = moe.swiglu %x {layout = #moe.layout<interleaved>}
      : tensor<?x36xbf16> -> tensor<?x18xbf16>
  %g = moe.swiglu_grad %x, %dy : tensor<?x36xbf16>, tensor<?x18xbf16>
      -> tensor<?x36xf32>
  return %y, %g : tensor<?x18xbf16>, tensor<?x36xf32>
}

// A whole MoE layer at small sizes (E8 H40 I20 k2): fused into a gathered
// gate_up + SwiGLU matmul and a scattered, weighted down projection.
func.func @moe_layer(%x: tensor<?x40xbf16>, %gate: tensor<8x40xbf16>,
                     %w1: tensor<8x40x40xbf16>, %w2: tensor<8x40x20xbf16>)
    -> tensor<?x40xbf16> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x40xbf16>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?x8xf32>) -> tensor<?x8xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate : tensor<?x40xbf16>, tensor<8x40xbf16>)
      outs(%acc : tensor<?x8xf32>) -> tensor<?x8xf32>
  %w, %ids = moe.router_topk %logits k = 2
      : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x40xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x40xbf16>
  %h = moe.grouped_matmul %rows, %w1, %offsets {transpose_rhs}
      : tensor<?x40xbf16>, tensor<8x40x40xbf16>, tensor<8xi32> -> tensor<?x40xbf16>
  %a = moe.swiglu %h : tensor<?x40xbf16> -> tensor<?x20xbf16>
  %d = moe.grouped_matmul %a, %w2, %offsets {transpose_rhs}
      : tensor<?x20xbf16>, tensor<8x40x20xbf16>, tensor<8xi32> -> tensor<?x40xbf16>
  %y = moe.unpermute %d, %slots, %offsets k = 2 weights(%w : tensor<?x2xf32>)
      : tensor<?x40xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x40xbf16>
  return %y : tensor<?x40xbf16>
}

// FP8 quantization: row-wise 1x128 groups (K = 200 leaves a partial group)
// with power-of-two scales; column-wise groups of 4 rows inside each expert
// group, and back.
func.func @quantize_rowwise(%x: tensor<?x200xbf16>)
    -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>) {
  %d, %s = moe.quantize %x group_size = 128 {pow2_scale}
      : tensor<?x200xbf16> -> tensor<?x200xf8E4M3FN>, tensor<?x2xf32>
  return %d, %s : tensor<?x200xf8E4M3FN>, tensor<?x2xf32>
}
func.func @quantize_colwise(%x: tensor<?x48xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x48xf8E5M2>, tensor<?x48xf32>, tensor<?x48xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x48xf32>, tensor<?xi32>, tensor<8xi32> -> tensor<?x48xf32>
  %d, %s = moe.quantize %rows offsets(%offsets : tensor<8xi32>) group_size = 4
      {axis = #moe.axis<colwise>}
      : tensor<?x48xf32> -> tensor<?x48xf8E5M2>, tensor<?x48xf32>
  %y = moe.dequantize %d, %s offsets(%offsets : tensor<8xi32>) group_size = 4
      {axis = #moe.axis<colwise>}
      : tensor<?x48xf8E5M2>, tensor<?x48xf32> -> tensor<?x48xf32>
  return %d, %s, %y : tensor<?x48xf8E5M2>, tensor<?x48xf32>, tensor<?x48xf32>
}

// NF4 expert weights: 3 of 4 experts, 16-element absmax blocks.
func.func @dequantize_nf4(%packed: tensor<4x6x8xui8>, %absmax: tensor<4x6xf32>,
                          %cb: tensor<16xf32>, %ids: tensor<3xi32>)
    -> tensor<3x6x16xbf16> {
  %w = moe.dequantize %packed, %absmax codebook(%cb : tensor<16xf32>)
      experts(%ids : tensor<3xi32>) group_size = 16
      : tensor<4x6x8xui8>, tensor<4x6xf32> -> tensor<3x6x16xbf16>
  return %w : tensor<3x6x16xbf16>
}

// FP8 (e4m3) gathered grouped matmul with 1x32 activation and 32x32 weight
// block scales (scale_group = 32; K = 72 and N = 40 leave partial blocks),
// rhs in the nn.Linear layout.
// Expert weights in 128x128 blocks (N = 264 and K = 136 leave partial
// blocks along both), as they are, transposed, and both layouts from one
// read; on GPUs the warp kernel (transposed and both: N a multiple of each
// thread's run of rows, 8 for bf16 and 16 for f32), on the host the scalar
// one.
func.func @quantize_blocks(%w: tensor<4x264x136xbf16>,
                           %v: tensor<3x272x136xf32>)
    -> (tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>,
        tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>,
        tensor<3x136x272xf8E4M3FN>, tensor<3x2x3xf32>,
        tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>,
        tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>,
        tensor<3x272x136xf8E5M2>, tensor<3x3x2xf32>,
        tensor<3x136x272xf8E5M2>, tensor<3x2x3xf32>) {
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>}
      : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>
  %qt, %st = moe.quantize %w group_size = 128
      {axis = #moe.axis<blocks>, transpose, pow2_scale}
      : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>
  %vt, %vs = moe.quantize %v group_size = 128
      {axis = #moe.axis<blocks>, transpose}
      : tensor<3x272x136xf32> -> tensor<3x136x272xf8E4M3FN>, tensor<3x2x3xf32>
  %bq, %bs, %bt, %bts = moe.quantize %w group_size = 128
      {axis = #moe.axis<blocks>}
      : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>,
        tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
  %cq, %cs, %ct, %cts = moe.quantize %v group_size = 128
      {axis = #moe.axis<blocks>, pow2_scale}
      : tensor<3x272x136xf32> -> tensor<3x272x136xf8E5M2>, tensor<3x3x2xf32>,
        tensor<3x136x272xf8E5M2>, tensor<3x2x3xf32>
  return %q, %s, %qt, %st, %vt, %vs, %bq, %bs, %bt, %bts, %cq, %cs, %ct, %cts
      : tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>,
        tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>,
        tensor<3x136x272xf8E4M3FN>, tensor<3x2x3xf32>,
        tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>,
        tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>,
        tensor<3x272x136xf8E5M2>, tensor<3x3x2xf32>,
        tensor<3x136x272xf8E5M2>, tensor<3x2x3xf32>
}

// The FP8 forward and input gradient from bf16 operands: 1x128 activation
// groups, the weights' 128x128 blocks as they are ([E, N, K], forward) and
// transposed ([E, K, N], read as the input gradient's [E, N', K'] weights).
func.func @fp8_block_weights(%x: tensor<?x136xbf16>, %dy: tensor<?x264xbf16>,
                             %ids: tensor<?x2xi32>,
                             %w: tensor<4x264x136xbf16>)
    -> (tensor<?x264xbf16>, tensor<?x136xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  %xq, %xs = moe.quantize %x group_size = 128
      : tensor<?x136xbf16> -> tensor<?x136xf8E4M3FN>, tensor<?x2xf32>
  %wq, %ws = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>}
      : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>
  %y = moe.grouped_matmul %xq, %wq, %offsets gather(%slots : tensor<?xi32>)
      scales(%xs, %ws : tensor<?x2xf32>, tensor<4x3x2xf32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x136xf8E4M3FN>, tensor<4x264x136xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x264xbf16>
  %dq, %ds = moe.quantize %dy group_size = 128
      : tensor<?x264xbf16> -> tensor<?x264xf8E4M3FN>, tensor<?x3xf32>
  %wt, %wts = moe.quantize %w group_size = 128
      {axis = #moe.axis<blocks>, transpose}
      : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
  %dx = moe.grouped_matmul %dq, %wt, %offsets gather(%slots : tensor<?xi32>)
      scales(%ds, %wts : tensor<?x3xf32>, tensor<4x2x3xf32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x264xf8E4M3FN>, tensor<4x136x264xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x136xbf16>
  return %y, %dx : tensor<?x264xbf16>, tensor<?x136xbf16>
}

func.func @gmm_fp8(%x: tensor<?x72xf8E4M3FN>, %sx: tensor<?x3xf32>,
                   %ids: tensor<?x2xi32>, %w: tensor<8x40x72xf8E4M3FN>,
                   %sw: tensor<8x2x3xf32>) -> tensor<?x40xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scales(%sx, %sw : tensor<?x3xf32>, tensor<8x2x3xf32>)
      {k = 2 : i64, transpose_rhs, scale_group = 32 : i64}
      : tensor<?x72xf8E4M3FN>, tensor<8x40x72xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x40xbf16>
  return %y : tensor<?x40xbf16>
}
