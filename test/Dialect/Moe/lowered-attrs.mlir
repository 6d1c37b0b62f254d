// RUN: moec-opt %s -split-input-file -allow-unregistered-dialect | moec-opt -split-input-file -allow-unregistered-dialect | FileCheck %s
// The typed attributes convert-moe-to-kernels records for the bundle writer
// print and parse back unchanged (MoeLoweredAttrs.td). Errors:
// lowered-attrs-invalid.mlir.

// Precedence and left associativity: the printer parenthesizes exactly
// where the tree needs it, so `a - (b - c)` and `(a + b) * c` survive.
// CHECK-LABEL: func.func @sizes
// CHECK-SAME: moe.dims = [#moe.size<s0 - (s1 - 3)>, #moe.size<(s0 + 1) * 8>, #moe.size<s0 * 8 + 1>, #moe.size<s0 * (8 floordiv 2)>, #moe.size<min(s0, max(s1 * 2, 4)) ceildiv 16>]
func.func @sizes(%x: memref<?xf32> {moe.dims = [
    #moe.size<s0 - (s1 - 3)>, #moe.size<(s0 + 1) * 8>,
    #moe.size<((s0 * 8) + 1)>, #moe.size<s0 * (8 floordiv 2)>,
    #moe.size<min(s0, max(s1 * 2, 4)) ceildiv 16>]}) {
  return
}

// -----

// CHECK-LABEL: func.func @entry
// CHECK-SAME: moe.dim_symbols = array<i64: 0, -1>
// CHECK-SAME: moe.name = "hidden"
// CHECK-SAME: moe.entry = "entry", moe.num_buffers = 2 : i32
// CHECK-SAME: moe.ref_ops = [#moe.ref_op<name = "moe.swiglu", attrs = {layout = "halves"}, operands = [0], operand_names = ["input"], results = [1], result_names = ["output"]>]
// CHECK-SAME: moe.symbols = [#moe.dim_symbol<name = "T", arg = 0, dim = 0>]
// CHECK: memref.alloc(%{{.*}}) {moe.buffer = 1 : i32, moe.dims = [#moe.size<s0 * 2>]}
// CHECK: "test.launch"() {moe.launch = #moe.launch<grid = <s0 ceildiv 256>, scalars = [<s0>, <7>]>}
// CHECK: "test.launch"() {moe.launch = #moe.launch<grid = <1>, scalars = []>}
func.func @entry(%x: memref<?x8xf32> {moe.dim_symbols = array<i64: 0, -1>,
                                     moe.name = "hidden"})
    attributes {moe.entry = "entry", moe.num_buffers = 2 : i32,
                moe.symbols = [#moe.dim_symbol<name = "T", arg = 0, dim = 0>],
                moe.ref_ops = [#moe.ref_op<name = "moe.swiglu",
                    attrs = {layout = "halves"}, operands = [0],
                    operand_names = ["input"], results = [1],
                    result_names = ["output"]>]} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %x, %c0 : memref<?x8xf32>
  %t = memref.alloc(%n) {moe.buffer = 1 : i32,
                         moe.dims = [#moe.size<s0 * 2>]} : memref<?xf32>
  "test.launch"() {moe.launch = #moe.launch<grid = <s0 ceildiv 256>,
                                            scalars = [<s0>, #moe.size<7>]>}
      : () -> ()
  "test.launch"() {moe.launch = #moe.launch<grid = <1>, scalars = []>}
      : () -> ()
  memref.dealloc %t : memref<?xf32>
  return
}
