// Inputs moe-autodiff rejects, each with a diagnostic naming the reason.
// RUN: moec-opt %s -split-input-file -moe-autodiff -verify-diagnostics
// RUN: not moec-opt %s -split-input-file -moe-autodiff="save=some" 2>&1 | FileCheck %s --check-prefix=SAVE
// RUN: not moec-opt %s -split-input-file -moe-autodiff="wrt=7" 2>&1 | FileCheck %s --check-prefix=WRT
// RUN: not moec-opt %s -split-input-file -moe-autodiff="func=nothing" 2>&1 | FileCheck %s --check-prefix=NAME
// SAVE: error: moe-autodiff: option 'save' must be all, matmuls or inputs, got 'some'
// WRT: error: 'func.func' op moe-autodiff: option 'wrt' names argument 7, but the function has 2
// NAME: error: moe-autodiff: no function named 'nothing'

// A fused activation has no rule: differentiate the unfused form.
func.func @fused(%x: tensor<?x16xbf16>, %w: tensor<4x24x16xbf16>, %offsets: tensor<4xi32>)
    -> tensor<?x12xbf16> {
  // expected-error @+1 {{moe-autodiff: no gradient rule for a grouped matmul with a fused activation (differentiate the unfused form: the fusion passes run after moe-autodiff)}}
  %h = moe.grouped_matmul %x, %w, %offsets {transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x16xbf16>, tensor<4x24x16xbf16>, tensor<4xi32> -> tensor<?x12xbf16>
  return %h : tensor<?x12xbf16>
}

// -----

// Nor a bias.
func.func @bias(%x: tensor<?x16xbf16>, %w: tensor<4x24x16xbf16>, %offsets: tensor<4xi32>,
                %b: tensor<4x24xbf16>) -> tensor<?x24xbf16> {
  // expected-error @+1 {{no gradient rule for a grouped matmul with bias}}
  %h = moe.grouped_matmul %x, %w, %offsets bias(%b : tensor<4x24xbf16>) {transpose_rhs}
      : tensor<?x16xbf16>, tensor<4x24x16xbf16>, tensor<4xi32> -> tensor<?x24xbf16>
  return %h : tensor<?x24xbf16>
}

// -----

// An op without a rule that a differentiable value reaches.
func.func @quantized(%x: tensor<?x256xbf16>) -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>) {
  // expected-error @+1 {{moe-autodiff: no gradient rule for this op, and a differentiable value reaches it}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  return %q, %s : tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
}

// -----

// An argument chosen for differentiation that reaches no result.
// expected-error @+1 {{moe-autodiff: argument 1 reaches no floating-point result through a differentiable op, so it has no gradient}}
func.func @unused(%x: tensor<?x24xbf16> {moe.wrt}, %y: tensor<?x12xbf16> {moe.wrt}) -> tensor<?x12xbf16> {
  %a = moe.swiglu %x : tensor<?x24xbf16> -> tensor<?x12xbf16>
  return %a : tensor<?x12xbf16>
}

// -----

// Marked moe.wrt but integer.
// expected-error @+1 {{moe-autodiff: argument 0 is marked moe.wrt but is not a floating-point tensor}}
func.func @int_wrt(%ids: tensor<?x2xi32> {moe.wrt}, %x: tensor<?x12xbf16>) -> tensor<?x6xbf16> {
  %a = moe.swiglu %x : tensor<?x12xbf16> -> tensor<?x6xbf16>
  return %a : tensor<?x6xbf16>
}

// -----

// Two functions and no `func` option.
// expected-error @+1 {{moe-autodiff: the module holds 2 functions; name the one to differentiate (option 'func')}}
module {
  func.func @a(%x: tensor<?x12xbf16>) -> tensor<?x6xbf16> {
    %a = moe.swiglu %x : tensor<?x12xbf16> -> tensor<?x6xbf16>
    return %a : tensor<?x6xbf16>
  }
  func.func @b(%x: tensor<?x12xbf16>) -> tensor<?x6xbf16> {
    %a = moe.swiglu %x : tensor<?x12xbf16> -> tensor<?x6xbf16>
    return %a : tensor<?x6xbf16>
  }
}

// -----

// The result's element type must be the operands' (dX and dW multiply the
// output's gradient with them).
func.func @f32_out(%x: tensor<?x16xbf16>, %w: tensor<4x24x16xbf16>, %offsets: tensor<4xi32>)
    -> tensor<?x24xf32> {
  // expected-error @+1 {{moe-autodiff: the gradient rule needs the result in the operands' element type ('bf16'), got 'f32'}}
  %h = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x16xbf16>, tensor<4x24x16xbf16>, tensor<4xi32> -> tensor<?x24xf32>
  return %h : tensor<?x24xf32>
}

// -----

// A matmul whose adapter is already applied transposed (an input
// gradient's form) has no rule: its adapters' gradients are not lora_grad's.
func.func @flipped_lora(%x: tensor<?x16xf32>, %w: tensor<4x16x16xf32>,
                        %offsets: tensor<4xi32>, %a: tensor<8x16xf32> {moe.wrt},
                        %b: tensor<16x8xf32> {moe.wrt}) -> tensor<?x16xf32> {
  // expected-error @+1 {{no gradient rule for a grouped matmul with transpose_lora}}
  %y = moe.grouped_matmul %x, %w, %offsets
      lora(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) {transpose_lora}
      : tensor<?x16xf32>, tensor<4x16x16xf32>, tensor<4xi32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
