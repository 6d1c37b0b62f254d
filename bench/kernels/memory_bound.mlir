// Bandwidth-bound kernels at Qwen3-30B-A3B (E128 H2048 I768 k8) and
// DeepSeek-V3 (E256 H7168 I2048 k8) shapes, for bench/memory_bound.py.
// Inputs with T·k rows name their leading symbol R (`moe.sym`); the others
// have T rows. Compile with
//   build/bin/moec compile bench/kernels/memory_bound.mlir -o .device/memory_bound.moecb --target sm_90a

// ---- qwen3: E128 H2048 I768 k8 ----
func.func @route_qwen3(%logits: tensor<?x128xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<128xi32>,
        tensor<?xi32>) {
  %w, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x128xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets, %positions = moe.sort_by_expert %ids experts = 128
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>, tensor<?xi32>
  return %w, %ids, %slots, %offsets, %positions
      : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<128xi32>, tensor<?xi32>
}

func.func @permute_qwen3(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                        %offsets: tensor<128xi32>, %w: tensor<?x8xf32>,
                        %positions: tensor<?xi32> {moe.sym = "R"})
    -> (tensor<?x2048xbf16>, tensor<?xf32>) {
  %rows, %probs = moe.permute %x, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>)
      probs(%w : tensor<?x8xf32> -> tensor<?xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %rows, %probs : tensor<?x2048xbf16>, tensor<?xf32>
}
func.func @unpermute_qwen3(%rows: tensor<?x2048xbf16> {moe.sym = "R"}, %slots: tensor<?xi32> {moe.sym = "R"},
                          %offsets: tensor<128xi32>, %w: tensor<?x8xf32>,
                        %positions: tensor<?xi32> {moe.sym = "R"})
    -> tensor<?x2048xbf16> {
  %y = moe.unpermute %rows, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>) weights(%w : tensor<?x8xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
// The backward of permute and unpermute. %w only gives the token count T
// to permute_grad, whose operands are all grouped rows (a layer's backward
// has T-sized arguments anyway).
func.func @permute_grad_qwen3(%drows: tensor<?x2048xbf16> {moe.sym = "R"},
                            %slots: tensor<?xi32> {moe.sym = "R"},
                            %offsets: tensor<128xi32>,
                            %dprobs: tensor<?xf32> {moe.sym = "R"},
                            %w: tensor<?x8xf32>,
                            %positions: tensor<?xi32> {moe.sym = "R"})
    -> (tensor<?x2048xbf16>, tensor<?x8xf32>) {
  %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>)
      probs(%dprobs : tensor<?xf32> -> tensor<?x8xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %dx, %dw : tensor<?x2048xbf16>, tensor<?x8xf32>
}
func.func @unpermute_grad_qwen3(%dy: tensor<?x2048xbf16>,
                              %slots: tensor<?xi32> {moe.sym = "R"},
                              %offsets: tensor<128xi32>, %w: tensor<?x8xf32>,
                              %positions: tensor<?xi32> {moe.sym = "R"},
                              %rows: tensor<?x2048xbf16> {moe.sym = "R"})
    -> (tensor<?x2048xbf16>, tensor<?x8xf32>) {
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>)
      weights(%w, %rows : tensor<?x8xf32>, tensor<?x2048xbf16> -> tensor<?x8xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %drows, %dw : tensor<?x2048xbf16>, tensor<?x8xf32>
}
func.func @quantize_row_qwen3(%x: tensor<?x2048xbf16>)
    -> (tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>) {
  %d, %s = moe.quantize %x group_size = 128
      : tensor<?x2048xbf16> -> tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>
  return %d, %s : tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>
}
func.func @quantize_col_qwen3(%x: tensor<?x2048xbf16>, %offsets: tensor<128xi32>)
    -> (tensor<?x2048xf8E4M3FN>, tensor<?x2048xf32>) {
  %d, %s = moe.quantize %x offsets(%offsets : tensor<128xi32>) group_size = 128
      {axis = #moe.axis<colwise>}
      : tensor<?x2048xbf16> -> tensor<?x2048xf8E4M3FN>, tensor<?x2048xf32>
  return %d, %s : tensor<?x2048xf8E4M3FN>, tensor<?x2048xf32>
}
// The FP8 weight gradient's operand layout: transposed, each expert
// from a 128-row block boundary.
func.func @quantize_colt_qwen3(%x: tensor<?x2048xbf16>, %offsets: tensor<128xi32>)
    -> (tensor<2048x?xf8E4M3FN>, tensor<?x2048xf32>) {
  %d, %s = moe.quantize %x offsets(%offsets : tensor<128xi32>) group_size = 128
      {axis = #moe.axis<colwise>, transpose}
      : tensor<?x2048xbf16> -> tensor<2048x?xf8E4M3FN>, tensor<?x2048xf32>
  return %d, %s : tensor<2048x?xf8E4M3FN>, tensor<?x2048xf32>
}
func.func @dequantize_row_qwen3(%d: tensor<?x2048xf8E4M3FN>, %s: tensor<?x16xf32>)
    -> tensor<?x2048xbf16> {
  %y = moe.dequantize %d, %s group_size = 128
      : tensor<?x2048xf8E4M3FN>, tensor<?x16xf32> -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
func.func @swiglu_qwen3(%x: tensor<?x1536xbf16>) -> tensor<?x768xbf16> {
  %y = moe.swiglu %x : tensor<?x1536xbf16> -> tensor<?x768xbf16>
  return %y : tensor<?x768xbf16>
}
func.func @swiglu_grad_qwen3(%x: tensor<?x1536xbf16>, %dy: tensor<?x768xbf16>)
    -> tensor<?x1536xbf16> {
  %g = moe.swiglu_grad %x, %dy : tensor<?x1536xbf16>, tensor<?x768xbf16>
      -> tensor<?x1536xbf16>
  return %g : tensor<?x1536xbf16>
}

// ---- dsv3: E256 H7168 I2048 k8 ----
func.func @route_dsv3(%logits: tensor<?x256xf32>, %bias: tensor<256xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<256xi32>,
        tensor<?xi32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<256xf32>) k = 8
      {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 8,
       topk_groups = 4, scaling_factor = 2.5 : f32}
      : tensor<?x256xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets, %positions = moe.sort_by_expert %ids experts = 256
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<256xi32>, tensor<?xi32>
  return %w, %ids, %slots, %offsets, %positions
      : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<256xi32>, tensor<?xi32>
}

func.func @permute_dsv3(%x: tensor<?x7168xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                        %offsets: tensor<256xi32>, %w: tensor<?x8xf32>,
                        %positions: tensor<?xi32> {moe.sym = "R"})
    -> (tensor<?x7168xbf16>, tensor<?xf32>) {
  %rows, %probs = moe.permute %x, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>)
      probs(%w : tensor<?x8xf32> -> tensor<?xf32>)
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  return %rows, %probs : tensor<?x7168xbf16>, tensor<?xf32>
}
func.func @unpermute_dsv3(%rows: tensor<?x7168xbf16> {moe.sym = "R"}, %slots: tensor<?xi32> {moe.sym = "R"},
                          %offsets: tensor<256xi32>, %w: tensor<?x8xf32>,
                        %positions: tensor<?xi32> {moe.sym = "R"})
    -> tensor<?x7168xbf16> {
  %y = moe.unpermute %rows, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>) weights(%w : tensor<?x8xf32>)
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}
// The backward of permute and unpermute. %w only gives the token count T
// to permute_grad, whose operands are all grouped rows (a layer's backward
// has T-sized arguments anyway).
func.func @permute_grad_dsv3(%drows: tensor<?x7168xbf16> {moe.sym = "R"},
                            %slots: tensor<?xi32> {moe.sym = "R"},
                            %offsets: tensor<256xi32>,
                            %dprobs: tensor<?xf32> {moe.sym = "R"},
                            %w: tensor<?x8xf32>,
                            %positions: tensor<?xi32> {moe.sym = "R"})
    -> (tensor<?x7168xbf16>, tensor<?x8xf32>) {
  %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>)
      probs(%dprobs : tensor<?xf32> -> tensor<?x8xf32>)
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  return %dx, %dw : tensor<?x7168xbf16>, tensor<?x8xf32>
}
func.func @unpermute_grad_dsv3(%dy: tensor<?x7168xbf16>,
                              %slots: tensor<?xi32> {moe.sym = "R"},
                              %offsets: tensor<256xi32>, %w: tensor<?x8xf32>,
                              %positions: tensor<?xi32> {moe.sym = "R"},
                              %rows: tensor<?x7168xbf16> {moe.sym = "R"})
    -> (tensor<?x7168xbf16>, tensor<?x8xf32>) {
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8 positions(%positions : tensor<?xi32>)
      weights(%w, %rows : tensor<?x8xf32>, tensor<?x7168xbf16> -> tensor<?x8xf32>)
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  return %drows, %dw : tensor<?x7168xbf16>, tensor<?x8xf32>
}
func.func @quantize_row_dsv3(%x: tensor<?x7168xbf16>)
    -> (tensor<?x7168xf8E4M3FN>, tensor<?x56xf32>) {
  %d, %s = moe.quantize %x group_size = 128
      : tensor<?x7168xbf16> -> tensor<?x7168xf8E4M3FN>, tensor<?x56xf32>
  return %d, %s : tensor<?x7168xf8E4M3FN>, tensor<?x56xf32>
}
func.func @quantize_col_dsv3(%x: tensor<?x7168xbf16>, %offsets: tensor<256xi32>)
    -> (tensor<?x7168xf8E4M3FN>, tensor<?x7168xf32>) {
  %d, %s = moe.quantize %x offsets(%offsets : tensor<256xi32>) group_size = 128
      {axis = #moe.axis<colwise>}
      : tensor<?x7168xbf16> -> tensor<?x7168xf8E4M3FN>, tensor<?x7168xf32>
  return %d, %s : tensor<?x7168xf8E4M3FN>, tensor<?x7168xf32>
}
// The FP8 weight gradient's operand layout: transposed, each expert
// from a 128-row block boundary.
func.func @quantize_colt_dsv3(%x: tensor<?x7168xbf16>, %offsets: tensor<256xi32>)
    -> (tensor<7168x?xf8E4M3FN>, tensor<?x7168xf32>) {
  %d, %s = moe.quantize %x offsets(%offsets : tensor<256xi32>) group_size = 128
      {axis = #moe.axis<colwise>, transpose}
      : tensor<?x7168xbf16> -> tensor<7168x?xf8E4M3FN>, tensor<?x7168xf32>
  return %d, %s : tensor<7168x?xf8E4M3FN>, tensor<?x7168xf32>
}
func.func @dequantize_row_dsv3(%d: tensor<?x7168xf8E4M3FN>, %s: tensor<?x56xf32>)
    -> tensor<?x7168xbf16> {
  %y = moe.dequantize %d, %s group_size = 128
      : tensor<?x7168xf8E4M3FN>, tensor<?x56xf32> -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}
func.func @swiglu_dsv3(%x: tensor<?x4096xbf16>) -> tensor<?x2048xbf16> {
  %y = moe.swiglu %x : tensor<?x4096xbf16> -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
func.func @swiglu_grad_dsv3(%x: tensor<?x4096xbf16>, %dy: tensor<?x2048xbf16>)
    -> tensor<?x4096xbf16> {
  %g = moe.swiglu_grad %x, %dy : tensor<?x4096xbf16>, tensor<?x2048xbf16>
      -> tensor<?x4096xbf16>
  return %g : tensor<?x4096xbf16>
}

func.func @nf4_qwen3(%packed: tensor<128x1536x1024xui8>,
                    %absmax: tensor<128x49152xf32>, %cb: tensor<16xf32>,
                    %ids: tensor<64xi32>) -> tensor<64x1536x2048xbf16> {
  %w = moe.dequantize %packed, %absmax codebook(%cb : tensor<16xf32>)
      experts(%ids : tensor<64xi32>) group_size = 64
      : tensor<128x1536x1024xui8>, tensor<128x49152xf32> -> tensor<64x1536x2048xbf16>
  return %w : tensor<64x1536x2048xbf16>
}

func.func @nf4_dsv3(%packed: tensor<256x4096x3584xui8>,
                    %absmax: tensor<256x458752xf32>, %cb: tensor<16xf32>,
                    %ids: tensor<16xi32>) -> tensor<16x4096x7168xbf16> {
  %w = moe.dequantize %packed, %absmax codebook(%cb : tensor<16xf32>)
      experts(%ids : tensor<16xi32>) group_size = 64
      : tensor<256x4096x3584xui8>, tensor<256x458752xf32> -> tensor<16x4096x7168xbf16>
  return %w : tensor<16x4096x7168xbf16>
}
