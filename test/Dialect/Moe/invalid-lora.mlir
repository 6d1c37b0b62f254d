// RUN: moec-opt %s -split-input-file -verify-diagnostics
// The verifier rules of the LoRA gradient forms: grouped_matmul's
// transpose_lora and moe.lora_grad. Every diagnostic names the operand,
// result or attribute it is about.

// transpose_lora without an adapter
func.func @flip_without_adapter(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'transpose_lora' requires operands 'lora_a' and 'lora_b'}}
  %y = moe.grouped_matmul %x, %w, %o {transpose_lora} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// transpose_lora: A spans the output columns
func.func @flip_a_columns(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<16x8xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'lora_a' is 16 but must equal N, the output columns of 'rhs' (transpose_lora) (32)}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xbf16>, tensor<16x8xbf16>) {transpose_lora} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// transpose_lora: B spans the reduction
func.func @flip_b_rows(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x32xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_b' is 32 but must equal K, the columns of 'lhs' (transpose_lora) (16)}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x32xbf16>, tensor<32x8xbf16>) {transpose_lora} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// lora_grad: lhs and grad_out share their element type
func.func @grad_mixed_types(%x: tensor<8x16xbf16>, %dy: tensor<8x32xf32>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{element type of operand 'grad_out' ('f32') must match operand 'lhs' ('bf16')}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<8x32xf32>, tensor<4xi32> -> tensor<8x16xf32>, tensor<32x8xf32>
  return
}

// -----

// lora_grad: FP8 rows are not differentiated
func.func @grad_fp8(%x: tensor<8x16xf8E4M3FN>, %dy: tensor<8x32xf8E4M3FN>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{operand 'lhs' must be a 2-D tensor of bf16, f16 or f32 values}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) : tensor<8x16xf8E4M3FN>, tensor<8x32xf8E4M3FN>, tensor<4xi32> -> tensor<8x16xf32>, tensor<32x8xf32>
  return
}

// -----

// lora_grad: k without gather
func.func @grad_k_alone(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{attribute 'k' and operand 'gather_slots' must be given together (slot / k is the token)}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<8x16xf32>, tensor<32x8xf32>
  return
}

// -----

// lora_grad: gathered rows need all T*k slots
func.func @grad_few_slots(%x: tensor<8x16xbf16>, %dy: tensor<4x32xbf16>, %s: tensor<4xi32>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{operand 'gather_slots'}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) gather(%s : tensor<4xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x32xbf16>, tensor<4xi32> -> tensor<8x16xf32>, tensor<32x8xf32>
  return
}

// -----

// lora_grad: grad_out has the grouped rows
func.func @grad_rows(%x: tensor<8x16xbf16>, %dy: tensor<6x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'grad_out' is 6 but must equal the number of grouped rows (8)}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<6x32xbf16>, tensor<4xi32> -> tensor<8x16xf32>, tensor<32x8xf32>
  return
}

// -----

// lora_grad: the rank divides among the experts
func.func @grad_rank(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<6x16xbf16>, %b: tensor<32x6xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_a' must be a static multiple of the number of experts (4) with a rank r >= 1, got 'tensor<6x16xbf16>'}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<6x16xbf16>, tensor<32x6xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<6x16xf32>, tensor<32x6xf32>
  return
}

// -----

// lora_grad: A's columns are lhs's
func.func @grad_a_columns(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x12xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'lora_a' is 12 but must equal K, the columns of 'lhs' (16)}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x12xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<8x12xf32>, tensor<32x8xf32>
  return
}

// -----

// lora_grad: B's rows are grad_out's columns
func.func @grad_b_rows(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<30x8xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_b' is 30 but must equal N, the columns of 'grad_out' (32)}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<30x8xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<8x16xf32>, tensor<30x8xf32>
  return
}

// -----

// lora_grad: B's columns are A's rows
func.func @grad_b_columns(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x4xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'lora_b' is 4 but must equal dimension 0 of 'lora_a' (E * r) (8)}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x4xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<8x16xf32>, tensor<32x4xf32>
  return
}

// -----

// lora_grad: each gradient has its adapter's shape
func.func @grad_shape(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{result 'grad_b' must have the shape of operand 'lora_b' 'tensor<32x8xbf16>', got 'tensor<8x32xf32>'}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<8x16xf32>, tensor<8x32xf32>
  return
}

// -----

// lora_grad: the gradients are bf16, f16 or f32
func.func @grad_type(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{result 'grad_a' must be a 2-D tensor of bf16, f16 or f32 values}}
  %da, %db = moe.lora_grad %x, %dy, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<8x16xi32>, tensor<32x8xf32>
  return
}
