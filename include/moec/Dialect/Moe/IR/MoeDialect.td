//===- MoeDialect.td - The moe dialect ---------------------*- tablegen -*-===//
//
// Part of moec. The `moe` dialect describes the pieces of a Mixture-of-Experts
// layer with tensor semantics.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEDIALECT_TD
#define MOEC_DIALECT_MOE_IR_MOEDIALECT_TD

include "mlir/IR/OpBase.td"

def Moe_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::moec::moe";
  let summary = "Mixture-of-Experts layers: routing, permutation, grouped "
                "matmul, activation and quantization";
  let description = [{
    The `moe` dialect describes the pieces of a Mixture-of-Experts (MoE) layer
    as operations on tensors: top-k routing, sorting token slots by expert,
    permuting token rows into expert groups and back, the grouped matmul of
    each expert group with that expert's weights, the SwiGLU activation, and
    FP8 / NF4 quantization.

    Conventions shared by every op:

    * `T` is the number of tokens, `E` the number of experts, `k` the number
      of experts each token is routed to, `H` the hidden size.
    * A *slot* is the flat index `t * k + j` of the `j`-th expert choice of
      token `t` (a position in the `[T, k]` routing tensors). The slot `-1`
      marks a padding row.
    * Ragged expert groups are given by an `offsets` operand of type
      `tensor<Exi32>`: `offsets[e]` is the end (exclusive) of expert `e`'s
      rows, so group `e` spans `[offsets[e-1], offsets[e])` with
      `offsets[-1] = 0`. This is the convention of `torch._grouped_mm`.
      Kernels read the offsets on the device; no host synchronization on
      per-expert token counts is ever needed.
    * `T` may be dynamic (`?`); `E`, `k`, `H` and weight shapes are static in
      practice, and verifiers check every size that is known.
    * Matmul-like ops accumulate in f32 whatever their element types.
    * Limits: every attribute or static size that sizes generated code, a
      table or a buffer is bounded, and the verifiers reject larger values
      with a message naming the limit: `1 <= k <= 64` (the kernels unroll
      their per-token loops over k), `1 <= E <= 65536` (the length of
      `offsets`, `num_experts`, the router's logits columns; one table entry
      per expert), and counts (`num_groups`, `topk_groups`, `group_size`,
      `scale_group`) positive and within i32. `#moe.tile` states its own
      bounds. A `tensor.dim` that `convert-moe-to-kernels` reads needs a
      constant index below the tensor's rank (a diagnostic otherwise).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasCanonicalizer = 0;
  // Checks discardable `moe.*` attributes (`moe.tile` must be a TileAttr).
  let hasOperationAttrVerify = 1;
}

class Moe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Moe_Dialect, mnemonic, traits>;

#endif // MOEC_DIALECT_MOE_IR_MOEDIALECT_TD
