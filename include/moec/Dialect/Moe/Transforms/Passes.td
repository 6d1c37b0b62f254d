//===- Passes.td - Tensor-level transforms of the moe dialect -*- tablegen -*-===//
//
// Part of moec. Fusion of moe ops into the prologue and epilogue of the
// grouped matmul, and the choice of tile configurations. Every pass runs on
// any op (a module or a function) and rewrites the moe ops nested in it.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_TRANSFORMS_PASSES_TD
#define MOEC_DIALECT_MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeFusePermutePass : Pass<"moe-fuse-permute"> {
  let summary = "Fuses moe.permute, and moe.unpermute_grad, into the prologue "
                "of moe.grouped_matmul";
  let description = [{
    Rewrites a forward `moe.grouped_matmul` whose `lhs` is the `rows` of a
    `moe.permute` with the same `offsets` into a matmul that gathers the
    token rows itself:

    ```mlir
    %rows = moe.permute %x, %slots, %offsets k = 8 : ...
    %y = moe.grouped_matmul %rows, %w, %offsets : ...
    // becomes
    %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
        {k = 8 : i64} : ...
    ```

    Both read row `i` as `tokens[slots[i] / k]` and a padding slot (`-1`) as
    a zero row, so the result is unchanged. Every other operand and
    attribute of the matmul (bias, LoRA, `row_scale`, activation, scatter,
    `moe.tile`, ...) is kept. The permute is erased once it has no users;
    its other users keep it.

    FP8 rows permuted with their `scales(...)`, when the matmul's
    `lhs_scales` are those permuted scales (as moe-fp8-recipe permutes
    quantized tokens), fuse too: the matmul gathers the FP8 tokens and
    reads the tokens' scales, per token as a gathered lhs takes them.

    Left unfused: permutes carrying `probs(...)`, or `scales(...)` that are
    not the matmul's `lhs_scales` (the passengers would need a permute of
    their own), weight gradients (`moe.grouped_weight_grad`), matmuls that
    already gather, matmuls with other FP8 block scales (per permuted row,
    where a gathered matmul needs them per token), a permute with
    different `offsets`, and a matmul whose `scatter` uses another `k` or
    another token count.

    The backward's counterpart: the row gradients of `moe.unpermute_grad`
    (`g_i = w_i * dy[t_i]`, the routing weight times the token's gradient)
    are never written when every reader is a grouped matmul that can read
    `dy` gathered by slot instead and take the weights as a `row_scale`
    (`moe.permute_probs`):

    ```mlir
    %dr, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8
        weights(%w, %y : ...) : ... -> tensor<?x2048xbf16>
    %da = moe.grouped_matmul %dr, %w_down, %offsets : ...
    // becomes
    %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8
        weights(%w, %y : ...) : ...
    %ws = moe.permute_probs %w, %slots, %offsets k = 8 : ...
    %da = moe.grouped_matmul %dy, %w_down, %offsets gather(%slots : ...)
        row_scale(%ws : tensor<?xf32>) {k = 8 : i64} : ...
    ```

    The unpermute_grad is left computing the weights' gradient only (or
    erased, without weights). A reader qualifies when it reads the rows as
    its `lhs`, with the unpermute_grad's `offsets`, no gather, scatter or
    FP8 scales, and:
    - a `moe.grouped_matmul` (the input gradient `dY · W`, LoRA's `dY · B`):
      no bias and an output linear in the row (no activation, or
      `swiglu_grad`); the routing weight becomes its row scale;
    - a `moe.grouped_weight_grad` (`Σ g_iᵀ r_i = Σ dy[t_i]ᵀ (w_i r_i)`): its
      `grad_out` is a grouped matmul that nothing else reads (LoRA's
      `u = x · A_eᵀ` on sm90a), whose row scale takes the weight.
    An existing row scale must be a constant (`linalg.fill`), which
    `permute_probs` multiplies in. If any reader does not qualify, nothing
    changes: the rows would still be written. So a full fine-tune's down
    projection, whose weight gradient reads the saved SwiGLU output, keeps
    them; an input-only backward (frozen experts) and LoRA on the down
    projection (sm90a) lose them.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeFuseEpiloguePass : Pass<"moe-fuse-epilogue"> {
  let summary = "Fuses SwiGLU (or its gradient) and row scaling into the "
                "epilogue of moe.grouped_matmul";
  let description = [{
    Folds element-wise work on a forward `moe.grouped_matmul`'s output into
    the matmul. The matmul must have no other user and no `scatter`.

    * `moe.swiglu` (`layout = halves`) of a matmul with `activation = none`
      and no `row_scale` becomes the matmul with `activation = swiglu` and
      the swiglu's result type `[M, N/2]`.
    * `moe.swiglu_grad %h, %dy` (`layout = halves`) whose output gradient
      `%dy` is a matmul with `activation = none` becomes the matmul with
      `activation = swiglu_grad`, `activation_input(%h)` and the result type
      `[M, 2N]` (a backward's down-projection input gradient, written
      straight as the gate_up output's gradient). A row scale may stay: the
      gradient is linear in `%dy`.
    * A row scaling, a `linalg.generic` with all-parallel loops over the
      matmul result `[M, N]` (identity map) and an f32 vector `[M]` (map
      `(d0, d1) -> (d0)`) whose body is `mulf` of the two (the matrix
      element optionally `extf`'d to f32 and the product optionally
      `truncf`'d) and which does not read its init, becomes the matmul's
      `row_scale` with the generic's result type. The scale applies after
      the activation, as in the generic's place.

    The fused epilogue rounds to the result type once, from f32, where the
    unfused ops round the matmul's output first.

    Left unfused: `layout = interleaved` (the matmul's swiglu reads halves),
    swiglu of a matmul that already has an activation or a `row_scale`
    (the scale would apply before the activation), a scaling of a matmul
    that already has a `row_scale`, scaling in any other form (e.g.
    `linalg.broadcast` + `linalg.mul`), and quantization (`moe.quantize` of
    the output): the grouped matmul has no FP8 output form.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeFuseCombinePass : Pass<"moe-fuse-combine"> {
  let summary = "Fuses moe.unpermute (the combine) into the epilogue of "
                "moe.grouped_matmul";
  let description = [{
    Rewrites `moe.unpermute` of the output of a forward
    `moe.grouped_matmul` with the same `offsets` into a matmul that
    scatters its rows back to token order itself:

    ```mlir
    %d = moe.grouped_matmul %a, %w, %offsets : ...
    %y = moe.unpermute %d, %slots, %offsets k = 8
        weights(%weights : tensor<?x8xf32>) : ...
    // becomes
    %y = moe.grouped_matmul %a, %w, %offsets scatter(%slots : tensor<?xi32>)
        scatter_weights(%weights : tensor<?x8xf32>) {k = 8 : i64} : ...
    ```

    Both compute `out[t] = sum over rows i with slots[i] / k == t of
    w[t, slots[i] % k] * y_i` (weight 1 without `weights`), drop padding
    rows and accumulate in f32; the fused form no longer rounds `y_i` to
    the matmul's element type before the sum. The matmul is moved to just
    before the unpermute so that the slots and weights dominate it.

    Left unfused: matmuls that already scatter, with other users, in another block than the unpermute, with
    different `offsets`, that gather with another `k`, or whose gathered
    token count differs from the unpermute's.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeSharePositionsPass : Pass<"moe-share-positions"> {
  let summary = "Hands sort_by_expert's slot-to-row map to the token-order "
                "kernels";
  let description = [{
    `moe.permute`, `moe.unpermute`, `moe.permute_grad`,
    `moe.unpermute_grad` and the combine of a `moe.grouped_matmul` with
    `scatter` (its `scatter_positions`) work in token order and need the
    row of each slot, the inverse of `slots`. Without a `positions` operand
    each of them
    builds that map itself (two kernel launches, and a third for permute's
    padding); `moe.sort_by_expert` knows it already and writes it with one
    coalesced store per slot. For every such op whose `slots` and `offsets`
    are the results of one `moe.sort_by_expert` with the same k, this pass
    adds the `positions` result to the sort (once) and passes it on:

    ```mlir
    %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128 : ...
    %rows = moe.permute %x, %slots, %offsets k = 8 : ...
    // becomes
    %sorted, %slots, %offsets, %positions = moe.sort_by_expert %ids
        experts = 128 : ..., tensor<?xi32>
    %rows = moe.permute %x, %slots, %offsets k = 8
        positions(%positions : tensor<?xi32>) : ...
    ```

    Left alone: ops that already have `positions`, whose slots come from a
    function argument or another op, or whose `offsets` or k differ from
    the sort's.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeTransposeLoraAdaptersPass : Pass<"moe-transpose-lora-adapters"> {
  let summary = "Rewrites a transposed LoRA adapter into the forward form on "
                "transposed copies";
  let description = [{
    A `moe.grouped_matmul` with `transpose_lora` (a LoRA matmul's input
    gradient, as `moe-autodiff` derives it) adds
    `s · (x · B_e) · A_e` with `A` `[E*r, N]` and `B` `[K, E*r]`. That is the
    forward adapter term `s · (x · A'_eᵀ) · B'_eᵀ` of `A' = Bᵀ` `[E*r, K]`
    and `B' = Aᵀ` `[N, E*r]`, so this pass transposes the two adapters
    (`linalg.transpose` into a `tensor.empty`) and drops `transpose_lora`:

    ```mlir
    %dx = moe.grouped_matmul %dy, %w, %offsets
        lora(%a, %b : tensor<64x2048xbf16>, tensor<1536x64xbf16>)
        {lora_scaling = 2.0 : f32, transpose_lora} : ...
    // becomes
    %bt = linalg.transpose ins(%b : tensor<1536x64xbf16>)
        outs(%0 : tensor<64x1536xbf16>) permutation = [1, 0]
    %at = linalg.transpose ins(%a : tensor<64x2048xbf16>)
        outs(%1 : tensor<2048x64xbf16>) permutation = [1, 0]
    %dx = moe.grouped_matmul %dy, %w, %offsets
        lora(%bt, %at : tensor<64x1536xbf16>, tensor<2048x64xbf16>)
        {lora_scaling = 2.0 : f32} : ...
    ```

    The adapters are small (`E·r·(K + N)` elements), and kernels that fuse
    the forward adapter (the sm_90a wgmma grouped matmul) then run the
    input gradient too; without this pass it takes the scalar kernel. The
    math is the same; the fused kernel rounds `s · (x · A'_eᵀ)` to the
    operands' type before its second product, as in the forward. Every
    other operand and attribute is kept. The pipeline runs it on every
    target: one form for every backend, which the host tests check; where
    the adapter is not fused, the two transposes cost little next to the
    scalar matmul.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MoePadLoraRankPass : Pass<"moe-pad-lora-rank"> {
  let summary = "Zero-pads 16-bit LoRA adapters to a rank that is a multiple "
                "of 8";
  let description = [{
    The sm_90a wgmma grouped matmul fuses a LoRA adapter, and
    `moe-decompose-lora-grad` turns `moe.lora_grad` into wgmma matmuls,
    only where the rank `r` is a multiple of 8 (`B_e`'s rows are copied in
    16-byte pieces). Other ranks (4, 12, ...) would take the scalar
    kernels, 100-1,000x slower. This pass gives each expert `p - r` more
    zero rows of `A` and zero columns of `B`, with `p` the next multiple
    of 8, on every `moe.grouped_matmul` with an adapter (either form,
    `transpose_lora` included) and every `moe.lora_grad`:

    ```mlir
    %y = moe.grouped_matmul %x, %w, %offsets
        lora(%a, %b : tensor<48x64xbf16>, tensor<32x48xbf16>) ...
    // 4 experts, r = 12, becomes
    %a3 = tensor.expand_shape %a [[0, 1], [2]] output_shape [4, 12, 64]
    %ap = tensor.pad %a3 low[0, 0, 0] high[0, 4, 0] { ... %zero }
    %a2 = tensor.collapse_shape %ap [[0, 1], [2]]  // 64x64
    // the same for B's columns: 32x48 -> 32x4x12 -> 32x4x16 -> 32x64
    %y = moe.grouped_matmul %x, %w, %offsets
        lora(%a2, %b2 : tensor<64x64xbf16>, tensor<32x64xbf16>) ...
    ```

    The output is the same: the zero rows of `A_e` give `u = x · A_eᵀ`
    zero columns, which meet `B_e`'s zero columns. `moe.lora_grad` is
    rebuilt on the padded adapters and its gradients sliced back
    (`tensor.extract_slice` between reshapes): the padded rows of `dA` and
    columns of `dB` are sums over those zero columns.

    The reshapes lower to views; the pads and slices are copy kernels of
    the adapters' size (`E·r·(K + N)` elements), small next to the
    matmuls. Each adapter is padded once, right after its definition, for
    all its users (a backward's input gradient and adapter gradients read
    the same two). Only bf16 and f16 adapters with static shapes are
    padded (the wgmma kernel takes no other); f32 ones and multiples of 8
    stay. The pipeline runs it on every target, first, so that
    `moe-transpose-lora-adapters` transposes the padded adapters and
    `moe-decompose-lora-grad` finds a multiple of 8.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MoeDecomposeLoraGradPass : Pass<"moe-decompose-lora-grad"> {
  let summary = "On sm90a, computes the LoRA adapter gradients with four "
                "grouped matmuls";
  let description = [{
    `moe.lora_grad` (the adapter gradients `moe-autodiff` derives) is one
    fused kernel on every target; its products run on SIMT cores. On
    `sm90a` this pass rewrites it into two `moe.grouped_matmul` and two
    `moe.grouped_weight_grad` ops the wgmma kernel runs, with
    `s = lora_scaling`:

    * `u = s · x · A_eᵀ`: forward, `A` `[E*r, K]` read as `[E, r, K]`
      (`tensor.expand_shape`) with `transpose_rhs`, `x` gathered as the op
      reads it, `s` as a `row_scale` (`linalg.fill`, only when `s != 1`);
    * `du = s · dy · B_e`: forward on `B` `[N, E*r]` read in place as
      `[N, E, r]` (`experts_in_columns`: expert `e`'s `[N, r]` is
      `B[:, e, :]`);
    * `dB`: `moe.grouped_weight_grad` of `dy` and `u` with
      `experts_in_columns`,
      written as `[N, E, r]` and joined to `[N, E*r]`
      (`tensor.collapse_shape`);
    * `dA`: `moe.grouped_weight_grad` of `du` and `x`, `[E, r, K]` joined
      to `[E*r, K]`; with a gathered `x`, the weight gradient of `x` (read
      by slot)
      and `du` with `transpose_rhs`, which writes the same `[E, r, K]`:
      no copies around any of the four.

    ```mlir
    %da, %db = moe.lora_grad %x, %dy, %offsets lora(%a, %b : ...)
        gather(%slots : tensor<?xi32>) {k = 8 : i64, lora_scaling = 2.0 : f32}
    // becomes (sketch)
    %u   = moe.grouped_matmul %x, %a3, %offsets gather(%slots) row_scale(%s)
    %du  = moe.grouped_matmul %dy, %b3, %offsets row_scale(%s)
        {experts_in_columns}
    %db3 = moe.grouped_weight_grad %dy, %u, %offsets {experts_in_columns}
    %da3 = moe.grouped_weight_grad %x, %du, %offsets gather(%slots)
        {transpose_rhs}
    ```

    The reshapes copy nothing once lowered: `convert-moe-to-kernels` makes
    them views of the adapters, and the weight gradients write the
    gradient outputs through views of them.

    `u` and `du` are rounded to the operands' type between the products,
    as a composition of `torch._grouped_mm` calls does (the fused kernel
    keeps them in f32). The rewrite applies where the wgmma kernel takes
    all four matmuls: bf16 or f16 operands of one type, static `K` and
    `N`, the rank a multiple of 8, at most 1023 experts; other
    `moe.lora_grad` ops stay. Elsewhere (host, nvvm, rocdl, generic) the
    fused kernel is faster than four scalar matmuls, so the pass does
    nothing. `target` is the kernel target (`sm90a`, ...); empty takes the
    module's `#moe.target` kind.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "Kernel target kind (only sm90a rewrites; empty: the module's "
           "#moe.target)">
  ];
  let dependentDialects = ["::moec::moe::MoeDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MoeFp8RecipePass : Pass<"moe-fp8-recipe"> {
  let summary = "Rewrites bf16 grouped matmuls and weight gradients to FP8 "
                "with DeepSeek-V3's block scales";
  let description = [{
    The blockwise FP8 recipe of DeepSeek-V3 (e4m3 everywhere, 1x128
    activation groups, 128x128 weight blocks), applied to a layer's expert
    matmuls: run it on a forward, or on the backward `moe-autodiff`
    derives. Each 16- or 32-bit op it takes keeps its result type (bf16 or
    f32 accumulation stays where it was):

    * `moe.grouped_matmul`: the lhs (the token matrix when gathered) is
      quantized in 1x128 groups along K, the weights in 128x128 blocks,
      and the op reads both as FP8 with `scales(...)`. An lhs that a
      `moe.permute` (without probs or scales) makes is quantized as
      tokens, before the permute, and the FP8 rows are permuted with their
      scales (TransformerEngine's permute straight to FP8): the same
      values, T token rows quantized instead of T*k, and a permute that
      `moe-fuse-permute` folds into the matmul's gather. `[E, N, K]` weights
      (`transpose_rhs`) are quantized as they are; `[E, K, N]` ones (the
      input gradient `dy · W_e` of a forward with `[E, N, K]` weights) as
      their transposed K-major copy (`moe.quantize {axis = blocks,
      transpose}`), and the op gets `transpose_rhs`: Hopper's FP8 wgmma
      reads both operands K-major only.
    * `moe.grouped_weight_grad`: the lhs rows (a gathered lhs permuted
      first by `moe.permute`) and the output gradient are quantized in
      128-row blocks of each expert, written transposed (`moe.quantize
      {axis = colwise, transpose}`), the layout the FP8 weight gradient
      reads.

    * A `moe.grouped_matmul` with a fused LoRA adapter (LoRA on a frozen
      FP8 base): the adapter's term is split off as two narrow grouped
      matmuls in the op's precision, `u = s·x·A_eᵀ` (s as a row scale)
      then `u·B_eᵀ` (with `transpose_lora`, `s·x·B_e` then `·A_e`), added
      to the base matmul by `linalg.add`; the base becomes FP8 as above.

    Left in their precision, each with a remark that says why: matmuls
    with a bias or `experts_in_columns` weights, a LoRA adapter under an
    activation, row scale or scatter (the split would leave the epilogue
    on the base alone), and operands that are not bf16, f16 or f32. Dense `linalg.matmul`s (the
    router) are not touched. Each quantize is its own op here, next to its
    consumer: an activation quantized for two matmuls is quantized twice.

    A forward and backward pair as `moe-autodiff` derives it (`@f_fwd`,
    and `@f_grad` with `moe.grad_of` and `moe.saved_results`): a saved
    value that the backward reads only through quantizes (the weight
    gradients' rows and SwiGLU output, column-wise) is saved quantized.
    `@f_fwd` quantizes it right where it is made and returns the FP8 data
    and scales after its other results; they replace the value among
    `@f_grad`'s saved arguments (`moe.saved_results` names them), and the
    bf16 value is no longer returned unless it is one of `@f`'s results.
    The column-wise data pads each expert's rows to 128-row blocks (up to
    127 rows more per expert): it holds fewer bytes than bf16 rows once
    the rows outnumber 127 per expert (T*k > 127 * E), about half as many
    when they far outnumber them.

    `weights=arguments` takes the weights' quantization out of the
    functions, so that a caller quantizes a weight once per update
    (an optimizer step) rather than on every call. In each function, the
    weight quantizes of one argument `%w` (one per layout) become two
    arguments appended to the function: `%w`'s FP8 copy (`moe.name`
    `<w>_fp8`, or `<w>_fp8t` for the transposed copy) and its scales
    (`<w>_fp8_scales`, `<w>_fp8t_scales`), each with `moe.fp8_weight_of`
    = `%w`'s argument index. A new function `@<f>_fp8_weights` takes those
    weights, in argument order, and returns the appended arguments' values
    in their order. Functions that quantize no argument are left as they
    are. For a moe-autodiff pair whose two functions both take copies,
    `@<f>_fwd_grad_fp8_weights` makes both sets in one call (the results
    of `@<f>_fwd_fp8_weights`, then those of `@<f>_grad_fp8_weights`): a
    weight the forward takes plain and the backward transposed is read
    once, by a `moe.quantize` writing both layouts, for the step that
    runs both on the same weights.

    ```mlir
    %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
        {k = 2 : i64, transpose_rhs}
        : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
        -> tensor<?x1536xbf16>
    // becomes
    %xq, %xs = moe.quantize %x group_size = 128
        : tensor<?x2048xbf16> -> tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>
    %wq, %ws = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>}
        : tensor<128x1536x2048xbf16> -> tensor<128x1536x2048xf8E4M3FN>,
          tensor<128x12x16xf32>
    %y = moe.grouped_matmul %xq, %wq, %offsets gather(%slots : tensor<?xi32>)
        scales(%xs, %ws : tensor<?x16xf32>, tensor<128x12x16xf32>)
        {k = 2 : i64, transpose_rhs} : ...
    ```
  }];
  let options = [
    Option<"recipe", "recipe", "std::string", /*default=*/"\"blockwise\"",
           "the FP8 recipe: blockwise (the only one so far)">,
    Option<"weights", "weights", "std::string", /*default=*/"\"inline\"",
           "inline: each function quantizes the weights it reads; "
           "arguments: it takes their FP8 copies as arguments, made by "
           "@<function>_fp8_weights">
  ];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeAutodiffPass : Pass<"moe-autodiff", "mlir::ModuleOp"> {
  let summary = "Derives the backward (vector-Jacobian product) of a function "
                "of moe ops";
  let description = [{
    For the function `@f` (option `func`; the module's only function when
    empty) this pass adds two functions next to it and leaves `@f` as it
    is:

    * `@f_fwd(args) -> (results, saved)`: `@f` plus the values the
      backward reads (see `save`), returned after `@f`'s results.
    * `@f_grad(args, saved, grads of the results) -> (grads of wrt)`: the
      gradient of `sum_r <grad_r, result_r>` with respect to each
      differentiable argument. Integer results take no gradient argument.

    Differentiable arguments: option `wrt` (argument indices), else the
    arguments with the unit attribute `moe.wrt` (an error if one of them
    has no gradient), else every floating-point argument that reaches a
    floating-point result through differentiable ops (a router's selection
    bias, which only selects, does not). `@f_grad` records `moe.grad_of`
    (the function's name),
    `moe.wrt` (the argument indices, in result order) and
    `moe.saved_results` (for each saved argument, the index of the
    `@f_fwd` result that holds it).

    Rules, applied in reverse program order; gradients that reach a value
    along several paths are summed with `linalg.add`:

    * `moe.unpermute` -> `moe.unpermute_grad` (with `weights(w, rows)`, so
      the routing weights get their gradient);
    * `moe.permute` -> `moe.permute_grad` (its `probs` too);
    * `moe.grouped_matmul` (forward; plain or gathered lhs, either rhs
      layout) -> the input gradient, a grouped matmul with the other rhs
      layout (then `moe.permute_grad` for a gathered lhs), and the weight
      gradient, `moe.grouped_weight_grad` (a gathered lhs is read by slot,
      never copied: for `[E, N, K]` weights through the weight gradient's
      `transpose_rhs` form, which writes `[E, N, K]`);
      with a LoRA adapter, the input gradient carries it transposed
      (`transpose_lora`) and the adapters' gradients come from
      `moe.lora_grad` (lhs gathered by slot like the forward's);
    * `moe.swiglu` -> `moe.swiglu_grad`;
    * `moe.router_topk` -> `moe.router_topk_grad` (the ids are not
      differentiable; the selection bias only selects);
    * `linalg.matmul` (zero-filled accumulator) -> two `linalg.matmul`s.

    Ops with integer results (`moe.sort_by_expert`, `tensor.dim`, ...) and
    constants carry no gradient. A differentiable value reaching an op
    without a rule (FP8 quantization, bias, row scale, scatter or an
    activation fused into a grouped matmul, the backward ops themselves) is
    an error naming it: differentiate the unfused form; the fusion passes
    fuse both functions afterwards. Every `moe.sort_by_expert` of `@f_fwd`
    gets its `positions` result, which the gradient ops take. With `save`
    `matmuls` or `inputs` one fusion runs first, in `@f_fwd`: a
    `moe.permute` whose rows a grouped matmul reads becomes that matmul's
    `gather` (moe-fuse-permute's rewrite), so that neither function makes
    a permuted `[T*k, K]` copy of the tokens; the weight gradient reads
    them by slot too.

    `save` chooses what `@f_fwd` keeps for `@f_grad`: `all` (default) every
    value the gradient ops read; `matmuls` only the results of matmuls and
    routing, recomputing copies and element-wise ops (swiglu, a permute
    that no matmul reads; one that a matmul reads is fused, above) in the
    backward, as ScatterMoE does to save memory; `inputs` nothing, the
    backward recomputes the whole forward.

    `accumulate` (argument indices) makes the backward add each named
    argument's gradient to a gradient it is given, for gradient accumulation
    over micro-batches into an f32 main gradient (Megatron-style
    `main_grad`): `@f_grad` takes one more argument per index (in ascending
    order), after the gradients of the results, of the argument's shape with
    `f32` elements (`moe.name` `<argument name>_main_grad`, else
    `main_grad<index>`), and returns `main_grad + gradient` in `f32` in that
    argument's place. The add is the weight gradient's epilogue
    (`moe.grouped_weight_grad ... accumulate(%main)`): each element is read
    before it is written, so a caller may pass the main gradient as that
    result's output buffer too and update it in place. An index whose
    gradient is not exactly one `moe.grouped_weight_grad` (the
    expert weights' gradients are; x's, the router's and LoRA adapters' are
    not) is an error, as is one that is not differentiated. `@f_grad`
    records the indices as `moe.accumulated`.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"\"",
           "The function to differentiate (empty: the module's only one)">,
    ListOption<"wrt", "wrt", "int64_t",
               "Indices of the arguments to differentiate with respect to">,
    Option<"save", "save", "std::string", /*default=*/"\"all\"",
           "What the forward keeps for the backward: all, matmuls or inputs">,
    ListOption<"accumulate", "accumulate", "int64_t",
               "Indices of differentiated arguments whose gradient the "
               "backward adds to an f32 gradient it is given">
  ];
  let dependentDialects = ["::moec::moe::MoeDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def MoeTilePass : Pass<"moe-tile"> {
  let summary = "Attaches a #moe.tile configuration to every moe op";
  let description = [{
    Gives every `moe` op without a `moe.tile` attribute the tile of the cost
    model `moec::moe::defaultTileFor` (include/moec/Dialect/Moe/Transforms/
    Tiling.h), which the lowering also uses for ops without the attribute.
    Ops that already carry a tile keep it.

    The model targets the first, simple kernels: one thread per output
    element of a tile.

    * `moe.grouped_matmul`, `moe.grouped_weight_grad`: `m = 16, n = 16,
      k = 32, threads = 256`; when the output is at most 8 columns wide,
      `n = 8, threads = 128`.
    * `moe.router_topk`, `moe.sort_by_expert`: one row per block, 128
      threads.
    * `moe.permute`, `moe.unpermute`, their gradients, `moe.swiglu`,
      `moe.swiglu_grad`, `moe.quantize`, `moe.dequantize`: one row per
      block, 256 threads; NF4 `moe.dequantize` (with a codebook): 128
      threads (measured 0.7 - 1.7 % faster on the H200).

    The options `m`, `n`, `k` and `threads` override the matmul tile (each
    one given replaces that field of the model's choice); a combination
    that is not a valid `#moe.tile` fails the pass with the verifier's
    message.

    The kernel choice itself (strategy, the sm90a kernel's plan, the
    autotuner's measured tiles) is `moe-select-kernel`'s; the compiler
    runs this pass only when tile options are given (they then take
    precedence over the tuning cache, as any tile written on an op).
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
  let options = [
    Option<"tileM", "m", "int64_t", /*default=*/"0",
           "Matmul tile rows (a power of two; 0: cost model)">,
    Option<"tileN", "n", "int64_t", /*default=*/"0",
           "Matmul tile columns (a power of two; 0: cost model)">,
    Option<"tileK", "k", "int64_t", /*default=*/"0",
           "Matmul reduction step (a power of two; 0: cost model)">,
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "Matmul threads per block (a multiple of 32 in [32, 1024]; 0: "
           "cost model)">
  ];
}

#endif // MOEC_DIALECT_MOE_TRANSFORMS_PASSES_TD
