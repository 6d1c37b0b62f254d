// RUN: moec-opt %s -split-input-file -verify-diagnostics
// One case per verifier rule of moe.router_topk_grad (invalid.mlir has the
// other ops'); every diagnostic names the operand, result or attribute.

// router_topk_grad: ids must be i32
func.func @router_grad_case0(%l: tensor<4x8xf32>, %i: tensor<4x2xi64>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{operand 'ids' must be a 2-D tensor of i32 values}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: grad_weights must be f32
func.func @router_grad_case1(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xbf16>) {
  // expected-error @+1 {{operand 'grad_weights' must be a 2-D tensor of f32 values}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x2xbf16> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: the result is bf16, f16 or f32
func.func @router_grad_case2(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{result 'grad_logits' must be a 2-D tensor of bf16, f16 or f32 values}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x8xf8E4M3FN>
  return
}

// -----

// router_topk_grad: the expert dimension must be static
func.func @router_grad_case3(%l: tensor<4x?xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{expert dimension (1) of operand 'logits' must be static}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x?xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x?xf32>
  return
}

// -----

// router_topk_grad: k must be static
func.func @router_grad_case4(%l: tensor<4x8xf32>, %i: tensor<4x?xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'ids' (k) must be static}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x?xi32>, tensor<4x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: k must not exceed E
func.func @router_grad_case5(%l: tensor<4x2xf32>, %i: tensor<4x3xi32>, %g: tensor<4x3xf32>) {
  // expected-error @+1 {{k (3, the columns of 'ids') must not exceed the number of experts (2)}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x2xf32>, tensor<4x3xi32>, tensor<4x3xf32> -> tensor<4x2xf32>
  return
}

// -----

// router_topk_grad: ids and logits share the token count
func.func @router_grad_case6(%l: tensor<4x8xf32>, %i: tensor<5x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'ids'}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<5x2xi32>, tensor<4x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: grad_weights has k columns
func.func @router_grad_case7(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x3xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'grad_weights'}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x3xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: the result has the logits' shape
func.func @router_grad_case8(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{dimension 1 of result 'grad_logits'}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x7xf32>
  return
}

// -----

// router_topk_grad: topk_then_softmax needs softmax scores
func.func @router_grad_case9(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{order = topk_then_softmax requires scoring = softmax, got scoring = sigmoid}}
  %d = moe.router_topk_grad %l, %i, %g {order = #moe.order<topk_then_softmax>, scoring = #moe.scoring<sigmoid>} : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: scaling_factor must be positive
func.func @router_grad_case10(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{attribute 'scaling_factor' must be finite and positive, got 0}}
  %d = moe.router_topk_grad %l, %i, %g {scaling_factor = 0.0 : f32} : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: logits must be 2-D float
func.func @router_grad_extra0(%l: tensor<4x8xi32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{operand 'logits' must be a 2-D tensor of floating-point values, got 'tensor<4x8xi32>'}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xi32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: at most 65536 experts
func.func @router_grad_extra1(%l: tensor<4x65537xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{expert dimension (1) of operand 'logits' must be static and at most 65536}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x65537xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<4x65537xf32>
  return
}

// -----

// router_topk_grad: k at most 64
func.func @router_grad_extra2(%l: tensor<4x128xf32>, %i: tensor<4x65xi32>, %g: tensor<4x65xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'ids' (k) must be in [1, 64] (the kernels unroll their per-token loops over k), got 65}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x128xf32>, tensor<4x65xi32>, tensor<4x65xf32> -> tensor<4x128xf32>
  return
}

// -----

// router_topk_grad: grad_weights has the tokens of logits
func.func @router_grad_extra3(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<5x2xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'grad_weights'}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi32>, tensor<5x2xf32> -> tensor<4x8xf32>
  return
}

// -----

// router_topk_grad: the result has the tokens of logits
func.func @router_grad_extra4(%l: tensor<4x8xf32>, %i: tensor<4x2xi32>, %g: tensor<4x2xf32>) {
  // expected-error @+1 {{dimension 0 of result 'grad_logits'}}
  %d = moe.router_topk_grad %l, %i, %g : tensor<4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32> -> tensor<3x8xf32>
  return
}
