// convert-moe-to-kernels: a static tensor.expand_shape / collapse_shape is a
// view (memref.expand_shape / collapse_shape on the host, a buffer of role
// "view" in the bundle) wherever the bytes can stay where they are: of an
// input, of a kernel's result, and, for a reshape a function returns, the
// output written by its source's kernel through the inverse view. A
// returned reshape of an input must still copy (an output has bytes of its
// own). The functions then run on the host against the float64 reference,
// which reads each view through its source.
// RUN: moec-opt %s --convert-moe-to-kernels -split-input-file | FileCheck %s
// RUN: moec compile %s -o %t.moecb --target host
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=BUNDLE
// RUN: moec run %s --entry view_of_input --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry output_through_view --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry returned_input_reshape --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry view_of_view --iters 1 | FileCheck %s --check-prefix=PASS

// PASS: PASS

// CHECK-LABEL: func.func @view_of_input
// CHECK: %[[V:.*]] = memref.expand_shape %arg0 {{\[\[}}0, 1], [2]] output_shape [2, 4, 6] {moe.buffer = 2 : i32, moe.dims = [#moe.size<2>, #moe.size<4>, #moe.size<6>]} : memref<8x6xf32> into memref<2x4x6xf32>
// CHECK-NOT: expand_shape
// CHECK: gpu.launch_func @view_of_input_kernels::@view_of_input_k0_transpose
// CHECK-SAME: args(%[[V]] : memref<2x4x6xf32>, %arg1 : memref<2x6x4xf32>
// BUNDLE-LABEL: entry view_of_input [host]
// BUNDLE: 2 view2 view f32 [2, 4, 6] of buffer 0
// BUNDLE-NOT: shape grid
// BUNDLE: view_of_input_k0_transpose
func.func @view_of_input(%a: tensor<8x6xf32>) -> tensor<2x6x4xf32> {
  %v = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 4, 6]
      : tensor<8x6xf32> into tensor<2x4x6xf32>
  %init = tensor.empty() : tensor<2x6x4xf32>
  %t = linalg.transpose ins(%v : tensor<2x4x6xf32>)
      outs(%init : tensor<2x6x4xf32>) permutation = [0, 2, 1]
  return %t : tensor<2x6x4xf32>
}

// -----

// CHECK-LABEL: func.func @output_through_view
// CHECK: %[[V:.*]] = memref.expand_shape %arg1 {{\[\[}}0, 1], [2]] output_shape [2, 6, 4] {moe.buffer = 2 : i32, {{.*}}} : memref<12x4xf32> into memref<2x6x4xf32>
// CHECK: gpu.launch_func @output_through_view_kernels::@output_through_view_k0_transpose
// CHECK-SAME: args(%arg0 : memref<2x4x6xf32>, %[[V]] : memref<2x6x4xf32>
// CHECK-NOT: gpu.launch_func
// CHECK: return
// BUNDLE-LABEL: entry output_through_view [host]
// BUNDLE: 1 result0 output f32 [12, 4]
// BUNDLE: 2 view2 view f32 [2, 6, 4] of buffer 1
// BUNDLE-NOT: shape grid
func.func @output_through_view(%a: tensor<2x4x6xf32>) -> tensor<12x4xf32> {
  %init = tensor.empty() : tensor<2x6x4xf32>
  %t = linalg.transpose ins(%a : tensor<2x4x6xf32>)
      outs(%init : tensor<2x6x4xf32>) permutation = [0, 2, 1]
  %r = tensor.collapse_shape %t [[0, 1], [2]]
      : tensor<2x6x4xf32> into tensor<12x4xf32>
  return %r : tensor<12x4xf32>
}

// -----

// CHECK-LABEL: func.func @returned_input_reshape
// CHECK-NOT: memref.expand_shape
// CHECK: gpu.launch_func @returned_input_reshape_kernels::@returned_input_reshape_k0_expand_shape
// BUNDLE-LABEL: entry returned_input_reshape [host]
// BUNDLE-NOT: view
// BUNDLE: returned_input_reshape_k0_expand_shape
func.func @returned_input_reshape(%a: tensor<8x6xf32>) -> tensor<2x4x6xf32> {
  %v = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 4, 6]
      : tensor<8x6xf32> into tensor<2x4x6xf32>
  return %v : tensor<2x4x6xf32>
}

// -----

// A view of a view reads the first view's source.
// CHECK-LABEL: func.func @view_of_view
// CHECK: %[[V1:.*]] = memref.expand_shape %arg0
// CHECK: %[[V2:.*]] = memref.collapse_shape %[[V1]] {{\[\[}}0], [1, 2]] {moe.buffer = 3 : i32, {{.*}}} : memref<2x4x6xf32> into memref<2x24xf32>
// CHECK: gpu.launch_func @view_of_view_kernels::@view_of_view_k0_transpose
// CHECK-SAME: args(%[[V2]] : memref<2x24xf32>
// BUNDLE-LABEL: entry view_of_view [host]
// BUNDLE: 2 view2 view f32 [2, 4, 6] of buffer 0
// BUNDLE: 3 view3 view f32 [2, 24] of buffer 0
func.func @view_of_view(%a: tensor<8x6xf32>) -> tensor<24x2xf32> {
  %v = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 4, 6]
      : tensor<8x6xf32> into tensor<2x4x6xf32>
  %w = tensor.collapse_shape %v [[0], [1, 2]]
      : tensor<2x4x6xf32> into tensor<2x24xf32>
  %init = tensor.empty() : tensor<24x2xf32>
  %t = linalg.transpose ins(%w : tensor<2x24xf32>)
      outs(%init : tensor<24x2xf32>) permutation = [1, 0]
  return %t : tensor<24x2xf32>
}
