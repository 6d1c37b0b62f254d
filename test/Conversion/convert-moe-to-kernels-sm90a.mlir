// RUN: moec-opt %s --convert-moe-to-kernels=target=sm90a -split-input-file | FileCheck %s

// The two kernels of the sm90a grouped matmul (lib/Conversion/MoeToKernels/
// Hopper/HopperKernel.h) at the kernel stage, part by part.

// Warp-specialized (n = 256, 384 threads of which 128 producers): the scan
// tables and a full/empty mbarrier pair per stage in dynamic shared memory
// (full: the TMA thread's arrival, the lhs rows being in order; empty: the
// 8 MMA warps); the producer warpgroup gives up registers, waits for a free
// stage and loads the lhs (2-d map) and the rhs (3-d map) by TMA, no
// cp.async; the MMA warpgroups take registers, wait for a full stage, fence
// the async proxy, issue 4 wgmmas per K slice, free the stage, and store
// 16-byte chunks traded within each quad of lanes.
// CHECK-LABEL: gpu.func @ws_k0_grouped_matmul_wgmma(
// CHECK-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: index)
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// CHECK: gpu.dynamic_shared_memory
// CHECK-COUNT-3: memref.view
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c8_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c8_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c8_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32{{(_[0-9]+)?}} :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c8_i32{{(_[0-9]+)?}} :
// CHECK-NOT: nvvm.mbarrier.init
// CHECK-NOT: nvvm.cluster
// CHECK: gpu.barrier
// CHECK: nvvm.setmaxregister decrease 72
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c49152_i32
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg5, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}]
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK: nvvm.setmaxregister increase 216
// CHECK: scf.for {{.*}} -> (!llvm.struct<(f32,
// CHECK-NEXT: arith.addi
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3>
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3>
// CHECK-NOT: nvvm.mapa
// CHECK: gpu.shuffle idx
// CHECK: vector.store %{{.*}} : memref<?x256xbf16>, vector<8xbf16>
// CHECK-NOT: nvvm.cluster
// CHECK: gpu.return
// CHECK-LABEL: func.func @ws(
// CHECK: gpu.launch_func @ws_kernels::@ws_k0_grouped_matmul_wgmma
// CHECK-SAME: threads in (%c384,
// CHECK-SAME: dynamic_shared_memory_size %c197760_i32
// CHECK-SAME: moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384, stages = 4, band_m = 8, producers = 128>
func.func @ws(%x: tensor<?x128xbf16>, %w: tensor<4x256x128xbf16>,
              %offsets: tensor<4xi32>) -> tensor<?x256xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            stages = 4, producers = 128>}
      : tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<4xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// -----

// Block barriers (n = 128, 256 threads): no mbarriers, no TMA; every
// thread copies 16-byte chunks with cp.async (4 lhs and 4 rhs rows a
// slice), the first tile's 2 slices ahead of the persistent loop; each K
// slice waits for its copies, fences the async proxy and syncs the block,
// issues the copies 2 slices on, then 4 wgmmas; the plain epilogue goes
// through a staging tile in the stages (pair stores, a barrier, 16-byte
// loads and stores).
// CHECK-LABEL: gpu.func @bb_k0_grouped_matmul_wgmma(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: gpu.dynamic_shared_memory
// CHECK-NOT: nvvm.mbarrier
// CHECK: gpu.barrier
// CHECK-NOT: nvvm.mbarrier
// CHECK-COUNT-8: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg
// CHECK-NEXT: nvvm.cp.async.commit.group
// CHECK-COUNT-8: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg
// CHECK-NEXT: nvvm.cp.async.commit.group
// CHECK: scf.for %{{.*}} = %block_id_x to %{{.*}} step %grid_dim_x
// CHECK: scf.for {{.*}} -> (!llvm.struct<(f32,
// CHECK-NEXT: nvvm.cp.async.wait.group 1
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: gpu.barrier
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT: gpu.barrier
// CHECK: memref.view %{{.*}} to memref<?xbf16, #gpu.address_space<workgroup>>
// CHECK: vector.store %{{.*}} : memref<?xbf16, #gpu.address_space<workgroup>>, vector<2xbf16>
// CHECK: gpu.barrier
// CHECK: vector.load %{{.*}} : memref<?xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK-NEXT: arith.addi
// CHECK-NEXT: vector.store %{{.*}} : memref<?x128xbf16>, vector<8xbf16>
// CHECK-NOT: nvvm.setmaxregister
// CHECK-NOT: nvvm.cp.async.bulk
// CHECK: gpu.return
// CHECK-LABEL: func.func @bb(
// CHECK: gpu.launch_func @bb_kernels::@bb_k0_grouped_matmul_wgmma
// CHECK-SAME: threads in (%c256,
// CHECK-SAME: dynamic_shared_memory_size %c132160_i32
// CHECK-SAME: moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 4, band_m = 8>
func.func @bb(%x: tensor<?x128xbf16>, %w: tensor<4x128x128xbf16>,
              %offsets: tensor<4xi32>) -> tensor<?x128xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256,
                            stages = 4>}
      : tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<4xi32>
      -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}

// -----

// An output of at most 64 columns (here a rank-16 product of
// moe-decompose-lora-grad) gets 128 x 64 tiles with block barriers:
// m64n64k16 wgmmas, half the wgmma work of n = 128 tiles at r = 64.
// CHECK-LABEL: gpu.func @narrow_k0_grouped_matmul_wgmma(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-NOT: nvvm.setmaxregister
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-LABEL: func.func @narrow(
// CHECK: gpu.launch_func @narrow_kernels::@narrow_k0_grouped_matmul_wgmma
// CHECK-SAME: moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 256, stages = 6, band_m = 8>
func.func @narrow(%x: tensor<?x256xbf16>, %a: tensor<4x16x256xbf16>,
                  %offsets: tensor<4xi32>) -> tensor<?x16xbf16> {
  %u = moe.grouped_matmul %x, %a, %offsets {transpose_rhs}
      : tensor<?x256xbf16>, tensor<4x16x256xbf16>, tensor<4xi32>
      -> tensor<?x16xbf16>
  return %u : tensor<?x16xbf16>
}

// -----

// The narrow weight gradient (dB's [E, N, r] of moe-decompose-lora-grad)
// likewise: block barriers at n = 64; SwiGLU keeps n = 128 (gate and up
// pairs), at any width.
// CHECK-LABEL: func.func @wgrad_narrow(
// CHECK: gpu.launch_func @wgrad_narrow_kernels::@wgrad_narrow_k0_grouped_weight_grad_wgmma
// CHECK-SAME: moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 256, stages = 6, band_m = 8>
// CHECK: gpu.launch_func @wgrad_narrow_kernels::@wgrad_narrow_k1_grouped_matmul_wgmma
// CHECK-SAME: moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 6, band_m = 8>
func.func @wgrad_narrow(%x: tensor<?x200xbf16>, %dy: tensor<?x64xbf16>,
                        %w: tensor<4x64x200xbf16>, %offsets: tensor<4xi32>)
    -> (tensor<4x200x64xbf16>, tensor<?x32xbf16>) {
  %g = moe.grouped_weight_grad %x, %dy, %offsets {
      moe.tile = #moe.tile<m = 128, n = 64, k = 64, threads = 256,
                           row_splits = 1>}
      : tensor<?x200xbf16>, tensor<?x64xbf16>, tensor<4xi32>
      -> tensor<4x200x64xbf16>
  %h = moe.grouped_matmul %x, %w, %offsets
      {transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x200xbf16>, tensor<4x64x200xbf16>, tensor<4xi32>
      -> tensor<?x32xbf16>
  return %g, %h : tensor<4x200x64xbf16>, tensor<?x32xbf16>
}

// -----

// rhs [E, K, N] (no transpose_rhs: the dX of a backward), warp-specialized:
// the weights come by TMA as four 64-column boxes of 64 K rows per stage
// (3-d map, box [64, 64, 1]) and wgmma reads them N-major, transposed
// (B layout <row>); the lhs rows still come by one 2-d TMA.
// CHECK-LABEL: gpu.func @dx_k0_grouped_matmul_wgmma(
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c49152_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg5, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}]
// CHECK-COUNT-4: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// CHECK-LABEL: func.func @dx(
// CHECK: moe.tensor_map_box = array<i64: 64, 64, 1>
// CHECK: gpu.launch_func @dx_kernels::@dx_k0_grouped_matmul_wgmma
func.func @dx(%dy: tensor<?x256xbf16>, %w: tensor<4x256x320xbf16>,
              %offsets: tensor<4xi32>) -> tensor<?x320xbf16> {
  %dx = moe.grouped_matmul %dy, %w, %offsets
      {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            stages = 4, producers = 128>}
      : tensor<?x256xbf16>, tensor<4x256x320xbf16>, tensor<4xi32>
      -> tensor<?x320xbf16>
  return %dx : tensor<?x320xbf16>
}

// -----

// experts_in_columns: the weights [K, E, N] (a LoRA B adapter as
// [N, E, r]) by TMA through a map over [K, E, N] whose box is one expert
// wide (box [64, 1, 64]): the same four 64-column boxes of 64 K rows per
// stage as [E, K, N], read N-major by the same wgmmas.
// CHECK-LABEL: gpu.func @columns_k0_grouped_matmul_wgmma(
// CHECK-COUNT-4: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// CHECK-LABEL: func.func @columns(
// CHECK: moe.tensor_map_box = array<i64: 64, 1, 64>
// CHECK: gpu.launch_func @columns_kernels::@columns_k0_grouped_matmul_wgmma
func.func @columns(%dy: tensor<?x256xbf16>, %w: tensor<256x4x320xbf16>,
                   %offsets: tensor<4xi32>) -> tensor<?x320xbf16> {
  %dx = moe.grouped_matmul %dy, %w, %offsets {experts_in_columns}
      : tensor<?x256xbf16>, tensor<256x4x320xbf16>, tensor<4xi32>
      -> tensor<?x320xbf16>
  return %dx : tensor<?x320xbf16>
}

// -----

// The weight gradient (moe.grouped_weight_grad), one chunk of rows per expert
// (row_splits = 1): block barriers at n = 128, every
// copy a cp.async (an expert's last slice must read zeros past its rows, no
// tensor maps), the slice count of a tile from its expert's rows (the
// k-loop's bound is not a constant), both operands read transposed
// (M-major A, N-major B), stored into out[e, row, col].
// CHECK-LABEL: gpu.func @wgrad_k0_grouped_weight_grad_wgmma(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: nvvm.cp.async.shared.global
// CHECK: arith.ceildivui %{{.*}}, %c64
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %{{[0-9]+}} step %c1{{.*}} iter_args({{.*}}) -> (!llvm.struct<(f32,
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK: vector.store %{{.*}}, %arg2[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<4x200x136xf32>, vector<2xf32>
// CHECK-LABEL: func.func @wgrad(
// CHECK: gpu.launch_func @wgrad_kernels::@wgrad_k0_grouped_weight_grad_wgmma
// CHECK-SAME: threads in (%c256,
func.func @wgrad(%x: tensor<?x200xbf16>, %dy: tensor<?x136xbf16>,
                 %offsets: tensor<4xi32>) -> tensor<4x200x136xf32> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets {
      moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256,
                           row_splits = 1>}
      : tensor<?x200xbf16>, tensor<?x136xbf16>, tensor<4xi32>
      -> tensor<4x200x136xf32>
  return %g : tensor<4x200x136xf32>
}

// -----

// A tile's row_splits sets the chunks per expert (the tuner's candidates):
// 2 here, where the kernel's own choice would be 16; the kernel records it
// in the tile it was built with.
// CHECK-LABEL: gpu.func @wgrad_split_asked_k0_grouped_weight_grad_wgmma(
// CHECK-SAME: %arg2: memref<8x200x136xf32>
// CHECK: arith.divui %{{.*}}, %c2
// CHECK: arith.remui %{{.*}}, %c2
// CHECK-LABEL: gpu.func @wgrad_split_asked_k1_grouped_weight_grad_sum_row_splits(
// CHECK-COUNT-2: vector.load %arg0[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<8x200x136xf32>, vector<4xf32>
// CHECK-NOT: vector.load %arg0
// CHECK-LABEL: func.func @wgrad_split_asked(
// CHECK: gpu.launch_func @wgrad_split_asked_kernels::@wgrad_split_asked_k0_grouped_weight_grad_wgmma
// CHECK-SAME: moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 6, band_m = 8, row_splits = 2>
// CHECK: gpu.launch_func @wgrad_split_asked_kernels::@wgrad_split_asked_k1_grouped_weight_grad_sum_row_splits
func.func @wgrad_split_asked(%x: tensor<?x200xbf16>, %dy: tensor<?x136xbf16>,
                             %offsets: tensor<4xi32>)
    -> tensor<4x200x136xf32> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets {
      moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256,
                           row_splits = 2>}
      : tensor<?x200xbf16>, tensor<?x136xbf16>, tensor<4xi32>
      -> tensor<4x200x136xf32>
  return %g : tensor<4x200x136xf32>
}

// -----

// Without a tile set, a weight gradient with fewer output tiles than SMs
// (here 4 experts x 2 x 2 tiles for 132) splits each expert's rows into
// chunks: min(16, 132 / (2 * 4)) = 16 groups per expert, group g being
// chunk g % 16 of expert g / 16 (bounds from the offsets: ceil(rows / 16),
// at least the experts' average rows, rounded up to 64, at least 256);
// every block sorts the chunks with rows by their rows (a loop over the
// 64 chunks per chunk, largest first: the blocks' tiles then pair large
// with small), whose tiles store f32 partial sums [64, 200, 136]; a second
// kernel adds an expert's used chunks in order, plus the gradient given to
// accumulate into, rounded to bf16.
// CHECK-LABEL: gpu.func @wgrad_split_k0_grouped_weight_grad_wgmma(
// CHECK-SAME: %arg2: memref<64x200x136xf32>
// CHECK: arith.divui %{{.*}}, %c16
// CHECK: arith.remui %{{.*}}, %c16
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c64{{.*}} step %c1{{.*}} iter_args
// CHECK: gpu.barrier
// CHECK: nvvm.wgmma.mma_async
// CHECK: vector.store %{{.*}}, %arg2[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<64x200x136xf32>, vector<2xf32>
// CHECK-LABEL: gpu.func @wgrad_split_k1_grouped_weight_grad_sum_row_splits(
// CHECK-COUNT-16: vector.load %arg0[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<64x200x136xf32>, vector<4xf32>
// CHECK: vector.store %{{.*}}, %arg2[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<4x200x136xbf16>, vector<4xbf16>
// CHECK-LABEL: func.func @wgrad_split(
// CHECK: memref.alloc() {{.*}} : memref<64x200x136xf32>
// CHECK: gpu.launch_func @wgrad_split_kernels::@wgrad_split_k0_grouped_weight_grad_wgmma
// CHECK-NOT: gpu.launch_func {{.*}}wgmma
// CHECK: gpu.launch_func @wgrad_split_kernels::@wgrad_split_k1_grouped_weight_grad_sum_row_splits
func.func @wgrad_split(%x: tensor<?x200xbf16>, %dy: tensor<?x136xbf16>,
                       %offsets: tensor<4xi32>, %acc: tensor<4x200x136xbf16>)
    -> tensor<4x200x136xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets accumulate(%acc : tensor<4x200x136xbf16>)
      
      : tensor<?x200xbf16>, tensor<?x136xbf16>, tensor<4xi32>
      -> tensor<4x200x136xbf16>
  return %g : tensor<4x200x136xbf16>
}

// -----

// The weight gradient of [E, N, K] weights (transpose_rhs) with gathered
// rows: the same kernel with the operands swapped, dy [M, N] as A and the
// token rows as B, looked up through the slots per slice (no permuted copy
// of x), the output [E, N, K] written in place; the groups split dy's M
// rows.
// CHECK-LABEL: gpu.func @wgrad_t_k0_grouped_weight_grad_wgmma(%arg0: memref<?x136xbf16>, %arg1: memref<?x200xbf16>, %arg2: memref<4x136x200xf32>, %arg3: memref<4xi32>, %arg4: memref<?xi32>, %arg5: index)
// CHECK: memref.load %arg4
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK: vector.store %{{.*}}, %arg2[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<4x136x200xf32>, vector<2xf32>
// CHECK-LABEL: func.func @wgrad_t(
// CHECK: %[[M:.*]] = memref.dim %arg1, %c0{{.*}} : memref<?x136xbf16>
// CHECK: gpu.launch_func @wgrad_t_kernels::@wgrad_t_k0_grouped_weight_grad_wgmma {{.*}} args(%arg1 : memref<?x136xbf16>, %arg0 : memref<?x200xbf16>, %arg4 : memref<4x136x200xf32>, %arg2 : memref<4xi32>, %arg3 : memref<?xi32>, %[[M]] : index)
func.func @wgrad_t(%x: tensor<?x200xbf16>, %dy: tensor<?x136xbf16>,
                   %offsets: tensor<4xi32>, %slots: tensor<?xi32>)
    -> tensor<4x136x200xf32> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {transpose_rhs, k = 2 : i64,
       moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256,
                            row_splits = 1>}
      : tensor<?x200xbf16>, tensor<?x136xbf16>, tensor<4xi32>
      -> tensor<4x136x200xf32>
  return %g : tensor<4x136x200xf32>
}

// -----

// The same with a bf16 output and no tile: the tokens gathered by slot keep
// the warp-specialized kernel on cp.async (no tensor map), so it runs up to
// 256 rows per expert on average (here 64 * 256), the block-barrier kernel
// above (64 experts: enough tiles not to split).
// CHECK-LABEL: gpu.func @wgrad_t_gathered_k0_grouped_weight_grad_wgmma_le16384(%arg0: memref<?x200xbf16>, %arg1: memref<?x264xbf16>, %arg2: memref<64x200x264xbf16>, %arg3: memref<64xi32>, %arg4: memref<?xi32>, %arg5: index)
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: nvvm.cp.async.bulk.global.shared.cta
// CHECK-LABEL: func.func @wgrad_t_gathered(
// CHECK-NOT: moe.tensor_map_box
// CHECK: gpu.launch_func @wgrad_t_gathered_kernels::@wgrad_t_gathered_k0_grouped_weight_grad_wgmma_le16384 {{.*}} threads in (%c384
// CHECK: gpu.launch_func @wgrad_t_gathered_kernels::@wgrad_t_gathered_k1_grouped_weight_grad_wgmma blocks {{.*}} threads in (%c256
func.func @wgrad_t_gathered(%x: tensor<?x264xbf16>, %dy: tensor<?x200xbf16>,
                            %offsets: tensor<64xi32>, %slots: tensor<?xi32>)
    -> tensor<64x200x264xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {transpose_rhs, k = 2 : i64}
      : tensor<?x264xbf16>, tensor<?x200xbf16>, tensor<64xi32>
      -> tensor<64x200x264xbf16>
  return %g : tensor<64x200x264xbf16>
}

// -----

// The warp-specialized weight gradient with a bf16 output stores through a
// staging tile of its own: the MMA threads wait until the last tile's bulk
// copies have read it, write their pairs behind a barrier of the 256 MMA
// threads, and MMA thread r issues row r's bulk copy, not waited for until
// the next tile (and, for the writes, before the threads exit).
// The producer loads a whole 64-row slice by TMA, 64 x 64 boxes of dy
// (%arg4, four for n = 256) and x (%arg5, two for m = 128), and the last
// slice of a reduction that is not a multiple of 64 by cp.async, which
// zero-fills past the expert's rows; the TMA thread's arrival is then a
// plain one (full barriers: 128 producer threads + 1).
// CHECK-LABEL: gpu.func @wgrad_bulk_k0_grouped_weight_grad_wgmma(
// CHECK-SAME: %arg4: !llvm.ptr, %arg5: !llvm.ptr
// CHECK: nvvm.mbarrier.init %{{.*}}, %c129_i32
// CHECK: scf.if
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3>
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c49152_i32
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg5, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}]
// CHECK-COUNT-4: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%{{[0-9]+}}, %{{[0-9]+}}]
// CHECK: nvvm.cp.async.mbarrier.arrive %{{.*}} {noinc = true}
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: nvvm.barrier id = %c3_i32{{.*}} number_of_threads = %c256_i32
// CHECK: vector.store %{{.*}} : memref<?xbf16, #gpu.address_space<workgroup>>, vector<2xbf16>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: nvvm.barrier id = %c3_i32{{.*}} number_of_threads = %c256_i32
// CHECK: nvvm.cp.async.bulk.global.shared.cta
// CHECK-NEXT: nvvm.cp.async.bulk.commit.group
// CHECK: nvvm.cp.async.bulk.wait_group 0{{$}}
// CHECK-LABEL: func.func @wgrad_bulk(
// CHECK-DAG: %[[DY_MAP:.*]] = builtin.unrealized_conversion_cast %arg1 : memref<?x264xbf16> to !llvm.ptr {moe.tensor_map_box = array<i64: 64, 64>}
// CHECK-DAG: %[[X_MAP:.*]] = builtin.unrealized_conversion_cast %arg0 : memref<?x200xbf16> to !llvm.ptr {moe.tensor_map_box = array<i64: 64, 64>}
// CHECK: gpu.launch_func {{.*}} threads in (%c384, %c1, %c1) {{.*}} %[[DY_MAP]] : !llvm.ptr, %[[X_MAP]] : !llvm.ptr{{.*}} stages = 3,
func.func @wgrad_bulk(%x: tensor<?x200xbf16>, %dy: tensor<?x264xbf16>,
                      %offsets: tensor<4xi32>) -> tensor<4x200x264xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets
      {
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384,
                            producers = 128, row_splits = 1>}
      : tensor<?x200xbf16>, tensor<?x264xbf16>, tensor<4xi32>
      -> tensor<4x200x264xbf16>
  return %g : tensor<4x200x264xbf16>
}

// -----

// Gradient accumulation (`accumulate`, an f32 main gradient): the kernel
// takes the gradient added to after the offsets; per fragment row the
// epilogue loads a batch of 8 of its pairs (pinned loads: inline assembly
// that the compilers keep ahead of the stores), then adds each to the f32
// sums before storing it (so the output may be the same memory). Before
// the tile's k-loop its part of the main gradient goes to L2, one prefetch
// per 128-byte line (4 per MMA thread: 128 rows of 8 lines of 32 f32).
// Without a tile, up to 512 rows per expert on average (here 32768 rows)
// run the warp-specialized kernel, more the block-barrier one (64 experts:
// 256 output tiles, more than the SMs, so the rows are not split).
// CHECK-LABEL: gpu.func @wgrad_acc_k0_grouped_weight_grad_wgmma_le32768(
// CHECK-COUNT-4: llvm.inline_asm has_side_effects "prefetch.global.L2 [$0];"
// CHECK-NOT: llvm.inline_asm has_side_effects "prefetch.global.L2
// CHECK: nvvm.wgmma.mma_async
// CHECK-COUNT-8: llvm.inline_asm has_side_effects "ld.global.ca.v2.b32 {$0, $1}, [$2];"
// CHECK-LABEL: gpu.func @wgrad_acc_k1_grouped_weight_grad_wgmma(%arg0: memref<?x200xbf16>, %arg1: memref<?x264xbf16>, %arg2: memref<64x200x264xf32>, %arg3: memref<64xi32>, %arg4: memref<64x200x264xf32>, %arg5: index)
// CHECK-COUNT-4: llvm.inline_asm has_side_effects "prefetch.global.L2 [$0];"
// CHECK-NOT: llvm.inline_asm has_side_effects "prefetch.global.L2
// CHECK: nvvm.wgmma.mma_async
// CHECK: memref.extract_aligned_pointer_as_index %arg4
// CHECK-COUNT-8: llvm.inline_asm has_side_effects "ld.global.ca.v2.b32 {$0, $1}, [$2];"
// CHECK-NOT: vector.store
// CHECK: arith.addf
// CHECK: vector.store %{{.*}}, %arg2[{{.*}}] {{.*}} : memref<64x200x264xf32>, vector<2xf32>
// CHECK-LABEL: func.func @wgrad_acc(
// CHECK: gpu.launch_func @wgrad_acc_kernels::@wgrad_acc_k0_grouped_weight_grad_wgmma_le32768 {{.*}} threads in (%c384
// CHECK: gpu.launch_func @wgrad_acc_kernels::@wgrad_acc_k1_grouped_weight_grad_wgmma {{.*}} args(%arg0 : memref<?x200xbf16>, %arg1 : memref<?x264xbf16>, %arg4 : memref<64x200x264xf32>, %arg2 : memref<64xi32>, %arg3 : memref<64x200x264xf32>,
func.func @wgrad_acc(%x: tensor<?x200xbf16>, %dy: tensor<?x264xbf16>,
                     %offsets: tensor<64xi32>, %main: tensor<64x200x264xf32>)
    -> tensor<64x200x264xf32> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets
      accumulate(%main : tensor<64x200x264xf32>)
      
      : tensor<?x200xbf16>, tensor<?x264xbf16>, tensor<64xi32>
      -> tensor<64x200x264xf32>
  return %g : tensor<64x200x264xf32>
}

// -----

// A bf16 weight gradient without a tile: the warp-specialized kernel with
// bulk stores at every row count, one launch (64 experts: enough tiles not
// to split).
// CHECK-LABEL: func.func @wgrad_default(
// CHECK: gpu.launch_func @wgrad_default_kernels::@wgrad_default_k0_grouped_weight_grad_wgmma {{.*}} threads in (%c384, {{.*}} producers = 128>
// CHECK-NOT: gpu.launch_func
func.func @wgrad_default(%x: tensor<?x200xbf16>,
                                 %dy: tensor<?x264xbf16>,
                                 %offsets: tensor<64xi32>)
    -> tensor<64x200x264xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets
      : tensor<?x200xbf16>, tensor<?x264xbf16>, tensor<64xi32>
      -> tensor<64x200x264xbf16>
  return %g : tensor<64x200x264xbf16>
}

// -----

// Row buckets whose tiles split (a tuning cache's): the bucket's split
// matmul and its sum both launch only for rows in the bucket (grids
// multiplied by the same 0 / 1), the unsplit base kernel above it.
// CHECK-LABEL: func.func @wgrad_split_buckets(
// CHECK: %[[ON:.*]] = arith.subi
// CHECK: memref.alloc() {{.*}} : memref<8x200x136xf32>
// CHECK: gpu.launch_func @wgrad_split_buckets_kernels::@wgrad_split_buckets_k0_grouped_weight_grad_wgmma_le4096 {{.*}} row_splits = 2>
// CHECK: arith.muli %{{.*}}, %[[ON]]
// CHECK: gpu.launch_func @wgrad_split_buckets_kernels::@wgrad_split_buckets_k1_grouped_weight_grad_sum_row_splits
// CHECK: gpu.launch_func @wgrad_split_buckets_kernels::@wgrad_split_buckets_k2_grouped_weight_grad_wgmma blocks
// CHECK-NOT: gpu.launch_func
func.func @wgrad_split_buckets(%x: tensor<?x200xbf16>, %dy: tensor<?x136xbf16>,
                               %offsets: tensor<4xi32>)
    -> tensor<4x200x136xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets {
      moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256,
                           row_splits = 1>,
      moe.tile_buckets = [#moe.tile_bucket<max_rows = 4096,
          tile = <m = 128, n = 128, k = 64, threads = 256, row_splits = 2>>]}
      : tensor<?x200xbf16>, tensor<?x136xbf16>, tensor<4xi32>
      -> tensor<4x200x136xbf16>
  return %g : tensor<4x200x136xbf16>
}

// -----

// A dense Aᵀ·B (A read as [K, M]: the router's weight gradient) runs on the
// weight gradient's kernel, without offsets. Its 8 output tiles (128 x 256)
// would leave most of the 132 SMs idle, so the rows split into chunks (at
// least 256 rows, multiples of 64) that are the kernel's groups: 16 at
// n = 256, so 128 x 128 tiles instead, 16 of them in 8 chunks. The kernel
// computes the chunks' bounds from the row count, stores each chunk's f32
// partial sum [8, K, N] (chunks without rows store nothing), and a second
// kernel adds the chunks that have rows, in chunk order, into out (16-byte
// loads, rounded to bf16 once).
// CHECK-LABEL: gpu.func @dense_at_b_k0_matmul_wgmma(
// CHECK-SAME: %arg2: memref<8x128x2048xf32>, %arg3: index)
// CHECK: arith.ceildivui
// CHECK: arith.minui
// CHECK: nvvm.wgmma.mma_async {{.*}} A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK-LABEL: gpu.func @dense_at_b_k1_matmul_sum_row_splits(
// CHECK-SAME: %arg0: memref<8x128x2048xf32>, %arg1: index, %arg2: memref<128x2048xbf16>
// CHECK: arith.ceildivui %arg1
// CHECK-COUNT-8: vector.load %arg0[{{.*}}] {{.*}} : memref<8x128x2048xf32>, vector<4xf32>
// CHECK-NOT: vector.load
// CHECK: vector.store %{{.*}}, %arg2[%{{.*}}, %{{.*}}] {{.*}} : memref<128x2048xbf16>, vector<4xbf16>
// CHECK-LABEL: func.func @dense_at_b(
// CHECK: gpu.launch_func @dense_at_b_kernels::@dense_at_b_k0_matmul_wgmma {{.*}}moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256
// CHECK: gpu.launch_func @dense_at_b_kernels::@dense_at_b_k1_matmul_sum_row_splits
func.func @dense_at_b(%dl: tensor<?x128xbf16>, %x: tensor<?x2048xbf16>)
    -> tensor<128x2048xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<128x2048xbf16>
  %acc = linalg.fill ins(%zero : bf16) outs(%e : tensor<128x2048xbf16>)
      -> tensor<128x2048xbf16>
  %y = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x128xbf16>, tensor<?x2048xbf16>)
      outs(%acc : tensor<128x2048xbf16>) -> tensor<128x2048xbf16>
  return %y : tensor<128x2048xbf16>
}

// With as many output tiles as SMs (8 x 16 = 128 of 132) the rows stay one
// group, and the wgmma kernel writes out: one launch.
// CHECK-LABEL: gpu.func @dense_at_b_wide_k0_matmul_wgmma(
// CHECK-SAME: %arg2: memref<1024x4096xf32>, %arg3: index)
// CHECK-LABEL: func.func @dense_at_b_wide(
// CHECK: gpu.launch_func @dense_at_b_wide_kernels::@dense_at_b_wide_k0_matmul_wgmma
// CHECK-NOT: gpu.launch_func
// CHECK: return
func.func @dense_at_b_wide(%dl: tensor<?x1024xbf16>, %x: tensor<?x4096xbf16>)
    -> tensor<1024x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024x4096xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<1024x4096xf32>)
      -> tensor<1024x4096xf32>
  %y = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x1024xbf16>, tensor<?x4096xbf16>)
      outs(%acc : tensor<1024x4096xf32>) -> tensor<1024x4096xf32>
  return %y : tensor<1024x4096xf32>
}

// -----

// LoRA fused (block barriers asked for, n = 256 without a producer warpgroup): each
// K slice's 4 wgmmas are followed by 4 m64n16k16 ones (x · A_eᵀ, r = 16)
// from the stage's A_e tile; after the k-loop the LoRA product U · B_eᵀ is
// one m64n256k16 wgmma (R = 16) from the last stage, then the epilogue.
// The adapters are kernel arguments after the gathered slots.
// CHECK-LABEL: gpu.func @lora_k0_grouped_matmul_wgmma(
// CHECK-SAME: %arg5: memref<2048x2048xbf16>, %arg6: memref<1536x2048xbf16>
// CHECK-NOT: nvvm.mbarrier
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 16, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: gpu.barrier
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-LABEL: func.func @lora(
// CHECK: gpu.launch_func @lora_kernels::@lora_k0_grouped_matmul_wgmma {{.*}} threads in (%c256, %c1, %c1) dynamic_shared_memory_size
func.func @lora(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32>,
                %w: tensor<128x1536x2048xbf16>, %offsets: tensor<128xi32>,
                %a: tensor<2048x2048xbf16>, %b: tensor<1536x2048xbf16>)
    -> tensor<?x768xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%a, %b : tensor<2048x2048xbf16>, tensor<1536x2048xbf16>)
      {k = 8 : i64, transpose_rhs, lora_scaling = 2.0 : f32,
       activation = #moe.activation<swiglu>,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256>}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  return %y : tensor<?x768xbf16>
}

// -----

// Past rank 32, U's accumulators (R/2 registers per thread) go on top of
// the tile's: the MMA warpgroups take 232 registers and the producer keeps
// 40 (216 and 72 left ptxas spilling at r = 64).
// CHECK-LABEL: gpu.func @lora_ws_r64_k0_grouped_matmul_wgmma(
// CHECK: nvvm.setmaxregister decrease 40
// CHECK: nvvm.setmaxregister increase 232
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>
func.func @lora_ws_r64(%x: tensor<?x256xbf16>, %w: tensor<4x512x256xbf16>,
                       %offsets: tensor<4xi32>, %a: tensor<256x256xbf16>,
                       %b: tensor<512x256xbf16>) -> tensor<?x512xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      lora(%a, %b : tensor<256x256xbf16>, tensor<512x256xbf16>)
      {transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x256xbf16>, tensor<4x512x256xbf16>, tensor<4xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// LoRA in the warp-specialized kernel (the default at n = 256, r <= 64).
// Every producer thread's cp.async of the A_e rows arrives on a stage's
// full barrier (128 + the TMA thread); a last barrier pair hands the B_e
// tile over (128 producer arrivals, 8 MMA warps). The producer loads B_e
// after the tile's last slice; the MMA warpgroups add x · A_eᵀ in the
// k-loop, then write s · U behind a barrier of their 128 threads, wait for
// B_e and add U · B_eᵀ with one m64n256k16 wgmma (R = 16) before freeing
// the B_e tile.
// CHECK-LABEL: gpu.func @lora_ws_k0_grouped_matmul_wgmma(
// CHECK: nvvm.mbarrier.init {{.*}}, %c129_i32
// CHECK: nvvm.mbarrier.init {{.*}}, %c8_i32
// CHECK: nvvm.mbarrier.init {{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init {{.*}}, %c8_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: nvvm.cp.async.mbarrier.arrive {{.*}} {noinc = true}
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.mbarrier.arrive {{.*}} {noinc = true}
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 16, k = 16>
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.barrier id = {{.*}} number_of_threads = %c128_i32
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.mbarrier.arrive
// CHECK-LABEL: func.func @lora_ws(
// CHECK: gpu.launch_func @lora_ws_kernels::@lora_ws_k0_grouped_matmul_wgmma {{.*}} threads in (%c384, %c1, %c1) {{.*}} moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384, stages = 3, band_m = 8, producers = 128>
func.func @lora_ws(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32>,
                   %w: tensor<128x1536x2048xbf16>, %offsets: tensor<128xi32>,
                   %a: tensor<2048x2048xbf16>, %b: tensor<1536x2048xbf16>)
    -> tensor<?x768xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%a, %b : tensor<2048x2048xbf16>, tensor<1536x2048xbf16>)
      {k = 8 : i64, transpose_rhs, lora_scaling = 2.0 : f32,
       activation = #moe.activation<swiglu>}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  return %y : tensor<?x768xbf16>
}

// -----

// Where the LoRA tiles leave too little shared memory for the scan tables
// of many experts (E = 900, r = 64), the default falls back to the
// block-barrier kernel.
// CHECK-LABEL: func.func @lora_many_experts(
// CHECK: gpu.launch_func {{.*}} threads in (%c256{{.*}} moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256,
func.func @lora_many_experts(%x: tensor<?x256xbf16>,
                             %w: tensor<900x512x256xbf16>,
                             %offsets: tensor<900xi32>,
                             %a: tensor<57600x256xbf16>,
                             %b: tensor<512x57600xbf16>)
    -> tensor<?x512xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      lora(%a, %b : tensor<57600x256xbf16>, tensor<512x57600xbf16>)
      {transpose_rhs}
      : tensor<?x256xbf16>, tensor<900x512x256xbf16>, tensor<900xi32>
      -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// activation = swiglu_grad: the tiles cover the matmul's N = 264 columns,
// half the output's (528). The accumulators are SwiGLU's output gradient:
// each lane of a quad gets the 8 f32 values of one chunk (column c, c + 8)
// by index shuffles, reads the saved input's gate at c and up at c + 264
// as 16-byte loads (a batch of 4 chunk groups' loads before their stores)
// and stores the gate and up gradients there, 16 bytes each.
// CHECK-LABEL: gpu.func @swiglu_grad_k0_grouped_matmul_wgmma(
// CHECK-SAME: %[[OUT:[^:]*]]: memref<?x528xbf16>, %{{[^:]*}}: memref<4xi32>, %[[H:[^:]*]]: memref<?x528xbf16>
// CHECK: %[[WIDE:.*]] = memref.dim %[[OUT]], %{{.*}} : memref<?x528xbf16>
// CHECK: %[[N:.*]] = arith.divui %[[WIDE]], %c2
// CHECK-COUNT-8: vector.load %[[H]][{{.*}} : memref<?x528xbf16>, vector<8xbf16>
// CHECK-NOT: vector.load
// CHECK: gpu.shuffle idx
// CHECK: vector.store %{{.*}}, %[[OUT]][%[[ROW:.*]], %[[COL:.*]]] {{.*}} vector<8xbf16>
// CHECK: %[[UP:.*]] = arith.addi %[[COL]], %[[N]] : index
// CHECK: vector.store %{{.*}}, %[[OUT]][%[[ROW]], %[[UP]]] {{.*}} vector<8xbf16>
// CHECK-LABEL: func.func @swiglu_grad(
// CHECK: gpu.launch_func {{.*}} threads in (%c384, %c1, %c1)
func.func @swiglu_grad(%dy: tensor<?x200xbf16>, %w: tensor<4x200x264xbf16>,
                       %offsets: tensor<4xi32>, %h: tensor<?x528xbf16>)
    -> tensor<?x528xbf16> {
  %g = moe.grouped_matmul %dy, %w, %offsets
      activation_input(%h : tensor<?x528xbf16>)
      {activation = #moe.activation<swiglu_grad>}
      : tensor<?x200xbf16>, tensor<4x200x264xbf16>, tensor<4xi32>
      -> tensor<?x528xbf16>
  return %g : tensor<?x528xbf16>
}
