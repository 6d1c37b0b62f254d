// Written by bench/small_wgrad.py --emit-mlir: f32 weight gradients with
// few output tiles per expert.

func.func @router_grad_mixtral(%dl: tensor<?x8xbf16> {moe.sym = "T"},
    %x: tensor<?x4096xbf16> {moe.sym = "T"}) -> tensor<8x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4096xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<8x4096xf32>)
      -> tensor<8x4096xf32>
  %g = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x8xbf16>, tensor<?x4096xbf16>)
      outs(%acc : tensor<8x4096xf32>) -> tensor<8x4096xf32>
  return %g : tensor<8x4096xf32>
}
func.func @lora_db_mixtral(%dy: tensor<?x28672xbf16> {moe.sym = "R"},
    %u: tensor<?x16xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>)
    -> tensor<8x28672x16xf32> {
  %g = moe.grouped_weight_grad %dy, %u, %offsets
      : tensor<?x28672xbf16>, tensor<?x16xbf16>, tensor<8xi32>
      -> tensor<8x28672x16xf32>
  return %g : tensor<8x28672x16xf32>
}
func.func @lora_da_mixtral(%du: tensor<?x16xbf16> {moe.sym = "R"},
    %x: tensor<?x4096xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>)
    -> tensor<8x16x4096xf32> {
  %g = moe.grouped_weight_grad %du, %x, %offsets
      : tensor<?x16xbf16>, tensor<?x4096xbf16>, tensor<8xi32>
      -> tensor<8x16x4096xf32>
  return %g : tensor<8x16x4096xf32>
}

func.func @router_grad_qwen3(%dl: tensor<?x128xbf16> {moe.sym = "T"},
    %x: tensor<?x2048xbf16> {moe.sym = "T"}) -> tensor<128x2048xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x2048xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<128x2048xf32>)
      -> tensor<128x2048xf32>
  %g = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x128xbf16>, tensor<?x2048xbf16>)
      outs(%acc : tensor<128x2048xf32>) -> tensor<128x2048xf32>
  return %g : tensor<128x2048xf32>
}
func.func @lora_db_qwen3(%dy: tensor<?x1536xbf16> {moe.sym = "R"},
    %u: tensor<?x16xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>)
    -> tensor<128x1536x16xf32> {
  %g = moe.grouped_weight_grad %dy, %u, %offsets
      : tensor<?x1536xbf16>, tensor<?x16xbf16>, tensor<128xi32>
      -> tensor<128x1536x16xf32>
  return %g : tensor<128x1536x16xf32>
}
func.func @lora_da_qwen3(%du: tensor<?x16xbf16> {moe.sym = "R"},
    %x: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>)
    -> tensor<128x16x2048xf32> {
  %g = moe.grouped_weight_grad %du, %x, %offsets
      : tensor<?x16xbf16>, tensor<?x2048xbf16>, tensor<128xi32>
      -> tensor<128x16x2048xf32>
  return %g : tensor<128x16x2048xf32>
}

func.func @router_grad_olmoe(%dl: tensor<?x64xbf16> {moe.sym = "T"},
    %x: tensor<?x2048xbf16> {moe.sym = "T"}) -> tensor<64x2048xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x2048xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<64x2048xf32>)
      -> tensor<64x2048xf32>
  %g = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x64xbf16>, tensor<?x2048xbf16>)
      outs(%acc : tensor<64x2048xf32>) -> tensor<64x2048xf32>
  return %g : tensor<64x2048xf32>
}
func.func @lora_db_olmoe(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %u: tensor<?x16xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>)
    -> tensor<64x2048x16xf32> {
  %g = moe.grouped_weight_grad %dy, %u, %offsets
      : tensor<?x2048xbf16>, tensor<?x16xbf16>, tensor<64xi32>
      -> tensor<64x2048x16xf32>
  return %g : tensor<64x2048x16xf32>
}
func.func @lora_da_olmoe(%du: tensor<?x16xbf16> {moe.sym = "R"},
    %x: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>)
    -> tensor<64x16x2048xf32> {
  %g = moe.grouped_weight_grad %du, %x, %offsets
      : tensor<?x16xbf16>, tensor<?x2048xbf16>, tensor<64xi32>
      -> tensor<64x16x2048xf32>
  return %g : tensor<64x16x2048xf32>
}

func.func @router_grad_dsv3(%dl: tensor<?x256xbf16> {moe.sym = "T"},
    %x: tensor<?x7168xbf16> {moe.sym = "T"}) -> tensor<256x7168xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x7168xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<256x7168xf32>)
      -> tensor<256x7168xf32>
  %g = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x256xbf16>, tensor<?x7168xbf16>)
      outs(%acc : tensor<256x7168xf32>) -> tensor<256x7168xf32>
  return %g : tensor<256x7168xf32>
}
func.func @lora_db_dsv3(%dy: tensor<?x4096xbf16> {moe.sym = "R"},
    %u: tensor<?x16xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>)
    -> tensor<256x4096x16xf32> {
  %g = moe.grouped_weight_grad %dy, %u, %offsets
      : tensor<?x4096xbf16>, tensor<?x16xbf16>, tensor<256xi32>
      -> tensor<256x4096x16xf32>
  return %g : tensor<256x4096x16xf32>
}
func.func @lora_da_dsv3(%du: tensor<?x16xbf16> {moe.sym = "R"},
    %x: tensor<?x7168xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>)
    -> tensor<256x16x7168xf32> {
  %g = moe.grouped_weight_grad %du, %x, %offsets
      : tensor<?x16xbf16>, tensor<?x7168xbf16>, tensor<256xi32>
      -> tensor<256x16x7168xf32>
  return %g : tensor<256x16x7168xf32>
}
