// RUN: moec-opt %s --moe-select-kernel=target=sm90a -split-input-file -verify-diagnostics
// RUN: moec-opt %s -split-input-file --convert-moe-to-kernels=target=sm90a -verify-diagnostics

// A hand-written sm90_wgmma plan is built as written or rejected with the
// reason, by moe-select-kernel and by convert-moe-to-kernels: never
// changed to one that fits.

// 16 stages of 128 + 256 rows do not fit in 227 KiB.
func.func @too_deep(%x: tensor<?x2048xbf16>, %w: tensor<8x512x2048xbf16>,
                    %offsets: tensor<8xi32>) -> tensor<?x512xbf16> {
  // expected-error @+1 {{'moe.grouped_matmul' op cannot follow its sm90_wgmma plan #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 16, band_m = 8, producers = 128, mma_registers = 216, producer_registers = 72>: 16 stages need 787824 bytes of shared memory per block, the target has 232448}}
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 256, k = 64, threads = 384, producers = 128>,
          plan = <block_m = 128, block_n = 256, block_k = 64, stages = 16,
                  band_m = 8, producers = 128, mma_registers = 216,
                  producer_registers = 72>>}
      : tensor<?x2048xbf16>, tensor<8x512x2048xbf16>, tensor<8xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// Only a row reduction splits its rows.
func.func @split_forward(%x: tensor<?x2048xbf16>, %w: tensor<8x512x2048xbf16>,
                         %offsets: tensor<8xi32>) -> tensor<?x512xbf16> {
  // expected-error @+1 {{row_splits = 4 is not possible here (only a row reduction splits its rows, not into a [K, E, N] output, and into at most 1024 groups)}}
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 256, k = 64, threads = 256>,
          plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4,
                  band_m = 8, row_splits = 4>>}
      : tensor<?x2048xbf16>, tensor<8x512x2048xbf16>, tensor<8xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// Bulk stores are the weight gradient's.
func.func @bulk_forward(%x: tensor<?x2048xbf16>, %w: tensor<8x512x2048xbf16>,
                        %offsets: tensor<8xi32>) -> tensor<?x512xbf16> {
  // expected-error @+1 {{bulk_stores needs the warp-specialized weight gradient writing a 16-bit output, not split}}
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 256, k = 64, threads = 384, producers = 128>,
          plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4,
                  band_m = 8, producers = 128, mma_registers = 216,
                  producer_registers = 72, bulk_stores = true>>}
      : tensor<?x2048xbf16>, tensor<8x512x2048xbf16>, tensor<8xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// LoRA runs need a fused LoRA term.
func.func @runs_without_lora(%x: tensor<?x2048xbf16>,
                             %w: tensor<8x512x2048xbf16>,
                             %offsets: tensor<8xi32>) -> tensor<?x512xbf16> {
  // expected-error @+1 {{lora_run_tiles = 2 needs a fused LoRA term in the warp-specialized kernel without a cluster, and n-tiles it divides}}
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 256, k = 64, threads = 384, producers = 128>,
          plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4,
                  band_m = 8, producers = 128, mma_registers = 216,
                  producer_registers = 72, lora_run_tiles = 2>>}
      : tensor<?x2048xbf16>, tensor<8x512x2048xbf16>, tensor<8xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// SwiGLU's gate and up halves need 128 columns or more per block.
func.func @narrow_swiglu(%x: tensor<?x2048xbf16>, %w: tensor<8x512x2048xbf16>,
                         %offsets: tensor<8xi32>) -> tensor<?x256xbf16> {
  // expected-error @+1 {{'moe.grouped_matmul' op cannot follow its sm90_wgmma plan #moe.wgmma_plan<block_m = 128, block_n = 64, block_k = 64, stages = 4, band_m = 8>: the kernel has no such block, warp roles or cluster for the op's types, sizes and attributes on this target}}
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      activation = #moe.activation<swiglu>,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 256, k = 64, threads = 256>,
          plan = <block_m = 128, block_n = 64, block_k = 64, stages = 4,
                  band_m = 8>>}
      : tensor<?x2048xbf16>, tensor<8x512x2048xbf16>, tensor<8xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// -----

// A dense matmul is one launch: row buckets would be ignored.
func.func @dense_buckets(%a: tensor<?x256xbf16>, %b: tensor<256x512xbf16>)
    -> tensor<?x512xbf16> {
  %c0 = arith.constant 0 : index
  %rows = tensor.dim %a, %c0 : tensor<?x256xbf16>
  %zero = arith.constant 0.0 : bf16
  %empty = tensor.empty(%rows) : tensor<?x512xbf16>
  %acc = linalg.fill ins(%zero : bf16) outs(%empty : tensor<?x512xbf16>)
      -> tensor<?x512xbf16>
  // expected-error @+1 {{'linalg.matmul' op cannot follow its sm90_wgmma plan: a dense matmul has one kernel, no 'buckets'}}
  %y = linalg.matmul
      {moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 256, k = 64, threads = 256>,
          plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4,
                  band_m = 8, buckets = [#moe.wgmma_bucket<max_rows = 4096,
                      plan = <block_m = 128, block_n = 128, block_k = 64,
                              stages = 4, band_m = 8>>]>>}
      ins(%a, %b : tensor<?x256xbf16>, tensor<256x512xbf16>)
      outs(%acc : tensor<?x512xbf16>) -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// FP8 SwiGLU at block_n = 256: a block's 128 up rows would start at 192
// past its gate rows, inside a 128-row weight-scale block.
func.func @fp8_wide_swiglu(%x: tensor<?x256xf8E4M3FN>, %sx: tensor<?x2xf32>,
                           %w: tensor<8x384x256xf8E4M3FN>, %sw: tensor<8x3x2xf32>,
                           %offsets: tensor<8xi32>) -> tensor<?x192xbf16> {
  // expected-error @+1 {{the kernel has no such block, warp roles or cluster for the op's types, sizes and attributes on this target (e.g. block_k is 64 for 16-bit operands, 128 for FP8, which also needs producers, and block_n <= 128 for its weight gradient and a SwiGLU whose up rows start inside a 128-row scale block;}}
  %y = moe.grouped_matmul %x, %w, %offsets
      scales(%sx, %sw : tensor<?x2xf32>, tensor<8x3x2xf32>) {transpose_rhs,
      activation = #moe.activation<swiglu>,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 16, n = 16, k = 32, threads = 256>,
          plan = <block_m = 128, block_n = 256, block_k = 128, stages = 4,
                  band_m = 8, producers = 128, mma_registers = 232,
                  producer_registers = 40>>}
      : tensor<?x256xf8E4M3FN>, tensor<8x384x256xf8E4M3FN>, tensor<8xi32>
      -> tensor<?x192xbf16>
  return %y : tensor<?x192xbf16>
}

// -----

// 16-bit operands take 64 of K per stage (one 128-byte row).
func.func @bf16_block_k(%x: tensor<?x2048xbf16>, %w: tensor<8x512x2048xbf16>,
                        %offsets: tensor<8xi32>) -> tensor<?x512xbf16> {
  // expected-error @+1 {{the kernel has no such block, warp roles or cluster}}
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 16, n = 16, k = 32, threads = 256>,
          plan = <block_m = 128, block_n = 128, block_k = 128, stages = 4,
                  band_m = 8, producers = 128, mma_registers = 216,
                  producer_registers = 72>>}
      : tensor<?x2048xbf16>, tensor<8x512x2048xbf16>, tensor<8xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}
