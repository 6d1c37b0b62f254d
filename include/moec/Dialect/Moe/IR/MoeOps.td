//===- MoeOps.td - Operations of the moe dialect -----------*- tablegen -*-===//
//
// Part of moec. Every op has tensor semantics and a C++ verifier whose
// diagnostics name the offending operand, result or attribute.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEOPS_TD
#define MOEC_DIALECT_MOE_IR_MOEOPS_TD

include "moec/Dialect/Moe/IR/MoeDialect.td"
include "moec/Dialect/Moe/IR/MoeAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

def Moe_RouterTopKOp : Moe_Op<"router_topk", [Pure]> {
  let summary = "Scores router logits and selects the top-k experts per token";
  let description = [{
    Turns router logits `[T, E]` into, for each token, the `k` selected expert
    ids `[T, k]` (i32) and their routing weights `[T, k]` (f32). Ids of one
    token are ordered by decreasing selection value (below); ties go to the
    lower expert id.

    * `scoring = softmax` (default): `s = softmax(logits)` over the experts.
      `scoring = sigmoid`: `s = sigmoid(logits)` element-wise.
    * `order = softmax_then_topk` (default): weights are the selected scores.
      `order = topk_then_softmax` (Mixtral): experts are selected on the raw
      logits, and the weights are the softmax of the k selected logits
      (requires `scoring = softmax`).
    * Selection runs on *selection values*: the scores (`softmax_then_topk`)
      or the logits (`topk_then_softmax`), plus `bias` when given.
    * `renormalize`: divide each token's k weights by their sum (Qwen3
      `norm_topk_prob`, DeepSeek-V3).
    * `bias(%b : tensor<Exf32>)`: a per-expert bias added to the selection
      values only; weights still come from the unbiased scores (DeepSeek-V3
      `e_score_correction_bias`).
    * `num_groups` / `topk_groups`: group-limited routing (DeepSeek-V3). The
      E experts form `num_groups` equal groups; a group's value is the sum of
      its two best selection values (its best when a group holds a single
      expert); only experts of the `topk_groups` best groups (ties: lower
      group) may be selected.
    * `scaling_factor`: multiplies the final weights (finite, positive;
      default 1.0; DeepSeek-V3 `routed_scaling_factor`).

    Example:

    ```mlir
    %weights, %ids = moe.router_topk %logits k = 8 {renormalize}
        : tensor<?x128xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= min(E, 64)`
    and `E <= 65536` (the logits' columns).
  }];
  let arguments = (ins
    AnyTensor:$logits,
    Optional<AnyTensor>:$selection_bias,
    I64Attr:$k,
    DefaultValuedAttr<Moe_ScoringAttr, "::moec::moe::Scoring::softmax">:$scoring,
    DefaultValuedAttr<Moe_TopKOrderAttr,
                      "::moec::moe::TopKOrder::softmax_then_topk">:$order,
    UnitAttr:$renormalize,
    OptionalAttr<I64Attr>:$num_groups,
    OptionalAttr<I64Attr>:$topk_groups,
    DefaultValuedAttr<F32Attr, "1.0f">:$scaling_factor
  );
  let results = (outs AnyTensor:$weights, AnyTensor:$ids);
  let builders = [
    // Default scoring (softmax, then top-k, no renormalization); results
    // typed [T, k] f32 and [T, k] i32 from the logits.
    OpBuilder<(ins "::mlir::Value":$logits, "int64_t":$k), [{
      // An unranked or rank-0 `logits` gets a dynamic token count here and
      // a diagnostic from the verifier.
      int64_t tokens = ::mlir::ShapedType::kDynamic;
      if (auto ranked = ::llvm::dyn_cast<::mlir::RankedTensorType>(logits.getType()))
        if (ranked.getRank() >= 1)
          tokens = ranked.getDimSize(0);
      ::llvm::SmallVector<int64_t> shape = {tokens, k};
      build($_builder, $_state,
            ::mlir::RankedTensorType::get(shape, $_builder.getF32Type()),
            ::mlir::RankedTensorType::get(shape, $_builder.getI32Type()),
            logits, /*selection_bias=*/::mlir::Value(),
            $_builder.getI64IntegerAttr(k), /*scoring=*/nullptr,
            /*order=*/nullptr, /*renormalize=*/nullptr,
            /*num_groups=*/nullptr, /*topk_groups=*/nullptr,
            /*scaling_factor=*/nullptr);
    }]>
  ];
  let assemblyFormat = [{
    $logits (`bias` `(` $selection_bias^ `:` type($selection_bias) `)`)?
    `k` `=` $k attr-dict `:` type($logits) `->` type($weights) `,` type($ids)
  }];
  let hasVerifier = 1;
  let hasCanonicalizeMethod = 1;
}

def Moe_RouterTopKGradOp : Moe_Op<"router_topk_grad", [Pure]> {
  let summary = "Gradient of moe.router_topk's weights with respect to its logits";
  let description = [{
    The backward of `moe.router_topk`: given the forward's `logits` `[T, E]`,
    the experts it selected `ids` `[T, k]` (i32) and the gradient of its
    routing weights `grad_weights` `[T, k]` (f32), returns the gradient of
    the logits `[T, E]` (bf16, f16 or f32; computed in f32 and rounded once).
    Selection is not differentiable: the ids are taken as given, so the
    selection bias and group-limited routing do not enter; `scoring`,
    `order`, `renormalize` and `scaling_factor` must be the forward's.

    With `c = scaling_factor` and, per token, the selected values
    `p_j = s[ids[j]]` (`s` the softmax or sigmoid scores; for
    `topk_then_softmax`, the softmax of the k selected logits), the forward
    weights are `w_j = c * p_j / Z` with `Z = sum_j p_j` under `renormalize`
    and 1 otherwise. So `dp_j = c * (dw_j - sum_i dw_i * w_i / c) / Z`
    (without the sum when not renormalizing), and then

    * `softmax_then_topk`, softmax scores:
      `dlogits[e] = s[e] * (dp[e] - sum_j dp_j * p_j)` where `dp[e]` is
      `dp_j` for `e = ids[j]` and 0 for experts not selected;
    * sigmoid scores: `dlogits[e] = dp[e] * s[e] * (1 - s[e])`;
    * `topk_then_softmax`: `dlogits[ids[j]] = p_j * (dp_j - sum_i dp_i * p_i)`,
      0 for experts not selected.

    Example:

    ```mlir
    %dlogits = moe.router_topk_grad %logits, %ids, %dweights {renormalize}
        : tensor<?x128xf32>, tensor<?x8xi32>, tensor<?x8xf32>
        -> tensor<?x128xbf16>
    ```

    Limits (verified; see the dialect's conventions): as `moe.router_topk`:
    `1 <= k <= min(E, 64)`, `E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$logits,
    AnyTensor:$ids,
    AnyTensor:$grad_weights,
    DefaultValuedAttr<Moe_ScoringAttr, "::moec::moe::Scoring::softmax">:$scoring,
    DefaultValuedAttr<Moe_TopKOrderAttr,
                      "::moec::moe::TopKOrder::softmax_then_topk">:$order,
    UnitAttr:$renormalize,
    DefaultValuedAttr<F32Attr, "1.0f">:$scaling_factor
  );
  let results = (outs AnyTensor:$grad_logits);
  let assemblyFormat = [{
    $logits `,` $ids `,` $grad_weights attr-dict `:` type($logits) `,`
    type($ids) `,` type($grad_weights) `->` type($grad_logits)
  }];
  let hasVerifier = 1;
}

def Moe_SortByExpertOp : Moe_Op<"sort_by_expert", [Pure]> {
  let summary = "Orders token slots by expert and computes group offsets";
  let description = [{
    Takes the expert ids `[T, k]` chosen by the router (`1 <= k <=
    num_experts`, k static) and returns, for the
    `T*k` slots sorted by expert (stable: equal experts keep slot order):

    * `sorted_expert_ids` `[M]` (i32): the expert of each sorted row;
    * `slots` `[M]` (i32): the slot (`t * k + j`) each sorted row came from;
    * `offsets` `[E]` (i32): cumulative row counts per expert (group ends).

    Without `align`, `M = T*k` and every row is a real slot. With
    `align = a` (a power of two, as FP8 grouped GEMMs need), every group is
    padded up to a multiple of `a` rows: `offsets` are the padded offsets,
    padding rows have slot `-1` and the expert id of their group, and `M` is
    the capacity `T*k + E*(a-1)`; rows at or past `offsets[E-1]` have slot
    `-1` and expert id `-1`. Ids outside `[0, E)` are undefined behaviour at
    run time (the runtime validates them where it can).

    An optional fourth result, `positions` `[T*k]` (i32), is the inverse of
    `slots`: the row of each slot (`slots[positions[s]] == s`). The kernels
    that work in token order (`moe.permute`, `moe.unpermute` and their
    gradients) need this map; given it as their `positions` operand they do
    not rebuild it. `moe-share-positions` adds it where such a kernel
    consumes the `slots` of this op; it costs one coalesced store per slot.

    Example:

    ```mlir
    %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128 align = 16
        : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
    ```

    Limits (verified; see the dialect's conventions): `num_experts <=
    65536`; `k`, the columns of `ids`, in `[1, min(num_experts, 64)]`.
  }];
  let arguments = (ins
    AnyTensor:$ids,
    I64Attr:$num_experts,
    OptionalAttr<I64Attr>:$align
  );
  let results = (outs AnyTensor:$sorted_expert_ids, AnyTensor:$slots,
                      AnyTensor:$offsets, Optional<AnyTensor>:$positions);
  let assemblyFormat = [{
    $ids `experts` `=` $num_experts (`align` `=` $align^)? attr-dict
    `:` type($ids) `->` type($sorted_expert_ids) `,` type($slots) `,`
    type($offsets) (`,` type($positions)^)?
  }];
  let hasVerifier = 1;
  let hasCanonicalizeMethod = 1;
}

//===----------------------------------------------------------------------===//
// Permutation
//===----------------------------------------------------------------------===//

def Moe_PermuteOp : Moe_Op<"permute", [Pure, AttrSizedOperandSegments,
                                       AttrSizedResultSegments]> {
  let summary = "Gathers token rows into expert-grouped order";
  let description = [{
    `rows[i] = tokens[slots[i] / k]` for every row `i` with `slots[i] >= 0`;
    rows with slot `-1` (alignment padding) and rows at or past
    `offsets[E-1]` are zero. `tokens` may be of any element type, FP8
    included.

    Optional passengers travel with the rows:

    * `probs(%w : tensor<Txkxf32> -> tensor<Mxf32>)`: the routing weight of
      each row's slot, `permuted_probs[i] = w[slots[i] / k, slots[i] % k]`
      (0 for padding rows).
    * `scales(%s : tensor<TxGxf32> -> tensor<MxGxf32>)`: per-token
      quantization scales, `permuted_scales[i] = s[slots[i] / k]` (0 for
      padding rows).
    * `positions(%p : tensor<Sxi32>)`: the row of each of the `S = T*k`
      slots, the `positions` result of the `moe.sort_by_expert` that made
      `slots`. With it the op reads the map instead of building it (two
      launches fewer, three when `M = T*k`: no padding rows to zero); it must be that inverse of `slots`, with every slot
      placed.

    Example:

    ```mlir
    %rows, %probs = moe.permute %x, %slots, %offsets k = 8
        probs(%weights : tensor<?x8xf32> -> tensor<?xf32>)
        : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32>
        -> tensor<?x2048xbf16>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64`;
    `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$tokens,
    AnyTensor:$slots,
    AnyTensor:$offsets,
    Optional<AnyTensor>:$probs,
    Optional<AnyTensor>:$scales,
    I64Attr:$k,
    Optional<AnyTensor>:$positions
  );
  let results = (outs AnyTensor:$rows, Optional<AnyTensor>:$permuted_probs,
                      Optional<AnyTensor>:$permuted_scales);
  let assemblyFormat = [{
    $tokens `,` $slots `,` $offsets `k` `=` $k
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    (`probs` `(` $probs^ `:` type($probs) `->` type($permuted_probs) `)`)?
    (`scales` `(` $scales^ `:` type($scales) `->` type($permuted_scales) `)`)?
    attr-dict `:` type($tokens) `,` type($slots) `,` type($offsets) `->`
    type($rows)
  }];
  let hasVerifier = 1;
}

def Moe_PermuteProbsOp : Moe_Op<"permute_probs", [Pure]> {
  let summary = "The routing weight of each expert-grouped row";
  let description = [{
    `out[i] = scale * probs[slots[i] / k, slots[i] % k]` for every row `i`
    with `slots[i] >= 0` before `offsets[E-1]`; padding rows and rows at or
    past `offsets[E-1]` are 0. This is `moe.permute`'s `probs` passenger
    without the rows, times a constant (default 1.0).

    `moe-fuse-permute` makes it when it fuses `moe.unpermute_grad` into the
    grouped matmuls that read the row gradients: they gather `grad_out` by
    slot and take these weights as their `row_scale`.

    Example:

    ```mlir
    %w_rows = moe.permute_probs %w, %slots, %offsets k = 8
        : tensor<?x8xf32>, tensor<?xi32>, tensor<128xi32> -> tensor<?xf32>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64`;
    `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$probs,
    AnyTensor:$slots,
    AnyTensor:$offsets,
    I64Attr:$k,
    DefaultValuedAttr<F32Attr, "1.0f">:$scale
  );
  let results = (outs AnyTensor:$out);
  let assemblyFormat = [{
    $probs `,` $slots `,` $offsets `k` `=` $k attr-dict `:` type($probs) `,`
    type($slots) `,` type($offsets) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Moe_UnpermuteOp : Moe_Op<"unpermute", [Pure, AttrSizedOperandSegments]> {
  let summary = "Scatters grouped rows back to token order and combines them";
  let description = [{
    The inverse of `moe.permute` followed by the combine of an MoE layer:

    `out[t] = sum_j w[t, j] * rows[pos(t * k + j)]`

    where `pos(s)` is the row whose slot is `s`. Padding rows (slot `-1`) are
    dropped. Without `weights` every weight is 1 (for when the weights were
    already applied, e.g. by a grouped matmul's `row_scale`). Sums are
    accumulated in f32 and rounded once to the result element type. `rows`
    and the result are bf16, f16 or f32.

    * `positions(%p : tensor<Sxi32>)`: the row of each of the `S = T*k`
      slots, the `positions` result of the `moe.sort_by_expert` that made
      `slots`. With it the op reads the map instead of building it (two
      launches fewer); it must be that inverse of `slots`, with every slot
      placed.

    Example:

    ```mlir
    %y = moe.unpermute %rows, %slots, %offsets k = 8
        weights(%weights : tensor<?x8xf32>)
        : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32>
        -> tensor<?x2048xbf16>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64`;
    `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$rows,
    AnyTensor:$slots,
    AnyTensor:$offsets,
    Optional<AnyTensor>:$weights,
    I64Attr:$k,
    Optional<AnyTensor>:$positions
  );
  let results = (outs AnyTensor:$out);
  let assemblyFormat = [{
    $rows `,` $slots `,` $offsets `k` `=` $k
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    (`weights` `(` $weights^ `:` type($weights) `)`)?
    attr-dict `:` type($rows) `,` type($slots) `,` type($offsets) `->`
    type($out)
  }];
  let hasVerifier = 1;
}

def Moe_PermuteGradOp : Moe_Op<"permute_grad",
                                [Pure, AttrSizedOperandSegments]> {
  let summary = "Gradient of moe.permute: grouped row gradients back to tokens";
  let description = [{
    The backward of `moe.permute`: each token's gradient is the sum of the
    gradients of the k rows it was copied to,

    `grad_tokens[t] = sum_j grad_rows[pos(t * k + j)]`

    where `pos(s)` is the row whose slot is `s`. Padding rows (slot `-1`)
    and rows at or past `offsets[E-1]` are ignored; a slot without a row
    adds nothing. Sums are accumulated in f32 and rounded once to the result
    element type (this is `moe.unpermute` without weights). `grad_rows` and
    `grad_tokens` are bf16, f16 or f32.

    * `probs(%g : tensor<Mxf32> -> tensor<Txkxf32>)`: the gradient of
      permute's `permuted_probs`, routed back to the routing weights:
      `grad_probs[t, j] = g[pos(t * k + j)]` (0 for a slot without a row).
    * `positions(%p : tensor<Sxi32>)`: the row of each of the `S = T*k`
      slots, the `positions` result of the `moe.sort_by_expert` that made
      `slots`. With it the op reads the map instead of building it (two
      launches fewer); it must be that inverse of `slots`, with every slot
      placed.

    Example:

    ```mlir
    %dx, %dw = moe.permute_grad %drows, %slots, %offsets k = 8
        probs(%dprobs : tensor<?xf32> -> tensor<?x8xf32>)
        : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32>
        -> tensor<?x2048xbf16>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64`;
    `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$grad_rows,
    AnyTensor:$slots,
    AnyTensor:$offsets,
    Optional<AnyTensor>:$grad_permuted_probs,
    I64Attr:$k,
    Optional<AnyTensor>:$positions
  );
  let results = (outs AnyTensor:$grad_tokens, Optional<AnyTensor>:$grad_probs);
  let assemblyFormat = [{
    $grad_rows `,` $slots `,` $offsets `k` `=` $k
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    (`probs` `(` $grad_permuted_probs^ `:` type($grad_permuted_probs) `->`
     type($grad_probs) `)`)?
    attr-dict `:` type($grad_rows) `,` type($slots) `,` type($offsets) `->`
    type($grad_tokens)
  }];
  let hasVerifier = 1;
}

def Moe_UnpermuteGradOp : Moe_Op<"unpermute_grad",
                                 [Pure, AttrSizedOperandSegments,
                                  AttrSizedResultSegments]> {
  let summary = "Gradient of moe.unpermute: token gradients to grouped rows";
  let description = [{
    The backward of `moe.unpermute`: every grouped row receives the gradient
    of the token it was combined into, times its routing weight,

    `grad_rows[i] = w[s / k, s % k] * grad_out[s / k]` with `s = slots[i]`

    for each row `i` with `slots[i] >= 0` before `offsets[E-1]`; padding rows
    and rows at or past `offsets[E-1]` are zero. Without `weights` every
    weight is 1 (the forward summed the rows as they were). Products are
    computed in f32 and rounded once to the result element type. `grad_out`
    and `grad_rows` are bf16, f16 or f32.

    * `weights(%w, %rows : tensor<Txkxf32>, tensor<MxHx...> ->
      tensor<Txkxf32>)`: the forward's routing weights and its input rows.
      The weights scale the row gradients as above, and the gradient of the
      weights is returned:
      `grad_weights[t, j] = sum_c grad_out[t, c] * rows[pos(t * k + j), c]`,
      accumulated in f32 (0 for a slot without a row), where `pos(s)` is the
      row whose slot is `s`.
    * `positions(%p : tensor<Sxi32>)`: the row of each of the `S = T*k`
      slots, the `positions` result of the `moe.sort_by_expert` that made
      `slots`. With it the op reads the map instead of building it (two
      launches fewer); it must be that inverse of `slots`, with every slot
      placed.
    * Without the `-> type` of `grad_rows` at the end, the op computes
      `grad_weights` only (then `weights` is required): the form
      `moe-fuse-permute` leaves when the matmuls that read the row gradients
      gather `grad_out` themselves.

    Example:

    ```mlir
    %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 8
        weights(%w, %rows : tensor<?x8xf32>, tensor<?x2048xbf16>
                -> tensor<?x8xf32>)
        : tensor<?x2048xbf16>, tensor<?xi32>, tensor<128xi32>
        -> tensor<?x2048xbf16>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64`;
    `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$grad_out,
    AnyTensor:$slots,
    AnyTensor:$offsets,
    Optional<AnyTensor>:$weights,
    Optional<AnyTensor>:$rows,
    I64Attr:$k,
    Optional<AnyTensor>:$positions
  );
  let results = (outs Optional<AnyTensor>:$grad_rows,
                      Optional<AnyTensor>:$grad_weights);
  let assemblyFormat = [{
    $grad_out `,` $slots `,` $offsets `k` `=` $k
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    (`weights` `(` $weights^ `,` $rows `:` type($weights) `,` type($rows)
     `->` type($grad_weights) `)`)?
    attr-dict `:` type($grad_out) `,` type($slots) `,` type($offsets)
    (`->` type($grad_rows)^)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Grouped matmul
//===----------------------------------------------------------------------===//

def Moe_GroupedMatmulOp : Moe_Op<"grouped_matmul",
                                 [Pure, AttrSizedOperandSegments]> {
  let summary = "Multiplies each expert's group of rows by that expert's weights";
  let description = [{
    For every row `i` of expert group `e` (`offsets[e-1] <= i < offsets[e]`),
    with `x_i` its lhs row:

    `y_i = x_i · W_e + bias[e] + lora_scaling * (x_i · A_eᵀ) · B_eᵀ`

    * `lhs` is `[M, K]`, rows already grouped; or, with
      `gather(%slots : tensor<Mxi32>)` and `k`, `lhs` is the token matrix
      `[T, K]` and row `i` is `lhs[slots[i] / k]` (zero for slot `-1`): the
      permute fused into the matmul's prologue.
    * `rhs` is `[E, K, N]`; with `transpose_rhs` it is `[E, N, K]` (the
      `nn.Linear` layout of most checkpoints); with `experts_in_columns` it
      is `[K, E, N]`: the experts' `[K, N]` matrices side by side in the
      columns of `[K, E*N]`, as in a LoRA B adapter `[N, E*r]` reshaped to
      `[N, E, r]` (no FP8 scales or `transpose_rhs` then).
    * `bias(%b : tensor<ExNx..>)`: per-expert bias.
    * `lora(%A, %B : tensor<(E*r)xKx..>, tensor<Nx(E*r)x..>)`: a rank-`r` LoRA
      adapter per expert; `A_e = A[e*r : (e+1)*r, :]` and
      `B_e = B[:, e*r : (e+1)*r]`, scaled by `lora_scaling` (default 1.0).
      With `transpose_lora` the adapter is applied transposed, as in the
      input gradient of a LoRA matmul: the term is
      `lora_scaling * (x_i · B_e) · A_e` with `A` `[E*r, N]` and `B`
      `[K, E*r]` (the forward's adapters, passed unchanged).
    * `activation = swiglu`: the epilogue applies `moe.swiglu` (halves
      layout) to each row, so `N` must be even and the output is `N/2` wide.
    * `activation = swiglu_grad` with `activation_input(%h : tensor<Mx2Nx..>)`:
      the epilogue applies `moe.swiglu_grad %h, y` (halves layout): `y` is
      the output gradient of a SwiGLU whose input was `%h`, and the output
      is `[M, 2N]`, the gradient of `%h` (the down projection's input
      gradient fused with SwiGLU's backward, so that `y` is never written).
      No scatter.
    * `row_scale(%s : tensor<Mxf32>)`: multiplies output row `i` by `s[i]`
      (after the activation; `swiglu_grad` is linear in `y`, so there the
      order does not matter), e.g. the routing weights from `moe.permute`.
    * `scales(%sx, %sw : tensor<Lx..xf32>, tensor<Ex..x..xf32>)`: required
      when `lhs` and `rhs` are FP8 (and rejected otherwise). Blocks of
      `scale_group` (default 128) along each dimension: `%sx` is
      `[L, ceil(K/g)]` for the `L` rows of `lhs` as given (tokens when
      gathered), the layout `moe.quantize` produces; `%sw` is
      `[E, ceil(K/g), ceil(N/g)]`, or `[E, ceil(N/g), ceil(K/g)]` with
      `transpose_rhs` (DeepSeek-V3's 1x128 activation and 128x128 weight
      blocks). The product uses `lhs * sx` and `rhs * sw`, element-wise by
      block. On sm_90a the wgmma kernel takes FP8 with `scale_group = 128`
      and `transpose_rhs` (FP8 wgmma reads both operands K-major): the
      forward reads `[E, N, K]` weights as they are, and the input
      gradient `dx = dy · W_e` is the same op on a second FP8 copy of the
      weights in `[E, K, N]` layout (`rhs` = that copy with
      `transpose_rhs`, its scales `[E, ceil(K/g), ceil(N/g)]`). Groups,
      K and N need no padding (partial blocks are zero-filled); other FP8
      forms run a scalar kernel.
    * Output: grouped `[M, N']`; or, with `scatter(%slots : tensor<Mxi32>)`
      and `k`, combined in token order `[T, N']`:
      `out[t] = sum over rows i with slots[i] / k == t of w * y_i`, where `w`
      is `scatter_weights[t, slots[i] % k]` when
      `scatter_weights(%w : tensor<Txkxf32>)` is given and 1 otherwise
      (padding rows are dropped): the unpermute fused into the epilogue.
      `scatter_positions(%p : tensor<Sxi32>)` gives the row of each of the
      `S = T*k` slots (the `positions` result of the `moe.sort_by_expert`
      that made the slots), so that the combine does not rebuild that map;
      `moe-share-positions` adds it where the sort is in the same function.

    `lhs` and `rhs` share one element type (bf16, f16, f32, f8E4M3FN or
    f8E5M2); accumulation is f32; the result is bf16, f16 or f32. With
    `gather`, `slots` must hold all `T*k` slots of the `T` rows of `lhs`;
    with both `gather` and `scatter`, the result has those `T` rows.

    Example:

    ```mlir
    %h = moe.grouped_matmul %x, %w_gate_up, %offsets
        gather(%slots : tensor<?xi32>)
        {k = 8 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
        : tensor<?x2048xbf16>, tensor<128x1536x2048xbf16>, tensor<128xi32>
        -> tensor<?x768xbf16>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64` when
    given; `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$lhs,
    AnyTensor:$rhs,
    AnyTensor:$offsets,
    Optional<AnyTensor>:$gather_slots,
    Optional<AnyTensor>:$bias,
    Optional<AnyTensor>:$lora_a,
    Optional<AnyTensor>:$lora_b,
    Optional<AnyTensor>:$row_scale,
    Optional<AnyTensor>:$scatter_slots,
    Optional<AnyTensor>:$scatter_weights,
    Optional<AnyTensor>:$scatter_positions,
    Optional<AnyTensor>:$lhs_scales,
    Optional<AnyTensor>:$rhs_scales,
    Optional<AnyTensor>:$activation_input,
    UnitAttr:$transpose_rhs,
    OptionalAttr<I64Attr>:$k,
    DefaultValuedAttr<F32Attr, "1.0f">:$lora_scaling,
    DefaultValuedAttr<Moe_ActivationAttr, "::moec::moe::Activation::none">:$activation,
    DefaultValuedAttr<I64Attr, "128">:$scale_group,
    UnitAttr:$transpose_lora,
    UnitAttr:$experts_in_columns
  );
  let results = (outs AnyTensor:$out);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $offsets
    (`gather` `(` $gather_slots^ `:` type($gather_slots) `)`)?
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    (`lora` `(` $lora_a^ `,` $lora_b `:` type($lora_a) `,` type($lora_b) `)`)?
    (`row_scale` `(` $row_scale^ `:` type($row_scale) `)`)?
    (`scatter` `(` $scatter_slots^ `:` type($scatter_slots) `)`)?
    (`scatter_weights` `(` $scatter_weights^ `:` type($scatter_weights) `)`)?
    (`scatter_positions` `(` $scatter_positions^ `:` type($scatter_positions) `)`)?
    (`scales` `(` $lhs_scales^ `,` $rhs_scales `:` type($lhs_scales) `,`
                  type($rhs_scales) `)`)?
    (`activation_input` `(` $activation_input^ `:` type($activation_input) `)`)?
    attr-dict `:` type($lhs) `,` type($rhs) `,` type($offsets) `->` type($out)
  }];
  let hasVerifier = 1;
  let hasCanonicalizeMethod = 1;
}

def Moe_GroupedWeightGradOp : Moe_Op<"grouped_weight_grad",
                                     [Pure, AttrSizedOperandSegments]> {
  let summary = "The weight gradient of a grouped matmul: each expert's "
                "rows reduced into that expert's matrix";
  let description = [{
    For every expert `e`, with rows `i` of group `e` (`offsets[e-1] <= i <
    offsets[e]`), `x_i` the lhs row and `dy_i` the output gradient's row:

    `out[e] = sum over rows i of group e of x_iᵀ · dy_i`   (`[K, N]`)

    the gradient of the weights `W_e` of `y_i = x_i · W_e`
    (`moe.grouped_matmul`). An expert with no rows gets zeros.

    * `lhs` is `[M, K]`, rows already grouped; or, with
      `gather(%slots : tensor<Mxi32>)` and `k`, the token matrix `[T, K]`
      and row `i` is `lhs[slots[i] / k]` (zero for slot `-1`): the forward's
      gathered input read by slot, with no permuted copy of the tokens.
    * `grad_out` is the output gradient `[M, N]` in the same grouped row
      order.
    * The result is `[E, K, N]`; with `transpose_rhs` it is `[E, N, K]`
      (`out[e] = sum of dy_iᵀ · x_i`): the gradient of `transpose_rhs`
      weights in their own layout; with `experts_in_columns` it is
      `[K, E, N]` (`out[:, e, :]` is expert `e`'s matrix), which collapses
      to the `[K, E*N]` of a LoRA B adapter's gradient.
    * `accumulate(%g : ...)`, of the result's type: the result is
      `%g + out`, each sum accumulated in f32 first, then added to `%g`'s
      element and rounded once (gradient accumulation over micro-batches
      into an f32 main gradient without a separate add). An expert with no
      rows then gets `%g`.

    `lhs` and `grad_out` share one element type, bf16, f16 or f32;
    accumulation is f32; the result is bf16, f16 or f32. With `gather`,
    `slots` must hold all `T*k` slots of the `T` rows of `lhs`.

    **FP8** (`scales(%xs, %gs : ...)`): Hopper's FP8 wgmma reads both
    operands K-major only, and here the reduction runs over each expert's
    rows, so both operands come transposed, as `moe.quantize ... {axis =
    colwise, transpose}` with `group_size = 128` and these `offsets`
    writes them: `lhs` is `[K, P]` and `grad_out` `[N, P]` (f8E4M3FN or
    f8E5M2, each its own), expert `e`'s rows as columns from `128 *
    b_e` on, where `b_e` is the number of 128-row blocks of the experts
    before it (each expert's rows start at a block boundary, zero-padded
    to the next: the quantize's fused pad, so no permute `align` is
    needed); `xs` `[B, K]` and `gs` `[B, N]` (f32) hold one scale per
    128-row block and column, block `b_e + j` covering the expert's rows
    `128 j ..< 128 (j + 1)`, and `P = 128 * B`. Then

    `out[e] = sum over rows i of e of (lhs[:, p_i] * xs[b_i, :])ᵀ · (grad_out[:, p_i] * gs[b_i, :])`

    with each 128-row block's products accumulated, multiplied by its two
    scales and added in f32. `gather` and `experts_in_columns` are not
    taken with scales (quantize the permuted rows); `accumulate` and
    `transpose_rhs` are. The kernels trust that `P` and `B` hold the
    blocks of `offsets` and that the padding columns are 0 (both hold when
    the quantize got the same `offsets`): the wgmma kernel sums whole
    blocks.

    Example (the weight gradient of the example of `moe.grouped_matmul`,
    before its SwiGLU):

    ```mlir
    %dw = moe.grouped_weight_grad %x, %dh, %offsets
        gather(%slots : tensor<?xi32>) {k = 8 : i64, transpose_rhs}
        : tensor<?x2048xbf16>, tensor<?x1536xbf16>, tensor<128xi32>
        -> tensor<128x1536x2048xbf16>
    ```

    The same in FP8, from the permuted rows `%rows` (`[M, 2048]`) and the
    gradient `%dh` (`[M, 1536]`):

    ```mlir
    %xq, %xs = moe.quantize %rows offsets(%offsets : tensor<128xi32>)
        group_size = 128 {axis = #moe.axis<colwise>, transpose}
        : tensor<?x2048xbf16> -> tensor<2048x?xf8E4M3FN>, tensor<?x2048xf32>
    %dq, %ds = moe.quantize %dh offsets(%offsets : tensor<128xi32>)
        group_size = 128 {axis = #moe.axis<colwise>, transpose}
        : tensor<?x1536xbf16> -> tensor<1536x?xf8E5M2>, tensor<?x1536xf32>
    %dw = moe.grouped_weight_grad %xq, %dq, %offsets
        scales(%xs, %ds : tensor<?x2048xf32>, tensor<?x1536xf32>)
        {transpose_rhs}
        : tensor<2048x?xf8E4M3FN>, tensor<1536x?xf8E5M2>, tensor<128xi32>
        -> tensor<128x1536x2048xbf16>
    ```

    Limits (verified): `1 <= k <= 64` when given; `offsets` of static length
    `1 <= E <= 65536`; with scales, `P` a multiple of 128.
  }];
  let arguments = (ins
    AnyTensor:$lhs,
    AnyTensor:$grad_out,
    AnyTensor:$offsets,
    Optional<AnyTensor>:$gather_slots,
    Optional<AnyTensor>:$accumulate,
    Optional<AnyTensor>:$lhs_scales,
    Optional<AnyTensor>:$grad_scales,
    UnitAttr:$transpose_rhs,
    UnitAttr:$experts_in_columns,
    OptionalAttr<I64Attr>:$k
  );
  let results = (outs AnyTensor:$out);
  let assemblyFormat = [{
    $lhs `,` $grad_out `,` $offsets
    (`gather` `(` $gather_slots^ `:` type($gather_slots) `)`)?
    (`accumulate` `(` $accumulate^ `:` type($accumulate) `)`)?
    (`scales` `(` $lhs_scales^ `,` $grad_scales `:` type($lhs_scales) `,`
                  type($grad_scales) `)`)?
    attr-dict `:` type($lhs) `,` type($grad_out) `,` type($offsets) `->`
    type($out)
  }];
  let hasVerifier = 1;
}

def Moe_LoraGradOp : Moe_Op<"lora_grad", [Pure]> {
  let summary = "Gradients of the LoRA adapters of a grouped matmul";
  let description = [{
    The weight gradients of the adapter term
    `y_i += lora_scaling * (x_i · A_eᵀ) · B_eᵀ` of
    `moe.grouped_matmul ... lora(%A, %B)`. `lhs` is the forward's lhs,
    `[M, K]` grouped rows or, with `gather(%slots : tensor<Mxi32>)` and `k`,
    the token matrix read by slot as in the grouped matmul (zero rows for
    slot `-1`); `grad_out` `[M, N]` is the gradient of the forward's output
    in grouped row order; `lora_a` `[E*r, K]` and `lora_b` `[N, E*r]` are
    the forward's adapters. With `s = lora_scaling`, per row `i` of group
    `e`: `u_i = x_i · A_eᵀ` and `du_i = s * dy_i · B_e` (both `[r]`), and

    * `grad_a`: `dA_e = sum_i du_iᵀ · x_i`, `[E*r, K]` like `lora_a`;
    * `grad_b`: `dB_e = s * sum_i dy_iᵀ · u_i`, `[N, E*r]` like `lora_b`.

    An expert with no rows gets zeros. Sums are accumulated in f32 and
    rounded once to the result types (bf16, f16 or f32). `lhs` and
    `grad_out` share one element type (bf16, f16 or f32).

    Example (the adapters of a gathered gate_up projection):

    ```mlir
    %da, %db = moe.lora_grad %x, %dh, %offsets lora(%a, %b
        : tensor<2048x2048xbf16>, tensor<1536x2048xbf16>)
        gather(%slots : tensor<?xi32>) {k = 8 : i64, lora_scaling = 2.0 : f32}
        : tensor<?x2048xbf16>, tensor<?x1536xbf16>, tensor<128xi32>
        -> tensor<2048x2048xf32>, tensor<1536x2048xf32>
    ```

    Limits (verified; see the dialect's conventions): `1 <= k <= 64` when
    given; `offsets` of static length `1 <= E <= 65536`.
  }];
  let arguments = (ins
    AnyTensor:$lhs,
    AnyTensor:$grad_out,
    AnyTensor:$offsets,
    AnyTensor:$lora_a,
    AnyTensor:$lora_b,
    Optional<AnyTensor>:$gather_slots,
    OptionalAttr<I64Attr>:$k,
    DefaultValuedAttr<F32Attr, "1.0f">:$lora_scaling
  );
  let results = (outs AnyTensor:$grad_a, AnyTensor:$grad_b);
  let assemblyFormat = [{
    $lhs `,` $grad_out `,` $offsets
    `lora` `(` $lora_a `,` $lora_b `:` type($lora_a) `,` type($lora_b) `)`
    (`gather` `(` $gather_slots^ `:` type($gather_slots) `)`)?
    attr-dict `:` type($lhs) `,` type($grad_out) `,` type($offsets) `->`
    type($grad_a) `,` type($grad_b)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Activation
//===----------------------------------------------------------------------===//

def Moe_SwigluOp : Moe_Op<"swiglu", [Pure]> {
  let summary = "silu(gate) * up over rows holding gate and up values";
  let description = [{
    For an input row of width `2I` holding gate values `g` and up values `u`
    (see `layout`: `halves`, the default, puts `g` in columns `[0, I)` and
    `u` in `[I, 2I)`; `interleaved` puts `g` in even and `u` in odd
    columns), the output row of width `I` is `g * sigmoid(g) * u`, computed
    in f32.

    Example:

    ```mlir
    %a = moe.swiglu %h : tensor<?x1536xbf16> -> tensor<?x768xbf16>
    ```
  }];
  let arguments = (ins
    AnyTensor:$input,
    DefaultValuedAttr<Moe_GateUpLayoutAttr, "::moec::moe::GateUpLayout::halves">:$layout
  );
  let results = (outs AnyTensor:$output);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output)
  }];
  let hasVerifier = 1;
}

def Moe_SwigluGradOp : Moe_Op<"swiglu_grad", [Pure]> {
  let summary = "Gradient of moe.swiglu with respect to its input";
  let description = [{
    Given the forward input `[M, 2I]` (gate `g`, up `u`, same `layout` as
    `moe.swiglu`) and the gradient of the output `dy` `[M, I]`, returns the
    gradient of the input `[M, 2I]` in the same layout:

    `dg = dy * u * s * (1 + g * (1 - s))`, `du = dy * g * s`, with
    `s = sigmoid(g)`, computed in f32.

    Example:

    ```mlir
    %dh = moe.swiglu_grad %h, %da
        : tensor<?x1536xbf16>, tensor<?x768xbf16> -> tensor<?x1536xbf16>
    ```
  }];
  let arguments = (ins
    AnyTensor:$input,
    AnyTensor:$grad_output,
    DefaultValuedAttr<Moe_GateUpLayoutAttr, "::moec::moe::GateUpLayout::halves">:$layout
  );
  let results = (outs AnyTensor:$grad_input);
  let assemblyFormat = [{
    $input `,` $grad_output attr-dict `:` type($input) `,` type($grad_output)
    `->` type($grad_input)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

def Moe_QuantizeOp : Moe_Op<"quantize", [Pure, AttrSizedResultSegments]> {
  let summary = "Quantizes to FP8 with per-group scales";
  let description = [{
    Quantizes `input` `[M, K]` (bf16, f16 or f32) to `data` `[M, K]` of type
    `f8E4M3FN` or `f8E5M2` (the result type chooses), with one f32 scale per
    group so that `input ≈ data * scale`:

    `scale = amax(|group|) / fmax` (`fmax` = 448 for e4m3, 57344 for e5m2; a
    group of zeros gets scale 1), rounded up to a power of two with
    `pow2_scale`; `data = saturate(round_to_nearest_even(x / scale))`.

    * `axis = rowwise` (default): a group is `group_size` consecutive columns
      of one row; `scales` is `[M, ceil(K / group_size)]`.
    * `axis = colwise`, with `offsets(%o : tensor<Exi32>)`: a group is
      `group_size` consecutive rows of one column *inside one expert group*
      (a block never spans two experts; the last block of a group may be
      short). Expert `e`'s blocks follow those of experts `< e`, so
      `scales` is `[(M + min(E, M) * (group_size - 1)) / group_size, K]`, an upper
      bound on the block count; unused trailing rows are 1. Rows at or past
      `offsets[E-1]` belong to no group and quantize to 0.
    * `axis = colwise` with `transpose`: the same groups and `scales`, and
      `data` is written transposed and padded, `[K, group_size * B]` with
      `B` the scale rows above: row `i` of expert `e` (the `j`-th of its
      group) goes to column `group_size * b_e + j`, `b_e` being the blocks
      of the experts before `e`, so each expert starts at a block boundary
      and the columns up to the next expert's are 0. This is the layout the
      FP8 `moe.grouped_weight_grad` reads (its reduction, each expert's
      rows, contiguous: Hopper's FP8 wgmma takes K-major operands only).
    * `axis = blocks`: expert weights `[E, N, K]` (rank 3, no `offsets`); a
      group is a `group_size` x `group_size` block of one expert's `[N, K]`
      (the last ones along each dimension may be short), and `scales` is
      `[E, ceil(N / group_size), ceil(K / group_size)]`: DeepSeek-V3's
      128x128 weight blocks, the `scales` operand of an FP8
      `moe.grouped_matmul` with `transpose_rhs`.
    * `axis = blocks` with `transpose`: the same blocks, each expert's
      matrix written transposed, `data` `[E, K, N]` and `scales`
      `[E, ceil(K / group_size), ceil(N / group_size)]`: the K-major copy
      the FP8 input gradient `dy · W_e` reads (as its `[E, N', K']` weights
      with `transpose_rhs`), quantized from the same weights with the same
      scales.
    * `axis = blocks` with the results `transposed_data` and
      `transposed_scales` (both or neither; without `transpose`): both
      layouts from one read of the weights. `data` and `scales` are the
      plain form's, the two others the `transpose` form's, bit for bit
      (the same blocks and scales): the forward's and the input gradient's
      copies of one weight update.

    Example:

    ```mlir
    %q, %s = moe.quantize %x group_size = 128
        : tensor<?x2048xbf16> -> tensor<?x2048xf8E4M3FN>, tensor<?x16xf32>
    %wq, %ws = moe.quantize %w group_size = 128 {axis = #moe.axis<blocks>}
        : tensor<128x1536x2048xbf16> -> tensor<128x1536x2048xf8E4M3FN>,
          tensor<128x12x16xf32>
    %p, %ps, %t, %ts = moe.quantize %w group_size = 128
        {axis = #moe.axis<blocks>}
        : tensor<128x1536x2048xbf16> -> tensor<128x1536x2048xf8E4M3FN>,
          tensor<128x12x16xf32>, tensor<128x2048x1536xf8E4M3FN>,
          tensor<128x16x12xf32>
    ```
  }];
  let arguments = (ins
    AnyTensor:$input,
    Optional<AnyTensor>:$offsets,
    I64Attr:$group_size,
    DefaultValuedAttr<Moe_QuantAxisAttr, "::moec::moe::QuantAxis::rowwise">:$axis,
    UnitAttr:$pow2_scale,
    UnitAttr:$transpose
  );
  let results = (outs AnyTensor:$data, AnyTensor:$scales,
                      Optional<AnyTensor>:$transposed_data,
                      Optional<AnyTensor>:$transposed_scales);
  let assemblyFormat = [{
    $input (`offsets` `(` $offsets^ `:` type($offsets) `)`)?
    `group_size` `=` $group_size attr-dict `:` type($input) `->` type($data)
    `,` type($scales)
    (`,` type($transposed_data)^ `,` type($transposed_scales))?
  }];
  let extraClassDeclaration = [{
    /// Whether this quantize writes both weight layouts (the
    /// transposed_data / transposed_scales results).
    bool writesBothLayouts() { return getTransposedData() != nullptr; }
  }];
  let hasVerifier = 1;
}

def Moe_DequantizeOp : Moe_Op<"dequantize", [Pure, AttrSizedOperandSegments]> {
  let summary = "Dequantizes FP8 data with group scales, or NF4 expert weights";
  let description = [{
    Two formats, chosen by the element type of `data`:

    **FP8** (`data` is `f8E4M3FN` or `f8E5M2`, `[M, K]`): the inverse of
    `moe.quantize` with the same `group_size`, `axis` and (for `colwise`)
    `offsets`: `output = data * scale`, `output` `[M, K]` of bf16, f16 or
    f32.

    **NF4** (`data` is `ui8`): 4-bit expert weights packed two per byte.
    `data` is `[E, K, N/2]`; element `(e, r, c)` of the unpacked `[E, K, N]`
    is the high nibble of byte `(e, r, c/2)` for even `c` and the low nibble
    for odd `c`. The nibble indexes `codebook(%cb : tensor<16xf32>)` and is
    multiplied by the absmax of its block: blocks are `group_size`
    consecutive elements of one expert in row-major order, and `scales` is
    `[E, K*N / group_size]` (f32). With `experts(%ids : tensor<Sxi32>)` only
    those experts are dequantized, in that order, into `[S, K, N]`;
    otherwise the output is `[E, K, N]`.

    Example:

    ```mlir
    %w = moe.dequantize %packed, %absmax codebook(%nf4 : tensor<16xf32>)
        experts(%active : tensor<8xi32>) group_size = 64
        : tensor<128x2048x768xui8>, tensor<128x49152xf32>
        -> tensor<8x2048x1536xbf16>
    ```
  }];
  let arguments = (ins
    AnyTensor:$data,
    AnyTensor:$scales,
    Optional<AnyTensor>:$offsets,
    Optional<AnyTensor>:$codebook,
    Optional<AnyTensor>:$experts,
    I64Attr:$group_size,
    DefaultValuedAttr<Moe_QuantAxisAttr, "::moec::moe::QuantAxis::rowwise">:$axis
  );
  let results = (outs AnyTensor:$output);
  let assemblyFormat = [{
    $data `,` $scales
    (`offsets` `(` $offsets^ `:` type($offsets) `)`)?
    (`codebook` `(` $codebook^ `:` type($codebook) `)`)?
    (`experts` `(` $experts^ `:` type($experts) `)`)?
    `group_size` `=` $group_size attr-dict
    `:` type($data) `,` type($scales) `->` type($output)
  }];
  let hasVerifier = 1;
}

#endif // MOEC_DIALECT_MOE_IR_MOEOPS_TD
