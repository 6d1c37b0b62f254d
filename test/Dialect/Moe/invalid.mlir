// RUN: moec-opt %s -split-input-file -verify-diagnostics
// One case per verifier rule of the moe ops; every diagnostic names the
// operand, result or attribute it is about.

// logits must be 2-D float
func.func @case0(%l: tensor<4x8xi32>) {
  // expected-error @+1 {{operand 'logits' must be a 2-D tensor of floating-point values, got 'tensor<4x8xi32>'}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xi32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// logits rank
func.func @case1(%l: tensor<8xf32>) {
  // expected-error @+1 {{operand 'logits' must be a 2-D tensor of floating-point values}}
  %w, %i = moe.router_topk %l k = 2 : tensor<8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// the expert dimension must be static
func.func @case2(%l: tensor<4x?xf32>) {
  // expected-error @+1 {{expert dimension (1) of operand 'logits' must be static}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x?xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// k must be positive
func.func @case3(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'k' must be positive, got 0}}
  %w, %i = moe.router_topk %l k = 0 : tensor<4x8xf32> -> tensor<4x0xf32>, tensor<4x0xi32>
  return
}

// -----

// k > E
func.func @case4(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'k' (9) must not exceed the number of experts (8)}}
  %w, %i = moe.router_topk %l k = 9 : tensor<4x8xf32> -> tensor<4x9xf32>, tensor<4x9xi32>
  return
}

// -----

// weights must be f32
func.func @case5(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{result 'weights' must be a 2-D tensor of f32 values, got 'tensor<4x2xbf16>'}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xf32> -> tensor<4x2xbf16>, tensor<4x2xi32>
  return
}

// -----

// ids must be i32
func.func @case6(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{result 'ids' must be a 2-D tensor of i32 values, got 'tensor<4x2xi64>'}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi64>
  return
}

// -----

// token count of weights
func.func @case7(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{dimension 0 of result 'weights' is 5 but must equal the number of tokens of 'logits' (4)}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xf32> -> tensor<5x2xf32>, tensor<4x2xi32>
  return
}

// -----

// k columns of ids
func.func @case8(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{dimension 1 of result 'ids' is 3 but must equal attribute 'k' (2)}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x3xi32>
  return
}

// -----

// topk_then_softmax needs softmax scoring
func.func @case9(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{order = topk_then_softmax requires scoring = softmax, got scoring = sigmoid}}
  %w, %i = moe.router_topk %l k = 2 {scoring = #moe.scoring<sigmoid>, order = #moe.order<topk_then_softmax>} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// bias must be f32
func.func @case10(%l: tensor<4x8xf32>, %b: tensor<8xbf16>) {
  // expected-error @+1 {{operand 'bias' must be a 1-D tensor of f32 values}}
  %w, %i = moe.router_topk %l bias(%b : tensor<8xbf16>) k = 2 : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// bias length
func.func @case11(%l: tensor<4x8xf32>, %b: tensor<7xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'bias' is 7 but must equal the number of experts (8)}}
  %w, %i = moe.router_topk %l bias(%b : tensor<7xf32>) k = 2 : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// num_groups without topk_groups
func.func @case12(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attributes 'num_groups' and 'topk_groups' must be given together}}
  %w, %i = moe.router_topk %l k = 2 {num_groups = 2 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// num_groups positive
func.func @case13(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'num_groups' must be positive, got 0}}
  %w, %i = moe.router_topk %l k = 2 {num_groups = 0 : i64, topk_groups = 1 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// topk_groups positive
func.func @case14(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'topk_groups' must be positive, got 0}}
  %w, %i = moe.router_topk %l k = 2 {num_groups = 2 : i64, topk_groups = 0 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// num_groups must divide E
func.func @case15(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'num_groups' (3) must divide the number of experts (8)}}
  %w, %i = moe.router_topk %l k = 2 {num_groups = 3 : i64, topk_groups = 1 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// topk_groups <= num_groups
func.func @case16(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'topk_groups' (3) must not exceed 'num_groups' (2)}}
  %w, %i = moe.router_topk %l k = 2 {num_groups = 2 : i64, topk_groups = 3 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// k must fit in the selected groups
func.func @case17(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'k' (3) exceeds the 2 experts in the 'topk_groups' best groups}}
  %w, %i = moe.router_topk %l k = 3 {num_groups = 4 : i64, topk_groups = 1 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>, tensor<4x3xi32>
  return
}

// -----

// scaling_factor positive
func.func @case18(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'scaling_factor' must be finite and positive, got -1}}
  %w, %i = moe.router_topk %l k = 2 {scaling_factor = -1.0 : f32} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// ids must be i32
func.func @case19(%ids: tensor<4x2xi64>) {
  // expected-error @+1 {{operand 'ids' must be a 2-D tensor of i32 values, got 'tensor<4x2xi64>'}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi64> -> tensor<8xi32>, tensor<8xi32>, tensor<8xi32>
  return
}

// -----

// num_experts positive
func.func @case20(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{attribute 'num_experts' must be positive, got 0}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 0 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<0xi32>
  return
}

// -----

// align must be a power of two
func.func @case21(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{attribute 'align' must be a positive power of two, got 24}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 align = 24 : tensor<4x2xi32> -> tensor<192xi32>, tensor<192xi32>, tensor<8xi32>
  return
}

// -----

// align zero
func.func @case22(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{attribute 'align' must be a positive power of two, got 0}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 align = 0 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<8xi32>
  return
}

// -----

// offsets type
func.func @case23(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{result 'offsets' must be a 1-D tensor of i32 values}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<8xi64>
  return
}

// -----

// sorted ids type
func.func @case24(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{result 'sorted_expert_ids' must be a 1-D tensor of i32 values}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8x1xi32>, tensor<8xi32>, tensor<8xi32>
  return
}

// -----

// slots type
func.func @case25(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{result 'slots' must be a 1-D tensor of i32 values}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xf32>, tensor<8xi32>
  return
}

// -----

// offsets length
func.func @case26(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{result 'offsets' must have static length 'num_experts' (8), got 'tensor<7xi32>'}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<7xi32>
  return
}

// -----

// offsets static
func.func @case27(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{result 'offsets' must have static length 'num_experts' (8)}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<?xi32>
  return
}

// -----

// k static
func.func @case28(%ids: tensor<4x?xi32>) {
  // expected-error @+1 {{dimension 1 (k) of operand 'ids' must be static}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x?xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  return
}

// -----

// unaligned capacity
func.func @case29(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dimension 0 of result 'sorted_expert_ids' is 9 but must equal tokens * k (8)}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<9xi32>, tensor<9xi32>, tensor<8xi32>
  return
}

// -----

// aligned capacity
func.func @case30(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dimension 0 of result 'slots' is 8 but must equal the padded capacity tokens * k + num_experts * (align - 1) (32)}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 align = 4 : tensor<4x2xi32> -> tensor<32xi32>, tensor<8xi32>, tensor<8xi32>
  return
}

// -----

// tokens rank
func.func @case31(%x: tensor<16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'tokens' must be a 2-D tensor of any values}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// slots must be i32
func.func @case32(%x: tensor<4x16xbf16>, %slots: tensor<8xi64>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' must be a 1-D tensor of i32 values}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi64>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// offsets must be i32
func.func @case33(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi64>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values, got 'tensor<4xi64>'}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi64> -> tensor<8x16xbf16>
  return
}

// -----

// offsets length must be static
func.func @case34(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<?xi32>'}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<?xi32> -> tensor<8x16xbf16>
  return
}

// -----

// k positive
func.func @case35(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' must be positive, got 0}}
  %r = moe.permute %x, %slots, %o k = 0 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// every slot needs a row
func.func @case36(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' has 8 rows, fewer than the 12 slots of 4 tokens with k = 3}}
  %r = moe.permute %x, %slots, %o k = 3 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// rows keep the token element type
func.func @case37(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{element type of result 'rows' ('f32') must match operand 'tokens' ('bf16')}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xf32>
  return
}

// -----

// rows rank
func.func @case38(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'rows' must be a 2-D tensor of any values}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<128xbf16>
  return
}

// -----

// one row per slot entry
func.func @case39(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of result 'rows' is 9 but must equal the length of 'slots' (8)}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<9x16xbf16>
  return
}

// -----

// hidden size kept
func.func @case40(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'rows' is 32 but must equal the hidden size of 'tokens' (16)}}
  %r = moe.permute %x, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// probs without its result (generic form)
func.func @case41(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{operand 'probs' and result 'permuted_probs' must be given together}}
  %r = "moe.permute"(%x, %slots, %o, %w) <{k = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32>, tensor<4x2xf32>) -> tensor<8x16xbf16>
  return
}

// -----

// probs must be f32
func.func @case42(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xbf16>) {
  // expected-error @+1 {{operand 'probs' must be a 2-D tensor of f32 values}}
  %r, %p = moe.permute %x, %slots, %o k = 2 probs(%w : tensor<4x2xbf16> -> tensor<8xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// permuted probs must be 1-D f32
func.func @case43(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{result 'permuted_probs' must be a 1-D tensor of f32 values}}
  %r, %p = moe.permute %x, %slots, %o k = 2 probs(%w : tensor<4x2xf32> -> tensor<8x1xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// probs token count
func.func @case44(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<5x2xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'probs' is 5 but must equal the number of tokens (4)}}
  %r, %p = moe.permute %x, %slots, %o k = 2 probs(%w : tensor<5x2xf32> -> tensor<8xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// probs width k
func.func @case45(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x3xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'probs' is 3 but must equal attribute 'k' (2)}}
  %r, %p = moe.permute %x, %slots, %o k = 2 probs(%w : tensor<4x3xf32> -> tensor<8xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// permuted probs length
func.func @case46(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{dimension 0 of result 'permuted_probs' is 7 but must equal the length of 'slots' (8)}}
  %r, %p = moe.permute %x, %slots, %o k = 2 probs(%w : tensor<4x2xf32> -> tensor<7xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// scales without its result (generic form)
func.func @case47(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{operand 'scales' and result 'permuted_scales' must be given together}}
  %r = "moe.permute"(%x, %slots, %o, %s) <{k = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 0>, resultSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32>, tensor<4x1xf32>) -> tensor<8x16xbf16>
  return
}

// -----

// scales must be f32
func.func @case48(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %s: tensor<4x1xf16>) {
  // expected-error @+1 {{operand 'scales' must be a 2-D tensor of f32 values}}
  %r, %p = moe.permute %x, %slots, %o k = 2 scales(%s : tensor<4x1xf16> -> tensor<8x1xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// scales token count
func.func @case49(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %s: tensor<3x1xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'scales' is 3 but must equal the number of tokens (4)}}
  %r, %p = moe.permute %x, %slots, %o k = 2 scales(%s : tensor<3x1xf32> -> tensor<8x1xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// permuted scales rows
func.func @case50(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{dimension 0 of result 'permuted_scales' is 6 but must equal the length of 'slots' (8)}}
  %r, %p = moe.permute %x, %slots, %o k = 2 scales(%s : tensor<4x1xf32> -> tensor<6x1xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// permuted scales groups
func.func @case51(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{dimension 1 of result 'permuted_scales' is 1 but must equal the scale groups of 'scales' (2)}}
  %r, %p = moe.permute %x, %slots, %o k = 2 scales(%s : tensor<4x2xf32> -> tensor<8x1xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// rows must be float
func.func @case52(%r: tensor<8x16xi8>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'rows' must be a 2-D tensor of bf16, f16 or f32 values, got 'tensor<8x16xi8>'}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xi8>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// slots must be i32
func.func @case53(%r: tensor<8x16xbf16>, %slots: tensor<8xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' must be a 1-D tensor of i32 values}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xf32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// out must be float
func.func @case54(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'out' must be a 2-D tensor of bf16, f16 or f32 values}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xi32>
  return
}

// -----

// offsets rank
func.func @case55(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4x1xi32>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4x1xi32> -> tensor<4x16xbf16>
  return
}

// -----

// k positive
func.func @case56(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' must be positive, got -1}}
  %y = moe.unpermute %r, %slots, %o k = -1 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// one slot per row
func.func @case57(%r: tensor<8x16xbf16>, %slots: tensor<6xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'slots' is 6 but must equal the number of rows of 'rows' (8)}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<6xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// hidden size kept
func.func @case58(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'out' is 8 but must equal the hidden size of 'rows' (16)}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x8xbf16>
  return
}

// -----

// rows must cover every slot
func.func @case59(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'rows' has 8 rows, fewer than the 10 slots of 5 tokens with k = 2}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<5x16xbf16>
  return
}

// -----

// weights must be f32
func.func @case60(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xbf16>) {
  // expected-error @+1 {{operand 'weights' must be a 2-D tensor of f32 values}}
  %y = moe.unpermute %r, %slots, %o k = 2 weights(%w : tensor<4x2xbf16>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// weights token count
func.func @case61(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<3x2xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'weights' is 3 but must equal the number of tokens of result 'out' (4)}}
  %y = moe.unpermute %r, %slots, %o k = 2 weights(%w : tensor<3x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// weights width k
func.func @case62(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x1xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'weights' is 1 but must equal attribute 'k' (2)}}
  %y = moe.unpermute %r, %slots, %o k = 2 weights(%w : tensor<4x1xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// lhs rank
func.func @case63(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %l: tensor<8x16x1xbf16>) {
  // expected-error @+1 {{operand 'lhs' must be a 2-D tensor of bf16, f16, f32, f8E4M3FN or f8E5M2 values}}
  %y = moe.grouped_matmul %l, %w, %o : tensor<8x16x1xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// offsets must be i32
func.func @case64(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi64>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi64> -> tensor<8x32xbf16>
  return
}

// -----

// gather needs k
func.func @case65(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>) {
  // expected-error @+1 {{attribute 'k' is required with 'gather' or 'scatter' (slot / k is the token)}}
  %y = moe.grouped_matmul %x, %w, %o gather(%s : tensor<8xi32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// k without gather or scatter
func.func @case66(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' is only used with 'gather' or 'scatter'}}
  %y = moe.grouped_matmul %x, %w, %o {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// k positive
func.func @case67(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>) {
  // expected-error @+1 {{attribute 'k' must be positive, got 0}}
  %y = moe.grouped_matmul %x, %w, %o gather(%s : tensor<8xi32>) {k = 0 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// gather slots must be i32
func.func @case68(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi64>) {
  // expected-error @+1 {{operand 'gather_slots' must be a 1-D tensor of i32 values}}
  %y = moe.grouped_matmul %x, %w, %o gather(%s : tensor<8xi64>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// gather slots must cover every slot of the lhs tokens
func.func @case69(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<6xi32>) {
  // expected-error @+1 {{operand 'gather_slots' has 6 rows, fewer than the 16 slots of 8 tokens with k = 2}}
  %y = moe.grouped_matmul %x, %w, %o gather(%s : tensor<6xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<6x32xbf16>
  return
}

// -----

// gathered rows come from the slots, not from lhs
func.func @case70(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<24xi32>) {
  // expected-error @+1 {{dimension 0 of result 'out' is 8 but must equal the number of grouped rows (24)}}
  %y = moe.grouped_matmul %x, %w, %o gather(%s : tensor<24xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// lhs and rhs element types
func.func @case71(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<4x16x32xf16>) {
  // expected-error @+1 {{element type of operand 'rhs' ('f16') must match operand 'lhs' ('bf16')}}
  %y = moe.grouped_matmul %x, %h, %o : tensor<8x16xbf16>, tensor<4x16x32xf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// rhs rank
func.func @case72(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<16x32xbf16>) {
  // expected-error @+1 {{operand 'rhs' must be a 3-D tensor of bf16, f16, f32, f8E4M3FN or f8E5M2 values}}
  %y = moe.grouped_matmul %x, %h, %o : tensor<8x16xbf16>, tensor<16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// one weight per expert
func.func @case73(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<5x16x32xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'rhs' is 5 but must equal the number of experts (4)}}
  %y = moe.grouped_matmul %x, %h, %o : tensor<8x16xbf16>, tensor<5x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// reduction size
func.func @case74(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<4x24x32xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'rhs' is 24 but must equal K, the columns of 'lhs' (16)}}
  %y = moe.grouped_matmul %x, %h, %o : tensor<8x16xbf16>, tensor<4x24x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// reduction size of a transposed rhs
func.func @case75(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 2 of operand 'rhs' (transposed) is 32 but must equal K, the columns of 'lhs' (16)}}
  %y = moe.grouped_matmul %x, %w, %o {transpose_rhs} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<16x32xbf16>
  return
}

// -----

// bias width
func.func @case76(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %b: tensor<4x16xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'bias' is 16 but must equal N, the output columns of 'rhs' (32)}}
  %y = moe.grouped_matmul %x, %w, %o bias(%b : tensor<4x16xf32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// bias per expert
func.func @case77(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %b: tensor<3x32xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'bias' is 3 but must equal the number of experts (4)}}
  %y = moe.grouped_matmul %x, %w, %o bias(%b : tensor<3x32xf32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// bias must be float
func.func @case78(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %b: tensor<4x32xi32>) {
  // expected-error @+1 {{operand 'bias' must be a 2-D tensor of floating-point values}}
  %y = moe.grouped_matmul %x, %w, %o bias(%b : tensor<4x32xi32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// lora_a without lora_b (generic form)
func.func @case79(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>) {
  // expected-error @+1 {{operands 'lora_a' and 'lora_b' must be given together}}
  %y = "moe.grouped_matmul"(%x, %w, %o, %a) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0>}> : (tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32>, tensor<8x16xbf16>) -> tensor<8x32xbf16>
  return
}

// -----

// LoRA rank per expert
func.func @case80(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<6x16xbf16>, %b: tensor<32x6xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_a' must be a static multiple of the number of experts (4) with a rank r >= 1, got 'tensor<6x16xbf16>'}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<6x16xbf16>, tensor<32x6xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// LoRA A reduction size
func.func @case81(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x12xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'lora_a' is 12 but must equal K, the columns of 'lhs' (16)}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x12xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// LoRA B output size
func.func @case82(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<30x8xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_b' is 30 but must equal N, the output columns of 'rhs' (32)}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xbf16>, tensor<30x8xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// LoRA ranks agree
func.func @case83(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x4xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'lora_b' is 4 but must equal dimension 0 of 'lora_a' (E * r) (8)}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x4xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// LoRA must be float
func.func @case84(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xi8>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{operand 'lora_a' must be a 2-D tensor of floating-point values}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xi8>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// lora_scaling without LoRA
func.func @case85(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'lora_scaling' requires operands 'lora_a' and 'lora_b'}}
  %y = moe.grouped_matmul %x, %w, %o {lora_scaling = 2.0 : f32} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// swiglu halves the output
func.func @case86(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'out' is 32 but must equal N / 2 (swiglu halves the output columns) (16)}}
  %y = moe.grouped_matmul %x, %w, %o {activation = #moe.activation<swiglu>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// swiglu needs an even N
func.func @case87(%x: tensor<8x16xbf16>, %w: tensor<4x16x31xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{activation = swiglu needs an even number of output columns in 'rhs', got 31}}
  %y = moe.grouped_matmul %x, %w, %o {activation = #moe.activation<swiglu>} : tensor<8x16xbf16>, tensor<4x16x31xbf16>, tensor<4xi32> -> tensor<8x15xbf16>
  return
}

// -----

// swiglu_grad needs the saved SwiGLU input
func.func @case87_swiglu_grad_no_input(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'activation_input' is given exactly when activation = swiglu_grad (the saved SwiGLU input)}}
  %y = moe.grouped_matmul %x, %w, %o {activation = #moe.activation<swiglu_grad>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  return
}

// -----

// activation_input only with swiglu_grad
func.func @case87_input_without_swiglu_grad(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<8x64xbf16>) {
  // expected-error @+1 {{operand 'activation_input' is given exactly when activation = swiglu_grad (the saved SwiGLU input)}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<8x64xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// swiglu_grad's saved input is [M, 2N]
func.func @case87_swiglu_grad_input_width(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<8x32xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'activation_input' is 32 but must equal 2 * N (gate and up halves) (64)}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<8x32xbf16>) {activation = #moe.activation<swiglu_grad>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  return
}

// -----

// swiglu_grad's saved input has the grouped rows
func.func @case87_swiglu_grad_input_rows(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<9x64xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'activation_input' is 9 but must equal the number of grouped rows (8)}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<9x64xbf16>) {activation = #moe.activation<swiglu_grad>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  return
}

// -----

// swiglu_grad doubles the output
func.func @case87_swiglu_grad_out_width(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<8x64xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'out' is 32 but must equal 2 * N (swiglu_grad writes gate and up halves) (64)}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<8x64xbf16>) {activation = #moe.activation<swiglu_grad>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// swiglu_grad's saved input must be bf16, f16 or f32
func.func @case87_swiglu_grad_input_type(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<8x64xi32>) {
  // expected-error @+1 {{operand 'activation_input' must be a 2-D tensor of}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<8x64xi32>) {activation = #moe.activation<swiglu_grad>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x64xbf16>
  return
}

// -----

// swiglu_grad writes grouped rows, not tokens
func.func @case87_swiglu_grad_scatter(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %h: tensor<8x64xbf16>, %slots: tensor<8xi32>) {
  // expected-error @+1 {{activation = swiglu_grad writes grouped rows: operand 'scatter_slots' is not supported}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%slots : tensor<8xi32>) activation_input(%h : tensor<8x64xbf16>) {activation = #moe.activation<swiglu_grad>, k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x64xbf16>
  return
}

// -----

// with N dynamic, the output is as wide as the saved input
func.func @case87_swiglu_grad_dynamic_n(%x: tensor<8x48xbf16>, %w: tensor<4x48x?xbf16>, %o: tensor<4xi32>, %h: tensor<8x64xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'out' is 100 but must equal 2 * N (swiglu_grad writes gate and up halves) (64)}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<8x64xbf16>) {activation = #moe.activation<swiglu_grad>} : tensor<8x48xbf16>, tensor<4x48x?xbf16>, tensor<4xi32> -> tensor<8x100xbf16>
  return
}

// -----

// the saved input's width is even
func.func @case87_swiglu_grad_odd_input(%x: tensor<8x48xbf16>, %w: tensor<4x48x?xbf16>, %o: tensor<4xi32>, %h: tensor<8x7xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'activation_input' must be even (gate and up halves), got 7}}
  %y = moe.grouped_matmul %x, %w, %o activation_input(%h : tensor<8x7xbf16>) {activation = #moe.activation<swiglu_grad>} : tensor<8x48xbf16>, tensor<4x48x?xbf16>, tensor<4xi32> -> tensor<8x7xbf16>
  return
}

// -----

// row scale must be f32
func.func @case88(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xbf16>) {
  // expected-error @+1 {{operand 'row_scale' must be a 1-D tensor of f32 values}}
  %y = moe.grouped_matmul %x, %w, %o row_scale(%s : tensor<8xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// one scale per row
func.func @case89(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<7xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'row_scale' is 7 but must equal the number of grouped rows (8)}}
  %y = moe.grouped_matmul %x, %w, %o row_scale(%s : tensor<7xf32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// out rank
func.func @case90(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'out' must be a 2-D tensor of bf16, f16 or f32 values}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32x1xbf16>
  return
}

// -----

// out width
func.func @case91(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'out' is 30 but must equal N, the output columns of 'rhs' (32)}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x30xbf16>
  return
}

// -----

// out rows
func.func @case92(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of result 'out' is 9 but must equal the number of grouped rows (8)}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<9x32xbf16>
  return
}

// -----

// scatter_weights without scatter (generic form)
func.func @case93(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %sw: tensor<4x2xf32>) {
  // expected-error @+1 {{operand 'scatter_weights' requires operand 'scatter_slots'}}
  %y = "moe.grouped_matmul"(%x, %w, %o, %sw) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0>}> : (tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32>, tensor<4x2xf32>) -> tensor<8x32xbf16>
  return
}

// -----

// scatter slots must be i32
func.func @case94(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{operand 'scatter_slots' must be a 1-D tensor of i32 values}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xf32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return
}

// -----

// one slot per row
func.func @case95(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<6xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'scatter_slots' is 6 but must equal the number of grouped rows (8)}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<6xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<3x32xbf16>
  return
}

// -----

// scatter rows cover every slot
func.func @case96(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>) {
  // expected-error @+1 {{operand 'scatter_slots' has 8 rows, fewer than the 10 slots of 5 tokens with k = 2}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<5x32xbf16>
  return
}

// -----

// scatter weights must be f32
func.func @case97(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>, %sw: tensor<4x2xbf16>) {
  // expected-error @+1 {{operand 'scatter_weights' must be a 2-D tensor of f32 values}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xi32>) scatter_weights(%sw : tensor<4x2xbf16>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return
}

// -----

// scatter weights per token
func.func @case98(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>, %sw: tensor<3x2xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'scatter_weights' is 3 but must equal the number of tokens of result 'out' (4)}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xi32>) scatter_weights(%sw : tensor<3x2xf32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return
}

// -----

// scatter weights width k
func.func @case99(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>, %sw: tensor<4x1xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'scatter_weights' is 1 but must equal attribute 'k' (2)}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xi32>) scatter_weights(%sw : tensor<4x1xf32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return
}

// -----

// grouped_weight_grad with transpose_rhs writes [E, N, K], not [E, K, N]
func.func @case106(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 2 of result 'out' (transpose_rhs) is 32 but must equal K, the columns of 'lhs' (16)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o {transpose_rhs} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// grouped_weight_grad with transpose_rhs: dimension 1 is N
func.func @case106b(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'out' (transpose_rhs) is 24 but must equal N, the columns of 'grad_out' (32)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o {transpose_rhs} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x24x16xf32>
  return
}

// -----

// grouped_weight_grad: one result layout, [K, E, N] or [E, N, K]
func.func @case106c(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attributes 'experts_in_columns' and 'transpose_rhs' cannot be combined (the result is [K, E, N] or [E, N, K])}}
  %dw = moe.grouped_weight_grad %x, %dy, %o {transpose_rhs, experts_in_columns} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<16x4x32xf32>
  return
}

// -----

// grouped_weight_grad accumulate: the result's type, layout and element type
func.func @case106d(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %g: tensor<4x16x32xbf16>) {
  // expected-error @+1 {{operand 'accumulate' must have the type of result 'out' ('tensor<4x16x32xf32>'), got 'tensor<4x16x32xbf16>'}}
  %dw = moe.grouped_weight_grad %x, %dy, %o accumulate(%g : tensor<4x16x32xbf16>) : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// grouped_weight_grad accumulate with transpose_rhs: [E, N, K], not [E, K, N]
func.func @case106e(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>, %g: tensor<4x16x32xf32>) {
  // expected-error @+1 {{operand 'accumulate' must have the type of result 'out' ('tensor<4x32x16xf32>'), got 'tensor<4x16x32xf32>'}}
  %dw = moe.grouped_weight_grad %x, %dy, %o accumulate(%g : tensor<4x16x32xf32>) {transpose_rhs} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x32x16xf32>
  return
}

// -----

// grouped_weight_grad: grad_out is the 2-D output gradient
func.func @case108(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'grad_out' must be a 2-D tensor of bf16, f16 or f32 values}}
  %dw = moe.grouped_weight_grad %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// grouped_weight_grad element types
func.func @case109(%x: tensor<8x16xbf16>, %dy: tensor<8x32xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{element type of operand 'grad_out' ('f32') must match operand 'lhs' ('bf16')}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xbf16>, tensor<8x32xf32>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// grouped_weight_grad: gradient rows
func.func @case110(%x: tensor<8x16xbf16>, %dy: tensor<9x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'grad_out' is 9 but must equal the number of grouped rows (8)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xbf16>, tensor<9x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// grouped_weight_grad out rank
func.func @case111(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'out' must be a 3-D tensor of bf16, f16 or f32 values}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32x1xf32>
  return
}

// -----

// grouped_weight_grad one gradient per expert
func.func @case112(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of result 'out' is 3 but must equal the number of experts (4)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<3x16x32xf32>
  return
}

// -----

// grouped_weight_grad K
func.func @case113(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'out' is 15 but must equal K, the columns of 'lhs' (16)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x15x32xf32>
  return
}

// -----

// grouped_weight_grad N
func.func @case114(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 2 of result 'out' is 31 but must equal N, the columns of 'grad_out' (32)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x31xf32>
  return
}

// -----

// grouped_weight_grad: k turns a gathered slot into a token, nothing else
func.func @case114b(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' is only used with 'gather'}}
  %dw = moe.grouped_weight_grad %x, %dy, %o {k = 2 : i64} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// grouped_weight_grad: a gather needs k
func.func @case114c(%x: tensor<8x16xbf16>, %dy: tensor<16x32xbf16>, %s: tensor<16xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' is required with 'gather' (slot / k is the token)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o gather(%s : tensor<16xi32>) : tensor<8x16xbf16>, tensor<16x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// swiglu input must be float
func.func @case115(%h: tensor<4x6xi32>) {
  // expected-error @+1 {{operand 'input' must be a 2-D tensor of floating-point values}}
  %a = moe.swiglu %h : tensor<4x6xi32> -> tensor<4x3xf32>
  return
}

// -----

// swiglu output must be float
func.func @case116(%h: tensor<4x6xf32>) {
  // expected-error @+1 {{result 'output' must be a 2-D tensor of floating-point values}}
  %a = moe.swiglu %h : tensor<4x6xf32> -> tensor<4x3xi32>
  return
}

// -----

// swiglu needs an even width
func.func @case117(%h: tensor<4x7xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'input' must be even (gate and up halves), got 7}}
  %a = moe.swiglu %h : tensor<4x7xf32> -> tensor<4x3xf32>
  return
}

// -----

// swiglu keeps the rows
func.func @case118(%h: tensor<4x6xf32>) {
  // expected-error @+1 {{dimension 0 of result 'output' is 5 but must equal the rows of operand 'input' (4)}}
  %a = moe.swiglu %h : tensor<4x6xf32> -> tensor<5x3xf32>
  return
}

// -----

// swiglu halves the width
func.func @case119(%h: tensor<4x6xf32>) {
  // expected-error @+1 {{dimension 1 of result 'output' is 6 but must equal half the width of operand 'input' (3)}}
  %a = moe.swiglu %h : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

// swiglu_grad output gradient shape
func.func @case120(%h: tensor<4x6xf32>, %dy: tensor<4x6xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'grad_output' is 6 but must equal half the width of operand 'input' (3)}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

// swiglu_grad input gradient shape
func.func @case121(%h: tensor<4x6xf32>, %dy: tensor<4x3xf32>) {
  // expected-error @+1 {{dimension 1 of result 'grad_input' is 3 but must equal operand 'input' (6)}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  return
}

// -----

// swiglu_grad input gradient must be float
func.func @case122(%h: tensor<4x6xf32>, %dy: tensor<4x3xf32>) {
  // expected-error @+1 {{result 'grad_input' must be a 2-D tensor of floating-point values}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xf32>, tensor<4x3xf32> -> tensor<4x6xi32>
  return
}

// -----

// quantize input must be bf16/f16/f32
func.func @case123(%x: tensor<4x128xf8E4M3FN>) {
  // expected-error @+1 {{operand 'input' must be a 2-D tensor of bf16, f16 or f32 values}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x128xf8E4M3FN> -> tensor<4x128xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// quantize data must be FP8
func.func @case124(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{result 'data' must be a 2-D tensor of f8E4M3FN or f8E5M2 values, got 'tensor<4x128xi8>'}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x128xbf16> -> tensor<4x128xi8>, tensor<4x1xf32>
  return
}

// -----

// quantize group_size positive
func.func @case125(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{attribute 'group_size' must be positive, got 0}}
  %q, %s = moe.quantize %x group_size = 0 : tensor<4x128xbf16> -> tensor<4x128xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// quantize keeps the shape
func.func @case126(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'data' is 64 but must equal operand 'input' (128)}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x128xbf16> -> tensor<4x64xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// quantize scales must be f32
func.func @case127(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{result 'scales' must be a 2-D tensor of f32 values}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x128xbf16> -> tensor<4x128xf8E4M3FN>, tensor<4x1xbf16>
  return
}

// -----

// rowwise quantize takes no offsets
func.func @case128(%x: tensor<4x128xbf16>, %o: tensor<2xi32>) {
  // expected-error @+1 {{operand 'offsets' is only used with axis = colwise}}
  %q, %s = moe.quantize %x offsets(%o : tensor<2xi32>) group_size = 128 : tensor<4x128xbf16> -> tensor<4x128xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// rowwise scale rows
func.func @case129(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{dimension 0 of result 'scales' is 1 but must equal the number of rows (4)}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x128xbf16> -> tensor<4x128xf8E4M3FN>, tensor<1x1xf32>
  return
}

// -----

// rowwise scale columns
func.func @case130(%x: tensor<4x200xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'scales' is 1 but must equal ceil(columns / group_size) (2)}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x200xbf16> -> tensor<4x200xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// colwise quantize needs offsets
func.func @case131(%x: tensor<256x64xbf16>) {
  // expected-error @+1 {{axis = colwise requires operand 'offsets' (the expert groups)}}
  %q, %s = moe.quantize %x group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<2x64xf32>
  return
}

// -----

// colwise scale rows
func.func @case132(%x: tensor<256x64xbf16>, %o: tensor<8xi32>) {
  // expected-error @+1 {{dimension 0 of result 'scales' is 2 but must equal (rows + min(E, rows) * (group_size - 1)) / group_size (9)}}
  %q, %s = moe.quantize %x offsets(%o : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<2x64xf32>
  return
}

// -----

// colwise scale columns
func.func @case133(%x: tensor<256x64xbf16>, %o: tensor<8xi32>) {
  // expected-error @+1 {{dimension 1 of result 'scales' is 32 but must equal the number of columns (64)}}
  %q, %s = moe.quantize %x offsets(%o : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<9x32xf32>
  return
}

// -----

// transpose is a colwise or blocks layout
func.func @quantize_transpose_rowwise(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{attribute 'transpose' is only used with axis = colwise (the FP8 weight gradient's layout) or axis = blocks (expert weights)}}
  %q, %s = moe.quantize %x group_size = 128 {transpose} : tensor<4x128xbf16> -> tensor<128x4xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// blocks quantize [E, N, K] weights
func.func @quantize_blocks_rank(%w: tensor<264x136xbf16>) {
  // expected-error @+1 {{operand 'input' (axis = blocks) must be a 3-D tensor of bf16, f16 or f32 values, got 'tensor<264x136xbf16>'}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<264x136xbf16> -> tensor<264x136xf8E4M3FN>, tensor<3x2xf32>
  return
}

// -----

// blocks take no expert groups
func.func @quantize_blocks_offsets(%w: tensor<4x264x136xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'offsets' is only used with axis = colwise (axis = blocks quantizes each expert's whole matrix)}}
  %q, %s = moe.quantize %w offsets(%o : tensor<4xi32>) group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>
  return
}

// -----

// blocks keep [E, N, K]
func.func @quantize_blocks_data(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'data' is 136 but must equal N of operand 'input' (264)}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E4M3FN>, tensor<4x3x2xf32>
  return
}

// -----

// transposed blocks write [E, K, N]
func.func @quantize_blocks_transposed_data(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'data' (transpose) is 264 but must equal K of operand 'input' (136)}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>, transpose} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x2x3xf32>
  return
}

// -----

// one scale per block of each expert
func.func @quantize_blocks_scales(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 2 of result 'scales' is 1 but must equal ceil(K / group_size) (2)}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x1xf32>
  return
}

// -----

// transposed blocks transpose their scales too
func.func @quantize_blocks_transposed_scales(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'scales' is 3 but must equal ceil(K / group_size) (2)}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>, transpose} : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E4M3FN>, tensor<4x3x2xf32>
  return
}

// -----

// blocks scales are [E, ., .] f32
func.func @quantize_blocks_scale_rank(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{result 'scales' (axis = blocks) must be a 3-D tensor of f32 values, got 'tensor<12x2xf32>'}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<12x2xf32>
  return
}

// -----

// the experts of the scales
func.func @quantize_blocks_scale_experts(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 0 of result 'scales' is 2 but must equal the experts of operand 'input' (4)}}
  %q, %s = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<2x3x2xf32>
  return
}

// -----

// both layouts: the transposed data is [E, K, N]
func.func @quantize_both_transposed_data(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'transposed_data' is 264 but must equal K of operand 'input' (136)}}
  %q, %s, %t, %ts = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x264x136xf8E4M3FN>, tensor<4x2x3xf32>
  return
}

// -----

// both layouts: the transposed scales are [E, ceil(K/g), ceil(N/g)]
func.func @quantize_both_transposed_scales(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'transposed_scales' is 3 but must equal ceil(K / group_size) (2)}}
  %q, %s, %t, %ts = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x3x2xf32>
  return
}

// -----

// both layouts in one FP8 format
func.func @quantize_both_formats(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{result 'transposed_data' must have the element type of result 'data' ('f8E4M3FN'), got 'f8E5M2'}}
  %q, %s, %t, %ts = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E5M2>, tensor<4x2x3xf32>
  return
}

// -----

// both layouts: data is the plain one
func.func @quantize_both_transpose(%w: tensor<4x264x136xbf16>) {
  // expected-error @+1 {{with results 'transposed_data' and 'transposed_scales' writes the plain layout to 'data' and the transposed one to them: drop attribute 'transpose'}}
  %q, %s, %t, %ts = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>, transpose} : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
  return
}

// -----

// the second layout is the expert weights'
func.func @quantize_both_rowwise(%x: tensor<8x256xbf16>) {
  // expected-error @+1 {{results 'transposed_data' and 'transposed_scales' are only used with axis = blocks (the expert weights' second layout)}}
  %q, %s, %t, %ts = moe.quantize %x group_size = 128 : tensor<8x256xbf16> -> tensor<8x256xf8E4M3FN>, tensor<8x2xf32>, tensor<256x8xf8E4M3FN>, tensor<2x8xf32>
  return
}

// -----

// blocks are not dequantized
func.func @dequantize_blocks(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{axis = blocks (FP8 expert weight blocks) is not dequantized: moe.dequantize reads the rowwise and colwise layouts}}
  %x = moe.dequantize %q, %s group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// dequantize group_size positive
func.func @case134(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{attribute 'group_size' must be positive, got -2}}
  %x = moe.dequantize %q, %s group_size = -2 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 dequantize takes no codebook
func.func @case135(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{operand 'codebook' is only used with packed NF4 'data' (ui8)}}
  %x = moe.dequantize %q, %s codebook(%cb : tensor<16xf32>) group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 dequantize takes no expert subset
func.func @case136(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>, %e: tensor<2xi32>) {
  // expected-error @+1 {{operand 'experts' is only used with packed NF4 'data' (ui8)}}
  %x = moe.dequantize %q, %s experts(%e : tensor<2xi32>) group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 dequantize data rank
func.func @case137(%q: tensor<2x4x128xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{operand 'data' must be a 2-D tensor of f8E4M3FN or f8E5M2 values}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<2x4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 dequantize output type
func.func @case138(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{result 'output' must be a 2-D tensor of bf16, f16 or f32 values}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xf8E5M2>
  return
}

// -----

// FP8 dequantize keeps the shape
func.func @case139(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{dimension 0 of result 'output' is 8 but must equal operand 'data' (4)}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<8x128xbf16>
  return
}

// -----

// FP8 dequantize scale columns
func.func @case140(%q: tensor<4x256xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'scales' is 1 but must equal ceil(columns / group_size) (2)}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x256xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x256xbf16>
  return
}

// -----

// FP8 colwise dequantize needs offsets
func.func @case141(%q: tensor<256x64xf8E4M3FN>, %s: tensor<9x64xf32>) {
  // expected-error @+1 {{axis = colwise requires operand 'offsets' (the expert groups)}}
  %x = moe.dequantize %q, %s group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E4M3FN>, tensor<9x64xf32> -> tensor<256x64xbf16>
  return
}

// -----

// dequantize data must be FP8 or ui8
func.func @case142(%q: tensor<4x128xi8>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{operand 'data' must be a tensor of FP8 (f8E4M3FN, f8E5M2) values, or of ui8 for packed NF4, got 'tensor<4x128xi8>'}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x128xi8>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// NF4 takes no offsets
func.func @case143(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'offsets' is only used with FP8 'data'}}
  %w = moe.dequantize %p, %a offsets(%o : tensor<4xi32>) codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// NF4 has no axis
func.func @case144(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{attribute 'axis' applies to FP8 'data' only; NF4 blocks run along each expert's elements}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 {axis = #moe.axis<colwise>} : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// NF4 needs a codebook
func.func @case145(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{packed NF4 'data' (ui8) requires operand 'codebook'}}
  %w = moe.dequantize %p, %a group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// codebook has 16 entries
func.func @case146(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>, %cb8: tensor<8xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'codebook' is 8 but must equal the 16 NF4 code values (16)}}
  %w = moe.dequantize %p, %a codebook(%cb8 : tensor<8xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// codebook must be f32
func.func @case147(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>, %cbh: tensor<16xbf16>) {
  // expected-error @+1 {{operand 'codebook' must be a 1-D tensor of f32 values}}
  %w = moe.dequantize %p, %a codebook(%cbh : tensor<16xbf16>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// NF4 data rank
func.func @case148(%p: tensor<8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{operand 'data' must be a 3-D tensor of ui8 values (two NF4 codes per byte)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// block size divides an expert
func.func @case149(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{attribute 'group_size' (48) must divide the 128 elements of each expert}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 48 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// NF4 absmax blocks
func.func @case150(%p: tensor<4x8x8xui8>, %a: tensor<4x4xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'scales' is 4 but must equal the blocks per expert (K * N / group_size) (2)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x4xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// NF4 absmax experts
func.func @case151(%p: tensor<4x8x8xui8>, %a: tensor<3x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'scales' is 3 but must equal the number of experts of 'data' (4)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<3x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// NF4 absmax must be f32
func.func @case152(%p: tensor<4x8x8xui8>, %a: tensor<4x2xbf16>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{operand 'scales' must be a 2-D tensor of f32 values}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xbf16> -> tensor<4x8x16xbf16>
  return
}

// -----

// expert subset must be i32
func.func @case153(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>, %e: tensor<2xi64>) {
  // expected-error @+1 {{operand 'experts' must be a 1-D tensor of i32 values}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) experts(%e : tensor<2xi64>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<2x8x16xbf16>
  return
}

// -----

// one output per selected expert
func.func @case154(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>, %e: tensor<2xi32>) {
  // expected-error @+1 {{dimension 0 of result 'output' is 4 but must equal the length of 'experts' (2)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) experts(%e : tensor<2xi32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xbf16>
  return
}

// -----

// one output per expert
func.func @case155(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{dimension 0 of result 'output' is 3 but must equal the number of experts of 'data' (4)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<3x8x16xbf16>
  return
}

// -----

// output rows
func.func @case156(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{dimension 1 of result 'output' is 4 but must equal dimension 1 of 'data' (8)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x4x16xbf16>
  return
}

// -----

// two codes per byte
func.func @case157(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{dimension 2 of result 'output' is 8 but must equal twice dimension 2 of 'data' (two codes per byte) (16)}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x8xbf16>
  return
}

// -----

// NF4 output type
func.func @case158(%p: tensor<4x8x8xui8>, %a: tensor<4x2xf32>, %cb: tensor<16xf32>) {
  // expected-error @+1 {{result 'output' must be a 3-D tensor of bf16, f16 or f32 values}}
  %w = moe.dequantize %p, %a codebook(%cb : tensor<16xf32>) group_size = 64 : tensor<4x8x8xui8>, tensor<4x2xf32> -> tensor<4x8x16xi32>
  return
}

// -----

// router_topk: k columns of weights
func.func @case159(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{dimension 1 of result 'weights' is 3 but must equal attribute 'k' (2)}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xf32> -> tensor<4x3xf32>, tensor<4x2xi32>
  return
}

// -----

// router_topk: token count of ids
func.func @case160(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{dimension 0 of result 'ids' is 5 but must equal the number of tokens of 'logits' (4)}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<5x2xi32>
  return
}

// -----

// router_topk: topk_groups without num_groups
func.func @case161(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attributes 'num_groups' and 'topk_groups' must be given together}}
  %w, %i = moe.router_topk %l k = 2 {topk_groups = 1 : i64} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// permute: permuted_scales must be 2-D f32
func.func @case162(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{result 'permuted_scales' must be a 2-D tensor of f32 values, got 'tensor<8x2xbf16>'}}
  %r, %ps = moe.permute %x, %slots, %o k = 2 scales(%s : tensor<4x2xf32> -> tensor<8x2xbf16>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute: offsets length must be static
func.func @case163(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<?xi32>'}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<?xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grouped_matmul: offsets length must be >= 1
func.func @case164(%x: tensor<8x16xbf16>, %w: tensor<0x16x32xbf16>, %o: tensor<0xi32>) {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<0xi32>'}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<0x16x32xbf16>, tensor<0xi32> -> tensor<8x32xbf16>
  return
}

// -----

// grouped_matmul: lora_b must be 2-D float
func.func @case165(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<8x16xbf16>, %b: tensor<32x8xi8>) {
  // expected-error @+1 {{operand 'lora_b' must be a 2-D tensor of floating-point values, got 'tensor<32x8xi8>'}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<8x16xbf16>, tensor<32x8xi8>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// grouped_matmul: lora_a rows must be static
func.func @case166(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<?x16xbf16>, %b: tensor<32x8xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_a' must be a static multiple of the number of experts (4) with a rank r >= 1, got 'tensor<?x16xbf16>'}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<?x16xbf16>, tensor<32x8xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// swiglu_grad: input must be 2-D float
func.func @case167(%h: tensor<4x6xi32>, %dy: tensor<4x3xf32>) {
  // expected-error @+1 {{operand 'input' must be a 2-D tensor of floating-point values, got 'tensor<4x6xi32>'}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xi32>, tensor<4x3xf32> -> tensor<4x6xf32>
  return
}

// -----

// swiglu_grad: grad_output must be 2-D float
func.func @case168(%h: tensor<4x6xf32>, %dy: tensor<12xf32>) {
  // expected-error @+1 {{operand 'grad_output' must be a 2-D tensor of floating-point values, got 'tensor<12xf32>'}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xf32>, tensor<12xf32> -> tensor<4x6xf32>
  return
}

// -----

// swiglu_grad: odd input width
func.func @case169(%h: tensor<4x7xf32>, %dy: tensor<4x3xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'input' must be even (gate and up halves), got 7}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x7xf32>, tensor<4x3xf32> -> tensor<4x7xf32>
  return
}

// -----

// swiglu_grad: grad_output rows
func.func @case170(%h: tensor<4x6xf32>, %dy: tensor<5x3xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'grad_output' is 5 but must equal the rows of operand 'input' (4)}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xf32>, tensor<5x3xf32> -> tensor<4x6xf32>
  return
}

// -----

// swiglu_grad: grad_input rows
func.func @case171(%h: tensor<4x6xf32>, %dy: tensor<4x3xf32>) {
  // expected-error @+1 {{dimension 0 of result 'grad_input' is 8 but must equal operand 'input' (4)}}
  %dh = moe.swiglu_grad %h, %dy : tensor<4x6xf32>, tensor<4x3xf32> -> tensor<8x6xf32>
  return
}

// -----

// quantize: data rows
func.func @case172(%x: tensor<4x128xbf16>) {
  // expected-error @+1 {{dimension 0 of result 'data' is 8 but must equal operand 'input' (4)}}
  %q, %s = moe.quantize %x group_size = 128 : tensor<4x128xbf16> -> tensor<8x128xf8E4M3FN>, tensor<4x1xf32>
  return
}

// -----

// quantize colwise: offsets must be 1-D i32
func.func @case173(%x: tensor<256x64xbf16>, %o: tensor<8xi64>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values, got 'tensor<8xi64>'}}
  %q, %s = moe.quantize %x offsets(%o : tensor<8xi64>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<9x64xf32>
  return
}

// -----

// quantize colwise: offsets length static
func.func @case174(%x: tensor<256x64xbf16>, %o: tensor<?xi32>) {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<?xi32>'}}
  %q, %s = moe.quantize %x offsets(%o : tensor<?xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xbf16> -> tensor<256x64xf8E4M3FN>, tensor<9x64xf32>
  return
}

// -----

// FP8 dequantize: output columns
func.func @case175(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{dimension 1 of result 'output' is 64 but must equal operand 'data' (128)}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x64xbf16>
  return
}

// -----

// FP8 dequantize: scales must be 2-D f32
func.func @case176(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xbf16>) {
  // expected-error @+1 {{operand 'scales' must be a 2-D tensor of f32 values, got 'tensor<4x1xbf16>'}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xbf16> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 rowwise dequantize takes no offsets
func.func @case177(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4x1xf32>, %o: tensor<2xi32>) {
  // expected-error @+1 {{operand 'offsets' is only used with axis = colwise}}
  %x = moe.dequantize %q, %s offsets(%o : tensor<2xi32>) group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 rowwise dequantize: scale rows
func.func @case178(%q: tensor<4x128xf8E4M3FN>, %s: tensor<2x1xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'scales' is 2 but must equal the number of rows (4)}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<4x128xf8E4M3FN>, tensor<2x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// FP8 colwise dequantize: offsets must be 1-D i32
func.func @case179(%q: tensor<256x64xf8E4M3FN>, %s: tensor<9x64xf32>, %o: tensor<8x1xi32>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values, got 'tensor<8x1xi32>'}}
  %x = moe.dequantize %q, %s offsets(%o : tensor<8x1xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E4M3FN>, tensor<9x64xf32> -> tensor<256x64xbf16>
  return
}

// -----

// FP8 colwise dequantize: offsets length >= 1
func.func @case180(%q: tensor<256x64xf8E4M3FN>, %s: tensor<2x64xf32>, %o: tensor<0xi32>) {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<0xi32>'}}
  %x = moe.dequantize %q, %s offsets(%o : tensor<0xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E4M3FN>, tensor<2x64xf32> -> tensor<256x64xbf16>
  return
}

// -----

// FP8 colwise dequantize: scale rows
func.func @case181(%q: tensor<256x64xf8E4M3FN>, %s: tensor<2x64xf32>, %o: tensor<8xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'scales' is 2 but must equal (rows + min(E, rows) * (group_size - 1)) / group_size (9)}}
  %x = moe.dequantize %q, %s offsets(%o : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E4M3FN>, tensor<2x64xf32> -> tensor<256x64xbf16>
  return
}

// -----

// FP8 colwise dequantize: scale columns
func.func @case182(%q: tensor<256x64xf8E4M3FN>, %s: tensor<9x32xf32>, %o: tensor<8xi32>) {
  // expected-error @+1 {{dimension 1 of operand 'scales' is 32 but must equal the number of columns (64)}}
  %x = moe.dequantize %q, %s offsets(%o : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>} : tensor<256x64xf8E4M3FN>, tensor<9x32xf32> -> tensor<256x64xbf16>
  return
}

// -----

// counts must fit in i32 (slots and offsets are i32)
func.func @case183(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'k' must fit in i32, got 3000000000}}
  %w, %i = moe.router_topk %l k = 3000000000 : tensor<4x8xf32> -> tensor<4x3000000000xf32>, tensor<4x3000000000xi32>
  return
}

// -----

// scaling_factor must be finite
func.func @case184(%l: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'scaling_factor' must be finite and positive, got INF}}
  %w, %i = moe.router_topk %l k = 2 {scaling_factor = 0x7F800000 : f32} : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

// sort needs k >= 1
func.func @case185(%ids: tensor<4x0xi32>) {
  // expected-error @+1 {{dimension 1 (k) of operand 'ids' must be in [1, min(num_experts = 8, 64)], got 0}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x0xi32> -> tensor<0xi32>, tensor<0xi32>, tensor<8xi32>
  return
}

// -----

// sort needs k <= num_experts
func.func @case186(%ids: tensor<4x9xi32>) {
  // expected-error @+1 {{dimension 1 (k) of operand 'ids' must be in [1, min(num_experts = 8, 64)], got 9}}
  %s, %sl, %o = moe.sort_by_expert %ids experts = 8 : tensor<4x9xi32> -> tensor<36xi32>, tensor<36xi32>, tensor<8xi32>
  return
}

// -----

// unpermute rows cannot be FP8 (no scales to combine with)
func.func @case187(%r: tensor<8x16xf8E4M3FN>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'rows' must be a 2-D tensor of bf16, f16 or f32 values, got 'tensor<8x16xf8E4M3FN>'}}
  %y = moe.unpermute %r, %slots, %o k = 2 : tensor<8x16xf8E4M3FN>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grouped_matmul lhs element type
func.func @case188(%x: tensor<8x16xf64>, %w: tensor<4x16x32xf64>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'lhs' must be a 2-D tensor of bf16, f16, f32, f8E4M3FN or f8E5M2 values, got 'tensor<8x16xf64>'}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xf64>, tensor<4x16x32xf64>, tensor<4xi32> -> tensor<8x32xf32>
  return
}

// -----

// grouped_matmul result element type
func.func @case189(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'out' must be a 2-D tensor of bf16, f16 or f32 values}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xf8E4M3FN>
  return
}

// -----

// gather and scatter decode slots of the same tokens
func.func @case190(%x: tensor<4x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>) {
  // expected-error @+1 {{dimension 0 of result 'out' is 3 but must equal the tokens of the gathered 'lhs' (4)}}
  %y = moe.grouped_matmul %x, %w, %o gather(%s : tensor<8xi32>) scatter(%s : tensor<8xi32>) {k = 2 : i64} : tensor<4x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<3x32xbf16>
  return
}

// -----

// LoRA rank must be at least one
func.func @case191(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %a: tensor<0x16xbf16>, %b: tensor<32x0xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'lora_a' must be a static multiple of the number of experts (4) with a rank r >= 1, got 'tensor<0x16xbf16>'}}
  %y = moe.grouped_matmul %x, %w, %o lora(%a, %b : tensor<0x16xbf16>, tensor<32x0xbf16>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// FP8 needs scales
func.func @case193(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>) {
  // expected-error @+1 {{FP8 'lhs' and 'rhs' require block scales: scales(%lhs_scales, %rhs_scales : ...)}}
  %y = moe.grouped_matmul %x, %w, %o : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// scales only with FP8
func.func @case194(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %sx: tensor<8x1xf32>, %sw: tensor<4x1x1xf32>) {
  // expected-error @+1 {{operand 'lhs_scales' is only used with FP8 'lhs' and 'rhs'}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x1xf32>, tensor<4x1x1xf32>) : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// scales come in pairs (generic form)
func.func @case195(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>) {
  // expected-error @+1 {{operands 'lhs_scales' and 'rhs_scales' must be given together}}
  %y = "moe.grouped_matmul"(%x, %w, %o, %sx) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0>}> : (tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32>, tensor<8x2xf32>) -> tensor<8x512xbf16>
  return
}

// -----

// lhs scales must be f32
func.func @case196(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xbf16>, %sw: tensor<4x2x4xf32>) {
  // expected-error @+1 {{operand 'lhs_scales' must be a 2-D tensor of f32 values}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xbf16>, tensor<4x2x4xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// rhs scales are 3-D
func.func @case197(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<4x8xf32>) {
  // expected-error @+1 {{operand 'rhs_scales' must be a 3-D tensor of f32 values}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<4x8xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// one scale row per lhs row
func.func @case198(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<4x2xf32>, %sw: tensor<4x2x4xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'lhs_scales' is 4 but must equal the rows of 'lhs' (8)}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<4x2xf32>, tensor<4x2x4xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// lhs scale blocks along K
func.func @case199(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x1xf32>, %sw: tensor<4x2x4xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'lhs_scales' is 1 but must equal ceil(K / scale_group) (2)}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x1xf32>, tensor<4x2x4xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// rhs scales per expert
func.func @case200(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<2x2x4xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'rhs_scales' is 2 but must equal the number of experts (4)}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<2x2x4xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// rhs scale blocks along K
func.func @case201(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<4x4x4xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'rhs_scales' is 4 but must equal ceil(K / scale_group) (2)}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<4x4x4xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// rhs scale blocks along N
func.func @case202(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<4x2x2xf32>) {
  // expected-error @+1 {{dimension 2 of operand 'rhs_scales' is 2 but must equal ceil(N / scale_group) (4)}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<4x2x2xf32>) : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// transposed rhs scales follow the rhs layout
func.func @case203(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x512x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<4x2x4xf32>) {
  // expected-error @+1 {{dimension 2 of operand 'rhs_scales' is 4 but must equal ceil(K / scale_group) (2)}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<4x2x4xf32>) {transpose_rhs} : tensor<8x256xf8E4M3FN>, tensor<4x512x256xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// scale_group positive
func.func @case204(%x: tensor<8x256xf8E4M3FN>, %w: tensor<4x256x512xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<4x2x4xf32>) {
  // expected-error @+1 {{attribute 'scale_group' must be positive, got 0}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<4x2x4xf32>) {scale_group = 0 : i64} : tensor<8x256xf8E4M3FN>, tensor<4x256x512xf8E4M3FN>, tensor<4xi32> -> tensor<8x512xbf16>
  return
}

// -----

// grouped_weight_grad takes FP8 only with scales (and transposed operands)
func.func @case205(%x: tensor<8x16xf8E4M3FN>, %dy: tensor<8x32xf8E4M3FN>, %o: tensor<4xi32>) {
  // expected-error @+1 {{FP8 'lhs' and 'grad_out' require block scales and the transposed layout of moe.quantize {transpose}: scales(%lhs_scales, %grad_scales : ...)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o : tensor<8x16xf8E4M3FN>, tensor<8x32xf8E4M3FN>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// dequantize data must be ranked
func.func @case208(%q: tensor<*xf8E4M3FN>, %s: tensor<4x1xf32>) {
  // expected-error @+1 {{operand 'data' must be a ranked tensor, got 'tensor<*xf8E4M3FN>'}}
  %x = moe.dequantize %q, %s group_size = 128 : tensor<*xf8E4M3FN>, tensor<4x1xf32> -> tensor<4x128xbf16>
  return
}

// -----

// tile m must be a power of two
func.func @case209(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'm' must be a power of two >= 1, got 3}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 3, n = 1, k = 1, threads = 256>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile m must be at least 1
func.func @case210(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'm' must be a power of two >= 1, got 0}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 0, n = 1, k = 1, threads = 256>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile n must be a power of two
func.func @case211(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'n' must be a power of two >= 1, got 12}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 16, n = 12, k = 32, threads = 256>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile k must be positive
func.func @case212(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'k' must be a power of two >= 1, got -32}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 16, n = 16, k = -32, threads = 256>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile threads must be whole warps
func.func @case213(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'threads' must be a multiple of 32 in [32, 1024], got 100}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 100>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile threads at least one warp
func.func @case214(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'threads' must be a multiple of 32 in [32, 1024], got 0}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 0>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile threads at most 1024 (the CUDA block limit)
func.func @case215(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'threads' must be a multiple of 32 in [32, 1024], got 2048}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 2048>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// tile outputs must split evenly over threads
func.func @case216(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{tile of 16x16 outputs does not split evenly over 96 computing threads: one of m*n and 'threads' - 'producers' must divide the other}}
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 96>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// a producer warpgroup is 128 threads
func.func @tile_producers_not_a_warpgroup(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{tile parameter 'producers' must be 0 or 128 (one warpgroup) and less than 'threads', got 64}}
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 320, producers = 64>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// clusters of 1 or 2 blocks
func.func @tile_cluster_of_four(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{tile parameter 'cluster' must be 1 or 2 (blocks per cluster), got 4}}
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 384, producers = 128, cluster = 4>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// at most 16 row chunks per group
func.func @tile_too_many_row_splits(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{tile parameter 'row_splits' must be 0 (the kernel's choice) or in [1, 16], got 17}}
  %g = moe.grouped_weight_grad %x, %dy, %o {moe.tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256, row_splits = 17>} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

// only the warp-specialized kernel runs in clusters
func.func @tile_cluster_without_producers(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{tile parameter 'cluster' = 2 needs 'producers' = 128 (the warp-specialized kernel multicasts the weights), got producers = 0}}
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256, cluster = 2>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// producers leave threads to compute
func.func @tile_producers_only(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{tile parameter 'producers' must be 0 or 128 (one warpgroup) and less than 'threads', got 128}}
  %y = moe.grouped_matmul %x, %w, %o {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 128, producers = 128>} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// the moe.tile attribute must be a tile
func.func @case217(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{attribute 'moe.tile' must be a #moe.tile<...>, got 256 : i64}}
  %a = moe.swiglu %x {moe.tile = 256 : i64} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// m, n, k and threads are required (stages and band_m have defaults)
func.func @case218(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{struct is missing required parameter: threads}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 1, n = 1, k = 1>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// grad_rows must be float
func.func @case219(%r: tensor<8x16xi8>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'grad_rows' must be a 2-D tensor of bf16, f16 or f32 values, got 'tensor<8x16xi8>'}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xi8>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// permute_grad: slots must be i32
func.func @case220(%r: tensor<8x16xbf16>, %slots: tensor<8xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' must be a 1-D tensor of i32 values}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xf32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grad_tokens must be float
func.func @case221(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'grad_tokens' must be a 2-D tensor of bf16, f16 or f32 values}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xi32>
  return
}

// -----

// permute_grad: offsets rank
func.func @case222(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4x1xi32>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4x1xi32> -> tensor<4x16xbf16>
  return
}

// -----

// permute_grad: offsets static
func.func @case223(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<?xi32>'}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<?xi32> -> tensor<4x16xbf16>
  return
}

// -----

// permute_grad: k positive
func.func @case224(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' must be positive, got 0}}
  %y = moe.permute_grad %r, %slots, %o k = 0 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// permute_grad: one slot per row
func.func @case225(%r: tensor<8x16xbf16>, %slots: tensor<6xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'slots' is 6 but must equal the number of rows of 'grad_rows' (8)}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<6xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// permute_grad: hidden size kept
func.func @case226(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'grad_tokens' is 8 but must equal the hidden size of 'grad_rows' (16)}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x8xbf16>
  return
}

// -----

// permute_grad: rows cover every slot
func.func @case227(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'grad_rows' has 8 rows, fewer than the 10 slots of 5 tokens with k = 2}}
  %y = moe.permute_grad %r, %slots, %o k = 2 : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<5x16xbf16>
  return
}

// -----

// permute_grad: probs gradient and its result together (generic form)
func.func @case228(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{operand 'grad_permuted_probs' and result 'grad_probs' must be given together}}
  %y = "moe.permute_grad"(%r, %slots, %o, %p) <{k = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>}> : (tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32>, tensor<8xf32>) -> tensor<4x16xbf16>
  return
}

// -----

// grad_permuted_probs must be f32
func.func @case229(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8xbf16>) {
  // expected-error @+1 {{operand 'grad_permuted_probs' must be a 1-D tensor of f32 values, got 'tensor<8xbf16>'}}
  %y, %dw = moe.permute_grad %r, %slots, %o k = 2 probs(%p : tensor<8xbf16> -> tensor<4x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grad_probs must be 2-D f32
func.func @case230(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{result 'grad_probs' must be a 2-D tensor of f32 values, got 'tensor<8xf32>'}}
  %y, %dw = moe.permute_grad %r, %slots, %o k = 2 probs(%p : tensor<8xf32> -> tensor<8xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grad_permuted_probs: one per row
func.func @case231(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<6xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'grad_permuted_probs' is 6 but must equal the number of rows of 'grad_rows' (8)}}
  %y, %dw = moe.permute_grad %r, %slots, %o k = 2 probs(%p : tensor<6xf32> -> tensor<4x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grad_probs token count
func.func @case232(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{dimension 0 of result 'grad_probs' is 3 but must equal the number of tokens of result 'grad_tokens' (4)}}
  %y, %dw = moe.permute_grad %r, %slots, %o k = 2 probs(%p : tensor<8xf32> -> tensor<3x2xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grad_probs width k
func.func @case233(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{dimension 1 of result 'grad_probs' is 1 but must equal attribute 'k' (2)}}
  %y, %dw = moe.permute_grad %r, %slots, %o k = 2 probs(%p : tensor<8xf32> -> tensor<4x1xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

// grad_out must be float
func.func @case234(%g: tensor<4x16xi8>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'grad_out' must be a 2-D tensor of bf16, f16 or f32 values, got 'tensor<4x16xi8>'}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<4x16xi8>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: slots must be i32
func.func @case235(%g: tensor<4x16xbf16>, %slots: tensor<8xi64>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' must be a 1-D tensor of i32 values}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi64>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// grad_rows must be float
func.func @case236(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{result 'grad_rows' must be a 2-D tensor of bf16, f16 or f32 values, got 'tensor<8x16xf8E4M3FN>'}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xf8E4M3FN>
  return
}

// -----

// unpermute_grad: offsets i32
func.func @case237(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi64>) {
  // expected-error @+1 {{operand 'offsets' must be a 1-D tensor of i32 values}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi64> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: k positive
func.func @case238(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'k' must be positive, got -2}}
  %y = moe.unpermute_grad %g, %slots, %o k = -2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// grad_rows: one row per slot
func.func @case239(%g: tensor<4x16xbf16>, %slots: tensor<10xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of result 'grad_rows' is 8 but must equal the length of 'slots' (10)}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<10xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// grad_rows: hidden size kept
func.func @case240(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'grad_rows' is 32 but must equal the hidden size of 'grad_out' (16)}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// the slots (and grad_rows) cover every slot
func.func @case241(%g: tensor<5x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' has 8 rows, fewer than the 10 slots of 5 tokens with k = 2}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 : tensor<5x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// weights, rows and grad_weights together (generic form)
func.func @case242(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{operands 'weights' and 'rows' and result 'grad_weights' must be given together}}
  %y, %dw = "moe.unpermute_grad"(%g, %slots, %o, %w) <{k = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, resultSegmentSizes = array<i32: 1, 1>}> : (tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32>, tensor<4x2xf32>) -> (tensor<8x16xbf16>, tensor<4x2xf32>)
  return
}

// -----

// unpermute_grad: weights must be f32
func.func @case243(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xbf16>, %r: tensor<8x16xbf16>) {
  // expected-error @+1 {{operand 'weights' must be a 2-D tensor of f32 values, got 'tensor<4x2xbf16>'}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xbf16>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: rows must be float
func.func @case244(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>, %r: tensor<8x16xi32>) {
  // expected-error @+1 {{operand 'rows' must be a 2-D tensor of bf16, f16 or f32 values, got 'tensor<8x16xi32>'}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xf32>, tensor<8x16xi32> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// grad_weights must be f32
func.func @case245(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>, %r: tensor<8x16xbf16>) {
  // expected-error @+1 {{result 'grad_weights' must be a 2-D tensor of f32 values, got 'tensor<4x2xbf16>'}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x2xbf16>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: weights token count
func.func @case246(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<3x2xf32>, %r: tensor<8x16xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'weights' is 3 but must equal the number of tokens of 'grad_out' (4)}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<3x2xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: weights width k
func.func @case247(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x3xf32>, %r: tensor<8x16xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'weights' is 3 but must equal attribute 'k' (2)}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x3xf32>, tensor<8x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: forward rows, one per slot
func.func @case248(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>, %r: tensor<9x16xbf16>) {
  // expected-error @+1 {{dimension 0 of operand 'rows' is 9 but must equal the length of 'slots' (8)}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xf32>, tensor<9x16xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// unpermute_grad: forward rows hidden size
func.func @case249(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>, %r: tensor<8x8xbf16>) {
  // expected-error @+1 {{dimension 1 of operand 'rows' is 8 but must equal the hidden size of 'grad_out' (16)}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xf32>, tensor<8x8xbf16> -> tensor<4x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// grad_weights token count
func.func @case250(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>, %r: tensor<8x16xbf16>) {
  // expected-error @+1 {{dimension 0 of result 'grad_weights' is 5 but must equal the number of tokens of 'grad_out' (4)}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<5x2xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// grad_weights width k
func.func @case251(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %w: tensor<4x2xf32>, %r: tensor<8x16xbf16>) {
  // expected-error @+1 {{dimension 1 of result 'grad_weights' is 4 but must equal attribute 'k' (2)}}
  %y, %dw = moe.unpermute_grad %g, %slots, %o k = 2 weights(%w, %r : tensor<4x2xf32>, tensor<8x16xbf16> -> tensor<4x4xf32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

func.func @tile_stages(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'stages' must be 0 (the kernel's choice) or in [3, 16], got 2}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 32, stages = 2>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @tile_band(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{tile parameter 'band_m' must be 0 (the kernel's choice) or a power of two up to 64, got 12}}
  %a = moe.swiglu %x {moe.tile = #moe.tile<m = 1, n = 1, k = 1, threads = 32, band_m = 12>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @tile_buckets_not_array(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{attribute 'moe.tile_buckets' must be a non-empty array of #moe.tile_bucket<...>, got 4 : i64}}
  %a = moe.swiglu %x {moe.tile_buckets = 4} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @tile_buckets_order(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{attribute 'moe.tile_buckets' needs strictly increasing max_rows, got 64 after 64}}
  %a = moe.swiglu %x {moe.tile_buckets = [
      #moe.tile_bucket<max_rows = 64, tile = #moe.tile<m = 1, n = 1, k = 1, threads = 32>>,
      #moe.tile_bucket<max_rows = 64, tile = #moe.tile<m = 1, n = 1, k = 1, threads = 64>>]}
      : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @tile_bucket_rows(%x: tensor<8x16xbf16>) {
  %a = moe.swiglu %x {moe.tile_buckets = [
      // expected-error @+1 {{tile bucket 'max_rows' must be >= 1, got 0}}
      #moe.tile_bucket<max_rows = 0, tile = #moe.tile<m = 1, n = 1, k = 1, threads = 32>>]}
      : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @sort_positions_length(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dimension 0 of result 'positions' is 9 but must equal the number of slots tokens * k (8)}}
  %s, %sl, %o, %p = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<9xi32>
  return
}

// -----

func.func @sort_positions_type(%ids: tensor<4x2xi32>) {
  // expected-error @+1 {{result 'positions' must be a 1-D tensor of i32 values, got 'tensor<8xi64>'}}
  %s, %sl, %o, %p = moe.sort_by_expert %ids experts = 8 : tensor<4x2xi32> -> tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi64>
  return
}

// -----

func.func @permute_positions_length(%x: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<6xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'positions' is 6 but must equal the number of slots tokens * k (8)}}
  %r = moe.permute %x, %slots, %o k = 2 positions(%p : tensor<6xi32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

func.func @unpermute_positions_type(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{operand 'positions' must be a 1-D tensor of i32 values, got 'tensor<8xf32>'}}
  %y = moe.unpermute %r, %slots, %o k = 2 positions(%p : tensor<8xf32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

func.func @permute_grad_positions_length(%r: tensor<8x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'positions' is 4 but must equal the number of slots tokens * k (8)}}
  %y = moe.permute_grad %r, %slots, %o k = 2 positions(%p : tensor<4xi32>) : tensor<8x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<4x16xbf16>
  return
}

// -----

func.func @unpermute_grad_positions_rank(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>, %p: tensor<8x1xi32>) {
  // expected-error @+1 {{operand 'positions' must be a 1-D tensor of i32 values, got 'tensor<8x1xi32>'}}
  %y = moe.unpermute_grad %g, %slots, %o k = 2 positions(%p : tensor<8x1xi32>) : tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8x16xbf16>
  return
}

// -----

// scatter_positions without scatter (generic form)
func.func @grouped_matmul_positions_without_scatter(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %p: tensor<8xi32>) {
  // expected-error @+1 {{operand 'scatter_positions' requires operand 'scatter_slots'}}
  %y = "moe.grouped_matmul"(%x, %w, %o, %p) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0>}> : (tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32>, tensor<8xi32>) -> tensor<8x32xbf16>
  return
}

// -----

func.func @grouped_matmul_positions_length(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>, %p: tensor<6xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'scatter_positions' is 6 but must equal the number of slots tokens * k (8)}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xi32>) scatter_positions(%p : tensor<6xi32>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return
}

// -----

func.func @grouped_matmul_positions_type(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>, %s: tensor<8xi32>, %p: tensor<8xi64>) {
  // expected-error @+1 {{operand 'scatter_positions' must be a 1-D tensor of i32 values, got 'tensor<8xi64>'}}
  %y = moe.grouped_matmul %x, %w, %o scatter(%s : tensor<8xi32>) scatter_positions(%p : tensor<8xi64>) {k = 2 : i64} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<4x32xbf16>
  return
}

// -----

// moe.kernel must be a #moe.kernel
func.func @kernel_not_kernel(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{attribute 'moe.kernel' must be a #moe.kernel<...>, got #moe.tile<m = 1, n = 1, k = 1, threads = 256>}}
  %a = moe.swiglu %x {moe.kernel = #moe.tile<m = 1, n = 1, k = 1, threads = 256>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// moe.target must be a #moe.target
// expected-error @+1 {{attribute 'moe.target' must be a #moe.target<...>, got "sm90a"}}
module attributes {moe.target = "sm90a"} {
}

// -----

// target kind must be known
// expected-error @+1 {{target kind must be one of generic, nvvm, sm90a, rocdl or host, got 'sm_90a'}}
module attributes {moe.target = #moe.target<kind = "sm_90a">} {
}

// -----

// target sm_count in range
// expected-error @+1 {{target 'sm_count' must be in [0, 65536], got -1}}
module attributes {moe.target = #moe.target<kind = "nvvm", sm_count = -1>} {
}

// -----

// target shared_memory in range
// expected-error @+1 {{target 'shared_memory' must be in [0, 2^30] bytes, got 2147483648}}
module attributes {moe.target = #moe.target<kind = "generic", shared_memory = 2147483648>} {
}

// -----

// nvvm kernels need sm_89 or newer (packed FP8 conversions)
// expected-error @+1 {{target kind 'nvvm' needs a chip sm_89 or newer (e.g. sm_89, sm_90), got 'sm_80'}}
module attributes {moe.target = #moe.target<kind = "nvvm", chip = "sm_80">} {
}

// -----

// sm90a needs SMs for its persistent grid
// expected-error @+1 {{target kind 'sm90a' needs 'sm_count' >= 1 (its persistent grid), got 0}}
module attributes {moe.target = #moe.target<kind = "sm90a">} {
}

// -----

// sm90a blocks get at most 227 KiB of shared memory
// expected-error @+1 {{target kind 'sm90a' allows at most 232448 bytes (227 KiB) of 'shared_memory' per block, got 262144}}
module attributes {moe.target = #moe.target<kind = "sm90a", sm_count = 132, shared_memory = 262144>} {
}

// -----

// Limits that keep the compiler's code and the runtime's tables bounded
// (issue 28: k = 2147483647 made convert-moe-to-kernels run out of memory).

func.func @permute_k_too_large(%x: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                               %offsets: tensor<16xi32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{attribute 'k' must be at most 64 (the kernels unroll their per-token loops over k), got 2147483647}}
  %r = moe.permute %x, %slots, %offsets k = 2147483647
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %r : tensor<?x64xbf16>
}

// -----

func.func @router_topk_k_too_large(%l: tensor<4x128xf32>) {
  // expected-error @+1 {{attribute 'k' must be at most 64 (the kernels unroll their per-token loops over k), got 65}}
  %w, %i = moe.router_topk %l k = 65 : tensor<4x128xf32> -> tensor<4x65xf32>, tensor<4x65xi32>
  return
}

// -----

func.func @router_topk_too_many_experts(%l: tensor<4x65537xf32>) {
  // expected-error @+1 {{expert dimension (1) of operand 'logits' must be static and at most 65536, got 'tensor<4x65537xf32>'}}
  %w, %i = moe.router_topk %l k = 2 : tensor<4x65537xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  return
}

// -----

func.func @sort_by_expert_too_many_experts(%ids: tensor<?x2xi32>) {
  // expected-error @+1 {{attribute 'num_experts' must be at most 65536 (one table entry per expert), got 65537}}
  %s, %slots, %o = moe.sort_by_expert %ids experts = 65537
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<65537xi32>
  return
}

// -----

func.func @sort_by_expert_k_too_large(%ids: tensor<?x65xi32>) {
  // expected-error @+1 {{dimension 1 (k) of operand 'ids' must be in [1, min(num_experts = 128, 64)], got 65}}
  %s, %slots, %o = moe.sort_by_expert %ids experts = 128
      : tensor<?x65xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  return
}

// -----

func.func @permute_too_many_experts(%x: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                                    %offsets: tensor<65537xi32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{operand 'offsets' must have a static length in [1, 65536] (the number of experts), got 'tensor<65537xi32>'}}
  %r = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<65537xi32> -> tensor<?x64xbf16>
  return %r : tensor<?x64xbf16>
}

// -----

func.func @unpermute_k_too_large(%rows: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                                 %offsets: tensor<16xi32>, %w: tensor<?x100xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{attribute 'k' must be at most 64 (the kernels unroll their per-token loops over k), got 100}}
  %y = moe.unpermute %rows, %slots, %offsets k = 100 weights(%w : tensor<?x100xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

func.func @permute_grad_k_too_large(%d: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                                    %offsets: tensor<16xi32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{attribute 'k' must be at most 64 (the kernels unroll their per-token loops over k), got 1000}}
  %dx = moe.permute_grad %d, %slots, %offsets k = 1000
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %dx : tensor<?x64xbf16>
}

// -----

func.func @unpermute_grad_k_too_large(%dy: tensor<?x64xbf16>, %slots: tensor<?xi32>,
                                      %offsets: tensor<16xi32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{attribute 'k' must be at most 64 (the kernels unroll their per-token loops over k), got 65}}
  %dr = moe.unpermute_grad %dy, %slots, %offsets k = 65
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %dr : tensor<?x64xbf16>
}

// -----

func.func @grouped_matmul_k_too_large(%x: tensor<?x64xbf16>, %w: tensor<8x128x64xbf16>,
                                      %offsets: tensor<8xi32>, %slots: tensor<?xi32>) -> tensor<?x128xbf16> {
  // expected-error @+1 {{attribute 'k' must be at most 64 (the kernels unroll their per-token loops over k), got 2147483647}}
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>) {k = 2147483647 : i64, transpose_rhs}
      : tensor<?x64xbf16>, tensor<8x128x64xbf16>, tensor<8xi32> -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}

// -----

// unpermute_grad without grad_rows computes the weights' gradient only
func.func @unpermute_grad_nothing(%g: tensor<4x16xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{without result 'grad_rows' needs 'weights' (it would compute nothing)}}
  "moe.unpermute_grad"(%g, %slots, %o) <{k = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>, resultSegmentSizes = array<i32: 0, 0>}> : (tensor<4x16xbf16>, tensor<8xi32>, tensor<4xi32>) -> ()
  return
}

// -----

// permute_probs: the weights are [T, k] f32
func.func @permute_probs_type(%w: tensor<4x2xbf16>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'probs' must be a 2-D tensor of f32 values, got 'tensor<4x2xbf16>'}}
  %p = moe.permute_probs %w, %slots, %o k = 2 : tensor<4x2xbf16>, tensor<8xi32>, tensor<4xi32> -> tensor<8xf32>
  return
}

// -----

// permute_probs: the weights' second dimension is k
func.func @permute_probs_k(%w: tensor<4x3xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of operand 'probs' is 3 but must equal attribute 'k' (2)}}
  %p = moe.permute_probs %w, %slots, %o k = 2 : tensor<4x3xf32>, tensor<8xi32>, tensor<4xi32> -> tensor<8xf32>
  return
}

// -----

// permute_probs: one weight per row
func.func @permute_probs_rows(%w: tensor<4x2xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of result 'out' is 6 but must equal the length of 'slots' (8)}}
  %p = moe.permute_probs %w, %slots, %o k = 2 : tensor<4x2xf32>, tensor<8xi32>, tensor<4xi32> -> tensor<6xf32>
  return
}

// -----

// permute_probs: the slots cover every slot of the tokens
func.func @permute_probs_slots(%w: tensor<5x2xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{operand 'slots' has 8 rows, fewer than the 10 slots of 5 tokens with k = 2}}
  %p = moe.permute_probs %w, %slots, %o k = 2 : tensor<5x2xf32>, tensor<8xi32>, tensor<4xi32> -> tensor<8xf32>
  return
}

// -----

// permute_probs: a finite scale
func.func @permute_probs_scale(%w: tensor<4x2xf32>, %slots: tensor<8xi32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attribute 'scale' must be finite}}
  %p = moe.permute_probs %w, %slots, %o k = 2 {scale = 0x7F800000 : f32} : tensor<4x2xf32>, tensor<8xi32>, tensor<4xi32> -> tensor<8xf32>
  return
}

// -----

// experts_in_columns: the weights are [K, E, N], not transposed
func.func @experts_in_columns_transposed(%x: tensor<8x16xbf16>, %w: tensor<16x4x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{attributes 'experts_in_columns' and 'transpose_rhs' cannot be combined}}
  %y = moe.grouped_matmul %x, %w, %o {experts_in_columns, transpose_rhs} : tensor<8x16xbf16>, tensor<16x4x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// experts_in_columns: the experts are dimension 1 of the weights
func.func @experts_in_columns_experts(%x: tensor<8x16xbf16>, %w: tensor<4x16x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of operand 'rhs' (experts_in_columns) is 16 but must equal the number of experts (4)}}
  %y = moe.grouped_matmul %x, %w, %o {experts_in_columns} : tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// experts_in_columns: K is dimension 0 of the weights
func.func @experts_in_columns_k(%x: tensor<8x16xbf16>, %w: tensor<24x4x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 0 of operand 'rhs' (experts_in_columns) is 24 but must equal K, the columns of 'lhs' (16)}}
  %y = moe.grouped_matmul %x, %w, %o {experts_in_columns} : tensor<8x16xbf16>, tensor<24x4x32xbf16>, tensor<4xi32> -> tensor<8x32xbf16>
  return
}

// -----

// experts_in_columns: not with FP8 block scales
func.func @experts_in_columns_fp8(%x: tensor<8x256xf8E4M3FN>, %w: tensor<256x4x128xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<8x2xf32>, %sw: tensor<4x2x1xf32>) {
  // expected-error @+1 {{attribute 'experts_in_columns' is not supported with FP8 block scales}}
  %y = moe.grouped_matmul %x, %w, %o scales(%sx, %sw : tensor<8x2xf32>, tensor<4x2x1xf32>) {experts_in_columns} : tensor<8x256xf8E4M3FN>, tensor<256x4x128xf8E4M3FN>, tensor<4xi32> -> tensor<8x128xbf16>
  return
}

// -----

// grouped_weight_grad with experts_in_columns: the result is [K, E, N]
func.func @experts_in_columns_weight_grad(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>, %o: tensor<4xi32>) {
  // expected-error @+1 {{dimension 1 of result 'out' (experts_in_columns) is 16 but must equal the number of experts (4)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o {experts_in_columns} : tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<4xi32> -> tensor<4x16x32xf32>
  return
}

// -----

func.func @plan_not_wgmma(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{kernel plan #moe.wgmma_plan is for strategy sm90_wgmma only, got 'vector'}}
  %a = moe.swiglu %x {moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 256>, plan = <block_m = 128, block_n = 128, block_k = 64, stages = 4, band_m = 8>>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_block_k(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan needs block_m = 128 and block_k = 64 (128 for FP8 operands: two m64 warpgroups, one 128-byte row of K), got 128 and 32}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 128, block_k = 32, stages = 4, band_m = 8>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_block(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan parameter 'block_n' must be 64, 128 or 256, got 32}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 32, block_k = 64, stages = 4, band_m = 8>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_registers(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan's register split needs 256 x 232 + 128 x 72 = 68608 registers, more than the 64512 (168 x 384) the block starts with}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, producers = 128, mma_registers = 232, producer_registers = 72>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_registers_without_producers(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan without producers has no register split: 'mma_registers' and 'producer_registers' must be 0, got 216 and 72}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, mma_registers = 216, producer_registers = 72>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_producer_registers(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan parameter 'producer_registers' must be a multiple of 8 in [24, 256] (setmaxnreg), got 20}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, producers = 128, mma_registers = 216, producer_registers = 20>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_cluster(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan parameter 'cluster' must be 1, or 2 with producers = 128, got 2}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, cluster = 2>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_stages(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan parameter 'stages' must be in [3, 16], got 2}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 2, band_m = 8>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_bucket_order(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan 'buckets' need strictly increasing max_rows, got 64 after 128}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, buckets = [#moe.wgmma_bucket<max_rows = 128, plan = <block_m = 128, block_n = 128, block_k = 64, stages = 4, band_m = 8>>, #moe.wgmma_bucket<max_rows = 64, plan = <block_m = 128, block_n = 128, block_k = 64, stages = 4, band_m = 8>>]>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

func.func @plan_bulk_stores(%x: tensor<8x16xbf16>) {
  // expected-error @+1 {{wgmma plan with 'bulk_stores' needs producers = 128 (the warp-specialized weight gradient)}}
  %a = moe.swiglu %x {p = #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, bulk_stores = true>} : tensor<8x16xbf16> -> tensor<8x8xbf16>
  return
}

// -----

// quantize transpose is colwise only
func.func @fp8_q_t_rowwise(%x: tensor<256x64xbf16>) {
  // expected-error @+1 {{attribute 'transpose' is only used with axis = colwise (the FP8 weight gradient's layout)}}
  %q, %s = moe.quantize %x group_size = 128 {transpose} : tensor<256x64xbf16> -> tensor<64x256xf8E4M3FN>, tensor<256x1xf32>
  return
}

// -----

// quantize transpose: data is [K, g * blocks] (dimension 0)
func.func @fp8_q_t_dim0(%x: tensor<256x64xbf16>, %o: tensor<8xi32>) {
  // expected-error @+1 {{dimension 0 of result 'data' (transpose) is 256 but must equal the columns of operand 'input' (64)}}
  %q, %s = moe.quantize %x offsets(%o : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>, transpose} : tensor<256x64xbf16> -> tensor<256x1152xf8E4M3FN>, tensor<9x64xf32>
  return
}

// -----

// quantize transpose: data is [K, g * blocks] (dimension 1)
func.func @fp8_q_t_dim1(%x: tensor<256x64xbf16>, %o: tensor<8xi32>) {
  // expected-error @+1 {{dimension 1 of result 'data' (transpose) is 256 but must equal group_size * the scale rows (each expert padded to its blocks) (1152)}}
  %q, %s = moe.quantize %x offsets(%o : tensor<8xi32>) group_size = 128 {axis = #moe.axis<colwise>, transpose} : tensor<256x64xbf16> -> tensor<64x256xf8E4M3FN>, tensor<9x64xf32>
  return
}

// -----

// grouped_weight_grad with FP8 scales does not gather
func.func @fp8_w_gather(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xf32>, %slots: tensor<8xi32>) {
  // expected-error @+1 {{operand 'gather_slots' is not taken with FP8 scales (quantize the permuted rows instead)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o gather(%slots : tensor<8xi32>) scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xf32>) {k = 2 : i64} : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with FP8 scales: no experts_in_columns
func.func @fp8_w_cols(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{attribute 'experts_in_columns' is not supported with FP8 scales}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xf32>) {experts_in_columns} : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<64x4x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: FP8 operands
func.func @fp8_w_bf16(%x: tensor<64x256xbf16>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{operand 'lhs' must be a 2-D tensor of f8E4M3FN or f8E5M2 values (FP8 with scales), got 'tensor<64x256xbf16>'}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xf32>) : tensor<64x256xbf16>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: padded rows a multiple of 128
func.func @fp8_w_p(%x: tensor<64x200xf8E4M3FN>, %dy: tensor<32x200xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{dimension 1 of operands 'lhs' and 'grad_out' (transposed FP8 rows) must be a multiple of 128 (moe.quantize {transpose} pads each expert to its 128-row blocks), got 200}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xf32>) : tensor<64x200xf8E4M3FN>, tensor<32x200xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: both operands share the padded rows
func.func @fp8_w_gp(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x384xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'grad_out' (transposed) is 384 but must equal the padded rows of 'lhs' (256)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xf32>) : tensor<64x256xf8E4M3FN>, tensor<32x384xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: one scale row per 128-row block
func.func @fp8_w_sxrows(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<3x64xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'lhs_scales' is 3 but must equal the 128-row blocks of 'lhs' (its columns / 128) (2)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<3x64xf32>, tensor<2x32xf32>) : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: lhs_scales [B, K]
func.func @fp8_w_sxcols(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x32xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'lhs_scales' is 32 but must equal K, the rows of 'lhs' (64)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x32xf32>, tensor<2x32xf32>) : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: grad_scales [B, N]
func.func @fp8_w_sdcols(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x64xf32>) {
  // expected-error @+1 {{dimension 1 of operand 'grad_scales' is 64 but must equal N, the rows of 'grad_out' (32)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x64xf32>) : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: f32 scales
func.func @fp8_w_sdtype(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xbf16>) {
  // expected-error @+1 {{operand 'grad_scales' must be a 2-D tensor of f32 values, got 'tensor<2x32xbf16>'}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xbf16>) : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales and transpose_rhs: [E, N, K], N and K the operands' rows
func.func @fp8_w_outk(%x: tensor<64x256xf8E4M3FN>, %dy: tensor<32x256xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<2x32xf32>) {
  // expected-error @+1 {{dimension 2 of result 'out' (transpose_rhs) is 32 but must equal K, the rows of 'lhs' (64)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<2x32xf32>) {transpose_rhs} : tensor<64x256xf8E4M3FN>, tensor<32x256xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// quantize transpose: colwise needs its offsets
func.func @fp8_q_t_no_offsets(%x: tensor<256x64xbf16>) {
  // expected-error @+1 {{axis = colwise requires operand 'offsets' (the expert groups)}}
  %q, %s = moe.quantize %x group_size = 128 {axis = #moe.axis<colwise>, transpose} : tensor<256x64xbf16> -> tensor<64x256xf8E4M3FN>, tensor<2x64xf32>
  return
}

// -----

// grouped_weight_grad with scales: the padded rows are whole blocks (checked on grad_out where lhs's are dynamic)
func.func @fp8_w_p_dynamic(%x: tensor<64x?xf8E4M3FN>, %dy: tensor<32x200xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<?x64xf32>, %sd: tensor<?x32xf32>) {
  // expected-error @+1 {{dimension 1 of operands 'lhs' and 'grad_out' (transposed FP8 rows) must be a multiple of 128 (moe.quantize {transpose} pads each expert to its 128-row blocks), got 200}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<?x64xf32>, tensor<?x32xf32>) : tensor<64x?xf8E4M3FN>, tensor<32x200xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}

// -----

// grouped_weight_grad with scales: both scales have the same blocks (dynamic padded rows)
func.func @fp8_w_blocks_dynamic(%x: tensor<64x?xf8E4M3FN>, %dy: tensor<32x?xf8E4M3FN>, %o: tensor<4xi32>, %sx: tensor<2x64xf32>, %sd: tensor<3x32xf32>) {
  // expected-error @+1 {{dimension 0 of operand 'grad_scales' is 3 but must equal the 128-row blocks of 'lhs' (its columns / 128) (2)}}
  %dw = moe.grouped_weight_grad %x, %dy, %o scales(%sx, %sd : tensor<2x64xf32>, tensor<3x32xf32>) : tensor<64x?xf8E4M3FN>, tensor<32x?xf8E4M3FN>, tensor<4xi32> -> tensor<4x64x32xf32>
  return
}
