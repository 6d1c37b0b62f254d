// RUN: moec-opt %s --convert-moe-to-kernels -split-input-file -verify-diagnostics

func.func @not_lowered(%x: tensor<?x256xf8E4M3FN>, %w: tensor<4x256x256xf8E4M3FN>,
                       %offsets: tensor<4xi32>, %sx: tensor<?x2xf32>,
                       %sw: tensor<4x2x2xf32>) -> tensor<?x256xbf16> {
  // expected-error @+1 {{FP8 operands are not lowered to kernels yet}}
  %y = moe.grouped_matmul %x, %w, %offsets
      scales(%sx, %sw : tensor<?x2xf32>, tensor<4x2x2xf32>)
      : tensor<?x256xf8E4M3FN>, tensor<4x256x256xf8E4M3FN>, tensor<4xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
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
