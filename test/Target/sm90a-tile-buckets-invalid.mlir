// A tile bucket the sm90a wgmma kernel cannot build (not of its
// 128 x {128, 256} x 64, 256-thread form) fails the compile at the op.
// RUN: not moec compile %s -o %t.moecb --target sm_90a 2>&1 | FileCheck %s
// CHECK: error: 'moe.grouped_matmul' op has a tile bucket the sm90a matmul cannot build: #moe.tile_bucket<max_rows = 64, tile = <m = 16, n = 16, k = 32, threads = 256>>
func.func @bad_bucket(%x: tensor<?x64xbf16>, %offsets: tensor<4xi32>,
                      %w: tensor<4x128x64xbf16>) -> tensor<?x128xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      {transpose_rhs,
       moe.tile_buckets = [#moe.tile_bucket<max_rows = 64,
           tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>>]}
      : tensor<?x64xbf16>, tensor<4x128x64xbf16>, tensor<4xi32> -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}
