
func.func @qwen3_moe_layer(
    %x: tensor<?x2048xbf16>,                  // [T, H] hidden states
    %gate_w: tensor<128x2048xbf16>,           // [E, H] router (mlp.gate)
    %w_gate_up: tensor<128x1536x2048xbf16>,   // [E, 2I, H] gate_proj ; up_proj
    %w_down: tensor<128x2048x768xbf16>        // [E, H, I] down_proj
  ) -> tensor<?x2048xbf16> {
  // Router logits [T, E] = x · gate_wᵀ, accumulated in f32.
  %c0 = arith.constant 999999999999 : index
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

  // Top-8 experts per token and their renormalized softmax weights.
  %weights, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x128xf32> -> tensor<?x8xf32>, tensor<?x8xi32>

  // Slots sorted by expert; offsets are the group ends.
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>

  // Token rows gathered into expert groups [T*k, H].
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32>
      -> tensor<?x2048xbf16>

  // gate_up projection [T*k, 2I], then silu(gate) * up [T*k, I].
  %gate_up = moe.grouped_matmul %rows, %w_gate_up, %offsets {transpose_rhs}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x1536xbf16>
  %act = moe.swiglu %gate_up : tensor<?x1536xbf16> -> tensor<?x768xbf16>

  // down projection [T*k, H].
  %down = moe.grouped_matmul %act, %w_down, %offsets {transpose_rhs}
      : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>

  // Back to token order, each token's k rows summed with its weights.
  %y = moe.unpermute %down, %slots, %offsets k = 8
      weights(%weights : tensor<?x8xf32>)
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
