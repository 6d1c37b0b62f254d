// RUN: moec-opt %s -split-input-file -moe-tile | FileCheck %s
// RUN: moec-opt %s -split-input-file -moe-tile="m=32 k=64 threads=512" | FileCheck %s --check-prefix=OPTS
// RUN: not moec-opt %s -split-input-file -moe-tile="threads=100" 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not moec-opt %s -split-input-file -moe-tile="m=3" 2>&1 | FileCheck %s --check-prefix=POW2
// RUN: not moec-opt %s -split-input-file -moe-tile="threads=96" 2>&1 | FileCheck %s --check-prefix=SPLIT

// Options override the matmul tile only; a bad one fails the pass.
// THREADS: error: moe-tile: invalid matmul tile options: tile parameter 'threads' must be a multiple of 32 in [32, 1024], got 100
// POW2: error: moe-tile: invalid matmul tile options: tile parameter 'm' must be a power of two >= 1, got 3
// SPLIT: error: moe-tile: invalid matmul tile options: tile of 16x16 outputs does not split evenly over 96 computing threads: one of m*n and 'threads' - 'producers' must divide the other

// Every op of a layer gets the cost model's tile.
// CHECK-LABEL: func @layer
// OPTS-LABEL: func @layer
func.func @layer(%x: tensor<?x64xbf16>, %logits: tensor<?x8xf32>, %wgu: tensor<8x64x64xbf16>, %wd: tensor<8x32x64xbf16>) -> tensor<?x64xbf16> {
  // CHECK: moe.router_topk {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 128>
  // CHECK: moe.sort_by_expert {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 128>
  // CHECK: moe.permute {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // CHECK: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>
  // CHECK: moe.swiglu {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // CHECK: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>
  // CHECK: moe.unpermute {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // OPTS: moe.router_topk {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 128>
  // OPTS: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 32, n = 16, k = 64, threads = 512>
  // OPTS: moe.swiglu {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // OPTS: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 32, n = 16, k = 64, threads = 512>
  %w, %ids = moe.router_topk %logits k = 2 : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %o = moe.sort_by_expert %ids experts = 8 : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %rows = moe.permute %x, %slots, %o k = 2 : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  %h = moe.grouped_matmul %rows, %wgu, %o : tensor<?x64xbf16>, tensor<8x64x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %a = moe.swiglu %h : tensor<?x64xbf16> -> tensor<?x32xbf16>
  %d = moe.grouped_matmul %a, %wd, %o : tensor<?x32xbf16>, tensor<8x32x64xbf16>, tensor<8xi32> -> tensor<?x64xbf16>
  %y = moe.unpermute %d, %slots, %o k = 2 weights(%w : tensor<?x2xf32>) : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Backward and quantization ops: row tiles.
// CHECK-LABEL: func @row_ops
func.func @row_ops(%h: tensor<?x64xbf16>, %da: tensor<?x32xbf16>, %x: tensor<?x256xbf16>, %packed: tensor<2x16x8xui8>, %absmax: tensor<2x4xf32>, %cb: tensor<16xf32>) -> (tensor<?x64xbf16>, tensor<?x256xf32>, tensor<2x16x16xbf16>) {
  // CHECK: moe.swiglu_grad {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // CHECK: moe.quantize {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // CHECK: moe.dequantize {{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 256>
  // NF4 weights: 128 threads.
  // CHECK: moe.dequantize {{.*}}codebook{{.*}}moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 128>
  %dh = moe.swiglu_grad %h, %da : tensor<?x64xbf16>, tensor<?x32xbf16> -> tensor<?x64xbf16>
  %q, %s = moe.quantize %x group_size = 128 : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  %dq = moe.dequantize %q, %s group_size = 128 : tensor<?x256xf8E4M3FN>, tensor<?x2xf32> -> tensor<?x256xf32>
  %wt = moe.dequantize %packed, %absmax codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<2x16x8xui8>, tensor<2x4xf32> -> tensor<2x16x16xbf16>
  return %dh, %dq, %wt : tensor<?x64xbf16>, tensor<?x256xf32>, tensor<2x16x16xbf16>
}

// -----

// A narrow output (at most 8 columns) gets 16x8 tiles; weight gradients get
// the matmul tile over [K, N].
// CHECK-LABEL: func @matmul_shapes
// OPTS-LABEL: func @matmul_shapes
func.func @matmul_shapes(%x: tensor<?x64xbf16>, %w: tensor<8x64x8xbf16>, %dy: tensor<?x32xbf16>, %o: tensor<8xi32>) -> (tensor<?x8xbf16>, tensor<8x64x32xf32>) {
  // CHECK: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 16, n = 8, k = 32, threads = 128>
  // CHECK: moe.grouped_weight_grad {{.*}}moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>
  // OPTS: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 32, n = 8, k = 64, threads = 512>
  // OPTS: moe.grouped_weight_grad {{.*}}moe.tile = #moe.tile<m = 32, n = 16, k = 64, threads = 512>
  %y = moe.grouped_matmul %x, %w, %o : tensor<?x64xbf16>, tensor<8x64x8xbf16>, tensor<8xi32> -> tensor<?x8xbf16>
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<8xi32> -> tensor<8x64x32xf32>
  return %y, %dw : tensor<?x8xbf16>, tensor<8x64x32xf32>
}

// -----

// Ops that carry a tile keep it; other dialects' ops get none.
// CHECK-LABEL: func @keep_given_tile
// OPTS-LABEL: func @keep_given_tile
func.func @keep_given_tile(%x: tensor<8x64xbf16>, %w: tensor<8x64x64xbf16>, %o: tensor<8xi32>, %a: tensor<8x64xf32>, %b: tensor<64x64xf32>) -> (tensor<8x64xbf16>, tensor<8x64xf32>) {
  // CHECK: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 64, n = 32, k = 16, threads = 1024>
  // CHECK: linalg.matmul
  // CHECK-NOT: moe.tile
  // CHECK: return
  // OPTS: moe.grouped_matmul {{.*}}moe.tile = #moe.tile<m = 64, n = 32, k = 16, threads = 1024>
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 64, n = 32, k = 16, threads = 1024>} : tensor<8x64xbf16>, tensor<8x64x64xbf16>, tensor<8xi32> -> tensor<8x64xbf16>
  %init = tensor.empty() : tensor<8x64xf32>
  %c = linalg.matmul ins(%a, %b : tensor<8x64xf32>, tensor<64x64xf32>) outs(%init : tensor<8x64xf32>) -> tensor<8x64xf32>
  return %y, %c : tensor<8x64xbf16>, tensor<8x64xf32>
}
