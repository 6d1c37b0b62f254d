// Grouped matmuls (bf16 in, f32 accumulation, bf16 out) at the expert shapes
// of five MoE models, for bench/grouped_gemm.py. Weights are in the
// nn.Linear layout [E, N, K] (`transpose_rhs`): w_gate_up [E, 2I, H] (gate
// rows, then up rows) and w_down [E, H, I]. Per model key:
//   gather_{key}(x [T, H], slots [R], offsets [E], w_gate_up [E, 2I, H])
//       -> [R, 2I]: grouped row r is x[slots[r] / k] (the permute fused
//       into the matmul); R = T*k slots sorted by expert, offsets the
//       cumulative group ends.
//   gate_up_swiglu_{key}(same inputs) -> [R, I]: the same product with
//       silu(gate) * up in the epilogue.
//   down_{key}(h [R, I], offsets [E], w_down [E, H, I]) -> [R, H].
// Inputs with T*k rows name their leading symbol R (`moe.sym`).
// dense_swiglu is a dense SwiGLU MLP (d = 4096, I = 3d = 12288) written as
// two grouped matmuls with one expert (offsets = [M]).
// Compile with
//   build/bin/moec compile bench/kernels/grouped_gemm.mlir -o .device/grouped_gemm.moecb --target sm_90a

// ---- mixtral: Mixtral-8x7B, E8 H4096 I14336 k2 ----
func.func @gather_mixtral(%x: tensor<?x4096xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                          %offsets: tensor<8xi32>, %w_gate_up: tensor<8x28672x4096xbf16>)
    -> tensor<?x28672xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x4096xbf16>, tensor<8x28672x4096xbf16>, tensor<8xi32>
      -> tensor<?x28672xbf16>
  return %y : tensor<?x28672xbf16>
}
func.func @gate_up_swiglu_mixtral(%x: tensor<?x4096xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                                  %offsets: tensor<8xi32>, %w_gate_up: tensor<8x28672x4096xbf16>)
    -> tensor<?x14336xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x4096xbf16>, tensor<8x28672x4096xbf16>, tensor<8xi32>
      -> tensor<?x14336xbf16>
  return %y : tensor<?x14336xbf16>
}
func.func @down_mixtral(%h: tensor<?x14336xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>,
                        %w_down: tensor<8x4096x14336xbf16>) -> tensor<?x4096xbf16> {
  %y = moe.grouped_matmul %h, %w_down, %offsets {transpose_rhs}
      : tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<8xi32>
      -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}

// ---- qwen3: Qwen3-30B-A3B, E128 H2048 I768 k8 ----
func.func @gather_qwen3(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                        %offsets: tensor<128xi32>, %w_gate_up: tensor<128x1536x2048xbf16>)
    -> tensor<?x1536xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x1536xbf16>
  return %y : tensor<?x1536xbf16>
}
func.func @gate_up_swiglu_qwen3(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                                %offsets: tensor<128xi32>, %w_gate_up: tensor<128x1536x2048xbf16>)
    -> tensor<?x768xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  return %y : tensor<?x768xbf16>
}
func.func @down_qwen3(%h: tensor<?x768xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>,
                      %w_down: tensor<128x2048x768xbf16>) -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %h, %w_down, %offsets {transpose_rhs}
      : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// ---- qwen35: Qwen3.5-35B-A3B, E256 H2048 I512 k8 ----
func.func @gather_qwen35(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                         %offsets: tensor<256xi32>, %w_gate_up: tensor<256x1024x2048xbf16>)
    -> tensor<?x1024xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<256x1024x2048xbf16>, tensor<256xi32>
      -> tensor<?x1024xbf16>
  return %y : tensor<?x1024xbf16>
}
func.func @gate_up_swiglu_qwen35(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                                 %offsets: tensor<256xi32>, %w_gate_up: tensor<256x1024x2048xbf16>)
    -> tensor<?x512xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x2048xbf16>, tensor<256x1024x2048xbf16>, tensor<256xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}
func.func @down_qwen35(%h: tensor<?x512xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
                       %w_down: tensor<256x2048x512xbf16>) -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %h, %w_down, %offsets {transpose_rhs}
      : tensor<?x512xbf16>, tensor<256x2048x512xbf16>, tensor<256xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// ---- olmoe: OLMoE-1B-7B, E64 H2048 I1024 k8 ----
func.func @gather_olmoe(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                        %offsets: tensor<64xi32>, %w_gate_up: tensor<64x2048x2048xbf16>)
    -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<64x2048x2048xbf16>, tensor<64xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
func.func @gate_up_swiglu_olmoe(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                                %offsets: tensor<64xi32>, %w_gate_up: tensor<64x2048x2048xbf16>)
    -> tensor<?x1024xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x2048xbf16>, tensor<64x2048x2048xbf16>, tensor<64xi32>
      -> tensor<?x1024xbf16>
  return %y : tensor<?x1024xbf16>
}
func.func @down_olmoe(%h: tensor<?x1024xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>,
                      %w_down: tensor<64x2048x1024xbf16>) -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %h, %w_down, %offsets {transpose_rhs}
      : tensor<?x1024xbf16>, tensor<64x2048x1024xbf16>, tensor<64xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// ---- dsv3: DeepSeek-V3, E256 H7168 I2048 k8 ----
func.func @gather_dsv3(%x: tensor<?x7168xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                       %offsets: tensor<256xi32>, %w_gate_up: tensor<256x4096x7168xbf16>)
    -> tensor<?x4096xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x7168xbf16>, tensor<256x4096x7168xbf16>, tensor<256xi32>
      -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}
func.func @gate_up_swiglu_dsv3(%x: tensor<?x7168xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                               %offsets: tensor<256xi32>, %w_gate_up: tensor<256x4096x7168xbf16>)
    -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %x, %w_gate_up, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x7168xbf16>, tensor<256x4096x7168xbf16>, tensor<256xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
func.func @down_dsv3(%h: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
                     %w_down: tensor<256x7168x2048xbf16>) -> tensor<?x7168xbf16> {
  %y = moe.grouped_matmul %h, %w_down, %offsets {transpose_rhs}
      : tensor<?x2048xbf16>, tensor<256x7168x2048xbf16>, tensor<256xi32>
      -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}

// ---- dense SwiGLU MLP as E = 1 grouped matmuls: M = B*S rows, d = 4096 ----
func.func @dense_swiglu(%x: tensor<?x4096xbf16> {moe.sym = "M"}, %offsets: tensor<1xi32>,
                        %w1: tensor<1x24576x4096xbf16>, %w2: tensor<1x4096x12288xbf16>)
    -> tensor<?x4096xbf16> {
  %h = moe.grouped_matmul %x, %w1, %offsets
      {transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x4096xbf16>, tensor<1x24576x4096xbf16>, tensor<1xi32>
      -> tensor<?x12288xbf16>
  %y = moe.grouped_matmul %h, %w2, %offsets {transpose_rhs}
      : tensor<?x12288xbf16>, tensor<1x4096x12288xbf16>, tensor<1xi32>
      -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}
