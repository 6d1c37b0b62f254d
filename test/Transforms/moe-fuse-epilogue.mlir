// RUN: moec-opt %s -split-input-file -moe-fuse-epilogue | FileCheck %s

// SwiGLU (halves) becomes the matmul's activation.
// CHECK-LABEL: func @fuse_swiglu
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xbf16>, %[[W:.*]]: tensor<4x16x64xbf16>, %[[O:.*]]: tensor<4xi32>)
func.func @fuse_swiglu(%x: tensor<8x16xbf16>, %w: tensor<4x16x64xbf16>, %o: tensor<4xi32>) -> tensor<8x32xbf16> {
  // CHECK-NEXT: %[[Y:.*]] = moe.grouped_matmul %[[X]], %[[W]], %[[O]] {activation = #moe.activation<swiglu>} : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  // CHECK-NEXT: return %[[Y]]
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  %a = moe.swiglu %h : tensor<8x64xbf16> -> tensor<8x32xbf16>
  return %a : tensor<8x32xbf16>
}

// -----

// The activation's result type wins (one rounding, from f32); gather, bias
// and transpose_rhs are kept.
// CHECK-LABEL: func @fuse_swiglu_keeps_operands
func.func @fuse_swiglu_keeps_operands(%x: tensor<?x16xbf16>, %w: tensor<4x64x16xbf16>, %b: tensor<4x64xbf16>, %slots: tensor<?xi32>, %o: tensor<4xi32>) -> tensor<?x32xf16> {
  // CHECK-NEXT: %[[Y:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} gather(%{{.*}} : tensor<?xi32>) bias(%{{.*}} : tensor<4x64xbf16>) {activation = #moe.activation<swiglu>, k = 8 : i64, transpose_rhs} : tensor<?x16xbf16>, tensor<4x64x16xbf16>, tensor<4xi32> -> tensor<?x32xf16>
  // CHECK-NEXT: return %[[Y]]
  %h = moe.grouped_matmul %x, %w, %o gather(%slots : tensor<?xi32>) bias(%b : tensor<4x64xbf16>) {k = 8 : i64, transpose_rhs} : tensor<?x16xbf16>, tensor<4x64x16xbf16>, tensor<4xi32> -> tensor<?x64xf32>
  %a = moe.swiglu %h : tensor<?x64xf32> -> tensor<?x32xf16>
  return %a : tensor<?x32xf16>
}

// -----

// Not fused: the matmul's swiglu reads halves, not interleaved columns.
// CHECK-LABEL: func @no_fuse_interleaved
func.func @no_fuse_interleaved(%x: tensor<8x16xbf16>, %w: tensor<4x16x64xbf16>, %o: tensor<4xi32>) -> tensor<8x32xbf16> {
  // CHECK: moe.grouped_matmul %{{.*}} -> tensor<8x64xbf16>
  // CHECK: moe.swiglu %{{.*}} {layout = #moe.layout<interleaved>}
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  %a = moe.swiglu %h {layout = #moe.layout<interleaved>} : tensor<8x64xbf16> -> tensor<8x32xbf16>
  return %a : tensor<8x32xbf16>
}

// -----

// Not fused: the matmul's output has another user.
// CHECK-LABEL: func @no_fuse_other_user
func.func @no_fuse_other_user(%x: tensor<8x16xbf16>, %w: tensor<4x16x64xbf16>, %o: tensor<4xi32>) -> (tensor<8x32xbf16>, tensor<8x64xbf16>) {
  // CHECK: moe.grouped_matmul %{{.*}} -> tensor<8x64xbf16>
  // CHECK: moe.swiglu
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  %a = moe.swiglu %h : tensor<8x64xbf16> -> tensor<8x32xbf16>
  return %a, %h : tensor<8x32xbf16>, tensor<8x64xbf16>
}

// -----

// Not fused: a row scale applies after the activation, not before it.
// CHECK-LABEL: func @no_fuse_swiglu_after_row_scale
func.func @no_fuse_swiglu_after_row_scale(%x: tensor<8x16xbf16>, %w: tensor<4x16x64xbf16>, %o: tensor<4xi32>, %s: tensor<8xf32>) -> tensor<8x32xbf16> {
  // CHECK: moe.grouped_matmul %{{.*}} row_scale(%{{.*}} : tensor<8xf32>) : {{.*}} -> tensor<8x64xbf16>
  // CHECK: moe.swiglu
  %h = moe.grouped_matmul %x, %w, %o row_scale(%s : tensor<8xf32>) : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  %a = moe.swiglu %h : tensor<8x64xbf16> -> tensor<8x32xbf16>
  return %a : tensor<8x32xbf16>
}

// -----

// Not fused: a scattering matmul's rows are tokens already.
// CHECK-LABEL: func @no_fuse_scatter
func.func @no_fuse_scatter(%x: tensor<8x16xbf16>, %w: tensor<4x16x64xbf16>, %o: tensor<4xi32>, %slots: tensor<8xi32>) -> tensor<4x32xbf16> {
  // CHECK: moe.grouped_matmul %{{.*}} scatter(%{{.*}} : tensor<8xi32>) {k = 2 : i64} : {{.*}} -> tensor<4x64xbf16>
  // CHECK: moe.swiglu
  %h = moe.grouped_matmul %x, %w, %o scatter(%slots : tensor<8xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<4x64xbf16>
  %a = moe.swiglu %h : tensor<4x64xbf16> -> tensor<4x32xbf16>
  return %a : tensor<4x32xbf16>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A per-row scaling (bf16 rows extended to f32, product truncated) after the
// SwiGLU: both fuse, the scale after the activation.
// CHECK-LABEL: func @fuse_swiglu_and_row_scale
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xbf16>, %[[W:.*]]: tensor<4x16x64xbf16>, %[[O:.*]]: tensor<4xi32>, %[[S:.*]]: tensor<8xf32>)
func.func @fuse_swiglu_and_row_scale(%x: tensor<8x16xbf16>, %w: tensor<4x16x64xbf16>, %o: tensor<4xi32>, %s: tensor<8xf32>) -> tensor<8x32xbf16> {
  // CHECK-NEXT: %[[Y:.*]] = moe.grouped_matmul %[[X]], %[[W]], %[[O]] row_scale(%[[S]] : tensor<8xf32>) {activation = #moe.activation<swiglu>} : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  // CHECK-NEXT: return %[[Y]]
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x64xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  %a = moe.swiglu %h : tensor<8x64xbf16> -> tensor<8x32xbf16>
  %init = tensor.empty() : tensor<8x32xbf16>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %s : tensor<8x32xbf16>, tensor<8xf32>) outs(%init : tensor<8x32xbf16>) {
  ^bb0(%y: bf16, %sc: f32, %out: bf16):
    %y32 = arith.extf %y : bf16 to f32
    %p = arith.mulf %y32, %sc : f32
    %t = arith.truncf %p : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<8x32xbf16>
  return %r : tensor<8x32xbf16>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// f32 rows, the scale first in the product and in the inputs; the scale is
// defined after the matmul, which moves next to the scaling.
// CHECK-LABEL: func @fuse_row_scale_f32
func.func @fuse_row_scale_f32(%x: tensor<?x16xf32>, %w: tensor<4x16x32xf32>, %o: tensor<4xi32>, %p: tensor<?x2xf32>) -> tensor<?x32xf32> {
  // CHECK: %[[RS:.*]] = tensor.collapse_shape
  // CHECK: %[[Y:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} row_scale(%[[RS]] : tensor<?xf32>) : tensor<?x16xf32>, tensor<4x16x32xf32>, tensor<4xi32> -> tensor<?x32xf32>
  // CHECK-NOT: linalg.generic
  // CHECK: return %[[Y]]
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x16xf32>, tensor<4x16x32xf32>, tensor<4xi32> -> tensor<?x32xf32>
  %s = tensor.collapse_shape %p [[0, 1]] : tensor<?x2xf32> into tensor<?xf32>
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x16xf32>
  %init = tensor.empty(%m) : tensor<?x32xf32>
  %r = linalg.generic {indexing_maps = [#row, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%s, %h : tensor<?xf32>, tensor<?x32xf32>) outs(%init : tensor<?x32xf32>) {
  ^bb0(%sc: f32, %y: f32, %out: f32):
    %q = arith.mulf %sc, %y : f32
    linalg.yield %q : f32
  } -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// Not fused: a per-column scaling.
// CHECK-LABEL: func @no_fuse_column_scale
func.func @no_fuse_column_scale(%x: tensor<8x16xf32>, %w: tensor<4x16x32xf32>, %o: tensor<4xi32>, %s: tensor<32xf32>) -> tensor<8x32xf32> {
  // CHECK: moe.grouped_matmul
  // CHECK: linalg.generic
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<4xi32> -> tensor<8x32xf32>
  %init = tensor.empty() : tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%h, %s : tensor<8x32xf32>, tensor<32xf32>) outs(%init : tensor<8x32xf32>) {
  ^bb0(%y: f32, %sc: f32, %out: f32):
    %q = arith.mulf %y, %sc : f32
    linalg.yield %q : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Not fused: the body reads the init (an accumulation, not a scaling).
// CHECK-LABEL: func @no_fuse_reads_init
func.func @no_fuse_reads_init(%x: tensor<8x16xf32>, %w: tensor<4x16x32xf32>, %o: tensor<4xi32>, %s: tensor<8xf32>, %acc: tensor<8x32xf32>) -> tensor<8x32xf32> {
  // CHECK: moe.grouped_matmul
  // CHECK: linalg.generic
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<4xi32> -> tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%h, %s : tensor<8x32xf32>, tensor<8xf32>) outs(%acc : tensor<8x32xf32>) {
  ^bb0(%y: f32, %sc: f32, %out: f32):
    %q = arith.mulf %y, %sc : f32
    %a = arith.addf %q, %out : f32
    linalg.yield %a : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Not fused: the matmul already scales its rows.
// CHECK-LABEL: func @no_fuse_second_row_scale
func.func @no_fuse_second_row_scale(%x: tensor<8x16xf32>, %w: tensor<4x16x32xf32>, %o: tensor<4xi32>, %s: tensor<8xf32>, %s2: tensor<8xf32>) -> tensor<8x32xf32> {
  // CHECK: moe.grouped_matmul %{{.*}} row_scale(
  // CHECK: linalg.generic
  %h = moe.grouped_matmul %x, %w, %o row_scale(%s2 : tensor<8xf32>) : tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<4xi32> -> tensor<8x32xf32>
  %init = tensor.empty() : tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%h, %s : tensor<8x32xf32>, tensor<8xf32>) outs(%init : tensor<8x32xf32>) {
  ^bb0(%y: f32, %sc: f32, %out: f32):
    %q = arith.mulf %y, %sc : f32
    linalg.yield %q : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

// Not fused: quantizing the output (the matmul has no FP8 output form).
// CHECK-LABEL: func @no_fuse_quantize
func.func @no_fuse_quantize(%x: tensor<8x16xbf16>, %w: tensor<4x16x256xbf16>, %o: tensor<4xi32>) -> (tensor<8x128xf8E4M3FN>, tensor<8x1xf32>) {
  // CHECK: moe.grouped_matmul %{{.*}} {activation = #moe.activation<swiglu>}
  // CHECK: moe.quantize
  %h = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x256xbf16>, tensor<4xi32> -> tensor<8x256xbf16>
  %a = moe.swiglu %h : tensor<8x256xbf16> -> tensor<8x128xbf16>
  %q, %qs = moe.quantize %a group_size = 128 : tensor<8x128xbf16> -> tensor<8x128xf8E4M3FN>, tensor<8x1xf32>
  return %q, %qs : tensor<8x128xf8E4M3FN>, tensor<8x1xf32>
}

// -----

// A backward's down-projection input gradient feeding SwiGLU's gradient:
// the matmul writes the gate_up gradient [M, 2N] from the saved input, with
// the gradient's result type; the matmul moves next to the saved input's
// use.
// CHECK-LABEL: func @fuse_swiglu_grad
// CHECK-SAME: (%[[DY:.*]]: tensor<?x48xbf16>, %[[W:.*]]: tensor<4x48x20xbf16>, %[[O:.*]]: tensor<4xi32>, %[[H:.*]]: tensor<?x40xbf16>)
func.func @fuse_swiglu_grad(%dy: tensor<?x48xbf16>, %w: tensor<4x48x20xbf16>, %o: tensor<4xi32>, %h: tensor<?x40xbf16>) -> tensor<?x40xbf16> {
  // CHECK-NEXT: %[[G:.*]] = moe.grouped_matmul %[[DY]], %[[W]], %[[O]] activation_input(%[[H]] : tensor<?x40xbf16>) {activation = #moe.activation<swiglu_grad>} : tensor<?x48xbf16>, tensor<4x48x20xbf16>, tensor<4xi32> -> tensor<?x40xbf16>
  // CHECK-NEXT: return %[[G]]
  %da = moe.grouped_matmul %dy, %w, %o : tensor<?x48xbf16>, tensor<4x48x20xbf16>, tensor<4xi32> -> tensor<?x20xbf16>
  %dh = moe.swiglu_grad %h, %da : tensor<?x40xbf16>, tensor<?x20xbf16> -> tensor<?x40xbf16>
  return %dh : tensor<?x40xbf16>
}

// -----

// A row scale stays (the gradient is linear in the output gradient), as do
// transpose_rhs and an f32 saved input.
// CHECK-LABEL: func @fuse_swiglu_grad_row_scale
func.func @fuse_swiglu_grad_row_scale(%dy: tensor<8x48xbf16>, %w: tensor<4x20x48xbf16>, %o: tensor<4xi32>, %h: tensor<8x40xf32>, %s: tensor<8xf32>) -> tensor<8x40xf32> {
  // CHECK-NEXT: %[[G:.*]] = moe.grouped_matmul %{{.*}} row_scale(%{{.*}} : tensor<8xf32>) activation_input(%{{.*}} : tensor<8x40xf32>) {activation = #moe.activation<swiglu_grad>, transpose_rhs} : tensor<8x48xbf16>, tensor<4x20x48xbf16>, tensor<4xi32> -> tensor<8x40xf32>
  // CHECK-NEXT: return %[[G]]
  %da = moe.grouped_matmul %dy, %w, %o row_scale(%s : tensor<8xf32>) {transpose_rhs} : tensor<8x48xbf16>, tensor<4x20x48xbf16>, tensor<4xi32> -> tensor<8x20xf32>
  %dh = moe.swiglu_grad %h, %da : tensor<8x40xf32>, tensor<8x20xf32> -> tensor<8x40xf32>
  return %dh : tensor<8x40xf32>
}

// -----

// Not fused: the output gradient has another user (it would be computed
// twice), or the layout is interleaved.
// CHECK-LABEL: func @no_fuse_swiglu_grad
func.func @no_fuse_swiglu_grad(%dy: tensor<8x48xbf16>, %w: tensor<4x48x20xbf16>, %o: tensor<4xi32>, %h: tensor<8x40xbf16>) -> (tensor<8x40xbf16>, tensor<8x20xbf16>, tensor<8x40xbf16>) {
  // CHECK: %[[DA:.*]] = moe.grouped_matmul %{{.*}} -> tensor<8x20xbf16>
  // CHECK: moe.swiglu_grad %{{.*}}, %[[DA]] :
  // CHECK: %[[DB:.*]] = moe.grouped_matmul %{{.*}} -> tensor<8x20xbf16>
  // CHECK: moe.swiglu_grad %{{.*}}, %[[DB]] {layout = #moe.layout<interleaved>}
  // CHECK-NOT: swiglu_grad>
  %da = moe.grouped_matmul %dy, %w, %o : tensor<8x48xbf16>, tensor<4x48x20xbf16>, tensor<4xi32> -> tensor<8x20xbf16>
  %dh = moe.swiglu_grad %h, %da : tensor<8x40xbf16>, tensor<8x20xbf16> -> tensor<8x40xbf16>
  %db = moe.grouped_matmul %dy, %w, %o : tensor<8x48xbf16>, tensor<4x48x20xbf16>, tensor<4xi32> -> tensor<8x20xbf16>
  %di = moe.swiglu_grad %h, %db {layout = #moe.layout<interleaved>} : tensor<8x40xbf16>, tensor<8x20xbf16> -> tensor<8x40xbf16>
  return %dh, %da, %di : tensor<8x40xbf16>, tensor<8x20xbf16>, tensor<8x40xbf16>
}
