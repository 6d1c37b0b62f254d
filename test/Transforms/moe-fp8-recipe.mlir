// RUN: moec-opt %s -split-input-file -moe-fp8-recipe -verify-diagnostics | FileCheck %s
// RUN: moec-opt %s -split-input-file -moe-fp8-recipe -moe-fuse-permute -verify-diagnostics | FileCheck %s --check-prefix=FUSED
// RUN: not moec-opt %s -split-input-file -moe-fp8-recipe="recipe=tensorwise" 2>&1 | FileCheck %s --check-prefix=RECIPE
// RECIPE: moe-fp8-recipe: unknown recipe 'tensorwise' (the one there is: blockwise, DeepSeek-V3's 1x128 / 128x128 block scales)
// RUN: not moec-opt %s -split-input-file -moe-fp8-recipe="weights=arguments" 2>/dev/null | FileCheck %s --check-prefix=ARGS
// RUN: not moec-opt %s -split-input-file -moe-fp8-recipe="weights=arguments" 2>&1 >/dev/null | FileCheck %s --check-prefix=CLASH
// RUN: not moec-opt %s -split-input-file -moe-fp8-recipe="weights=cached" 2>&1 | FileCheck %s --check-prefix=WEIGHTS
// WEIGHTS: moe-fp8-recipe: unknown weights 'cached' (inline: each function quantizes its weights; arguments: it takes their FP8 copies, made by @<function>_fp8_weights)

// The forward of a gathered gate_up with SwiGLU: the tokens in 1x128
// groups, the [E, N, K] weights in 128x128 blocks (264 and 136 leave
// partial blocks), the epilogue and the result type kept.
// CHECK-LABEL: func.func @forward
// CHECK-SAME:    (%[[X:.*]]: tensor<?x136xbf16>, %[[W:.*]]: tensor<4x264x136xbf16>, %[[SLOTS:.*]]: tensor<?xi32>, %[[OFFS:.*]]: tensor<4xi32>)
// CHECK:         %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] group_size = 128 : tensor<?x136xbf16> -> tensor<?x136xf8E4M3FN>, tensor<?x2xf32>
// CHECK:         %[[WQ:.*]], %[[WS:.*]] = moe.quantize %[[W]] group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>
// CHECK:         moe.grouped_matmul %[[XQ]], %[[WQ]], %[[OFFS]] gather(%[[SLOTS]] : tensor<?xi32>) scales(%[[XS]], %[[WS]] : tensor<?x2xf32>, tensor<4x3x2xf32>) {activation = #moe.activation<swiglu>, k = 2 : i64, transpose_rhs} : tensor<?x136xf8E4M3FN>, tensor<4x264x136xf8E4M3FN>, tensor<4xi32> -> tensor<?x132xbf16>
func.func @forward(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                   %slots: tensor<?xi32>, %offsets: tensor<4xi32>)
    -> tensor<?x132xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x132xbf16>
  return %y : tensor<?x132xbf16>
}

// -----

// Permuted rows that a forward matmul reads and the weight gradient saves
// (a full fine-tune's gate_up): the matmul's operand is quantized as
// tokens, before the permute (T rows, not T*k), and the FP8 rows travel
// with their scales; the bf16 rows stay for their other reader.
// moe-fuse-permute then folds that permute into the matmul's gather, so
// no quantize of the permuted rows is left and no FP8 copy of them is
// written.
// CHECK-LABEL: func.func @permuted
// CHECK-SAME:    (%[[X:.*]]: tensor<?x136xbf16>, %[[W:.*]]: tensor<4x264x136xbf16>, %[[SLOTS:.*]]: tensor<?xi32>, %[[OFFS:.*]]: tensor<4xi32>)
// CHECK:         %[[ROWS:.*]] = moe.permute %[[X]], %[[SLOTS]], %[[OFFS]] k = 2 : tensor<?x136xbf16>
// CHECK:         %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] group_size = 128 : tensor<?x136xbf16> -> tensor<?x136xf8E4M3FN>, tensor<?x2xf32>
// CHECK:         %[[RQ:.*]], %[[RS:.*]] = moe.permute %[[XQ]], %[[SLOTS]], %[[OFFS]] k = 2 scales(%[[XS]] : tensor<?x2xf32> -> tensor<?x2xf32>) : tensor<?x136xf8E4M3FN>, tensor<?xi32>, tensor<4xi32> -> tensor<?x136xf8E4M3FN>
// CHECK:         moe.grouped_matmul %[[RQ]], %{{.*}}, %[[OFFS]] scales(%[[RS]], %{{.*}} : tensor<?x2xf32>, tensor<4x3x2xf32>) {transpose_rhs}
// CHECK:         return %{{.*}}, %[[ROWS]]
// FUSED-LABEL: func.func @permuted
// FUSED-SAME:    (%[[X:.*]]: tensor<?x136xbf16>, %[[W:.*]]: tensor<4x264x136xbf16>, %[[SLOTS:.*]]: tensor<?xi32>, %[[OFFS:.*]]: tensor<4xi32>)
// FUSED:         %[[ROWS:.*]] = moe.permute %[[X]], %[[SLOTS]], %[[OFFS]] k = 2 : tensor<?x136xbf16>
// FUSED:         %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] group_size = 128 :
// FUSED-NOT:     moe.permute
// FUSED:         moe.grouped_matmul %[[XQ]], %{{.*}}, %[[OFFS]] gather(%[[SLOTS]] : tensor<?xi32>) scales(%[[XS]], %{{.*}} : tensor<?x2xf32>, tensor<4x3x2xf32>) {k = 2 : i64, transpose_rhs}
// FUSED-NOT:     moe.quantize
// FUSED:         return %{{.*}}, %[[ROWS]]
func.func @permuted(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                    %slots: tensor<?xi32>, %offsets: tensor<4xi32>)
    -> (tensor<?x264xbf16>, tensor<?x136xbf16>) {
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x136xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x136xbf16>
  %y = moe.grouped_matmul %rows, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  return %y, %rows : tensor<?x264xbf16>, tensor<?x136xbf16>
}

// -----

// The backward as moe-autodiff derives it: the input gradient reads the
// [E, N, K] weights as [E, K, N] (no transpose_rhs), so it gets their
// transposed K-major copy and transpose_rhs; the weight gradient of a
// gathered lhs permutes the tokens first, then both operands go to the
// transposed 128-row blocks of each expert. The f32 gradient with
// accumulate keeps its type and its accumulator.
// CHECK-LABEL: func.func @backward
// CHECK-SAME:    (%[[X:.*]]: tensor<?x136xbf16>, %[[W:.*]]: tensor<4x264x136xbf16>, %[[DY:.*]]: tensor<?x264xbf16>, %[[SLOTS:.*]]: tensor<?xi32>, %[[OFFS:.*]]: tensor<4xi32>, %[[MAIN:.*]]: tensor<4x264x136xf32>)
// CHECK:         %[[DQ:.*]], %[[DS:.*]] = moe.quantize %[[DY]] group_size = 128 : tensor<?x264xbf16> -> tensor<?x264xf8E4M3FN>, tensor<?x3xf32>
// CHECK:         %[[WT:.*]], %[[WTS:.*]] = moe.quantize %[[W]] group_size = 128 {axis = #moe.axis<blocks>, transpose} : tensor<4x264x136xbf16> -> tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
// CHECK:         moe.grouped_matmul %[[DQ]], %[[WT]], %[[OFFS]] scales(%[[DS]], %[[WTS]] : tensor<?x3xf32>, tensor<4x2x3xf32>) {transpose_rhs} : tensor<?x264xf8E4M3FN>, tensor<4x136x264xf8E4M3FN>, tensor<4xi32> -> tensor<?x136xbf16>
// CHECK:         %[[ROWS:.*]] = moe.permute %[[X]], %[[SLOTS]], %[[OFFS]] k = 2 : tensor<?x136xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x136xbf16>
// CHECK:         %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[ROWS]] offsets(%[[OFFS]] : tensor<4xi32>) group_size = 128 {axis = #moe.axis<colwise>, transpose} : tensor<?x136xbf16> -> tensor<136x?xf8E4M3FN>, tensor<?x136xf32>
// CHECK:         %[[GQ:.*]], %[[GS:.*]] = moe.quantize %[[DY]] offsets(%[[OFFS]] : tensor<4xi32>) group_size = 128 {axis = #moe.axis<colwise>, transpose} : tensor<?x264xbf16> -> tensor<264x?xf8E4M3FN>, tensor<?x264xf32>
// CHECK:         moe.grouped_weight_grad %[[XQ]], %[[GQ]], %[[OFFS]] accumulate(%[[MAIN]] : tensor<4x264x136xf32>) scales(%[[XS]], %[[GS]] : tensor<?x136xf32>, tensor<?x264xf32>) {transpose_rhs} : tensor<136x?xf8E4M3FN>, tensor<264x?xf8E4M3FN>, tensor<4xi32> -> tensor<4x264x136xf32>
// CHECK-NOT:     gather
func.func @backward(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                    %dy: tensor<?x264xbf16>, %slots: tensor<?xi32>,
                    %offsets: tensor<4xi32>, %main: tensor<4x264x136xf32>)
    -> (tensor<?x136xbf16>, tensor<4x264x136xf32>) {
  %dx = moe.grouped_matmul %dy, %w, %offsets
      : tensor<?x264xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x136xbf16>
  %dw = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      accumulate(%main : tensor<4x264x136xf32>) {k = 2 : i64, transpose_rhs}
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<4xi32>
      -> tensor<4x264x136xf32>
  return %dx, %dw : tensor<?x136xbf16>, tensor<4x264x136xf32>
}

// -----

// What stays in its precision says why; an op already in FP8 is left
// alone without a word.
// CHECK-LABEL: func.func @kept
// CHECK-NOT:     moe.quantize
func.func @kept(%x: tensor<?x16xbf16>, %w: tensor<4x12x16xbf16>,
                %offsets: tensor<4xi32>, %a: tensor<8x16xbf16>,
                %b: tensor<12x8xbf16>, %bias: tensor<4x12xbf16>,
                %xq: tensor<?x16xf8E4M3FN>, %sx: tensor<?x1xf32>,
                %wq: tensor<4x12x16xf8E4M3FN>, %sw: tensor<4x1x1xf32>,
                %rs: tensor<?xf32>)
    -> (tensor<?x12xbf16>, tensor<?x12xbf16>, tensor<?x12xbf16>,
        tensor<16x4x12xbf16>) {
  // expected-remark @+1 {{moe-fp8-recipe keeps this op in its precision: a fused LoRA adapter under an epilogue (activation, row scale or scatter), which would apply to the base product alone once the adapter is split off}}
  %l = moe.grouped_matmul %x, %w, %offsets lora(%a, %b : tensor<8x16xbf16>, tensor<12x8xbf16>)
      row_scale(%rs : tensor<?xf32>)
      {transpose_rhs} : tensor<?x16xbf16>, tensor<4x12x16xbf16>, tensor<4xi32> -> tensor<?x12xbf16>
  // expected-remark @+1 {{moe-fp8-recipe keeps this op in its precision: a bias}}
  %c = moe.grouped_matmul %x, %w, %offsets bias(%bias : tensor<4x12xbf16>)
      {transpose_rhs} : tensor<?x16xbf16>, tensor<4x12x16xbf16>, tensor<4xi32> -> tensor<?x12xbf16>
  %f = moe.grouped_matmul %xq, %wq, %offsets scales(%sx, %sw : tensor<?x1xf32>, tensor<4x1x1xf32>)
      {transpose_rhs, scale_group = 16 : i64}
      : tensor<?x16xf8E4M3FN>, tensor<4x12x16xf8E4M3FN>, tensor<4xi32> -> tensor<?x12xbf16>
  // expected-remark @+1 {{moe-fp8-recipe keeps this op in its precision: experts_in_columns (a LoRA adapter's gradient)}}
  %g = moe.grouped_weight_grad %x, %l, %offsets {experts_in_columns}
      : tensor<?x16xbf16>, tensor<?x12xbf16>, tensor<4xi32> -> tensor<16x4x12xbf16>
  return %l, %c, %f, %g : tensor<?x12xbf16>, tensor<?x12xbf16>, tensor<?x12xbf16>,
      tensor<16x4x12xbf16>
}

// -----

// LoRA on an FP8 base: the adapter's term is split off as two narrow
// grouped matmuls in bf16 (s as the row scale of the r-wide product, B
// transposed to [E, r, N]; the input gradient's transpose_lora reads B
// [K, E*r] in place as experts_in_columns and A as [E, r, N]) and added to
// the FP8 base matmul, which keeps no adapter.
// CHECK-LABEL: func.func @lora
// CHECK-SAME:    (%[[X:.*]]: tensor<?x136xbf16>, %[[W:.*]]: tensor<4x264x136xbf16>, %[[OFFS:.*]]: tensor<4xi32>, %[[A:.*]]: tensor<32x136xbf16>, %[[B:.*]]: tensor<264x32xbf16>, %[[DY:.*]]: tensor<?x264xbf16>)
// CHECK:         %[[S:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<?xf32>)
// CHECK:         %[[A3:.*]] = tensor.expand_shape %[[A]] {{\[\[}}0, 1], [2]] output_shape [4, 8, 136]
// CHECK:         %[[U:.*]] = moe.grouped_matmul %[[X]], %[[A3]], %[[OFFS]] row_scale(%[[S]] : tensor<?xf32>) {transpose_rhs} : tensor<?x136xbf16>, tensor<4x8x136xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
// CHECK:         %[[BT:.*]] = linalg.transpose ins(%[[B]] : tensor<264x32xbf16>)
// CHECK:         %[[BT3:.*]] = tensor.expand_shape %[[BT]] {{\[\[}}0, 1], [2]] output_shape [4, 8, 264]
// CHECK:         %[[UP:.*]] = moe.grouped_matmul %[[U]], %[[BT3]], %[[OFFS]] : tensor<?x8xbf16>, tensor<4x8x264xbf16>, tensor<4xi32> -> tensor<?x264xbf16>
// CHECK:         %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] group_size = 128
// CHECK:         %[[WQ:.*]], %[[WS:.*]] = moe.quantize %[[W]] group_size = 128 {axis = #moe.axis<blocks>}
// CHECK:         %[[BASE:.*]] = moe.grouped_matmul %[[XQ]], %[[WQ]], %[[OFFS]] scales(%[[XS]], %[[WS]] : tensor<?x2xf32>, tensor<4x3x2xf32>) {transpose_rhs} : tensor<?x136xf8E4M3FN>
// CHECK:         %[[Y:.*]] = linalg.add ins(%[[BASE]], %[[UP]] : tensor<?x264xbf16>, tensor<?x264xbf16>)
// CHECK:         %[[B3:.*]] = tensor.expand_shape %[[B]] {{\[\[}}0], [1, 2]] output_shape [264, 4, 8]
// CHECK:         %[[DU:.*]] = moe.grouped_matmul %[[DY]], %[[B3]], %[[OFFS]] row_scale(%{{.*}} : tensor<?xf32>) {experts_in_columns} : tensor<?x264xbf16>, tensor<264x4x8xbf16>, tensor<4xi32> -> tensor<?x8xbf16>
// CHECK:         %[[A3B:.*]] = tensor.expand_shape %[[A]] {{\[\[}}0, 1], [2]] output_shape [4, 8, 136]
// CHECK:         %[[DOWN:.*]] = moe.grouped_matmul %[[DU]], %[[A3B]], %[[OFFS]] : tensor<?x8xbf16>, tensor<4x8x136xbf16>, tensor<4xi32> -> tensor<?x136xbf16>
// CHECK:         %[[DBASE:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %[[OFFS]] scales(%{{.*}}, %{{.*}} : tensor<?x3xf32>, tensor<4x2x3xf32>) {transpose_rhs} : tensor<?x264xf8E4M3FN>, tensor<4x136x264xf8E4M3FN>
// CHECK:         %[[DX:.*]] = linalg.add ins(%[[DBASE]], %[[DOWN]] : tensor<?x136xbf16>, tensor<?x136xbf16>)
// CHECK-NOT:     lora(
// CHECK:         return %[[Y]], %[[DX]]
func.func @lora(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                %offsets: tensor<4xi32>, %a: tensor<32x136xbf16>,
                %b: tensor<264x32xbf16>, %dy: tensor<?x264xbf16>)
    -> (tensor<?x264xbf16>, tensor<?x136xbf16>) {
  %y = moe.grouped_matmul %x, %w, %offsets lora(%a, %b : tensor<32x136xbf16>, tensor<264x32xbf16>)
      {transpose_rhs, lora_scaling = 2.0 : f32}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32> -> tensor<?x264xbf16>
  %dx = moe.grouped_matmul %dy, %w, %offsets lora(%a, %b : tensor<32x136xbf16>, tensor<264x32xbf16>)
      {transpose_lora, lora_scaling = 2.0 : f32}
      : tensor<?x264xbf16>, tensor<4x264x136xbf16>, tensor<4xi32> -> tensor<?x136xbf16>
  return %y, %dx : tensor<?x264xbf16>, tensor<?x136xbf16>
}

// -----

// weights=arguments: the forward and the input gradient of one weight in
// one function. Each layout is quantized once, however many matmuls read
// it: the copies become arguments after the function's own (named after
// the weight, `moe.fp8_weight_of` its index), and @both_fp8_weights makes
// them from the weights, plain copy first, both layouts by one quantize
// (one read of the weights). The activations' quantizes stay.
// (Without the option the function quantizes its weights itself.)
// CHECK-LABEL: func.func @both
// CHECK:         moe.quantize %{{.*}} group_size = 128 {axis = #moe.axis<blocks>}
// ARGS-LABEL: func.func @both
// ARGS-SAME:    (%[[X:.*]]: tensor<?x136xbf16> {moe.name = "x"}, %{{.*}}: tensor<4x264x136xbf16> {moe.name = "w"}, %[[DY:.*]]: tensor<?x264xbf16> {moe.name = "dy"}, %[[OFFS:.*]]: tensor<4xi32> {moe.name = "offsets"},
// ARGS-SAME:     %[[WQ:.*]]: tensor<4x264x136xf8E4M3FN> {moe.fp8_weight_of = 1 : i64, moe.name = "w_fp8"}, %[[WS:.*]]: tensor<4x3x2xf32> {moe.fp8_weight_of = 1 : i64, moe.name = "w_fp8_scales"},
// ARGS-SAME:     %[[WT:.*]]: tensor<4x136x264xf8E4M3FN> {moe.fp8_weight_of = 1 : i64, moe.name = "w_fp8t"}, %[[WTS:.*]]: tensor<4x2x3xf32> {moe.fp8_weight_of = 1 : i64, moe.name = "w_fp8t_scales"})
// ARGS-NOT:      axis = #moe.axis<blocks>
// ARGS:          %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] group_size = 128
// ARGS:          moe.grouped_matmul %[[XQ]], %[[WQ]], %[[OFFS]] scales(%[[XS]], %[[WS]] : tensor<?x2xf32>, tensor<4x3x2xf32>) {transpose_rhs}
// ARGS:          %[[X2Q:.*]], %[[X2S:.*]] = moe.quantize %[[X]] group_size = 128
// ARGS:          moe.grouped_matmul %[[X2Q]], %[[WQ]], %[[OFFS]] scales(%[[X2S]], %[[WS]]
// ARGS:          %[[DQ:.*]], %[[DS:.*]] = moe.quantize %[[DY]] group_size = 128
// ARGS:          moe.grouped_matmul %[[DQ]], %[[WT]], %[[OFFS]] scales(%[[DS]], %[[WTS]] : tensor<?x3xf32>, tensor<4x2x3xf32>) {transpose_rhs}
// ARGS-NOT:      axis = #moe.axis<blocks>
// ARGS:        }
// ARGS-LABEL: func.func @both_fp8_weights
// ARGS-SAME:    (%[[W:.*]]: tensor<4x264x136xbf16> {moe.name = "w"}) -> (tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>)
// ARGS:          %[[Q:[^,]*]], %[[S:[^,]*]], %[[TQ:[^,]*]], %[[TS:[^,]*]] = moe.quantize %[[W]] group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
// ARGS-NEXT:     return %[[Q]], %[[S]], %[[TQ]], %[[TS]]
func.func @both(%x: tensor<?x136xbf16> {moe.name = "x"},
                %w: tensor<4x264x136xbf16> {moe.name = "w"},
                %dy: tensor<?x264xbf16> {moe.name = "dy"},
                %offsets: tensor<4xi32> {moe.name = "offsets"})
    -> (tensor<?x264xbf16>, tensor<?x264xbf16>, tensor<?x136xbf16>) {
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  %y2 = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  %dx = moe.grouped_matmul %dy, %w, %offsets
      : tensor<?x264xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x136xbf16>
  return %y, %y2, %dx : tensor<?x264xbf16>, tensor<?x264xbf16>, tensor<?x136xbf16>
}

// -----

// The function weights=arguments would add exists already.
// CHECK-LABEL: func.func @taken
// CLASH: error: moe-fp8-recipe: weights=arguments adds @taken_fp8_weights, and the module has one already
func.func @taken(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                 %offsets: tensor<4xi32>) -> tensor<?x264xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}
func.func @taken_fp8_weights() {
  return
}

// -----

// The same for the step's quantizer of a moe-autodiff pair.
// CHECK-LABEL: func.func @pair_fwd
// CLASH: error: moe-fp8-recipe: weights=arguments adds @pair_fwd_grad_fp8_weights, and the module has one already
func.func @pair_fwd(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                    %offsets: tensor<4xi32>) -> tensor<?x264xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}
func.func @pair_grad(%x: tensor<?x136xbf16>, %w: tensor<4x264x136xbf16>,
                     %offsets: tensor<4xi32>,
                     %dy: tensor<?x264xbf16> {moe.name = "grad_result0"})
    -> tensor<?x136xbf16>
    attributes {moe.grad_of = "pair", moe.saved_results = array<i64>,
                moe.wrt = array<i64: 0>} {
  %dx = moe.grouped_matmul %dy, %w, %offsets
      : tensor<?x264xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x136xbf16>
  return %dx : tensor<?x136xbf16>
}
func.func @pair_fwd_grad_fp8_weights() {
  return
}

// -----

// A forward and backward as moe-autodiff derives them. The saved SwiGLU
// output %h is read by the backward only through the weight gradient's
// column-wise quantize: @saved_fwd quantizes it where it is made and saves
// the FP8 data and scales in its place (no bf16 copy kept between the two
// calls), and moe.saved_results names them. The gate_up output %g, which
// the SwiGLU gradient reads in bf16, stays saved as it is.
// CHECK-LABEL: func.func @saved_fwd
// CHECK-SAME:    -> (tensor<?x264xbf16>, tensor<?x272xbf16>, tensor<136x?xf8E4M3FN>, tensor<?x136xf32>)
// CHECK:         %[[H:.*]] = moe.swiglu
// CHECK-NEXT:    %[[HQ:.*]], %[[HS:.*]] = moe.quantize %[[H]] offsets(%{{.*}} : tensor<4xi32>) group_size = 128 {axis = #moe.axis<colwise>, transpose} : tensor<?x136xbf16> -> tensor<136x?xf8E4M3FN>, tensor<?x136xf32>
// CHECK:         return %{{.*}}, %{{.*}}, %[[HQ]], %[[HS]] :
// CHECK-LABEL: func.func @saved_grad
// CHECK-SAME:    %[[G:[^:]*]]: tensor<?x272xbf16> {moe.name = "saved0", moe.sym = "rows"}, %[[HQ:[^:]*]]: tensor<136x?xf8E4M3FN> {moe.name = "saved1"}, %[[HS:[^:]*]]: tensor<?x136xf32> {moe.name = "saved2", moe.sym = "rows_blocks0"}, %{{[^:]*}}: tensor<?x264xbf16> {moe.name = "grad_result0"
// CHECK-SAME:    moe.saved_results = array<i64: 1, 2, 3>
// CHECK:         moe.swiglu_grad %[[G]]
// CHECK:         moe.grouped_weight_grad %[[HQ]], %{{.*}}, %{{.*}} scales(%[[HS]], %{{.*}} : tensor<?x136xf32>, tensor<?x264xf32>)
// With weights=arguments @saved_fwd takes the plain copy of %w and
// @saved_grad the transposed one, each from its own quantizer; for a step
// that runs both, @saved_fwd_grad_fp8_weights makes the two copies (in
// that order) by one quantize writing both layouts.
// ARGS-LABEL: func.func @saved_fwd_fp8_weights
// ARGS-SAME:    -> (tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>)
// ARGS-LABEL: func.func @saved_grad_fp8_weights
// ARGS-SAME:    -> (tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>)
// ARGS-LABEL: func.func @saved_fwd_grad_fp8_weights
// ARGS-SAME:    (%[[W:.*]]: tensor<4x264x136xbf16> {moe.name = "arg1"}) -> (tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>)
// ARGS-NEXT:     %[[Q:[^,]*]], %[[S:[^,]*]], %[[TQ:[^,]*]], %[[TS:[^,]*]] = moe.quantize %[[W]] group_size = 128 {axis = #moe.axis<blocks>} : tensor<4x264x136xbf16> -> tensor<4x264x136xf8E4M3FN>, tensor<4x3x2xf32>, tensor<4x136x264xf8E4M3FN>, tensor<4x2x3xf32>
// ARGS-NEXT:     return %[[Q]], %[[S]], %[[TQ]], %[[TS]]
func.func @saved(%g: tensor<?x272xbf16>, %w: tensor<4x264x136xbf16>,
                 %offsets: tensor<4xi32>) -> tensor<?x264xbf16> {
  %h = moe.swiglu %g : tensor<?x272xbf16> -> tensor<?x136xbf16>
  %y = moe.grouped_matmul %h, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  return %y : tensor<?x264xbf16>
}
func.func @saved_fwd(%g: tensor<?x272xbf16>, %w: tensor<4x264x136xbf16>,
                     %offsets: tensor<4xi32>)
    -> (tensor<?x264xbf16>, tensor<?x272xbf16>, tensor<?x136xbf16>) {
  %h = moe.swiglu %g : tensor<?x272xbf16> -> tensor<?x136xbf16>
  %y = moe.grouped_matmul %h, %w, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x264xbf16>
  return %y, %g, %h : tensor<?x264xbf16>, tensor<?x272xbf16>, tensor<?x136xbf16>
}
func.func @saved_grad(%g0: tensor<?x272xbf16>, %w: tensor<4x264x136xbf16>,
                      %offsets: tensor<4xi32>,
                      %g: tensor<?x272xbf16> {moe.name = "saved0", moe.sym = "rows"},
                      %h: tensor<?x136xbf16> {moe.name = "saved1", moe.sym = "rows"},
                      %dy: tensor<?x264xbf16> {moe.name = "grad_result0", moe.sym = "rows"})
    -> (tensor<?x272xbf16>, tensor<4x264x136xbf16>)
    attributes {moe.grad_of = "saved", moe.saved_results = array<i64: 1, 2>,
                moe.wrt = array<i64: 0, 1>} {
  %dh = moe.grouped_matmul %dy, %w, %offsets
      : tensor<?x264xbf16>, tensor<4x264x136xbf16>, tensor<4xi32>
      -> tensor<?x136xbf16>
  %dg = moe.swiglu_grad %g, %dh
      : tensor<?x272xbf16>, tensor<?x136xbf16> -> tensor<?x272xbf16>
  %dw = moe.grouped_weight_grad %h, %dy, %offsets {transpose_rhs}
      : tensor<?x136xbf16>, tensor<?x264xbf16>, tensor<4xi32>
      -> tensor<4x264x136xbf16>
  return %dg, %dw : tensor<?x272xbf16>, tensor<4x264x136xbf16>
}
