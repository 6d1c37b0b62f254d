// The input gradients (dX) of the grouped matmuls of an MoE layer's
// backward (bf16 in, f32 accumulation, bf16 out) at the expert shapes of
// five MoE models, for bench/training_kernels.py. The forward weights are
// in the nn.Linear layout [E, N, K], so dX = dY · W_e reads them as
// rhs [E, K, N] (no `transpose_rhs`). Per model key:
//   dx_gate_up_{key}(dg [R, 2I], offsets [E], w_gate_up [E, 2I, H])
//       -> [R, H]: the gradient of gate_up's grouped input rows;
//   dx_down_{key}(dy [R, H], offsets [E], w_down [E, H, I]) -> [R, I];
//   dw_gate_up_{key}(x [R, H], dg [R, 2I], offsets [E]) -> [E, H, 2I]: the
//       weight gradient (moe.grouped_weight_grad) of gate_up, in the [E, K, N]
//       layout torch._grouped_mm(x.t(), dg, offs) gives, bf16;
//   dw_down_{key}(h [R, I], dy [R, H], offsets [E]) -> [E, I, H].
// R = T*k grouped rows (`moe.sym`), offsets the cumulative group ends.
// Compile with
//   build/bin/moec compile bench/kernels/training_kernels.mlir -o .device/training_kernels.moecb --target sm_90a

// ---- mixtral: Mixtral-8x7B, E8 H4096 I14336 k2 ----
func.func @dx_gate_up_mixtral(%dg: tensor<?x28672xbf16> {moe.sym = "R"},
    %offsets: tensor<8xi32>, %w_gate_up: tensor<8x28672x4096xbf16>)
    -> tensor<?x4096xbf16> {
  %dx = moe.grouped_matmul %dg, %w_gate_up, %offsets
      : tensor<?x28672xbf16>, tensor<8x28672x4096xbf16>, tensor<8xi32>
      -> tensor<?x4096xbf16>
  return %dx : tensor<?x4096xbf16>
}
func.func @dx_down_mixtral(%dy: tensor<?x4096xbf16> {moe.sym = "R"},
    %offsets: tensor<8xi32>, %w_down: tensor<8x4096x14336xbf16>)
    -> tensor<?x14336xbf16> {
  %dh = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x4096xbf16>, tensor<8x4096x14336xbf16>, tensor<8xi32>
      -> tensor<?x14336xbf16>
  return %dh : tensor<?x14336xbf16>
}
// ---- qwen3: Qwen3-30B-A3B, E128 H2048 I768 k8 ----
func.func @dx_gate_up_qwen3(%dg: tensor<?x1536xbf16> {moe.sym = "R"},
    %offsets: tensor<128xi32>, %w_gate_up: tensor<128x1536x2048xbf16>)
    -> tensor<?x2048xbf16> {
  %dx = moe.grouped_matmul %dg, %w_gate_up, %offsets
      : tensor<?x1536xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  return %dx : tensor<?x2048xbf16>
}
func.func @dx_down_qwen3(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<128xi32>, %w_down: tensor<128x2048x768xbf16>)
    -> tensor<?x768xbf16> {
  %dh = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  return %dh : tensor<?x768xbf16>
}
// ---- qwen35: Qwen3.5-35B-A3B, E256 H2048 I512 k8 ----
func.func @dx_gate_up_qwen35(%dg: tensor<?x1024xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_gate_up: tensor<256x1024x2048xbf16>)
    -> tensor<?x2048xbf16> {
  %dx = moe.grouped_matmul %dg, %w_gate_up, %offsets
      : tensor<?x1024xbf16>, tensor<256x1024x2048xbf16>, tensor<256xi32>
      -> tensor<?x2048xbf16>
  return %dx : tensor<?x2048xbf16>
}
func.func @dx_down_qwen35(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_down: tensor<256x2048x512xbf16>)
    -> tensor<?x512xbf16> {
  %dh = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<256x2048x512xbf16>, tensor<256xi32>
      -> tensor<?x512xbf16>
  return %dh : tensor<?x512xbf16>
}
// ---- olmoe: OLMoE-1B-7B, E64 H2048 I1024 k8 ----
func.func @dx_gate_up_olmoe(%dg: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<64xi32>, %w_gate_up: tensor<64x2048x2048xbf16>)
    -> tensor<?x2048xbf16> {
  %dx = moe.grouped_matmul %dg, %w_gate_up, %offsets
      : tensor<?x2048xbf16>, tensor<64x2048x2048xbf16>, tensor<64xi32>
      -> tensor<?x2048xbf16>
  return %dx : tensor<?x2048xbf16>
}
func.func @dx_down_olmoe(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<64xi32>, %w_down: tensor<64x2048x1024xbf16>)
    -> tensor<?x1024xbf16> {
  %dh = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<64x2048x1024xbf16>, tensor<64xi32>
      -> tensor<?x1024xbf16>
  return %dh : tensor<?x1024xbf16>
}
// ---- dsv3: DeepSeek-V3, E256 H7168 I2048 k8 ----
func.func @dx_gate_up_dsv3(%dg: tensor<?x4096xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_gate_up: tensor<256x4096x7168xbf16>)
    -> tensor<?x7168xbf16> {
  %dx = moe.grouped_matmul %dg, %w_gate_up, %offsets
      : tensor<?x4096xbf16>, tensor<256x4096x7168xbf16>, tensor<256xi32>
      -> tensor<?x7168xbf16>
  return %dx : tensor<?x7168xbf16>
}
func.func @dx_down_dsv3(%dy: tensor<?x7168xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_down: tensor<256x7168x2048xbf16>)
    -> tensor<?x2048xbf16> {
  %dh = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x7168xbf16>, tensor<256x7168x2048xbf16>, tensor<256xi32>
      -> tensor<?x2048xbf16>
  return %dh : tensor<?x2048xbf16>
}

func.func @dw_gate_up_mixtral(%x: tensor<?x4096xbf16> {moe.sym = "R"},
    %dg: tensor<?x28672xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>)
    -> tensor<8x4096x28672xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets
      : tensor<?x4096xbf16>, tensor<?x28672xbf16>, tensor<8xi32>
      -> tensor<8x4096x28672xbf16>
  return %dw : tensor<8x4096x28672xbf16>
}
func.func @dw_down_mixtral(%h: tensor<?x14336xbf16> {moe.sym = "R"},
    %dy: tensor<?x4096xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>)
    -> tensor<8x14336x4096xbf16> {
  %dw = moe.grouped_weight_grad %h, %dy, %offsets
      : tensor<?x14336xbf16>, tensor<?x4096xbf16>, tensor<8xi32>
      -> tensor<8x14336x4096xbf16>
  return %dw : tensor<8x14336x4096xbf16>
}
func.func @dw_gate_up_qwen3(%x: tensor<?x2048xbf16> {moe.sym = "R"},
    %dg: tensor<?x1536xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>)
    -> tensor<128x2048x1536xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets
      : tensor<?x2048xbf16>, tensor<?x1536xbf16>, tensor<128xi32>
      -> tensor<128x2048x1536xbf16>
  return %dw : tensor<128x2048x1536xbf16>
}
func.func @dw_down_qwen3(%h: tensor<?x768xbf16> {moe.sym = "R"},
    %dy: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>)
    -> tensor<128x768x2048xbf16> {
  %dw = moe.grouped_weight_grad %h, %dy, %offsets
      : tensor<?x768xbf16>, tensor<?x2048xbf16>, tensor<128xi32>
      -> tensor<128x768x2048xbf16>
  return %dw : tensor<128x768x2048xbf16>
}
func.func @dw_gate_up_qwen35(%x: tensor<?x2048xbf16> {moe.sym = "R"},
    %dg: tensor<?x1024xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>)
    -> tensor<256x2048x1024xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets
      : tensor<?x2048xbf16>, tensor<?x1024xbf16>, tensor<256xi32>
      -> tensor<256x2048x1024xbf16>
  return %dw : tensor<256x2048x1024xbf16>
}
func.func @dw_down_qwen35(%h: tensor<?x512xbf16> {moe.sym = "R"},
    %dy: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>)
    -> tensor<256x512x2048xbf16> {
  %dw = moe.grouped_weight_grad %h, %dy, %offsets
      : tensor<?x512xbf16>, tensor<?x2048xbf16>, tensor<256xi32>
      -> tensor<256x512x2048xbf16>
  return %dw : tensor<256x512x2048xbf16>
}
func.func @dw_gate_up_olmoe(%x: tensor<?x2048xbf16> {moe.sym = "R"},
    %dg: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>)
    -> tensor<64x2048x2048xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets
      : tensor<?x2048xbf16>, tensor<?x2048xbf16>, tensor<64xi32>
      -> tensor<64x2048x2048xbf16>
  return %dw : tensor<64x2048x2048xbf16>
}
func.func @dw_down_olmoe(%h: tensor<?x1024xbf16> {moe.sym = "R"},
    %dy: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>)
    -> tensor<64x1024x2048xbf16> {
  %dw = moe.grouped_weight_grad %h, %dy, %offsets
      : tensor<?x1024xbf16>, tensor<?x2048xbf16>, tensor<64xi32>
      -> tensor<64x1024x2048xbf16>
  return %dw : tensor<64x1024x2048xbf16>
}
func.func @dw_gate_up_dsv3(%x: tensor<?x7168xbf16> {moe.sym = "R"},
    %dg: tensor<?x4096xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>)
    -> tensor<256x7168x4096xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets
      : tensor<?x7168xbf16>, tensor<?x4096xbf16>, tensor<256xi32>
      -> tensor<256x7168x4096xbf16>
  return %dw : tensor<256x7168x4096xbf16>
}
func.func @dw_down_dsv3(%h: tensor<?x2048xbf16> {moe.sym = "R"},
    %dy: tensor<?x7168xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>)
    -> tensor<256x2048x7168xbf16> {
  %dw = moe.grouped_weight_grad %h, %dy, %offsets
      : tensor<?x2048xbf16>, tensor<?x7168xbf16>, tensor<256xi32>
      -> tensor<256x2048x7168xbf16>
  return %dw : tensor<256x2048x7168xbf16>
}

// ---- The down projection's dX into SwiGLU's gradient ----
// dx_down_swiglu_{key}(dy [R, H], offsets [E], w_down [E, H, I],
//     h [R, 2I]) -> [R, 2I]: dA = dy · W_e, then swiglu_grad(h, dA), the
//     gradient of the saved gate_up output h. moe-fuse-epilogue folds the
//     two into one matmul (activation = swiglu_grad), so dA is never
//     written;
// dx_down_swiglu_unfused_{key}: the same two ops, with dA also returned so
//     that they stay two kernels (the backward before the fusion).
func.func @dx_down_swiglu_mixtral(%dy: tensor<?x4096xbf16> {moe.sym = "R"},
    %offsets: tensor<8xi32>, %w_down: tensor<8x4096x14336xbf16>,
    %h: tensor<?x28672xbf16> {moe.sym = "R"}) -> tensor<?x28672xbf16> {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x4096xbf16>, tensor<8x4096x14336xbf16>, tensor<8xi32>
      -> tensor<?x14336xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x28672xbf16>, tensor<?x14336xbf16> -> tensor<?x28672xbf16>
  return %dh : tensor<?x28672xbf16>
}
func.func @dx_down_swiglu_unfused_mixtral(%dy: tensor<?x4096xbf16> {moe.sym = "R"},
    %offsets: tensor<8xi32>, %w_down: tensor<8x4096x14336xbf16>,
    %h: tensor<?x28672xbf16> {moe.sym = "R"})
    -> (tensor<?x28672xbf16>, tensor<?x14336xbf16>) {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x4096xbf16>, tensor<8x4096x14336xbf16>, tensor<8xi32>
      -> tensor<?x14336xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x28672xbf16>, tensor<?x14336xbf16> -> tensor<?x28672xbf16>
  return %dh, %da : tensor<?x28672xbf16>, tensor<?x14336xbf16>
}
func.func @dx_down_swiglu_qwen3(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<128xi32>, %w_down: tensor<128x2048x768xbf16>,
    %h: tensor<?x1536xbf16> {moe.sym = "R"}) -> tensor<?x1536xbf16> {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x1536xbf16>, tensor<?x768xbf16> -> tensor<?x1536xbf16>
  return %dh : tensor<?x1536xbf16>
}
func.func @dx_down_swiglu_unfused_qwen3(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<128xi32>, %w_down: tensor<128x2048x768xbf16>,
    %h: tensor<?x1536xbf16> {moe.sym = "R"})
    -> (tensor<?x1536xbf16>, tensor<?x768xbf16>) {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x1536xbf16>, tensor<?x768xbf16> -> tensor<?x1536xbf16>
  return %dh, %da : tensor<?x1536xbf16>, tensor<?x768xbf16>
}
func.func @dx_down_swiglu_qwen35(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_down: tensor<256x2048x512xbf16>,
    %h: tensor<?x1024xbf16> {moe.sym = "R"}) -> tensor<?x1024xbf16> {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<256x2048x512xbf16>, tensor<256xi32>
      -> tensor<?x512xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x1024xbf16>, tensor<?x512xbf16> -> tensor<?x1024xbf16>
  return %dh : tensor<?x1024xbf16>
}
func.func @dx_down_swiglu_unfused_qwen35(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_down: tensor<256x2048x512xbf16>,
    %h: tensor<?x1024xbf16> {moe.sym = "R"})
    -> (tensor<?x1024xbf16>, tensor<?x512xbf16>) {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<256x2048x512xbf16>, tensor<256xi32>
      -> tensor<?x512xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x1024xbf16>, tensor<?x512xbf16> -> tensor<?x1024xbf16>
  return %dh, %da : tensor<?x1024xbf16>, tensor<?x512xbf16>
}
func.func @dx_down_swiglu_olmoe(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<64xi32>, %w_down: tensor<64x2048x1024xbf16>,
    %h: tensor<?x2048xbf16> {moe.sym = "R"}) -> tensor<?x2048xbf16> {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<64x2048x1024xbf16>, tensor<64xi32>
      -> tensor<?x1024xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x2048xbf16>, tensor<?x1024xbf16> -> tensor<?x2048xbf16>
  return %dh : tensor<?x2048xbf16>
}
func.func @dx_down_swiglu_unfused_olmoe(%dy: tensor<?x2048xbf16> {moe.sym = "R"},
    %offsets: tensor<64xi32>, %w_down: tensor<64x2048x1024xbf16>,
    %h: tensor<?x2048xbf16> {moe.sym = "R"})
    -> (tensor<?x2048xbf16>, tensor<?x1024xbf16>) {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x2048xbf16>, tensor<64x2048x1024xbf16>, tensor<64xi32>
      -> tensor<?x1024xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x2048xbf16>, tensor<?x1024xbf16> -> tensor<?x2048xbf16>
  return %dh, %da : tensor<?x2048xbf16>, tensor<?x1024xbf16>
}
func.func @dx_down_swiglu_dsv3(%dy: tensor<?x7168xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_down: tensor<256x7168x2048xbf16>,
    %h: tensor<?x4096xbf16> {moe.sym = "R"}) -> tensor<?x4096xbf16> {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x7168xbf16>, tensor<256x7168x2048xbf16>, tensor<256xi32>
      -> tensor<?x2048xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x4096xbf16>, tensor<?x2048xbf16> -> tensor<?x4096xbf16>
  return %dh : tensor<?x4096xbf16>
}
func.func @dx_down_swiglu_unfused_dsv3(%dy: tensor<?x7168xbf16> {moe.sym = "R"},
    %offsets: tensor<256xi32>, %w_down: tensor<256x7168x2048xbf16>,
    %h: tensor<?x4096xbf16> {moe.sym = "R"})
    -> (tensor<?x4096xbf16>, tensor<?x2048xbf16>) {
  %da = moe.grouped_matmul %dy, %w_down, %offsets
      : tensor<?x7168xbf16>, tensor<256x7168x2048xbf16>, tensor<256xi32>
      -> tensor<?x2048xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x4096xbf16>, tensor<?x2048xbf16> -> tensor<?x4096xbf16>
  return %dh, %da : tensor<?x4096xbf16>, tensor<?x2048xbf16>
}

// ---- gate_up's weight gradient from the token rows, by slot ----
// With the nn.Linear layout [E, 2I, H] the gradient is Σ dgᵀ · rows:
//   dwg_gate_up_{key}(x [T, H], dg [R, 2I], offsets [E], slots [R])
//       -> [E, 2I, H]: grouped_weight_grad with transpose_rhs, x read by slot
//       (what moe-autodiff derives);
//   dwp_gate_up_{key}(same) -> [E, 2I, H]: the permuted copy of x first,
//       then dg times the rows (what it derived before).
func.func @dwg_gate_up_mixtral(%x: tensor<?x4096xbf16> {moe.sym = "T"},
    %dg: tensor<?x28672xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<8x28672x4096xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x4096xbf16>, tensor<?x28672xbf16>, tensor<8xi32>
      -> tensor<8x28672x4096xbf16>
  return %dw : tensor<8x28672x4096xbf16>
}
func.func @dwp_gate_up_mixtral(%x: tensor<?x4096xbf16> {moe.sym = "T"},
    %dg: tensor<?x28672xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<8x28672x4096xbf16> {
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x4096xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x4096xbf16>
  %dw = moe.grouped_weight_grad %dg, %rows, %offsets
      : tensor<?x28672xbf16>, tensor<?x4096xbf16>, tensor<8xi32>
      -> tensor<8x28672x4096xbf16>
  return %dw : tensor<8x28672x4096xbf16>
}
func.func @dwg_gate_up_qwen3(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x1536xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<128x1536x2048xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<?x1536xbf16>, tensor<128xi32>
      -> tensor<128x1536x2048xbf16>
  return %dw : tensor<128x1536x2048xbf16>
}
func.func @dwp_gate_up_qwen3(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x1536xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<128x1536x2048xbf16> {
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32> -> tensor<?x2048xbf16>
  %dw = moe.grouped_weight_grad %dg, %rows, %offsets
      : tensor<?x1536xbf16>, tensor<?x2048xbf16>, tensor<128xi32>
      -> tensor<128x1536x2048xbf16>
  return %dw : tensor<128x1536x2048xbf16>
}
func.func @dwg_gate_up_qwen35(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x1024xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<256x1024x2048xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<?x1024xbf16>, tensor<256xi32>
      -> tensor<256x1024x2048xbf16>
  return %dw : tensor<256x1024x2048xbf16>
}
func.func @dwp_gate_up_qwen35(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x1024xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<256x1024x2048xbf16> {
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x2048xbf16>
  %dw = moe.grouped_weight_grad %dg, %rows, %offsets
      : tensor<?x1024xbf16>, tensor<?x2048xbf16>, tensor<256xi32>
      -> tensor<256x1024x2048xbf16>
  return %dw : tensor<256x1024x2048xbf16>
}
func.func @dwg_gate_up_olmoe(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<64x2048x2048xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<?x2048xbf16>, tensor<64xi32>
      -> tensor<64x2048x2048xbf16>
  return %dw : tensor<64x2048x2048xbf16>
}
func.func @dwp_gate_up_olmoe(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<64x2048x2048xbf16> {
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x2048xbf16>, tensor<?xi32>, tensor<64xi32> -> tensor<?x2048xbf16>
  %dw = moe.grouped_weight_grad %dg, %rows, %offsets
      : tensor<?x2048xbf16>, tensor<?x2048xbf16>, tensor<64xi32>
      -> tensor<64x2048x2048xbf16>
  return %dw : tensor<64x2048x2048xbf16>
}
func.func @dwg_gate_up_dsv3(%x: tensor<?x7168xbf16> {moe.sym = "T"},
    %dg: tensor<?x4096xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<256x4096x7168xbf16> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x7168xbf16>, tensor<?x4096xbf16>, tensor<256xi32>
      -> tensor<256x4096x7168xbf16>
  return %dw : tensor<256x4096x7168xbf16>
}
func.func @dwp_gate_up_dsv3(%x: tensor<?x7168xbf16> {moe.sym = "T"},
    %dg: tensor<?x4096xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"}) -> tensor<256x4096x7168xbf16> {
  %rows = moe.permute %x, %slots, %offsets k = 8
      : tensor<?x7168xbf16>, tensor<?xi32>, tensor<256xi32> -> tensor<?x7168xbf16>
  %dw = moe.grouped_weight_grad %dg, %rows, %offsets
      : tensor<?x4096xbf16>, tensor<?x7168xbf16>, tensor<256xi32>
      -> tensor<256x4096x7168xbf16>
  return %dw : tensor<256x4096x7168xbf16>
}

// ---- gradient accumulation into an f32 main gradient ----
// dwa_gate_up_{key}(x, dg, offsets, slots, main [E, 2I, H] f32)
//     -> main + Σ dgᵀ · x[slot / k]: dwg's gathered weight gradient added
//     to the main gradient in its epilogue (`accumulate`; the bench passes
//     main as the output too, so it is updated in place).
func.func @dwa_gate_up_mixtral(%x: tensor<?x4096xbf16> {moe.sym = "T"},
    %dg: tensor<?x28672xbf16> {moe.sym = "R"}, %offsets: tensor<8xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"},
    %main: tensor<8x28672x4096xf32>) -> tensor<8x28672x4096xf32> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main : tensor<8x28672x4096xf32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x4096xbf16>, tensor<?x28672xbf16>, tensor<8xi32>
      -> tensor<8x28672x4096xf32>
  return %dw : tensor<8x28672x4096xf32>
}

func.func @dwa_gate_up_qwen3(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x1536xbf16> {moe.sym = "R"}, %offsets: tensor<128xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"},
    %main: tensor<128x1536x2048xf32>) -> tensor<128x1536x2048xf32> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main : tensor<128x1536x2048xf32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<?x1536xbf16>, tensor<128xi32>
      -> tensor<128x1536x2048xf32>
  return %dw : tensor<128x1536x2048xf32>
}

func.func @dwa_gate_up_qwen35(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x1024xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"},
    %main: tensor<256x1024x2048xf32>) -> tensor<256x1024x2048xf32> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main : tensor<256x1024x2048xf32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<?x1024xbf16>, tensor<256xi32>
      -> tensor<256x1024x2048xf32>
  return %dw : tensor<256x1024x2048xf32>
}

func.func @dwa_gate_up_olmoe(%x: tensor<?x2048xbf16> {moe.sym = "T"},
    %dg: tensor<?x2048xbf16> {moe.sym = "R"}, %offsets: tensor<64xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"},
    %main: tensor<64x2048x2048xf32>) -> tensor<64x2048x2048xf32> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main : tensor<64x2048x2048xf32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x2048xbf16>, tensor<?x2048xbf16>, tensor<64xi32>
      -> tensor<64x2048x2048xf32>
  return %dw : tensor<64x2048x2048xf32>
}

func.func @dwa_gate_up_dsv3(%x: tensor<?x7168xbf16> {moe.sym = "T"},
    %dg: tensor<?x4096xbf16> {moe.sym = "R"}, %offsets: tensor<256xi32>,
    %slots: tensor<?xi32> {moe.sym = "R"},
    %main: tensor<256x4096x7168xf32>) -> tensor<256x4096x7168xf32> {
  %dw = moe.grouped_weight_grad %x, %dg, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main : tensor<256x4096x7168xf32>)
      {k = 8 : i64, transpose_rhs}
      : tensor<?x7168xbf16>, tensor<?x4096xbf16>, tensor<256xi32>
      -> tensor<256x4096x7168xf32>
  return %dw : tensor<256x4096x7168xf32>
}
