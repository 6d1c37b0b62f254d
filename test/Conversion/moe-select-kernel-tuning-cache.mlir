// moe-select-kernel with an autotuner cache (tuning-cache, tuning-target):
// a grouped matmul the cache has measured is asked for the measured tiles,
// the others for the cost model's; the sm90a plan follows them.
// RUN: moec-opt %s -moe-select-kernel="target=sm90a tuning-cache=%S/Inputs/tuning-cache.json tuning-target=sm_90a" | FileCheck %s
// RUN: moec-opt %s -moe-select-kernel="target=rocdl tuning-cache=%S/Inputs/tuning-cache.json tuning-target=gfx942" | FileCheck %s --check-prefix=GFX
// RUN: moec-opt %s -moe-tile="n=64" -moe-select-kernel="target=sm90a tuning-cache=%S/Inputs/tuning-cache.json tuning-target=sm_90a" | FileCheck %s --check-prefix=OPTS
// RUN: not moec-opt %s -moe-select-kernel="tuning-cache=%S/Inputs/tuning-cache.json" 2>&1 | FileCheck %s --check-prefix=NOTARGET
// RUN: not moec-opt %s -moe-select-kernel="tuning-cache=%S/Inputs/missing.json tuning-target=sm_90a" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not moec-opt %s -moe-select-kernel="tuning-cache=%S/moe-select-kernel-tuning-cache.mlir tuning-target=sm_90a" 2>&1 | FileCheck %s --check-prefix=NOTJSON
// RUN: not moec-opt %s -moe-select-kernel="tuning-cache=%S/Inputs/tuning-cache-duplicate.json tuning-target=sm_90a" 2>&1 | FileCheck %s --check-prefix=DUP
// RUN: not moec-opt %s -moe-select-kernel="tuning-cache=%S/Inputs/tuning-cache-bad-tile.json tuning-target=sm_90a" 2>&1 | FileCheck %s --check-prefix=BADTILE

// NOTARGET: error: moe-select-kernel: 'tuning-cache' needs 'tuning-target' (the compile target the tiles were measured on, e.g. sm_90a)
// MISSING: error: moe-select-kernel: tuning cache '{{.*}}missing.json': cannot read it: No such file or directory
// NOTJSON: error: moe-select-kernel: tuning cache '{{.*}}moe-select-kernel-tuning-cache.mlir': not JSON: {{.*}}
// DUP: error: moe-select-kernel: tuning cache '{{.*}}': entry 1: a second tile for "k" on sm_90a at max_rows 64
// BADTILE: error: moe-select-kernel: tuning cache '{{.*}}': entry 0: "tile" is not a #moe.tile<...>: '#moe.tile<m = 128, n = 96, k = 64, threads = 256>'

// Buckets 1024 and 4096 measured the same tile: they merge into one bucket
// of up to 4096 rows, then the bucket of up to 16384; rows above the
// largest bucket were never measured and get the cost model's tile (and
// plan: warp-specialized at n = 256).
// CHECK-LABEL: func @gathered
// CHECK: moe.grouped_matmul {{.*}}moe.kernel = #moe.kernel<strategy = sm90_wgmma, tile = <m = 16, n = 16, k = 32, threads = 256>, plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, producers = 128, mma_registers = 216, producer_registers = 72, buckets = [#moe.wgmma_bucket<max_rows = 4096, plan = <block_m = 128, block_n = 128, block_k = 64, stages = 6, band_m = 4>>, #moe.wgmma_bucket<max_rows = 16384, plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 16>>]>>, moe.tile_buckets = [#moe.tile_bucket<max_rows = 4096, tile = <m = 128, n = 128, k = 64, threads = 256, stages = 6, band_m = 4>>, #moe.tile_bucket<max_rows = 16384, tile = <m = 128, n = 256, k = 64, threads = 256, stages = 4, band_m = 16>>]
// One bucket: that bucket, the cost model above it (n = 64 for 64 columns).
// CHECK: moe.grouped_matmul {{.*}}plan = <block_m = 128, block_n = 64, block_k = 64, stages = 6, band_m = 8, buckets = [#moe.wgmma_bucket<max_rows = 4096, plan = <block_m = 128, block_n = 128, block_k = 64, stages = 5, band_m = 8>>]>>, moe.tile_buckets = [#moe.tile_bucket<max_rows = 4096, tile = <m = 128, n = 128, k = 64, threads = 256, stages = 5, band_m = 8>>]
// Not in the cache (another K): the cost model.
// CHECK: moe.grouped_matmul {{.*}}moe.kernel = #moe.kernel<strategy = sm90_wgmma, tile = <m = 16, n = 16, k = 32, threads = 256>, plan = <block_m = 128, block_n = 64, block_k = 64, stages = 6, band_m = 8>>, transpose_rhs}
// A tile set by hand stays.
// CHECK: moe.grouped_matmul {{.*}}moe.kernel = #moe.kernel<strategy = sm90_wgmma, tile = <m = 32, n = 16, k = 32, threads = 256>,
// CHECK-NOT: moe.tile_buckets

// Other targets' entries do not apply.
// GFX-LABEL: func @gathered
// GFX: moe.grouped_matmul {{.*}}moe.kernel = #moe.kernel<strategy = scalar, tile = <m = 16, n = 16, k = 32, threads = 256>>, transpose_rhs}
// On a target without a kernel per bucket the largest bucket is moe.tile.
// GFX: moe.grouped_matmul {{.*}}moe.kernel = #moe.kernel<strategy = scalar, tile = <m = 32, n = 32, k = 32, threads = 256>>, moe.tile = #moe.tile<m = 32, n = 32, k = 32, threads = 256>

// Tile options (moe-tile) override the cache.
// OPTS-NOT: moe.tile_buckets
// OPTS-COUNT-3: moe.tile = #moe.tile<m = 16, n = 64, k = 32, threads = 256>
func.func @gathered(%x: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                    %offsets: tensor<8xi32>, %w: tensor<8x512x64xbf16>,
                    %h: tensor<?x256xbf16>, %wd: tensor<8x64x256xbf16>,
                    %wk: tensor<8x64x128xbf16>, %h2: tensor<?x128xbf16>)
    -> (tensor<?x512xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x64xbf16>, tensor<8x512x64xbf16>, tensor<8xi32> -> tensor<?x512xbf16>
  %d = moe.grouped_matmul %h, %wd, %offsets {transpose_rhs}
      : tensor<?x256xbf16>, tensor<8x64x256xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %e = moe.grouped_matmul %h2, %wk, %offsets {transpose_rhs}
      : tensor<?x128xbf16>, tensor<8x64x128xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %f = moe.grouped_matmul %h, %wd, %offsets
      {transpose_rhs, moe.tile = #moe.tile<m = 32, n = 16, k = 32, threads = 256>}
      : tensor<?x256xbf16>, tensor<8x64x256xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  return %y, %d, %e, %f : tensor<?x512xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>
}

// The FP8 weight gradient's key names its K and N (the rows of its
// transposed operands) and its scales; its measured bucket is an FP8 tile.
// CHECK-LABEL: func @fp8_weight_grad
// CHECK: moe.grouped_weight_grad {{.*}}buckets = [#moe.wgmma_bucket<max_rows = 4096, plan = <block_m = 128, block_n = 64, block_k = 128, stages = 3, band_m = 8, producers = 128
func.func @fp8_weight_grad(%x: tensor<256x?xf8E4M3FN>, %dy: tensor<128x?xf8E5M2>,
                           %o: tensor<8xi32>, %sx: tensor<?x256xf32>,
                           %sd: tensor<?x128xf32>) -> tensor<8x128x256xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %o
      scales(%sx, %sd : tensor<?x256xf32>, tensor<?x128xf32>) {transpose_rhs}
      : tensor<256x?xf8E4M3FN>, tensor<128x?xf8E5M2>, tensor<8xi32>
      -> tensor<8x128x256xbf16>
  return %g : tensor<8x128x256xbf16>
}
