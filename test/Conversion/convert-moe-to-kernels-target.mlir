// RUN: moec-opt %s --convert-moe-to-kernels=target=nvvm -split-input-file | FileCheck %s --check-prefix=NVVM
// RUN: moec-opt %s --convert-moe-to-kernels=target=host -split-input-file | FileCheck %s --check-prefix=HOST
// RUN: moec-opt %s --convert-moe-to-kernels=target=rocdl -split-input-file | FileCheck %s --check-prefix=ROCDL
// RUN: moec-opt %s --convert-moe-to-kernels=target=sm90a -split-input-file | FileCheck %s --check-prefix=SM90A
// RUN: not moec-opt %s --convert-moe-to-kernels=target=ptx -split-input-file 2>&1 | FileCheck %s --check-prefix=BAD

// The target option picks the kernels. With nvvm, one thread per 16-byte chunk:
// the group's amax combined with xor shuffles, FP8 encoded by the hardware
// conversion in pairs. With host (threads run one by one), one thread per group,
// integer FP8 encoding.
// NVVM: gpu.func @quantize_k0_quantize_rowwise_warp
// NVVM-COUNT-4: gpu.shuffle xor
// NVVM: nvvm.convert.f32x2.to.f8x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>}
// HOST: gpu.func @quantize_k0_quantize_rowwise_vec
// HOST-NOT: gpu.shuffle
// HOST-NOT: nvvm.
// BAD: unknown target 'ptx' (expected generic, nvvm, sm90a, rocdl or host)
func.func @quantize(%x: tensor<?x256xbf16>)
    -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>) {
  %d, %s = moe.quantize %x group_size = 128
      : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  return %d, %s : tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
}

// -----

// Routing: with nvvm, one warp per token for the top-k (ids found by a
// ballot among equal values) and the sort as rank (block barriers between
// warp counts and prefixes), scan and place kernels. rocdl finds the lane
// by a min-reduction instead of the ballot. The host keeps the scalar
// kernels: count, offsets, place.
// NVVM: gpu.func @route_k0_router_topk_warp
// NVVM: gpu.shuffle xor
// NVVM: nvvm.vote.sync ballot
// NVVM: gpu.func @route_k1_sort_by_expert_rank
// NVVM: gpu.shuffle idx
// NVVM: gpu.barrier
// NVVM: gpu.func @route_k2_sort_by_expert_scan
// NVVM: gpu.shuffle up
// NVVM: gpu.func @route_k3_sort_by_expert_place
// ROCDL: gpu.func @route_k0_router_topk_warp
// ROCDL-NOT: nvvm.
// ROCDL: gpu.func @route_k1_sort_by_expert_rank
// HOST: gpu.func @route_k0_router_topk(
// HOST-NOT: gpu.shuffle
// HOST: gpu.func @route_k1_sort_by_expert_count
// HOST: gpu.func @route_k2_sort_by_expert_offsets
// HOST: gpu.func @route_k3_sort_by_expert_place
// HOST-NOT: gpu.barrier
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

// Grouped matmul with a gathered lhs: sm90a runs the warp-specialized
// wgmma kernel (384 threads over a persistent grid of at most 132 blocks:
// a producer warpgroup with fewer registers gathers the lhs rows with
// cp.async, one of its threads loads the gate and up rows of the rhs by
// TMA from a tensor map passed by value (parameter 33 of the lowered
// kernel: five memrefs come first), and both complete each stage's "full"
// mbarrier (128 cp.async arrivals + 1 expect_tx); the MMA warpgroups with
// more registers wait on it, fence the async proxy, run wgmmas and release
// the stage on its "empty" mbarrier); plain nvvm keeps the scalar kernel.
// SM90A-LABEL: gpu.func @gate_up_k0_grouped_matmul_wgmma
// SM90A-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: index) kernel attributes {{{.*}}moe.grid_constant_args = array<i64: 33>}
// SM90A: gpu.dynamic_shared_memory
// SM90A-COUNT-4: nvvm.mbarrier.init %{{.*}}, %c129_i32{{.*}}
// SM90A: gpu.barrier
// SM90A: nvvm.setmaxregister  decrease 72
// SM90A: nvvm.mbarrier.try_wait.parity
// SM90A: nvvm.cp.async.shared.global {{.*}}, 16, cache = cg
// SM90A: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c32768_i32
// SM90A-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}]
// SM90A: nvvm.cp.async.mbarrier.arrive %{{.*}} {noinc = true}
// SM90A: nvvm.setmaxregister  increase 216
// SM90A: nvvm.mbarrier.try_wait.parity
// SM90A: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// SM90A: nvvm.wgmma.fence.aligned
// SM90A-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// SM90A: nvvm.wgmma.commit.group.sync.aligned
// SM90A: nvvm.wgmma.wait.group.sync.aligned 1
// SM90A: nvvm.mbarrier.arrive
// SM90A: nvvm.wgmma.wait.group.sync.aligned 0
// SM90A: nvvm.mbarrier.arrive
// SM90A-LABEL: func.func @gate_up
// SM90A: builtin.unrealized_conversion_cast %{{.*}} : memref<128x1536x2048xbf16> to !llvm.ptr {moe.tensor_map_box = array<i64: 64, 128, 1>}
// SM90A: arith.minui %{{.*}}, %c132
// SM90A: gpu.launch_func @{{.*}}::@gate_up_k0_grouped_matmul_wgmma blocks in ({{.*}}) threads in (%c384{{.*}}) dynamic_shared_memory_size
// NVVM-LABEL: func.func @gate_up
// NVVM-NOT: nvvm.wgmma
func.func @gate_up(%x: tensor<?x2048xbf16>, %slots: tensor<?xi32>,
                   %w: tensor<128x1536x2048xbf16>, %offsets: tensor<128xi32>)
    -> tensor<?x768xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 8 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
      -> tensor<?x768xbf16>
  return %y : tensor<?x768xbf16>
}

// -----

// Rows in expert order: both operands by TMA (a 3-d map of the weights
// and a 2-d map of the rows, parameters 28 and 29 of the lowered kernel
// after four memrefs of 7 + 9 + 7 + 5), so one producer thread's expect_tx
// is the only arrival on a stage's full barrier.
// SM90A-LABEL: gpu.func @down_k0_grouped_matmul_wgmma
// SM90A-SAME: %{{.*}}: memref<128xi32>, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: index)
// SM90A-SAME: moe.grid_constant_args = array<i64: 28, 29>
// SM90A-COUNT-4: nvvm.mbarrier.init %{{.*}}, %c1_i32{{.*}}
// SM90A-NOT: nvvm.cp.async.shared.global
// SM90A: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c49152_i32
// SM90A: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}] :
// SM90A: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}] :
// SM90A-LABEL: func.func @down
// SM90A: builtin.unrealized_conversion_cast %{{.*}} : memref<128x2048x768xbf16> to !llvm.ptr {moe.tensor_map_box = array<i64: 64, 256, 1>}
// SM90A: builtin.unrealized_conversion_cast %{{.*}} : memref<?x768xbf16> to !llvm.ptr {moe.tensor_map_box = array<i64: 64, 128>}
// SM90A: gpu.launch_func @{{.*}}::@down_k0_grouped_matmul_wgmma blocks in ({{.*}}) threads in (%c384{{.*}}) dynamic_shared_memory_size
func.func @down(%h: tensor<?x768xbf16>, %w: tensor<128x2048x768xbf16>,
                %offsets: tensor<128xi32>) -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %h, %w, %offsets {transpose_rhs}
      : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// -----

// A tile without producers: the wgmma kernel whose 256 threads all copy
// and compute (cp.async groups, a block barrier per K slice).
// SM90A-LABEL: gpu.func @down_block_barriers_k0_grouped_matmul_wgmma
// SM90A: gpu.dynamic_shared_memory
// SM90A-NOT: nvvm.mbarrier
// SM90A: nvvm.cp.async.shared.global {{.*}}, 16, cache = cg
// SM90A: nvvm.cp.async.commit.group
// SM90A: nvvm.cp.async.wait.group 1
// SM90A: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// SM90A: gpu.barrier
// SM90A: nvvm.wgmma.fence.aligned
// SM90A-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>
// SM90A: nvvm.wgmma.commit.group.sync.aligned
// SM90A: nvvm.wgmma.wait.group.sync.aligned 1
// SM90A: nvvm.wgmma.wait.group.sync.aligned 0
// SM90A-LABEL: func.func @down_block_barriers
// SM90A: gpu.launch_func @{{.*}}::@down_block_barriers_k0_grouped_matmul_wgmma blocks in ({{.*}}) threads in (%c256{{.*}}) dynamic_shared_memory_size
func.func @down_block_barriers(%h: tensor<?x768xbf16>,
                               %w: tensor<128x2048x768xbf16>,
                               %offsets: tensor<128xi32>)
    -> tensor<?x2048xbf16> {
  %y = moe.grouped_matmul %h, %w, %offsets
      {transpose_rhs,
       moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256>}
      : tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
      -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}

// -----

// Shapes the wgmma kernel does not take keep the scalar grouped matmul on
// sm90a: f32 operands and K not a multiple of 8.
// SM90A-LABEL: gpu.func @fallback_k0_grouped_matmul(
// SM90A-NOT: nvvm.wgmma
// SM90A-LABEL: gpu.func @fallback_k1_grouped_matmul(
// SM90A-NOT: nvvm.wgmma
// SM90A-LABEL: func.func @fallback
func.func @fallback(%x: tensor<?x64xf32>, %w: tensor<8x128x64xf32>,
                    %x20: tensor<?x20xbf16>, %wt: tensor<8x128x20xbf16>,
                    %offsets: tensor<8xi32>)
    -> (tensor<?x128xf32>, tensor<?x128xbf16>) {
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x64xf32>, tensor<8x128x64xf32>, tensor<8xi32>
      -> tensor<?x128xf32>
  %z = moe.grouped_matmul %x20, %wt, %offsets {transpose_rhs}
      : tensor<?x20xbf16>, tensor<8x128x20xbf16>, tensor<8xi32>
      -> tensor<?x128xbf16>
  return %y, %z : tensor<?x128xf32>, tensor<?x128xbf16>
}

// -----

// unpermute_grad in token order: with warp shuffles (nvvm, rocdl) one warp
// per token (grid of T·32 threads), 16-byte chunks of the token's gradient
// written to its k rows and dotted with the forward rows, the k dots reduced
// by five xor shuffles each; the host takes one token per thread. Padding
// rows are zeroed by their own kernel.
// NVVM-LABEL: gpu.func @unpermute_grad_k2_unpermute_grad_token_warp
// NVVM: vector.load {{.*}} : memref<?x64xbf16>, vector<8xbf16>
// NVVM: vector.store {{.*}} : memref<?x64xbf16>, vector<8xbf16>
// NVVM-COUNT-10: gpu.shuffle xor
// NVVM-NOT: gpu.shuffle
// NVVM-LABEL: gpu.func @unpermute_grad_k3_unpermute_grad_pad
// NVVM-LABEL: func.func @unpermute_grad
// NVVM: @unpermute_grad_k2_unpermute_grad_token_warp
// NVVM-SAME: moe.launch = #moe.launch<grid = <s0 * 32 ceildiv 256>
// ROCDL-LABEL: gpu.func @unpermute_grad_k2_unpermute_grad_token_warp
// ROCDL-COUNT-10: gpu.shuffle xor
// HOST-LABEL: gpu.func @unpermute_grad_k2_unpermute_grad_token_vec
// HOST-NOT: gpu.shuffle
// HOST-LABEL: gpu.func @unpermute_grad_k3_unpermute_grad_pad
// HOST-LABEL: func.func @unpermute_grad
// HOST: @unpermute_grad_k2_unpermute_grad_token_vec
// HOST-SAME: moe.launch = #moe.launch<grid = <s0 ceildiv 256>
// HOST: @unpermute_grad_k3_unpermute_grad_pad
// HOST-SAME: moe.launch = #moe.launch<grid = <s1 ceildiv 256>
func.func @unpermute_grad(%dy: tensor<?x64xbf16>, %w: tensor<?x2xf32>,
                          %rows: tensor<?x64xbf16> {moe.sym = "M"},
                          %slots: tensor<?xi32> {moe.sym = "M"},
                          %offsets: tensor<4xi32>)
    -> (tensor<?x64xbf16>, tensor<?x2xf32>) {
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 2
      weights(%w, %rows : tensor<?x2xf32>, tensor<?x64xbf16> -> tensor<?x2xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x64xbf16>
  return %drows, %dw : tensor<?x64xbf16>, tensor<?x2xf32>
}

// -----

// Column-wise FP8 groups of 32 rows: on GPUs a block of 8 warps per (scale
// block, 256 columns) after a one-block scan of the experts' block counts.
// nvvm copies the block's input to workgroup memory with cp.async (4 steps
// of 8 rows); rocdl keeps it in registers; the host has the per-thread
// kernel that reads the input twice.
// NVVM-LABEL: gpu.func @colwise_k0_quantize_block_ends
// NVVM: gpu.shuffle up
// NVVM-LABEL: gpu.func @colwise_k2_quantize_colwise_block
// NVVM-COUNT-4: nvvm.cp.async.shared.global
// NVVM: nvvm.cp.async.wait.group 0
// NVVM: gpu.barrier
// NVVM-LABEL: func.func @colwise
// ROCDL-LABEL: gpu.func @colwise_k2_quantize_colwise_block
// ROCDL-NOT: nvvm.
// ROCDL: gpu.barrier
// HOST-LABEL: gpu.func @colwise_k2_quantize_colwise_vec
// HOST-NOT: gpu.barrier
func.func @colwise(%x: tensor<?x256xbf16> {moe.sym = "M"},
                   %offsets: tensor<8xi32>)
    -> (tensor<?x256xf8E4M3FN>, tensor<?x256xf32>) {
  %d, %s = moe.quantize %x offsets(%offsets : tensor<8xi32>) group_size = 32
      {axis = #moe.axis<colwise>}
      : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x256xf32>
  return %d, %s : tensor<?x256xf8E4M3FN>, tensor<?x256xf32>
}

// -----

// permute writes each token's chunk to its k rows with streaming stores on
// NVIDIA targets (st.global.cs: the rows are not read again by the kernel),
// plain vector stores elsewhere. On NVIDIA targets each token's first thread
// also prefetches the whole token 6 MiB ahead into L2 (49152 rows of 128
// bytes here), one bulk prefetch with an evict-last policy.
// NVVM-LABEL: gpu.func @permute_rows_k{{[0-9]+}}_permute_scatter_vec
// NVVM: arith.constant 49152 : index
// NVVM: scf.if
// NVVM: %[[POLICY:.*]] = llvm.inline_asm "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;", "=l"  : () -> i64
// NVVM: nvvm.cp.async.bulk.prefetch %{{.*}}, %c128_i32 l2_cache_hint = %[[POLICY]] : <1>
// NVVM: vector.load {{.*}} : memref<?x64xbf16>, vector<8xbf16>
// NVVM-COUNT-2: llvm.inline_asm has_side_effects "st.global.cs.v4.b32 [$0], {$1, $2, $3, $4};", "l,r,r,r,r"
// NVVM-NOT: vector.store
// NVVM: gpu.return
// ROCDL-LABEL: gpu.func @permute_rows_k{{[0-9]+}}_permute_scatter_vec
// ROCDL-NOT: nvvm.cp.async.bulk.prefetch
// ROCDL-NOT: llvm.inline_asm
// ROCDL-COUNT-2: vector.store {{.*}} : memref<?x64xbf16>, vector<8xbf16>
// HOST-LABEL: gpu.func @permute_rows_k{{[0-9]+}}_permute_scatter_vec
// HOST-NOT: nvvm.cp.async.bulk.prefetch
// HOST-NOT: llvm.inline_asm
// HOST: vector.store {{.*}} : memref<?x64xbf16>, vector<8xbf16>
func.func @permute_rows(%x: tensor<?x64xbf16>,
                        %slots: tensor<?xi32> {moe.sym = "M"},
                        %offsets: tensor<4xi32>,
                        %positions: tensor<?xi32> {moe.sym = "M"})
    -> tensor<?x64xbf16> {
  %rows = moe.permute %x, %slots, %offsets k = 2
      positions(%positions : tensor<?xi32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x64xbf16>
  return %rows : tensor<?x64xbf16>
}
