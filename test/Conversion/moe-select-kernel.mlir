// RUN: moec-opt %s --moe-select-kernel=target=nvvm -split-input-file | FileCheck %s --check-prefix=NVVM
// RUN: moec-opt %s --moe-select-kernel=target=sm90a -split-input-file | FileCheck %s --check-prefix=SM90A
// RUN: moec-opt %s --moe-select-kernel=target=rocdl -split-input-file | FileCheck %s --check-prefix=ROCDL
// RUN: moec-opt %s --moe-select-kernel=target=host -split-input-file | FileCheck %s --check-prefix=HOST
// RUN: moec-opt %s --moe-select-kernel -split-input-file | FileCheck %s --check-prefix=GENERIC
// The selection survives a round trip and convert-moe-to-kernels follows it:
// RUN: moec-opt %s --moe-select-kernel=target=nvvm -split-input-file | moec-opt -split-input-file --convert-moe-to-kernels | FileCheck %s --check-prefix=LOWERED

// The module records the target and its facts.
// NVVM: module attributes {moe.target = #moe.target<kind = "nvvm", shared_memory = 49152>}
// SM90A: module attributes {moe.target = #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 232448>}
// ROCDL: module attributes {moe.target = #moe.target<kind = "rocdl", chip = "gfx942", sm_count = 304, shared_memory = 65536>}
// HOST: module attributes {moe.target = #moe.target<kind = "host">}
// GENERIC: module attributes {moe.target = #moe.target<kind = "generic", shared_memory = 49152>}

// Routing: a warp per token and the warp counting sort where the target has
// shuffles; the scalar kernels on the host and the generic target.
// NVVM-LABEL: func.func @route
// NVVM: moe.router_topk {{.*}}moe.kernel = #moe.kernel<strategy = warp, tile = <m = 1, n = 1, k = 1, threads = 128>>
// NVVM: moe.sort_by_expert {{.*}}moe.kernel = #moe.kernel<strategy = warp,
// ROCDL: moe.router_topk {{.*}}strategy = warp
// ROCDL: moe.sort_by_expert {{.*}}strategy = warp
// HOST: moe.router_topk {{.*}}strategy = scalar
// HOST: moe.sort_by_expert {{.*}}strategy = scalar
// GENERIC: moe.router_topk {{.*}}strategy = scalar
// LOWERED: gpu.func @route_k0_router_topk_warp
// LOWERED: gpu.func @route_k1_sort_by_expert_rank
func.func @route(%logits: tensor<?x128xbf16>)
    -> (tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32>, tensor<128xi32>) {
  %w, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x128xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128 align = 16
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  return %w, %sorted, %slots, %offsets
      : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
}

// -----

// Router shapes the warp kernel cannot take (E = 40 is not a multiple of
// 32) fall back to the scalar kernel on every target.
// NVVM-LABEL: func.func @route_40
// NVVM: moe.router_topk {{.*}}strategy = scalar
func.func @route_40(%logits: tensor<?x40xf32>)
    -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  %w, %ids = moe.router_topk %logits k = 2
      : tensor<?x40xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  return %w, %ids : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

// The bf16 grouped matmul takes the wgmma kernel on sm90a only; its tile
// keeps the producer warpgroup, and the plan is the whole kernel built
// from it (stages, tile order, register split). Elsewhere the scalar matmul.
// SM90A-LABEL: func.func @gate_up
// SM90A: moe.grouped_matmul {{.*}}moe.kernel = #moe.kernel<strategy = sm90_wgmma, tile = <m = 128, n = 256, k = 64, threads = 384, producers = 128>, plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, producers = 128, mma_registers = 216, producer_registers = 72>>
// NVVM-LABEL: func.func @gate_up
// NVVM: moe.grouped_matmul {{.*}}strategy = scalar
// HOST: moe.grouped_matmul {{.*}}strategy = scalar
func.func @gate_up(%x: tensor<?x256xbf16>, %w: tensor<8x512x256xbf16>,
                   %offsets: tensor<8xi32>) -> tensor<?x512xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      {transpose_rhs, moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384, producers = 128>}
      : tensor<?x256xbf16>, tensor<8x512x256xbf16>, tensor<8xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// f32 operands are not a wgmma type: the scalar matmul even on sm90a.
// SM90A-LABEL: func.func @f32_matmul
// SM90A: moe.grouped_matmul {{.*}}strategy = scalar
func.func @f32_matmul(%x: tensor<?x64xf32>, %w: tensor<4x64x64xf32>,
                      %offsets: tensor<4xi32>) -> tensor<?x64xf32> {
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x64xf32>, tensor<4x64x64xf32>, tensor<4xi32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// FP8 with 128-wide block scales and [E, N, K] weights: the wgmma kernel's
// FP8 mode (block_k = 128, a producer warpgroup, 4 stages). Without
// transpose_rhs ([E, K, N] FP8 weights, which FP8 wgmma cannot read N-major),
// with other scale blocks, or as a dense linalg.matmul (no scales): scalar.
// SM90A-LABEL: func.func @fp8_matmuls
// SM90A: moe.grouped_matmul {{.*}}strategy = sm90_wgmma{{.*}}plan = <block_m = 128, block_n = 128, block_k = 128, stages = 4, band_m = 8, producers = 128
// SM90A: moe.grouped_matmul {{.*}}strategy = scalar
// SM90A: moe.grouped_matmul {{.*}}strategy = scalar
// SM90A: linalg.matmul {{.*}}strategy = scalar
func.func @fp8_matmuls(%x: tensor<?x256xf8E4M3FN>, %sx: tensor<?x2xf32>,
                       %w: tensor<4x128x256xf8E4M3FN>, %sw: tensor<4x1x2xf32>,
                       %wkn: tensor<4x256x128xf8E4M3FN>,
                       %swkn: tensor<4x2x1xf32>, %sx64: tensor<?x4xf32>,
                       %sw64: tensor<4x2x4xf32>, %offsets: tensor<4xi32>,
                       %b: tensor<256x128xf8E4M3FN>)
    -> (tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>,
        tensor<?x128xf32>) {
  %y = moe.grouped_matmul %x, %w, %offsets
      scales(%sx, %sw : tensor<?x2xf32>, tensor<4x1x2xf32>) {transpose_rhs}
      : tensor<?x256xf8E4M3FN>, tensor<4x128x256xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x128xbf16>
  %kn = moe.grouped_matmul %x, %wkn, %offsets
      scales(%sx, %swkn : tensor<?x2xf32>, tensor<4x2x1xf32>)
      : tensor<?x256xf8E4M3FN>, tensor<4x256x128xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x128xbf16>
  %g64 = moe.grouped_matmul %x, %w, %offsets
      scales(%sx64, %sw64 : tensor<?x4xf32>, tensor<4x2x4xf32>)
      {transpose_rhs, scale_group = 64 : i64}
      : tensor<?x256xf8E4M3FN>, tensor<4x128x256xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x128xbf16>
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %rows = tensor.dim %x, %c0 : tensor<?x256xf8E4M3FN>
  %empty = tensor.empty(%rows) : tensor<?x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x128xf32>)
      -> tensor<?x128xf32>
  %c = linalg.matmul ins(%x, %b : tensor<?x256xf8E4M3FN>, tensor<256x128xf8E4M3FN>)
      outs(%init : tensor<?x128xf32>) -> tensor<?x128xf32>
  return %y, %kn, %g64, %c
      : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>,
        tensor<?x128xf32>
}

// -----

// Bandwidth-bound ops: 16-byte vectors where the row length allows (the
// tile's producer warpgroup dropped: only the wgmma kernel has one), the
// scalar kernel where it does not (36 bf16 is not a multiple of 8).
// NVVM-LABEL: func.func @swiglu
// NVVM: moe.swiglu {{.*}}moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 256>>
// NVVM: moe.swiglu {{.*}}strategy = scalar
// HOST: moe.swiglu {{.*}}strategy = vector
func.func @swiglu(%x: tensor<?x64xbf16>, %z: tensor<?x72xbf16>)
    -> (tensor<?x32xbf16>, tensor<?x36xbf16>) {
  %y = moe.swiglu %x
      {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 384, producers = 128>}
      : tensor<?x64xbf16> -> tensor<?x32xbf16>
  %u = moe.swiglu %z : tensor<?x72xbf16> -> tensor<?x36xbf16>
  return %y, %u : tensor<?x32xbf16>, tensor<?x36xbf16>
}

// -----

// Row-wise FP8 quantization: the warp kernel with shuffles, the vector
// kernel on the host.
// NVVM-LABEL: func.func @quantize
// NVVM: moe.quantize {{.*}}strategy = warp
// HOST: moe.quantize {{.*}}strategy = vector
func.func @quantize(%x: tensor<?x256xbf16>)
    -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>) {
  %d, %s = moe.quantize %x group_size = 128
      : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  return %d, %s : tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
}

// -----

// A choice written by hand is kept (here the scalar kernel where the
// vector one would apply).
// NVVM-LABEL: func.func @kept
// NVVM: moe.swiglu {{.*}}moe.kernel = #moe.kernel<strategy = scalar, tile = <m = 1, n = 1, k = 1, threads = 64>>
func.func @kept(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %y = moe.swiglu %x
      {moe.kernel = #moe.kernel<strategy = scalar, tile = <m = 1, n = 1, k = 1, threads = 64>>}
      : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// linalg.add (gradients summed, a LoRA term added to its FP8 base): a
// thread per 16-byte chunk where the rows split into chunks, on every
// target; per element otherwise (36 bf16 columns).
// NVVM-LABEL: func.func @add
// NVVM: linalg.add {{.*}}moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 256>>
// NVVM: linalg.add {{.*}}moe.kernel = #moe.kernel<strategy = scalar,
// HOST: linalg.add {{.*}}strategy = vector
// HOST: linalg.add {{.*}}strategy = scalar
// LOWERED: gpu.func @add_k0_add_vec
// LOWERED: gpu.func @add_k1_add(
func.func @add(%a: tensor<?x264xbf16>, %b: tensor<?x264xbf16>,
               %c: tensor<?x36xbf16>, %d: tensor<?x36xbf16>)
    -> (tensor<?x264xbf16>, tensor<?x36xbf16>) {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x264xbf16>
  %e0 = tensor.empty(%m) : tensor<?x264xbf16>
  %s0 = linalg.add ins(%a, %b : tensor<?x264xbf16>, tensor<?x264xbf16>)
      outs(%e0 : tensor<?x264xbf16>) -> tensor<?x264xbf16>
  %n = tensor.dim %c, %c0 : tensor<?x36xbf16>
  %e1 = tensor.empty(%n) : tensor<?x36xbf16>
  %s1 = linalg.add ins(%c, %d : tensor<?x36xbf16>, tensor<?x36xbf16>)
      outs(%e1 : tensor<?x36xbf16>) -> tensor<?x36xbf16>
  return %s0, %s1 : tensor<?x264xbf16>, tensor<?x36xbf16>
}
