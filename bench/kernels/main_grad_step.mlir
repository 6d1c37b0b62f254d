// The full fine-tuning layers of bench/main_grad_step.py (generated
// by `python3 bench/main_grad_step.py --emit-mlir`): layer_{key}
// and layer_{key}_mg, the same forward; moe-autodiff derives the
// second's backward with accumulate=2,3 (see the script).

// ---- qwen3: Qwen3-30B-A3B, E128 H2048 I768 k8 ----
func.func @layer_qwen3(%x: tensor<?x2048xbf16>,
    %gate_w: tensor<128x2048xbf16>, %w_gate_up: tensor<128x1536x2048xbf16>,
    %w_down: tensor<128x2048x768xbf16>) -> tensor<?x2048xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x2048xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x128xf32>)
      -> tensor<?x128xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x2048xbf16>, tensor<128x2048xbf16>)
      outs(%acc : tensor<?x128xf32>) -> tensor<?x128xf32>
  %weights, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x128xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x1536xbf16>
  %a = moe.swiglu %h : tensor<?x1536xbf16> -> tensor<?x768xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 8
      weights(%weights : tensor<?x8xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// ---- qwen3: Qwen3-30B-A3B, E128 H2048 I768 k8 ----
func.func @layer_qwen3_mg(%x: tensor<?x2048xbf16>,
    %gate_w: tensor<128x2048xbf16>, %w_gate_up: tensor<128x1536x2048xbf16>,
    %w_down: tensor<128x2048x768xbf16>) -> tensor<?x2048xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x2048xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x128xf32>)
      -> tensor<?x128xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x2048xbf16>, tensor<128x2048xbf16>)
      outs(%acc : tensor<?x128xf32>) -> tensor<?x128xf32>
  %weights, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x128xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x1536xbf16>
  %a = moe.swiglu %h : tensor<?x1536xbf16> -> tensor<?x768xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 8
      weights(%weights : tensor<?x8xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// ---- mixtral: Mixtral-8x7B, E8 H4096 I14336 k2 ----
func.func @layer_mixtral(%x: tensor<?x4096xbf16>,
    %gate_w: tensor<8x4096xbf16>, %w_gate_up: tensor<8x28672x4096xbf16>,
    %w_down: tensor<8x4096x14336xbf16>) -> tensor<?x4096xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x4096xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x8xf32>)
      -> tensor<?x8xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x4096xbf16>, tensor<8x4096xbf16>)
      outs(%acc : tensor<?x8xf32>) -> tensor<?x8xf32>
  %weights, %ids = moe.router_topk %logits k = 2 {order = #moe.order<topk_then_softmax>}
      : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x4096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x4096xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x4096xbf16>, tensor<8x28672x4096xbf16>, tensor<8xi32>
      -> tensor<?x28672xbf16>
  %a = moe.swiglu %h : tensor<?x28672xbf16> -> tensor<?x14336xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<8xi32>
      -> tensor<?x4096xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 2
      weights(%weights : tensor<?x2xf32>)
      : tensor<?x4096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}

// ---- mixtral: Mixtral-8x7B, E8 H4096 I14336 k2 ----
func.func @layer_mixtral_mg(%x: tensor<?x4096xbf16>,
    %gate_w: tensor<8x4096xbf16>, %w_gate_up: tensor<8x28672x4096xbf16>,
    %w_down: tensor<8x4096x14336xbf16>) -> tensor<?x4096xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x4096xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x8xf32>)
      -> tensor<?x8xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x4096xbf16>, tensor<8x4096xbf16>)
      outs(%acc : tensor<?x8xf32>) -> tensor<?x8xf32>
  %weights, %ids = moe.router_topk %logits k = 2 {order = #moe.order<topk_then_softmax>}
      : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x4096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x4096xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x4096xbf16>, tensor<8x28672x4096xbf16>, tensor<8xi32>
      -> tensor<?x28672xbf16>
  %a = moe.swiglu %h : tensor<?x28672xbf16> -> tensor<?x14336xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<8xi32>
      -> tensor<?x4096xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 2
      weights(%weights : tensor<?x2xf32>)
      : tensor<?x4096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}

// ---- dsv3: DeepSeek-V3, E256 H7168 I2048 k8 ----
func.func @layer_dsv3(%x: tensor<?x7168xbf16>,
    %gate_w: tensor<256x7168xbf16>, %w_gate_up: tensor<256x4096x7168xbf16>,
    %w_down: tensor<256x7168x2048xbf16>,
    %bias: tensor<256xf32>) -> tensor<?x7168xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x7168xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x256xf32>)
      -> tensor<?x256xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x7168xbf16>, tensor<256x7168xbf16>)
      outs(%acc : tensor<?x256xf32>) -> tensor<?x256xf32>
  %weights, %ids = moe.router_topk %logits bias(%bias : tensor<256xf32>) k = 8 {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 8 : i64, topk_groups = 4 : i64, scaling_factor = 2.5 : f32}
      : tensor<?x256xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 256
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<256xi32>
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x7168xbf16>, tensor<256x4096x7168xbf16>, tensor<256xi32>
      -> tensor<?x4096xbf16>
  %a = moe.swiglu %h : tensor<?x4096xbf16> -> tensor<?x2048xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x2048xbf16>, tensor<256x7168x2048xbf16>, tensor<256xi32>
      -> tensor<?x7168xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 8
      weights(%weights : tensor<?x8xf32>)
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}

// ---- dsv3: DeepSeek-V3, E256 H7168 I2048 k8 ----
func.func @layer_dsv3_mg(%x: tensor<?x7168xbf16>,
    %gate_w: tensor<256x7168xbf16>, %w_gate_up: tensor<256x4096x7168xbf16>,
    %w_down: tensor<256x7168x2048xbf16>,
    %bias: tensor<256xf32>) -> tensor<?x7168xbf16> {
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x7168xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x256xf32>)
      -> tensor<?x256xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x7168xbf16>, tensor<256x7168xbf16>)
      outs(%acc : tensor<?x256xf32>) -> tensor<?x256xf32>
  %weights, %ids = moe.router_topk %logits bias(%bias : tensor<256xf32>) k = 8 {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 8 : i64, topk_groups = 4 : i64, scaling_factor = 2.5 : f32}
      : tensor<?x256xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 256
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<256xi32>
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x7168xbf16>, tensor<256x4096x7168xbf16>, tensor<256xi32>
      -> tensor<?x4096xbf16>
  %a = moe.swiglu %h : tensor<?x4096xbf16> -> tensor<?x2048xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets {transpose_rhs}
      : tensor<?x2048xbf16>, tensor<256x7168x2048xbf16>, tensor<256xi32>
      -> tensor<?x7168xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = 8
      weights(%weights : tensor<?x8xf32>)
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}
