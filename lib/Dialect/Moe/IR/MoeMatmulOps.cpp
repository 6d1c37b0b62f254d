//===- MoeMatmulOps.cpp - The grouped matmul's verifier ---------------===//
//
// Part of moec. The verifiers of the matmul ops: moe.grouped_matmul (the
// most operand combinations of the dialect, checked one concern at a time:
// gather, weights, bias, LoRA, FP8 scales, epilogue, output),
// moe.grouped_weight_grad and moe.lora_grad. The other ops' are in
// MoeOps.cpp.
//
//===----------------------------------------------------------------------===//

#include "MoeVerifiers.h"

using namespace mlir;
using namespace moec;
using namespace moec::moe;
using namespace moec::moe::verifiers;

//===----------------------------------------------------------------------===//
// GroupedMatmulOp and GroupedWeightGradOp
//===----------------------------------------------------------------------===//

namespace {

/// The rows a grouped op reads, with its `gather` and `k`: the slots' count
/// when gathered (enough of them for the tokens of `lhs`), else the rows of
/// `lhs`. `scatterSlots` is the op's other slot operand, if it has one
/// (`slotOperands` names those it has, for the diagnostics).
FailureOr<int64_t> verifyGather(Operation *op, RankedTensorType lhsType,
                                Value gatherSlots, std::optional<int64_t> k,
                                Value scatterSlots, StringRef slotOperands) {
  // Slot-indexed gather / scatter need k to turn a slot into a token.
  bool usesSlots = gatherSlots || scatterSlots;
  if (usesSlots && !k)
    return op->emitOpError() << "attribute 'k' is required with "
                             << slotOperands << " (slot / k is the token)";
  if (!usesSlots && k)
    return op->emitOpError() << "attribute 'k' is only used with "
                             << slotOperands;
  if (k && failed(expectTopK(op, *k)))
    return failure();
  if (!gatherSlots)
    return lhsType.getDimSize(0);
  auto slotsType =
      expectTensor(op, "operand 'gather_slots'", gatherSlots, 1, isI32, kI32);
  if (failed(slotsType))
    return failure();
  int64_t rows = slotsType->getDimSize(0);
  if (failed(expectEnoughRows(op, "operand 'gather_slots'", rows,
                              lhsType.getDimSize(0), *k)))
    return failure();
  return rows;
}

/// The rows of a LoRA A operand, E * r: a static multiple of the experts
/// with r >= 1.
LogicalResult expectLoraRows(Operation *op, Value loraA, int64_t experts) {
  int64_t rows = cast<ShapedType>(loraA.getType()).getDimSize(0);
  if (ShapedType::isDynamic(rows) || rows == 0 || rows % experts != 0)
    return op->emitOpError()
           << "dimension 0 of operand 'lora_a' must be a static multiple of "
              "the number of experts ("
           << experts << ") with a rank r >= 1, got " << loraA.getType();
  return success();
}

/// What the grouped matmul's verifier helpers share: the op, its experts,
/// the lhs, the rows it reads (slots when gathered), the weights and the
/// product's reduction K and columns N.
struct MatmulShape {
  mutable GroupedMatmulOp op; // its accessors are not const
  RankedTensorType lhsType, rhsType;
  int64_t experts = 0, rows = 0, reduction = 0, cols = 0;
  Operation *raw() const { return op.getOperation(); }
};

/// The weights: [E, K, N], [E, N, K] (transpose_rhs) or [K, E, N]
/// (experts_in_columns), of the lhs's element type. Fills rhsType,
/// reduction and cols.
LogicalResult verifyWeights(MatmulShape &m) {
  GroupedMatmulOp op = m.op;
  bool inColumns = op.getExpertsInColumns();
  if (inColumns && op.getTransposeRhs())
    return op.emitOpError() << "attributes 'experts_in_columns' and "
                               "'transpose_rhs' cannot be combined ([K, E, N] "
                               "weights are not transposed)";
  if (inColumns && op.getLhsScales())
    return op.emitOpError() << "attribute 'experts_in_columns' is not "
                               "supported with FP8 block scales";
  auto rhsType = expectTensor(m.raw(), "operand 'rhs'", op.getRhs(), 3,
                              isMatmulInput, kMatmulInput);
  const char *rhsName = op.getTransposeRhs() ? "operand 'rhs' (transposed)"
                        : inColumns ? "operand 'rhs' (experts_in_columns)"
                                    : "operand 'rhs'";
  if (failed(rhsType) ||
      failed(expectSameElementType(m.raw(), "operand 'rhs'", *rhsType,
                                   "operand 'lhs'", m.lhsType)) ||
      failed(expectDim(m.raw(), rhsName, *rhsType, inColumns ? 1 : 0,
                       m.experts, "the number of experts")))
    return failure();
  unsigned kDim = op.getTransposeRhs() ? 2 : inColumns ? 0 : 1;
  unsigned nDim = op.getTransposeRhs() ? 1 : 2;
  m.rhsType = *rhsType;
  m.reduction = m.lhsType.getDimSize(1);
  m.cols = rhsType->getDimSize(nDim);
  return expectDim(m.raw(), rhsName, *rhsType, kDim, m.reduction,
                   "K, the columns of 'lhs'");
}

/// The per-expert bias [E, N].
LogicalResult verifyBias(const MatmulShape &m) {
  Value bias = m.op.getBias();
  if (!bias)
    return success();
  auto biasType =
      expectTensor(m.raw(), "operand 'bias'", bias, 2, isAnyFloat, kAnyFloat);
  return failure(
      failed(biasType) ||
      failed(expectDim(m.raw(), "operand 'bias'", *biasType, 0, m.experts,
                       "the number of experts")) ||
      failed(expectDim(m.raw(), "operand 'bias'", *biasType, 1, m.cols,
                       "N, the output columns of 'rhs'")));
}

/// The LoRA adapters: A [E*r, K] and B [N, E*r], or transposed (an input
/// gradient) A [E*r, N] and B [K, E*r]; `lora_scaling` and
/// `transpose_lora` only with them.
LogicalResult verifyLora(const MatmulShape &m) {
  GroupedMatmulOp op = m.op;
  if (!op.getLoraA() && op.getLoraScaling().convertToFloat() != 1.0f)
    return op.emitOpError() << "attribute 'lora_scaling' requires operands "
                               "'lora_a' and 'lora_b'";
  if (!op.getLoraA() && op.getTransposeLora())
    return op.emitOpError() << "attribute 'transpose_lora' requires operands "
                               "'lora_a' and 'lora_b'";
  if (bool(op.getLoraA()) != bool(op.getLoraB()))
    return op.emitOpError() << "operands 'lora_a' and 'lora_b' must be given "
                               "together";
  if (!op.getLoraA())
    return success();
  auto aType = expectTensor(m.raw(), "operand 'lora_a'", op.getLoraA(), 2,
                            isAnyFloat, kAnyFloat);
  auto bType = expectTensor(m.raw(), "operand 'lora_b'", op.getLoraB(), 2,
                            isAnyFloat, kAnyFloat);
  if (failed(aType) || failed(bType) ||
      failed(expectLoraRows(m.raw(), op.getLoraA(), m.experts)))
    return failure();
  // Transposed, A spans the output columns and B the reduction.
  bool flip = op.getTransposeLora();
  return failure(
      failed(expectDim(m.raw(), "operand 'lora_a'", *aType, 1,
                       flip ? m.cols : m.reduction,
                       flip ? "N, the output columns of 'rhs' "
                              "(transpose_lora)"
                            : "K, the columns of 'lhs'")) ||
      failed(expectDim(m.raw(), "operand 'lora_b'", *bType, 0,
                       flip ? m.reduction : m.cols,
                       flip ? "K, the columns of 'lhs' (transpose_lora)"
                            : "N, the output columns of 'rhs'")) ||
      failed(expectDim(m.raw(), "operand 'lora_b'", *bType, 1,
                       aType->getDimSize(0),
                       "dimension 0 of 'lora_a' (E * r)")));
}

/// FP8 operands carry block scales (`scales(...)`); others must not. The
/// layout of DeepSeek-V3: blocks of `scale_group` along each dimension,
/// lhs_scales [L, ceil(K/g)] for the L rows of lhs as given, rhs_scales
/// [E, ceil(K/g), ceil(N/g)] ([E, ceil(N/g), ceil(K/g)] transposed).
LogicalResult verifyScales(const MatmulShape &m) {
  GroupedMatmulOp op = m.op;
  Operation *raw = m.raw();
  if (bool(op.getLhsScales()) != bool(op.getRhsScales()))
    return op.emitOpError() << "operands 'lhs_scales' and 'rhs_scales' must "
                               "be given together";
  if (!isFP8(m.lhsType.getElementType())) {
    const char *reason = "is only used with FP8 'lhs' and 'rhs'";
    return failure(
        failed(rejectOperand(raw, op.getLhsScales(), "lhs_scales", reason)) ||
        failed(rejectOperand(raw, op.getRhsScales(), "rhs_scales", reason)));
  }
  if (!op.getLhsScales())
    return op.emitOpError() << "FP8 'lhs' and 'rhs' require block scales: "
                               "scales(%lhs_scales, %rhs_scales : ...)";
  int64_t group = op.getScaleGroup();
  if (failed(expectPositive(raw, "scale_group", group)))
    return failure();
  auto lhsScales = expectTensor(raw, "operand 'lhs_scales'", op.getLhsScales(),
                                2, isF32, kF32);
  auto rhsScales = expectTensor(raw, "operand 'rhs_scales'", op.getRhsScales(),
                                3, isF32, kF32);
  if (failed(lhsScales) || failed(rhsScales))
    return failure();
  int64_t kBlocks = ceilDiv(m.reduction, group);
  int64_t nBlocks = ceilDiv(m.cols, group);
  bool transposed = op.getTransposeRhs();
  return failure(
      failed(expectDim(raw, "operand 'lhs_scales'", *lhsScales, 0,
                       m.lhsType.getDimSize(0), "the rows of 'lhs'")) ||
      failed(expectDim(raw, "operand 'lhs_scales'", *lhsScales, 1, kBlocks,
                       "ceil(K / scale_group)")) ||
      failed(expectDim(raw, "operand 'rhs_scales'", *rhsScales, 0,
                       m.rhsType.getDimSize(0), "the number of experts")) ||
      failed(expectDim(raw, "operand 'rhs_scales'", *rhsScales,
                       transposed ? 2 : 1, kBlocks, "ceil(K / scale_group)")) ||
      failed(expectDim(raw, "operand 'rhs_scales'", *rhsScales,
                       transposed ? 1 : 2, nBlocks, "ceil(N / scale_group)")));
}

/// The epilogue's activation and row scale; returns the output's columns:
/// N, N / 2 (swiglu) or 2N (swiglu_grad, from its saved input [M, 2N]).
FailureOr<int64_t> verifyEpilogue(const MatmulShape &m) {
  GroupedMatmulOp op = m.op;
  Operation *raw = m.raw();
  int64_t outCols = m.cols;
  if (op.getActivation() == Activation::swiglu &&
      !ShapedType::isDynamic(m.cols)) {
    if (m.cols % 2 != 0)
      return op.emitOpError() << "activation = swiglu needs an even number "
                                 "of output columns in 'rhs', got "
                              << m.cols;
    outCols = m.cols / 2;
  }
  bool swigluGrad = op.getActivation() == Activation::swiglu_grad;
  if (bool(op.getActivationInput()) != swigluGrad)
    return op.emitOpError() << "operand 'activation_input' is given exactly "
                               "when activation = swiglu_grad (the saved "
                               "SwiGLU input)";
  if (swigluGrad) {
    if (op.getScatterSlots())
      return op.emitOpError() << "activation = swiglu_grad writes grouped "
                                 "rows: operand 'scatter_slots' is not "
                                 "supported";
    auto inputType = expectTensor(raw, "operand 'activation_input'",
                                  op.getActivationInput(), 2, isWideFloat,
                                  kWideFloat);
    if (failed(inputType))
      return failure();
    // With N dynamic, the input's width stands for 2N (the kernels take N
    // as half the output's width): it must be even, and the output as wide.
    int64_t inputCols = inputType->getDimSize(1);
    if (!ShapedType::isDynamic(inputCols) && inputCols % 2 != 0)
      return op.emitOpError() << "dimension 1 of operand 'activation_input' "
                                 "must be even (gate and up halves), got "
                              << inputCols;
    outCols = ShapedType::isDynamic(m.cols) ? inputCols : 2 * m.cols;
    if (failed(expectDim(raw, "operand 'activation_input'", *inputType, 0,
                         m.rows, "the number of grouped rows")) ||
        failed(expectDim(raw, "operand 'activation_input'", *inputType, 1,
                         outCols, "2 * N (gate and up halves)")))
      return failure();
  }
  if (Value rowScale = op.getRowScale()) {
    auto scaleType =
        expectTensor(raw, "operand 'row_scale'", rowScale, 1, isF32, kF32);
    if (failed(scaleType) ||
        failed(expectDim(raw, "operand 'row_scale'", *scaleType, 0, m.rows,
                         "the number of grouped rows")))
      return failure();
  }
  return outCols;
}

/// The output: grouped [M, N'] or, scattered, [T, N'] combined by slot with
/// the optional weights [T, k] and positions.
LogicalResult verifyOutput(const MatmulShape &m, int64_t outCols) {
  GroupedMatmulOp op = m.op;
  Operation *raw = m.raw();
  Activation activation = op.getActivation();
  auto outType =
      expectTensor(raw, "result 'out'", op.getOut(), 2, isWideFloat, kWideFloat);
  if (failed(outType) ||
      failed(expectDim(raw, "result 'out'", *outType, 1, outCols,
                       activation == Activation::swiglu
                           ? "N / 2 (swiglu halves the output columns)"
                       : activation == Activation::swiglu_grad
                           ? "2 * N (swiglu_grad writes gate and up halves)"
                           : "N, the output columns of 'rhs'")))
    return failure();
  if (op.getScatterWeights() && !op.getScatterSlots())
    return op.emitOpError() << "operand 'scatter_weights' requires operand "
                               "'scatter_slots'";
  if (op.getScatterPositions() && !op.getScatterSlots())
    return op.emitOpError() << "operand 'scatter_positions' requires operand "
                               "'scatter_slots'";
  Value slots = op.getScatterSlots();
  if (!slots)
    return expectDim(raw, "result 'out'", *outType, 0, m.rows,
                     "the number of grouped rows");
  int64_t k = *op.getK();
  auto slotsType =
      expectTensor(raw, "operand 'scatter_slots'", slots, 1, isI32, kI32);
  if (failed(slotsType) ||
      failed(expectDim(raw, "operand 'scatter_slots'", *slotsType, 0, m.rows,
                       "the number of grouped rows")))
    return failure();
  int64_t tokens = outType->getDimSize(0);
  if (failed(expectEnoughRows(raw, "operand 'scatter_slots'", m.rows, tokens,
                              k)) ||
      failed(expectPositions(raw, "operand 'scatter_positions'",
                             op.getScatterPositions(), tokens, k)))
    return failure();
  // Gather and scatter both read slot / k as a token of the same layer.
  if (op.getGatherSlots() &&
      failed(expectDim(raw, "result 'out'", *outType, 0,
                       m.lhsType.getDimSize(0),
                       "the tokens of the gathered 'lhs'")))
    return failure();
  Value weights = op.getScatterWeights();
  if (!weights)
    return success();
  auto weightsType =
      expectTensor(raw, "operand 'scatter_weights'", weights, 2, isF32, kF32);
  return failure(
      failed(weightsType) ||
      failed(expectDim(raw, "operand 'scatter_weights'", *weightsType, 0,
                       tokens, "the number of tokens of result 'out'")) ||
      failed(expectDim(raw, "operand 'scatter_weights'", *weightsType, 1, k,
                       "attribute 'k'")));
}

} // namespace

LogicalResult GroupedMatmulOp::verify() {
  Operation *op = getOperation();
  auto lhsType = expectTensor(op, "operand 'lhs'", getLhs(), 2, isMatmulInput,
                              kMatmulInput);
  if (failed(lhsType))
    return failure();
  auto experts = expectOffsets(op, getOffsets());
  if (failed(experts))
    return failure();
  FailureOr<int64_t> rows =
      verifyGather(op, *lhsType, getGatherSlots(), getK(), getScatterSlots(),
                   "'gather' or 'scatter'");
  if (failed(rows))
    return failure();
  MatmulShape m{*this, *lhsType, {}, *experts, *rows};
  if (failed(verifyWeights(m)) || failed(verifyBias(m)) ||
      failed(verifyLora(m)) || failed(verifyScales(m)))
    return failure();
  FailureOr<int64_t> outCols = verifyEpilogue(m);
  return failure(failed(outCols) || failed(verifyOutput(m, *outCols)));
}

namespace {

/// The FP8 weight gradient's operands (scales(...)): lhs [K, P] and
/// grad_out [N, P] of FP8, transposed by moe.quantize {transpose}, with
/// scales [B, K] and [B, N] of its 128-row blocks, P = 128 * B. Fills
/// the reduction's K (rows of lhs) and N (rows of grad_out).
LogicalResult verifyWeightGradScales(GroupedWeightGradOp op, int64_t &k,
                                     int64_t &n) {
  Operation *raw = op.getOperation();
  if (bool(op.getLhsScales()) != bool(op.getGradScales()))
    return op.emitOpError() << "operands 'lhs_scales' and 'grad_scales' must "
                               "be given together";
  const char *reason = "is not taken with FP8 scales (quantize the permuted "
                       "rows instead)";
  if (failed(rejectOperand(raw, op.getGatherSlots(), "gather_slots", reason)))
    return failure();
  if (op.getExpertsInColumns())
    return op.emitOpError() << "attribute 'experts_in_columns' is not "
                               "supported with FP8 scales";
  const char *fp8 = "f8E4M3FN or f8E5M2 values (FP8 with scales)";
  auto lhsType = expectTensor(raw, "operand 'lhs'", op.getLhs(), 2, isFP8, fp8);
  auto gradType =
      expectTensor(raw, "operand 'grad_out'", op.getGradOut(), 2, isFP8, fp8);
  auto lhsScales = expectTensor(raw, "operand 'lhs_scales'", op.getLhsScales(),
                                2, isF32, kF32);
  auto gradScales = expectTensor(raw, "operand 'grad_scales'",
                                 op.getGradScales(), 2, isF32, kF32);
  if (failed(lhsType) || failed(gradType) || failed(lhsScales) ||
      failed(gradScales))
    return failure();
  int64_t padded = lhsType->getDimSize(1);
  if (ShapedType::isDynamic(padded))
    padded = gradType->getDimSize(1);
  if (!ShapedType::isDynamic(padded) && padded % kFp8ScaleBlock != 0)
    return op.emitOpError()
           << "dimension 1 of operands 'lhs' and 'grad_out' (transposed FP8 "
              "rows) must be a multiple of "
           << kFp8ScaleBlock << " (moe.quantize {transpose} pads each expert "
                                "to its 128-row blocks), got "
           << padded;
  int64_t blocks =
      ShapedType::isDynamic(padded) ? lhsScales->getDimSize(0)
                                    : padded / kFp8ScaleBlock;
  k = lhsType->getDimSize(0);
  n = gradType->getDimSize(0);
  return failure(
      failed(expectDim(raw, "operand 'grad_out' (transposed)", *gradType, 1,
                       lhsType->getDimSize(1), "the padded rows of 'lhs'")) ||
      failed(expectDim(raw, "operand 'lhs_scales'", *lhsScales, 0, blocks,
                       "the 128-row blocks of 'lhs' (its columns / 128)")) ||
      failed(expectDim(raw, "operand 'lhs_scales'", *lhsScales, 1, k,
                       "K, the rows of 'lhs'")) ||
      failed(expectDim(raw, "operand 'grad_scales'", *gradScales, 0, blocks,
                       "the 128-row blocks of 'lhs' (its columns / 128)")) ||
      failed(expectDim(raw, "operand 'grad_scales'", *gradScales, 1, n,
                       "N, the rows of 'grad_out'")));
}

} // namespace

LogicalResult GroupedWeightGradOp::verify() {
  Operation *op = getOperation();
  auto experts = expectOffsets(op, getOffsets());
  if (failed(experts))
    return failure();
  if (getTransposeRhs() && getExpertsInColumns())
    return emitOpError() << "attributes 'experts_in_columns' and "
                            "'transpose_rhs' cannot be combined (the result "
                            "is [K, E, N] or [E, N, K])";
  // K and N of the result: the columns of lhs and grad_out, or with FP8
  // scales their rows (both transposed).
  int64_t k, n;
  if (getLhsScales() || getGradScales()) {
    if (failed(verifyWeightGradScales(*this, k, n)) ||
        failed(verifyGather(op, cast<RankedTensorType>(getLhs().getType()),
                            Value(), getK(), Value(), "'gather'")))
      return failure();
  } else {
    if (auto lhs = dyn_cast<RankedTensorType>(getLhs().getType());
        lhs && isFP8(lhs.getElementType()))
      return emitOpError() << "FP8 'lhs' and 'grad_out' require block scales "
                              "and the transposed layout of moe.quantize "
                              "{transpose}: scales(%lhs_scales, %grad_scales "
                              ": ...)";
    auto lhsType = expectTensor(op, "operand 'lhs'", getLhs(), 2, isWideFloat,
                                kWideFloat);
    if (failed(lhsType))
      return failure();
    FailureOr<int64_t> rows = verifyGather(op, *lhsType, getGatherSlots(),
                                           getK(), Value(), "'gather'");
    if (failed(rows))
      return failure();
    auto gradType = expectTensor(op, "operand 'grad_out'", getGradOut(), 2,
                                 isWideFloat, kWideFloat);
    if (failed(gradType) ||
        failed(expectSameElementType(op, "operand 'grad_out'", *gradType,
                                     "operand 'lhs'", *lhsType)) ||
        failed(expectDim(op, "operand 'grad_out'", *gradType, 0, *rows,
                         "the number of grouped rows")))
      return failure();
    k = lhsType->getDimSize(1);
    n = gradType->getDimSize(1);
  }
  auto outType =
      expectTensor(op, "result 'out'", getOut(), 3, isWideFloat, kWideFloat);
  // [E, K, N]; [K, E, N] with experts_in_columns; [E, N, K] with
  // transpose_rhs (the gradient of transposed weights).
  bool inColumns = getExpertsInColumns(), transposed = getTransposeRhs();
  bool scaled = bool(getLhsScales());
  const char *outName = inColumns    ? "result 'out' (experts_in_columns)"
                        : transposed ? "result 'out' (transpose_rhs)"
                                     : "result 'out'";
  if (failed(outType) ||
      failed(expectDim(op, outName, *outType, inColumns ? 1 : 0, *experts,
                       "the number of experts")) ||
      failed(expectDim(op, outName, *outType,
                       inColumns ? 0 : (transposed ? 2 : 1), k,
                       scaled ? "K, the rows of 'lhs'"
                              : "K, the columns of 'lhs'")) ||
      failed(expectDim(op, outName, *outType, transposed ? 1 : 2, n,
                       scaled ? "N, the rows of 'grad_out'"
                              : "N, the columns of 'grad_out'")))
    return failure();
  // The gradient accumulated into: the result's type exactly (its layout).
  if (Value accumulate = getAccumulate();
      accumulate && accumulate.getType() != getOut().getType())
    return emitOpError() << "operand 'accumulate' must have the type of "
                            "result 'out' ("
                         << getOut().getType() << "), got "
                         << accumulate.getType();
  return success();
}

LogicalResult GroupedMatmulOp::canonicalize(GroupedMatmulOp op,
                                            PatternRewriter &rewriter) {
  // A LoRA adapter scaled by zero contributes nothing: drop its operands.
  if (op.getLoraA() && op.getLoraScaling().isZero()) {
    rewriter.modifyOpInPlace(op, [&] {
      op.getLoraAMutable().clear();
      op.getLoraBMutable().clear();
      op.setLoraScaling(APFloat(1.0f));
    });
    return success();
  }
  return failure();
}

//===----------------------------------------------------------------------===//
// LoraGradOp
//===----------------------------------------------------------------------===//

LogicalResult LoraGradOp::verify() {
  Operation *op = getOperation();
  // One diagnostic: each check runs only when the ones before it passed.
  auto lhsType =
      expectTensor(op, "operand 'lhs'", getLhs(), 2, isWideFloat, kWideFloat);
  if (failed(lhsType))
    return failure();
  auto gradType = expectTensor(op, "operand 'grad_out'", getGradOut(), 2,
                               isWideFloat, kWideFloat);
  if (failed(gradType) ||
      failed(expectSameElementType(op, "operand 'grad_out'", *gradType,
                                   "operand 'lhs'", *lhsType)))
    return failure();
  auto numExperts = expectOffsets(op, getOffsets());
  if (failed(numExperts))
    return failure();
  auto aType = expectTensor(op, "operand 'lora_a'", getLoraA(), 2,
                            isWideFloat, kWideFloat);
  if (failed(aType))
    return failure();
  auto bType = expectTensor(op, "operand 'lora_b'", getLoraB(), 2,
                            isWideFloat, kWideFloat);
  if (failed(bType))
    return failure();

  if (bool(getGatherSlots()) != bool(getK()))
    return emitOpError() << "attribute 'k' and operand 'gather_slots' must be "
                            "given together (slot / k is the token)";
  int64_t rows = lhsType->getDimSize(0);
  if (Value slots = getGatherSlots()) {
    auto slotsType =
        expectTensor(op, "operand 'gather_slots'", slots, 1, isI32, kI32);
    if (failed(slotsType) || failed(expectTopK(op, *getK())))
      return failure();
    rows = slotsType->getDimSize(0);
    if (failed(expectEnoughRows(op, "operand 'gather_slots'", rows,
                                lhsType->getDimSize(0), *getK())))
      return failure();
  }

  int64_t rankTimesExperts = aType->getDimSize(0);
  if (failed(expectLoraRows(op, getLoraA(), *numExperts)))
    return failure();
  if (failed(expectDim(op, "operand 'grad_out'", *gradType, 0, rows,
                       "the number of grouped rows")) ||
      failed(expectDim(op, "operand 'lora_a'", *aType, 1,
                       lhsType->getDimSize(1), "K, the columns of 'lhs'")) ||
      failed(expectDim(op, "operand 'lora_b'", *bType, 0,
                       gradType->getDimSize(1),
                       "N, the columns of 'grad_out'")) ||
      failed(expectDim(op, "operand 'lora_b'", *bType, 1, rankTimesExperts,
                       "dimension 0 of 'lora_a' (E * r)")))
    return failure();

  // Each gradient has its adapter's shape.
  auto expectShapeOf = [&](StringRef name, Value result,
                           RankedTensorType like,
                           StringRef likeName) -> LogicalResult {
    auto type = expectTensor(op, name, result, 2, isWideFloat, kWideFloat);
    if (failed(type))
      return failure();
    if (type->getShape() != like.getShape())
      return emitOpError() << name << " must have the shape of " << likeName
                           << " " << like << ", got " << result.getType();
    return success();
  };
  return failure(
      failed(expectShapeOf("result 'grad_a'", getGradA(), *aType,
                           "operand 'lora_a'")) ||
      failed(expectShapeOf("result 'grad_b'", getGradB(), *bType,
                           "operand 'lora_b'")));
}
