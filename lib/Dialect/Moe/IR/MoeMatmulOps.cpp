//===- MoeMatmulOps.cpp - The grouped matmul's verifier ---------------===//
//
// Part of moec. moe.grouped_matmul has the most operand combinations of the
// dialect (gather, scatter, bias, LoRA, FP8 scales, weight gradient); its
// verifier lives here. The other ops' are in MoeOps.cpp.
//
//===----------------------------------------------------------------------===//

#include "MoeVerifiers.h"

using namespace mlir;
using namespace moec;
using namespace moec::moe;
using namespace moec::moe::verifiers;

//===----------------------------------------------------------------------===//
// GroupedMatmulOp
//===----------------------------------------------------------------------===//

namespace {

/// Verifies `mode = weight_grad`: [M, K]ᵀ · [M, N] per group -> [E, K, N]
/// ([K, E, N] with experts_in_columns, [E, N, K] with transpose_rhs).
LogicalResult verifyWeightGrad(GroupedMatmulOp op, RankedTensorType lhsType,
                               int64_t rows, int64_t numExperts) {
  Operation *raw = op.getOperation();
  const char *reason = "is not supported with mode = weight_grad";
  if (failed(rejectOperand(raw, op.getBias(), "bias", reason)) ||
      failed(rejectOperand(raw, op.getLoraA(), "lora_a", reason)) ||
      failed(rejectOperand(raw, op.getLoraB(), "lora_b", reason)) ||
      failed(rejectOperand(raw, op.getRowScale(), "row_scale", reason)) ||
      failed(
          rejectOperand(raw, op.getScatterSlots(), "scatter_slots", reason)) ||
      failed(rejectOperand(raw, op.getScatterWeights(), "scatter_weights",
                           reason)) ||
      failed(rejectOperand(raw, op.getScatterPositions(), "scatter_positions",
                           reason)) ||
      failed(rejectOperand(raw, op.getLhsScales(), "lhs_scales", reason)) ||
      failed(rejectOperand(raw, op.getRhsScales(), "rhs_scales", reason)) ||
      failed(rejectOperand(raw, op.getActivationInput(), "activation_input",
                           reason)))
    return failure();
  if (!isWideFloat(lhsType.getElementType()))
    return op.emitOpError() << "mode = weight_grad needs bf16, f16 or f32 "
                               "operands, got 'lhs' of "
                            << lhsType;
  if (op.getTransposeRhs() && op.getExpertsInColumns())
    return op.emitOpError() << "attributes 'experts_in_columns' and "
                               "'transpose_rhs' cannot be combined (the "
                               "result is [K, E, N] or [E, N, K])";
  if (op.getActivation() != Activation::none)
    return op.emitOpError() << "attribute 'activation' " << reason;

  auto rhsType = expectTensor(raw, "operand 'rhs' (the output gradient)",
                              op.getRhs(), 2, isAnyFloat, kAnyFloat);
  auto outType = expectTensor(raw, "result 'out'", op.getOut(), 3, isWideFloat,
                              kWideFloat);
  // [E, K, N]; [K, E, N] with experts_in_columns; [E, N, K] with
  // transpose_rhs (the gradient of transposed weights).
  bool inColumns = op.getExpertsInColumns();
  bool transposed = op.getTransposeRhs();
  const char *outName = inColumns    ? "result 'out' (experts_in_columns)"
                        : transposed ? "result 'out' (transpose_rhs)"
                                     : "result 'out'";
  if (failed(rhsType) || failed(outType) ||
      failed(expectSameElementType(raw, "operand 'rhs'", *rhsType,
                                   "operand 'lhs'", lhsType)) ||
      failed(expectDim(raw, "operand 'rhs'", *rhsType, 0, rows,
                       "the number of grouped rows")) ||
      failed(expectDim(raw, outName, *outType, inColumns ? 1 : 0, numExperts,
                       "the number of experts")) ||
      failed(expectDim(raw, outName, *outType,
                       inColumns ? 0 : (transposed ? 2 : 1),
                       lhsType.getDimSize(1), "K, the columns of 'lhs'")) ||
      failed(expectDim(raw, outName, *outType, transposed ? 1 : 2,
                       rhsType->getDimSize(1), "N, the columns of 'rhs'")))
    return failure();
  // The gradient accumulated into: the result's type exactly (its layout).
  if (Value accumulate = op.getAccumulate();
      accumulate && accumulate.getType() != op.getOut().getType())
    return op.emitOpError()
           << "operand 'accumulate' must have the type of "
              "result 'out' ("
           << op.getOut().getType() << "), got " << accumulate.getType();
  return success();
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

/// FP8 operands carry block scales (`scales(...)`); others must not.
LogicalResult verifyMatmulScales(GroupedMatmulOp op, RankedTensorType lhsType,
                                 RankedTensorType rhsType, int64_t reduction,
                                 int64_t cols) {
  Operation *raw = op.getOperation();
  if (bool(op.getLhsScales()) != bool(op.getRhsScales()))
    return op.emitOpError() << "operands 'lhs_scales' and 'rhs_scales' must "
                               "be given together";
  if (!isFP8(lhsType.getElementType())) {
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
  int64_t kBlocks = ceilDiv(reduction, group), nBlocks = ceilDiv(cols, group);
  bool transposed = op.getTransposeRhs();
  if (failed(expectDim(raw, "operand 'lhs_scales'", *lhsScales, 0,
                       lhsType.getDimSize(0), "the rows of 'lhs'")) ||
      failed(expectDim(raw, "operand 'lhs_scales'", *lhsScales, 1, kBlocks,
                       "ceil(K / scale_group)")) ||
      failed(expectDim(raw, "operand 'rhs_scales'", *rhsScales, 0,
                       rhsType.getDimSize(0), "the number of experts")) ||
      failed(expectDim(raw, "operand 'rhs_scales'", *rhsScales,
                       transposed ? 2 : 1, kBlocks, "ceil(K / scale_group)")) ||
      failed(expectDim(raw, "operand 'rhs_scales'", *rhsScales,
                       transposed ? 1 : 2, nBlocks, "ceil(N / scale_group)")))
    return failure();
  return success();
}

} // namespace

LogicalResult GroupedMatmulOp::verify() {
  Operation *op = getOperation();
  auto lhsType = expectTensor(op, "operand 'lhs'", getLhs(), 2, isMatmulInput,
                              kMatmulInput);
  if (failed(lhsType))
    return failure();
  auto numExperts = expectOffsets(op, getOffsets());
  if (failed(numExperts))
    return failure();

  // Slot-indexed gather / scatter need k to turn a slot into a token.
  bool usesSlots = getGatherSlots() || getScatterSlots();
  if (usesSlots && !getK())
    return emitOpError() << "attribute 'k' is required with 'gather' or "
                            "'scatter' (slot / k is the token)";
  if (!usesSlots && getK())
    return emitOpError() << "attribute 'k' is only used with 'gather' or "
                            "'scatter'";
  if (getK() && failed(expectTopK(op, *getK())))
    return failure();

  int64_t rows = lhsType->getDimSize(0);
  if (Value slots = getGatherSlots()) {
    auto slotsType =
        expectTensor(op, "operand 'gather_slots'", slots, 1, isI32, kI32);
    if (failed(slotsType))
      return failure();
    rows = slotsType->getDimSize(0);
    if (failed(expectEnoughRows(op, "operand 'gather_slots'", rows,
                                lhsType->getDimSize(0), *getK())))
      return failure();
  }
  if (!getLoraA() && getLoraScaling().convertToFloat() != 1.0f)
    return emitOpError() << "attribute 'lora_scaling' requires operands "
                            "'lora_a' and 'lora_b'";
  if (!getLoraA() && getTransposeLora())
    return emitOpError() << "attribute 'transpose_lora' requires operands "
                            "'lora_a' and 'lora_b'";

  if (getMode() == MatmulMode::weight_grad)
    return verifyWeightGrad(*this, *lhsType, rows, *numExperts);
  if (getAccumulate())
    return emitOpError() << "operand 'accumulate' is only used with mode = "
                            "weight_grad";

  // [E, K, N], [E, N, K] (transpose_rhs) or [K, E, N] (experts_in_columns).
  bool inColumns = getExpertsInColumns();
  if (inColumns && getTransposeRhs())
    return emitOpError() << "attributes 'experts_in_columns' and "
                            "'transpose_rhs' cannot be combined ([K, E, N] "
                            "weights are not transposed)";
  if (inColumns && getLhsScales())
    return emitOpError() << "attribute 'experts_in_columns' is not supported "
                            "with FP8 block scales";
  auto rhsType = expectTensor(op, "operand 'rhs'", getRhs(), 3, isMatmulInput,
                              kMatmulInput);
  const char *rhsName = getTransposeRhs() ? "operand 'rhs' (transposed)"
                        : inColumns       ? "operand 'rhs' (experts_in_columns)"
                                          : "operand 'rhs'";
  if (failed(rhsType) ||
      failed(expectSameElementType(op, "operand 'rhs'", *rhsType,
                                   "operand 'lhs'", *lhsType)) ||
      failed(expectDim(op, rhsName, *rhsType, inColumns ? 1 : 0, *numExperts,
                       "the number of experts")))
    return failure();
  unsigned kDim = getTransposeRhs() ? 2 : inColumns ? 0 : 1;
  unsigned nDim = getTransposeRhs() ? 1 : 2;
  int64_t reduction = lhsType->getDimSize(1);
  int64_t cols = rhsType->getDimSize(nDim);
  if (failed(expectDim(op, rhsName, *rhsType, kDim, reduction,
                       "K, the columns of 'lhs'")))
    return failure();

  if (Value bias = getBias()) {
    auto biasType =
        expectTensor(op, "operand 'bias'", bias, 2, isAnyFloat, kAnyFloat);
    if (failed(biasType) ||
        failed(expectDim(op, "operand 'bias'", *biasType, 0, *numExperts,
                         "the number of experts")) ||
        failed(expectDim(op, "operand 'bias'", *biasType, 1, cols,
                         "N, the output columns of 'rhs'")))
      return failure();
  }

  if (bool(getLoraA()) != bool(getLoraB()))
    return emitOpError() << "operands 'lora_a' and 'lora_b' must be given "
                            "together";
  if (getLoraA()) {
    auto aType = expectTensor(op, "operand 'lora_a'", getLoraA(), 2, isAnyFloat,
                              kAnyFloat);
    auto bType = expectTensor(op, "operand 'lora_b'", getLoraB(), 2, isAnyFloat,
                              kAnyFloat);
    if (failed(aType) || failed(bType))
      return failure();
    int64_t rankTimesExperts = aType->getDimSize(0);
    if (failed(expectLoraRows(op, getLoraA(), *numExperts)))
      return failure();
    // Transposed (an input gradient), A spans the output columns and B the
    // reduction.
    bool flip = getTransposeLora();
    if (failed(expectDim(op, "operand 'lora_a'", *aType, 1,
                         flip ? cols : reduction,
                         flip ? "N, the output columns of 'rhs' "
                                "(transpose_lora)"
                              : "K, the columns of 'lhs'")) ||
        failed(expectDim(op, "operand 'lora_b'", *bType, 0,
                         flip ? reduction : cols,
                         flip ? "K, the columns of 'lhs' (transpose_lora)"
                              : "N, the output columns of 'rhs'")) ||
        failed(expectDim(op, "operand 'lora_b'", *bType, 1, rankTimesExperts,
                         "dimension 0 of 'lora_a' (E * r)")))
      return failure();
  }

  if (failed(verifyMatmulScales(*this, *lhsType, *rhsType, reduction, cols)))
    return failure();

  int64_t outCols = cols;
  if (getActivation() == Activation::swiglu && !ShapedType::isDynamic(cols)) {
    if (cols % 2 != 0)
      return emitOpError() << "activation = swiglu needs an even number of "
                              "output columns in 'rhs', got "
                           << cols;
    outCols = cols / 2;
  }
  bool swigluGrad = getActivation() == Activation::swiglu_grad;
  if (bool(getActivationInput()) != swigluGrad)
    return emitOpError() << "operand 'activation_input' is given exactly when "
                            "activation = swiglu_grad (the saved SwiGLU input)";
  if (swigluGrad) {
    if (getScatterSlots())
      return emitOpError() << "activation = swiglu_grad writes grouped rows: "
                              "operand 'scatter_slots' is not supported";
    auto inputType = expectTensor(op, "operand 'activation_input'",
                                  getActivationInput(), 2, isWideFloat,
                                  kWideFloat);
    if (failed(inputType))
      return failure();
    // With N dynamic, the input's width stands for 2N (the kernels take N
    // as half the output's width): it must be even, and the output as wide.
    int64_t inputCols = inputType->getDimSize(1);
    if (!ShapedType::isDynamic(inputCols) && inputCols % 2 != 0)
      return emitOpError() << "dimension 1 of operand 'activation_input' must "
                              "be even (gate and up halves), got "
                           << inputCols;
    outCols = ShapedType::isDynamic(cols) ? inputCols : 2 * cols;
    if (
        failed(expectDim(op, "operand 'activation_input'", *inputType, 0, rows,
                         "the number of grouped rows")) ||
        failed(expectDim(op, "operand 'activation_input'", *inputType, 1,
                         outCols, "2 * N (gate and up halves)")))
      return failure();
  }

  if (Value rowScale = getRowScale()) {
    auto scaleType =
        expectTensor(op, "operand 'row_scale'", rowScale, 1, isF32, kF32);
    if (failed(scaleType) ||
        failed(expectDim(op, "operand 'row_scale'", *scaleType, 0, rows,
                         "the number of grouped rows")))
      return failure();
  }

  auto outType =
      expectTensor(op, "result 'out'", getOut(), 2, isWideFloat, kWideFloat);
  if (failed(outType) ||
      failed(expectDim(op, "result 'out'", *outType, 1, outCols,
                       getActivation() == Activation::swiglu
                           ? "N / 2 (swiglu halves the output columns)"
                       : swigluGrad
                           ? "2 * N (swiglu_grad writes gate and up halves)"
                           : "N, the output columns of 'rhs'")))
    return failure();

  if (getScatterWeights() && !getScatterSlots())
    return emitOpError() << "operand 'scatter_weights' requires operand "
                            "'scatter_slots'";
  if (getScatterPositions() && !getScatterSlots())
    return emitOpError() << "operand 'scatter_positions' requires operand "
                            "'scatter_slots'";
  if (Value slots = getScatterSlots()) {
    auto slotsType =
        expectTensor(op, "operand 'scatter_slots'", slots, 1, isI32, kI32);
    if (failed(slotsType) ||
        failed(expectDim(op, "operand 'scatter_slots'", *slotsType, 0, rows,
                         "the number of grouped rows")))
      return failure();
    int64_t tokens = outType->getDimSize(0);
    if (failed(expectEnoughRows(op, "operand 'scatter_slots'", rows, tokens,
                                *getK())) ||
        failed(expectPositions(op, "operand 'scatter_positions'",
                               getScatterPositions(), tokens, *getK())))
      return failure();
    // Gather and scatter both read slot / k as a token of the same layer.
    if (getGatherSlots() &&
        failed(expectDim(op, "result 'out'", *outType, 0,
                         lhsType->getDimSize(0),
                         "the tokens of the gathered 'lhs'")))
      return failure();
    if (Value weights = getScatterWeights()) {
      auto weightsType = expectTensor(op, "operand 'scatter_weights'", weights,
                                      2, isF32, kF32);
      if (failed(weightsType) ||
          failed(expectDim(op, "operand 'scatter_weights'", *weightsType, 0,
                           tokens, "the number of tokens of result 'out'")) ||
          failed(expectDim(op, "operand 'scatter_weights'", *weightsType, 1,
                           *getK(), "attribute 'k'")))
        return failure();
    }
    return success();
  }
  return expectDim(op, "result 'out'", *outType, 0, rows,
                   "the number of grouped rows");
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
