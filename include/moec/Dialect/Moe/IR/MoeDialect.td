//===- MoeDialect.td - The moe dialect ---------------------*- tablegen -*-===//
//
// Part of moec. The `moe` dialect describes the pieces of a Mixture-of-Experts
// layer with tensor semantics.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEDIALECT_TD
#define MOEC_DIALECT_MOE_IR_MOEDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

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
  // Result sizes are reified with tensor.dim and arith index ops.
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
  // Checks discardable `moe.*` attributes (`moe.tile` must be a TileAttr).
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  // What convert-moe-to-kernels records on the host function it builds, for
  // the bundle writer (MoeLoweredAttrs.td). On the function: `entry` (the
  // entry's name), `num_buffers`, `symbols` (#moe.dim_symbol),
  // `ref_ops` (#moe.ref_op). On its arguments: `name` (a user's name for
  // an input), `dim_symbols` (each dimension's symbol, -1 when static),
  // `output` (a result's buffer) and `dims` (an output's sizes, #moe.size).
  // On scratch `memref.alloc`s: `buffer` (the buffer index) and `dims`. On
  // each `gpu.launch_func`: `launch`. On a kernel: `grid_constant_args`
  // (its TMA descriptors' parameter positions). And on a tensor function's
  // input, `sym`: the symbol name of its dynamic leading dimension.
  let discardableAttrs = (ins
    "::mlir::StringAttr":$entry,
    "::mlir::IntegerAttr":$num_buffers,
    "::mlir::ArrayAttr":$symbols,
    "::mlir::ArrayAttr":$ref_ops,
    "::mlir::StringAttr":$name,
    "::mlir::DenseI64ArrayAttr":$dim_symbols,
    "::mlir::UnitAttr":$output,
    "::mlir::ArrayAttr":$dims,
    "::mlir::IntegerAttr":$buffer,
    "::moec::moe::LaunchAttr":$launch,
    "::mlir::DenseI64ArrayAttr":$grid_constant_args,
    "::mlir::StringAttr":$sym
  );
}

// Every moe op says how its results' sizes follow from its operands'
// (ReifyRankedShapedTypeOpInterface, lib/Dialect/Moe/IR/MoeResultShapes.cpp):
// the one definition the lowering allocates buffers and records the bundle's
// sizes by, and the checker reads back from the bundle.
class Moe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Moe_Dialect, mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<ReifyRankedShapedTypeOpInterface,
                                   ["reifyResultShapes"]>])>;

#endif // MOEC_DIALECT_MOE_IR_MOEDIALECT_TD
