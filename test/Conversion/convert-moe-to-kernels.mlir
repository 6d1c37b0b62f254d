// RUN: moec-opt %s --convert-moe-to-kernels -split-input-file | FileCheck %s

// Tensors become buffers in destination-passing style; the op becomes a
// kernel and a launch that records its grid and scalar expressions. A
// bandwidth-bound op gets the vectorized kernel: one thread per 8 bf16 of a
// row, 16-byte aligned vector loads and stores (32 / 8 = 4 threads per row).
// CHECK-LABEL: gpu.module @swiglu_kernels
// CHECK: gpu.func @swiglu_k0_swiglu_vec(%{{.*}}: memref<?x64xbf16>, %{{.*}}: memref<?x32xbf16>, %{{.*}}: index) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: llvm.call_intrinsic "llvm.exp2.f32"
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<?x32xbf16>, vector<8xbf16>
// CHECK: func.func @swiglu(%[[X:.*]]: memref<?x64xbf16> {moe.dim_symbols = array<i64: 0, -1>}, %[[Y:.*]]: memref<?x32xbf16> {moe.dims = [#moe.size<s0>, #moe.size<32>], moe.output})
// CHECK-SAME: moe.entry = "swiglu"
// CHECK-SAME: moe.symbols = [#moe.dim_symbol<name = "T", arg = 0, dim = 0>]
// CHECK: gpu.launch_func @swiglu_kernels::@swiglu_k0_swiglu_vec
// CHECK-SAME: args(%[[X]] : memref<?x64xbf16>, %[[Y]] : memref<?x32xbf16>
// CHECK-SAME: moe.launch = #moe.launch<grid = <s0 * 4 ceildiv 256>, scalars = [<s0 * 4>]>
func.func @swiglu(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %y = moe.swiglu %x : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// Sorting takes three kernels (count, offsets, place) and a scratch buffer
// for the counts; the grouped matmul walks the ragged tile schedule over a
// grid bounded by floor(M/m) + E + 1 m-tiles, never reading token counts.
// CHECK-LABEL: gpu.module @route_kernels
// CHECK: gpu.func @route_k0_sort_by_expert_count
// CHECK: gpu.func @route_k1_sort_by_expert_offsets
// CHECK: gpu.func @route_k2_sort_by_expert_place
// CHECK: gpu.func @route_k3_grouped_matmul
// CHECK: func.func @route
// CHECK: memref.alloc() {moe.buffer = {{[0-9]+}} : i32, moe.dims = [#moe.size<8>]} : memref<8xi32>
// CHECK: gpu.launch_func @route_kernels::@route_k0_sort_by_expert_count
// CHECK: gpu.launch_func @route_kernels::@route_k3_grouped_matmul
// CHECK-SAME: moe.launch = #moe.launch<grid = <(s0 * 2 floordiv 16 + 9) * (24 ceildiv 16)>
// CHECK: memref.dealloc
func.func @route(%ids: tensor<?x2xi32>, %x: tensor<?x16xf32>,
                 %w: tensor<8x16x24xf32>) -> tensor<?x24xf32> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>) {k = 2 : i64}
      : tensor<?x16xf32>, tensor<8x16x24xf32>, tensor<8xi32> -> tensor<?x24xf32>
  return %y : tensor<?x24xf32>
}


// -----

// A row length that no 16-byte vector divides (18 bf16) keeps the scalar
// kernel, one thread per element.
// CHECK-LABEL: gpu.module @swiglu_odd_kernels
// CHECK: gpu.func @swiglu_odd_k0_swiglu(
// CHECK-NOT: vector.load
// CHECK: moe.launch = #moe.launch<grid = <s0 * 18 ceildiv 256>
func.func @swiglu_odd(%x: tensor<?x36xbf16>) -> tensor<?x18xbf16> {
  %y = moe.swiglu %x : tensor<?x36xbf16> -> tensor<?x18xbf16>
  return %y : tensor<?x18xbf16>
}

// -----

// A user's argument name (moe.name, set by the Python frontend) carries over
// to the lowered entry, where the bundle takes its buffer names from it.
// CHECK-LABEL: func.func @named
// CHECK-SAME: %{{.*}}: memref<?x8xf32> {moe.dim_symbols = array<i64: 0, -1>, moe.name = "hidden"}
// CHECK-SAME: %{{.*}}: memref<?x4xf32> {moe.dims = [#moe.size<s0>, #moe.size<4>], moe.output}
func.func @named(%x: tensor<?x8xf32> {moe.name = "hidden"}) -> tensor<?x4xf32> {
  %y = moe.swiglu %x : tensor<?x8xf32> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// Leading dynamic dims are the symbol T unless an argument names another
// with moe.sym: here the permuted rows (R = T·k) next to the T tokens'
// weights.
// CHECK-LABEL: func.func @combine_rows
// CHECK-SAME: moe.symbols = [#moe.dim_symbol<name = "R", arg = 0, dim = 0>, #moe.dim_symbol<name = "T", arg = 3, dim = 0>]
func.func @combine_rows(%rows: tensor<?x16xbf16> {moe.sym = "R"},
                        %slots: tensor<?xi32> {moe.sym = "R"},
                        %offsets: tensor<4xi32>, %w: tensor<?x2xf32>)
    -> tensor<?x16xbf16> {
  %y = moe.unpermute %rows, %slots, %offsets k = 2 weights(%w : tensor<?x2xf32>)
      : tensor<?x16xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}

// -----

// permute_grad is unpermute's combine without weights (the vectorized one:
// 64 bf16 in chunks of 8), its probability gradient a fill and a scatter
// over the rows. The token count of its results is the symbol T of the
// arguments (here the ids'), not a size of its operands.
// CHECK-LABEL: gpu.module @permute_grad_kernels
// CHECK: gpu.func @permute_grad_k3_permute_grad_inverse_fill
// CHECK: gpu.func @permute_grad_k4_permute_grad_inverse
// CHECK: gpu.func @permute_grad_k5_permute_grad_combine_vec
// CHECK: vector.load %{{.*}} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: gpu.func @permute_grad_k6_permute_grad_slot_fill
// CHECK: gpu.func @permute_grad_k7_permute_grad_slot_scatter
// CHECK: func.func @permute_grad(
// CHECK-SAME: memref<?x64xbf16> {moe.dims = [#moe.size<s1>, #moe.size<64>], moe.output}
// CHECK-SAME: memref<?x3xf32> {moe.dims = [#moe.size<s1>, #moe.size<3>], moe.output}
// CHECK-SAME: moe.symbols = [#moe.dim_symbol<name = "M", arg = 0, dim = 0>, #moe.dim_symbol<name = "T", arg = 2, dim = 0>]
func.func @permute_grad(%drows: tensor<?x64xbf16> {moe.sym = "M"},
                        %dprobs: tensor<?xf32> {moe.sym = "M"},
                        %ids: tensor<?x3xi32>)
    -> (tensor<?x64xbf16>, tensor<?x3xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8 align = 2
      : tensor<?x3xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 3
      probs(%dprobs : tensor<?xf32> -> tensor<?x3xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  return %dx, %dw : tensor<?x64xbf16>, tensor<?x3xf32>
}

// -----

// A row length that no 16-byte vector divides (36 bf16) keeps the scalar
// kernels of unpermute_grad: one thread per row element, then one per slot
// for the weight gradient.
// CHECK-LABEL: gpu.module @unpermute_grad_odd_kernels
// CHECK: gpu.func @unpermute_grad_odd_k0_unpermute_grad_scatter(
// CHECK-NOT: vector.load
// CHECK: gpu.func @unpermute_grad_odd_k3_unpermute_grad_weights(
// CHECK: func.func @unpermute_grad_odd(
// CHECK: @unpermute_grad_odd_k0_unpermute_grad_scatter
// CHECK-SAME: moe.launch = #moe.launch<grid = <s1 * 36 ceildiv 256>
// CHECK: @unpermute_grad_odd_k3_unpermute_grad_weights
// CHECK-SAME: moe.launch = #moe.launch<grid = <s0 * 2 ceildiv 256>
func.func @unpermute_grad_odd(%dy: tensor<?x36xbf16>, %w: tensor<?x2xf32>,
                              %rows: tensor<?x36xbf16> {moe.sym = "M"},
                              %slots: tensor<?xi32> {moe.sym = "M"},
                              %offsets: tensor<4xi32>)
    -> (tensor<?x36xbf16>, tensor<?x2xf32>) {
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 2
      weights(%w, %rows : tensor<?x2xf32>, tensor<?x36xbf16> -> tensor<?x2xf32>)
      : tensor<?x36xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x36xbf16>
  return %drows, %dw : tensor<?x36xbf16>, tensor<?x2xf32>
}

// -----

// The function's own attributes stay on the lowered function (moe-autodiff's
// moe.saved_results reaches the bundle's source: a runtime without the
// compiler reads which forward results a backward takes), the lowering's
// own beside them.
// CHECK-LABEL: func.func @keeps_attrs
// CHECK-SAME: moe.entry = "keeps_attrs"
// CHECK-SAME: moe.grad_of = "f"
// CHECK-SAME: moe.saved_results = array<i64: 2, 0>
func.func @keeps_attrs(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16>
    attributes {moe.grad_of = "f", moe.saved_results = array<i64: 2, 0>} {
  %y = moe.swiglu %x : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
