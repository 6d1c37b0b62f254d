// RUN: moec-opt %s --convert-moe-to-kernels -split-input-file -verify-diagnostics

func.func @nonzero_accumulator(%a: tensor<?x16xf32>, %b: tensor<16x8xf32>)
    -> tensor<?x8xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %a, %c0 : tensor<?x16xf32>
  %one = arith.constant 1.0 : f32
  %e = tensor.empty(%t) : tensor<?x8xf32>
  // A constant tensor lowers (a fill kernel), but not as an accumulator.
  %acc = linalg.fill ins(%one : f32) outs(%e : tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{needs a zero-filled tensor.empty accumulator}}
  %c = linalg.matmul ins(%a, %b : tensor<?x16xf32>, tensor<16x8xf32>)
      outs(%acc : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %c : tensor<?x8xf32>
}

// -----

func.func @unknown_tokens(%rows: tensor<?x16xf32>, %slots: tensor<?xi32>,
                          %offsets: tensor<4xi32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{a dynamic token count needs `weights`}}
  %y = moe.unpermute %rows, %slots, %offsets k = 2
      : tensor<?x16xf32>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// expected-error @+1 {{arguments and results must be ranked tensors}}
func.func @scalar_arg(%x: tensor<?x64xbf16>, %s: f32) -> tensor<?x32xbf16> {
  %y = moe.swiglu %x : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// No argument has the token count T: every dynamic leading dimension here
// is named M.
func.func @permute_grad_unknown_tokens(%drows: tensor<?x16xf32> {moe.sym = "M"},
                                       %slots: tensor<?xi32> {moe.sym = "M"},
                                       %offsets: tensor<4xi32>)
    -> tensor<?x16xf32> {
  // expected-error @+1 {{a dynamic token count needs a function argument whose leading dimension is the token count T}}
  %y = moe.permute_grad %drows, %slots, %offsets k = 2
      : tensor<?x16xf32>, tensor<?xi32>, tensor<4xi32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// tensor.dim of a dimension the tensor does not have (issue 28: the lowering
// indexed the buffer's size list with it and crashed).
func.func @dim_index_out_of_range(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %c = arith.constant 999999999999 : index
  // expected-error @+1 {{'tensor.dim' op index 999999999999 is out of range for a tensor of rank 2}}
  %t = tensor.dim %x, %c : tensor<?x64xbf16>
  %y = moe.swiglu %x : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

func.func @dim_index_negative(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %c = arith.constant -1 : index
  // expected-error @+1 {{'tensor.dim' op index -1 is out of range for a tensor of rank 2}}
  %t = tensor.dim %x, %c : tensor<?x64xbf16>
  %y = moe.swiglu %x : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

func.func @fill_of_argument(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %one = arith.constant 1.0 : f32
  // expected-error @+1 {{only a fill of tensor.empty with a constant float}}
  %f = linalg.fill ins(%one : f32) outs(%a : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %f : tensor<4x8xf32>
}

// -----

func.func @dynamic_reshape(%a: tensor<?x8xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{of a dynamic shape is not supported}}
  %r = tensor.collapse_shape %a [[0, 1]] : tensor<?x8xf32> into tensor<?xf32>
  return %r : tensor<?xf32>
}

// -----

func.func @dynamic_pad(%a: tensor<?x8xbf16>) -> tensor<?x16xbf16> {
  %zero = arith.constant 0.0 : bf16
  // expected-error @+1 {{with a dynamic shape or padding is not supported}}
  %p = tensor.pad %a low[0, 0] high[0, 8] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : bf16
  } : tensor<?x8xbf16> to tensor<?x16xbf16>
  return %p : tensor<?x16xbf16>
}

// -----

func.func @pad_by_position(%a: tensor<4x8xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{only a float tensor padded with a constant is supported}}
  %p = tensor.pad %a low[0, 0] high[0, 8] {
  ^bb0(%i: index, %j: index):
    %n = arith.index_cast %j : index to i32
    %v = arith.sitofp %n : i32 to f32
    tensor.yield %v : f32
  } : tensor<4x8xf32> to tensor<4x16xf32>
  return %p : tensor<4x16xf32>
}

// -----

func.func @integer_pad(%a: tensor<4x8xi32>) -> tensor<4x16xi32> {
  %zero = arith.constant 0 : i32
  // expected-error @+1 {{only a float tensor padded with a constant is supported}}
  %p = tensor.pad %a low[0, 0] high[0, 8] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : i32
  } : tensor<4x8xi32> to tensor<4x16xi32>
  return %p : tensor<4x16xi32>
}

// -----

func.func @slice_dropping_a_dimension(%a: tensor<4x8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{that drops dimensions is not supported}}
  %s = tensor.extract_slice %a[1, 0] [1, 8] [1, 1] : tensor<4x8xf32> to tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

func.func @slice_at_a_dynamic_offset(%a: tensor<?x8xf32>) -> tensor<2x8xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?x8xf32>
  // expected-error @+1 {{with dynamic offsets, sizes or strides is not supported}}
  %s = tensor.extract_slice %a[%n, 0] [2, 8] [1, 1] : tensor<?x8xf32> to tensor<2x8xf32>
  return %s : tensor<2x8xf32>
}
