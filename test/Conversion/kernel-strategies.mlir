// RUN: moec-opt %s --convert-moe-to-kernels -split-input-file | FileCheck %s
// One op per strategy, its strategy given by a hand-written #moe.kernel:
// the emitted gpu.func shows the family (KernelPattern, one per op and
// strategy). The sm90_wgmma strategy's kernels are checked in
// convert-moe-to-kernels-sm90a.mlir; which strategy each target picks in
// moe-select-kernel.mlir.

// scalar: one thread per output element, scalar loads and stores.
// CHECK-LABEL: gpu.func @swiglu_k0_swiglu(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-NOT: vector.
// CHECK: memref.load %arg0
// CHECK: memref.load %arg0
// CHECK: llvm.call_intrinsic "llvm.exp2.f32"
// CHECK: memref.store %{{.*}}, %arg1
// CHECK: gpu.return
// CHECK: gpu.launch_func  @swiglu_kernels::@swiglu_k0_swiglu
// CHECK-SAME: moe.launch = #moe.launch<grid = <s0 * 32 ceildiv 256>
module attributes {moe.target = #moe.target<kind = "nvvm", shared_memory = 49152>} {
  func.func @swiglu(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
    %y = moe.swiglu %x {moe.kernel = #moe.kernel<strategy = scalar,
        tile = <m = 1, n = 1, k = 1, threads = 256>>}
        : tensor<?x64xbf16> -> tensor<?x32xbf16>
    return %y : tensor<?x32xbf16>
  }
}

// -----

// vector: each thread moves 16 bytes (8 bf16) of gate and up per access.
// CHECK-LABEL: gpu.func @swiglu_k0_swiglu_vec(
// CHECK: vector.load %arg0{{.*}} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: vector.load %arg0{{.*}} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: vector.store %{{.*}}, %arg1{{.*}} : memref<?x32xbf16>, vector<8xbf16>
// CHECK: gpu.launch_func  @swiglu_kernels::@swiglu_k0_swiglu_vec
// CHECK-SAME: moe.launch = #moe.launch<grid = <s0 * 4 ceildiv 256>, scalars = [<s0 * 4>]>
module attributes {moe.target = #moe.target<kind = "nvvm", shared_memory = 49152>} {
  func.func @swiglu(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
    %y = moe.swiglu %x {moe.kernel = #moe.kernel<strategy = vector,
        tile = <m = 1, n = 1, k = 1, threads = 256>>}
        : tensor<?x64xbf16> -> tensor<?x32xbf16>
    return %y : tensor<?x32xbf16>
  }
}

// -----

// scalar routing: a thread per token, a loop over its experts, no warp
// collectives.
// CHECK-LABEL: gpu.func @topk_k0_router_topk(
// CHECK-NOT: gpu.shuffle
// CHECK-NOT: nvvm.
// CHECK: scf.for
// CHECK: gpu.return
module attributes {moe.target = #moe.target<kind = "nvvm", shared_memory = 49152>} {
  func.func @topk(%l: tensor<?x64xf32>) -> (tensor<?x4xf32>, tensor<?x4xi32>) {
    %w, %ids = moe.router_topk %l k = 4 {moe.kernel = #moe.kernel<
        strategy = scalar, tile = <m = 1, n = 1, k = 1, threads = 128>>}
        : tensor<?x64xf32> -> tensor<?x4xf32>, tensor<?x4xi32>
    return %w, %ids : tensor<?x4xf32>, tensor<?x4xi32>
  }
}

// -----

// warp: a warp per token; the softmax's max and sum are butterfly
// shuffles, each of the k picks a redux and a ballot.
// CHECK-LABEL: gpu.func @topk_k0_router_topk_warp(
// CHECK: vector.load %arg0{{.*}} : memref<?x64xf32>, vector<2xf32>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: nvvm.redux.sync  umax
// CHECK: nvvm.vote.sync  ballot
// CHECK: gpu.launch_func  @topk_kernels::@topk_k0_router_topk_warp
// CHECK-SAME: moe.launch = #moe.launch<grid = <s0 ceildiv 4>
module attributes {moe.target = #moe.target<kind = "nvvm", shared_memory = 49152>} {
  func.func @topk(%l: tensor<?x64xf32>) -> (tensor<?x4xf32>, tensor<?x4xi32>) {
    %w, %ids = moe.router_topk %l k = 4 {moe.kernel = #moe.kernel<
        strategy = warp, tile = <m = 1, n = 1, k = 1, threads = 128>>}
        : tensor<?x64xf32> -> tensor<?x4xf32>, tensor<?x4xi32>
    return %w, %ids : tensor<?x4xf32>, tensor<?x4xi32>
  }
}

// -----

// warp, moe.quantize {axis = blocks, transpose}: a block of 8 warps per
// 128x128 block of the weights, each thread's 8 chunks (8 bf16) loaded
// once, the amax over the warp (shuffles) and the 8 warps (workgroup
// memory), then the FP8 data through a 128x128 workgroup tile: each
// thread's run of 8 rows of a column goes in as one 8-byte store at a
// swizzled place (8 of them), and the [E, K, N] rows leave 8 bytes a store.
// CHECK-LABEL: gpu.func @weights_k0_quantize_blocks_warp(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-COUNT-8: vector.load %arg0{{.*}} : memref<4x272x136xbf16>, vector<8xbf16>
// CHECK: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK: memref.store %{{.*}}, %arg2[%{{.*}}, %{{.*}}, %{{.*}}] : memref<4x2x3xf32>
// CHECK: arith.xori
// CHECK-COUNT-8: vector.store %{{.*}} : memref<128x128xf8E4M3FN, #gpu.address_space<workgroup>>, vector<8xf8E4M3FN>
// CHECK-NOT: memref.store {{.*}}workgroup
// CHECK: gpu.barrier
// CHECK: arith.xori
// CHECK: vector.load %{{.*}} : memref<128x128xf8E4M3FN, #gpu.address_space<workgroup>>, vector<8xf8E4M3FN>
// CHECK: vector.store %{{.*}}, %arg1{{.*}} : memref<4x136x272xf8E4M3FN>, vector<8xf8E4M3FN>
// CHECK: gpu.launch_func  @weights_kernels::@weights_k0_quantize_blocks_warp
// CHECK-SAME: blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}}) dynamic_shared_memory_size %c16416_i32
module attributes {moe.target = #moe.target<kind = "nvvm", shared_memory = 49152>} {
  func.func @weights(%w: tensor<4x272x136xbf16>)
      -> (tensor<4x136x272xf8E4M3FN>, tensor<4x2x3xf32>) {
    %q, %s = moe.quantize %w group_size = 128
        {axis = #moe.axis<blocks>, transpose,
         moe.kernel = #moe.kernel<strategy = warp,
             tile = <m = 1, n = 1, k = 1, threads = 256>>}
        : tensor<4x272x136xbf16> -> tensor<4x136x272xf8E4M3FN>, tensor<4x2x3xf32>
    return %q, %s : tensor<4x136x272xf8E4M3FN>, tensor<4x2x3xf32>
  }
}

// -----

// vector, moe.quantize {axis = colwise, transpose} (the FP8 weight
// gradient's operands) on a cp.async target: the column-wise block kernel
// (a 128-row scale block of 256 columns copied into a workgroup tile whose
// 16-byte chunks are XOR-swizzled by run of 16 rows, and nothing else in
// workgroup memory), each thread then reading a run of 16 rows of 8
// columns (16-byte loads), the column amaxes meeting over the 8 lanes of
// a chunk (three xor shuffles per column), and writing each of its 8
// columns as 16 bytes of a [K, 128 * B] row (zeros past the expert's rows,
// and for unused blocks). No zeroing kernel before it.
// CHECK-LABEL: gpu.func @operand_k0_quantize_block_ends(
// CHECK-NOT: gpu.func @operand_k{{.*}}_quantize_tail
// CHECK-LABEL: gpu.func @operand_k1_quantize_colwise_block(
// CHECK: memref.view {{.*}} to memref<128x256xbf16, #gpu.address_space<workgroup>>
// CHECK-NOT: address_space<workgroup>>{{.*}}f32
// CHECK: arith.xori
// CHECK: nvvm.cp.async.shared.global
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-16: vector.load %{{.*}} : memref<128x256xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: gpu.shuffle  xor %{{.*}}, %c1_i32
// CHECK: gpu.shuffle  xor %{{.*}}, %c2_i32
// CHECK: gpu.shuffle  xor %{{.*}}, %c4_i32
// CHECK: vector.store %{{.*}}, %arg2{{.*}} : memref<?x256xf32>, vector<8xf32>
// CHECK-COUNT-8: vector.store %{{.*}}, %arg1{{.*}} : memref<256x?xf8E4M3FN>, vector<16xf8E4M3FN>
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return
// CHECK-NOT: quantize_tail
module attributes {moe.target = #moe.target<kind = "nvvm", chip = "sm_90a", shared_memory = 232448>} {
  func.func @operand(%x: tensor<?x256xbf16>, %offsets: tensor<8xi32>)
      -> (tensor<256x?xf8E4M3FN>, tensor<?x256xf32>) {
    %q, %s = moe.quantize %x offsets(%offsets : tensor<8xi32>) group_size = 128
        {axis = #moe.axis<colwise>, transpose,
         moe.kernel = #moe.kernel<strategy = vector,
             tile = <m = 1, n = 1, k = 1, threads = 256>>}
        : tensor<?x256xbf16> -> tensor<256x?xf8E4M3FN>, tensor<?x256xf32>
    return %q, %s : tensor<256x?xf8E4M3FN>, tensor<?x256xf32>
  }
}
