//===- MoeOps.cpp - Verifiers and canonicalizations of moe ops ------------===//
//
// Part of moec. Every diagnostic names the operand, result or attribute it is
// about, and where a size must match another it says which one.
//
//===----------------------------------------------------------------------===//

#include "MoeVerifiers.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Support/MoeShapes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::moe;
using namespace moec::moe::verifiers;

static_assert(kDynamicSize == ShapedType::kDynamic,
              "moec::kDynamicSize must match MLIR's dynamic size marker");

//===----------------------------------------------------------------------===//
// RouterTopKOp
//===----------------------------------------------------------------------===//

namespace {

/// The logits' expert dimension: static and within the limit.
LogicalResult expectExpertColumns(Operation *op, Value logits,
                                  int64_t numExperts) {
  if (ShapedType::isDynamic(numExperts) || numExperts > kMaxNumExperts)
    return op->emitOpError()
           << "expert dimension (1) of operand 'logits' must be static and at "
              "most "
           << kMaxNumExperts << ", got " << logits.getType();
  return success();
}

/// The scoring attributes router_topk and its gradient share.
LogicalResult verifyScoring(Operation *op, Scoring scoring, TopKOrder order,
                            float scale) {
  if (order == TopKOrder::topk_then_softmax && scoring != Scoring::softmax)
    return op->emitOpError() << "order = topk_then_softmax requires scoring = "
                                "softmax, got scoring = "
                             << stringifyScoring(scoring);
  if (!(scale > 0.0f) || std::isinf(scale))
    return op->emitOpError() << "attribute 'scaling_factor' must be finite and "
                                "positive, got "
                             << scale;
  return success();
}

} // namespace

LogicalResult RouterTopKOp::verify() {
  Operation *op = getOperation();
  auto logitsType =
      expectTensor(op, "operand 'logits'", getLogits(), 2, isAnyFloat, kAnyFloat);
  if (failed(logitsType))
    return failure();
  int64_t tokens = logitsType->getDimSize(0);
  int64_t numExperts = logitsType->getDimSize(1);
  if (failed(expectExpertColumns(op, getLogits(), numExperts)))
    return failure();
  int64_t k = getK();
  if (failed(expectTopK(op, k)))
    return failure();
  if (k > numExperts)
    return emitOpError() << "attribute 'k' (" << k
                         << ") must not exceed the number of experts ("
                         << numExperts << ")";

  auto weightsType =
      expectTensor(op, "result 'weights'", getWeights(), 2, isF32, kF32);
  auto idsType = expectTensor(op, "result 'ids'", getIds(), 2, isI32, kI32);
  if (failed(weightsType) || failed(idsType))
    return failure();
  for (auto [name, type] : {std::make_pair("result 'weights'", *weightsType),
                            std::make_pair("result 'ids'", *idsType)}) {
    if (failed(expectDim(op, name, type, 0, tokens,
                         "the number of tokens of 'logits'")) ||
        failed(expectDim(op, name, type, 1, k, "attribute 'k'")))
      return failure();
  }

  if (failed(verifyScoring(op, getScoring(), getOrder(),
                           getScalingFactor().convertToFloat())))
    return failure();

  if (Value bias = getSelectionBias()) {
    auto biasType =
        expectTensor(op, "operand 'bias'", bias, 1, isF32, kF32);
    if (failed(biasType) ||
        failed(expectDim(op, "operand 'bias'", *biasType, 0, numExperts,
                         "the number of experts")))
      return failure();
  }

  std::optional<int64_t> numGroups = getNumGroups();
  std::optional<int64_t> topkGroups = getTopkGroups();
  if (numGroups.has_value() != topkGroups.has_value())
    return emitOpError() << "attributes 'num_groups' and 'topk_groups' must "
                            "be given together";
  if (numGroups) {
    if (failed(expectPositive(op, "num_groups", *numGroups)) ||
        failed(expectPositive(op, "topk_groups", *topkGroups)))
      return failure();
    if (numExperts % *numGroups != 0)
      return emitOpError() << "attribute 'num_groups' (" << *numGroups
                           << ") must divide the number of experts ("
                           << numExperts << ")";
    if (*topkGroups > *numGroups)
      return emitOpError() << "attribute 'topk_groups' (" << *topkGroups
                           << ") must not exceed 'num_groups' (" << *numGroups
                           << ")";
    int64_t selectable = *topkGroups * (numExperts / *numGroups);
    if (k > selectable)
      return emitOpError() << "attribute 'k' (" << k
                           << ") exceeds the " << selectable
                           << " experts in the 'topk_groups' best groups";
  }

  return success();
}

LogicalResult RouterTopKOp::canonicalize(RouterTopKOp op,
                                         PatternRewriter &rewriter) {
  // A softmax over the selected k already sums to one: renormalizing it again
  // is a no-op.
  if (op.getOrder() == TopKOrder::topk_then_softmax && op.getRenormalize()) {
    rewriter.modifyOpInPlace(op, [&] { op.setRenormalize(false); });
    return success();
  }
  return failure();
}

//===----------------------------------------------------------------------===//
// RouterTopKGradOp
//===----------------------------------------------------------------------===//

LogicalResult RouterTopKGradOp::verify() {
  Operation *op = getOperation();
  auto logitsType = expectTensor(op, "operand 'logits'", getLogits(), 2,
                                 isAnyFloat, kAnyFloat);
  auto idsType = expectTensor(op, "operand 'ids'", getIds(), 2, isI32, kI32);
  auto gradType = expectTensor(op, "operand 'grad_weights'", getGradWeights(),
                               2, isF32, kF32);
  auto resultType = expectTensor(op, "result 'grad_logits'", getGradLogits(), 2,
                                 isWideFloat, kWideFloat);
  if (failed(logitsType) || failed(idsType) || failed(gradType) ||
      failed(resultType))
    return failure();
  int64_t tokens = logitsType->getDimSize(0);
  int64_t numExperts = logitsType->getDimSize(1);
  if (failed(expectExpertColumns(op, getLogits(), numExperts)))
    return failure();
  int64_t k = idsType->getDimSize(1);
  if (ShapedType::isDynamic(k))
    return emitOpError() << "dimension 1 of operand 'ids' (k) must be static, "
                            "got "
                         << getIds().getType();
  if (k < 1 || k > kMaxTopK)
    return emitOpError() << "dimension 1 of operand 'ids' (k) must be in [1, "
                         << kMaxTopK
                         << "] (the kernels unroll their per-token loops over "
                            "k), got "
                         << k;
  if (k > numExperts)
    return emitOpError() << "k (" << k
                         << ", the columns of 'ids') must not exceed the "
                            "number of experts ("
                         << numExperts << ")";
  if (failed(expectDim(op, "operand 'ids'", *idsType, 0, tokens,
                       "the number of tokens of 'logits'")) ||
      failed(expectDim(op, "operand 'grad_weights'", *gradType, 0, tokens,
                       "the number of tokens of 'logits'")) ||
      failed(expectDim(op, "operand 'grad_weights'", *gradType, 1, k,
                       "the columns of 'ids'")) ||
      failed(expectDim(op, "result 'grad_logits'", *resultType, 0, tokens,
                       "the number of tokens of 'logits'")) ||
      failed(expectDim(op, "result 'grad_logits'", *resultType, 1, numExperts,
                       "the number of experts")))
    return failure();
  if (failed(verifyScoring(op, getScoring(), getOrder(),
                           getScalingFactor().convertToFloat())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// SortByExpertOp
//===----------------------------------------------------------------------===//

LogicalResult SortByExpertOp::verify() {
  Operation *op = getOperation();
  auto idsType = expectTensor(op, "operand 'ids'", getIds(), 2, isI32, kI32);
  if (failed(idsType))
    return failure();
  int64_t numExperts = getNumExperts();
  if (failed(expectNumExperts(op, "num_experts", numExperts)))
    return failure();
  int64_t align = getAlign().value_or(1);
  if (!isPowerOfTwo(align))
    return emitOpError() << "attribute 'align' must be a positive power of "
                            "two, got "
                         << align;

  auto offsetsType = expectTensor(op, "result 'offsets'", getOffsets(), 1,
                                  isI32, kI32);
  auto sortedType = expectTensor(op, "result 'sorted_expert_ids'",
                                 getSortedExpertIds(), 1, isI32, kI32);
  auto slotsType =
      expectTensor(op, "result 'slots'", getSlots(), 1, isI32, kI32);
  if (failed(offsetsType) || failed(sortedType) || failed(slotsType))
    return failure();
  if (offsetsType->isDynamicDim(0) ||
      offsetsType->getDimSize(0) != numExperts)
    return emitOpError() << "result 'offsets' must have static length "
                            "'num_experts' ("
                         << numExperts << "), got " << getOffsets().getType();

  int64_t topK = idsType->getDimSize(1);
  if (ShapedType::isDynamic(topK))
    return emitOpError() << "dimension 1 (k) of operand 'ids' must be static";
  if (topK < 1 || topK > std::min(numExperts, kMaxTopK))
    return emitOpError() << "dimension 1 (k) of operand 'ids' must be in [1, "
                            "min(num_experts = "
                         << numExperts << ", " << kMaxTopK << ")], got "
                         << topK;
  int64_t capacity =
      sortedCapacity(idsType->getDimSize(0), topK, numExperts, align);
  const char *capacityDesc =
      align == 1 ? "tokens * k" : "the padded capacity tokens * k + "
                                  "num_experts * (align - 1)";
  if (failed(expectDim(op, "result 'sorted_expert_ids'", *sortedType, 0,
                       capacity, capacityDesc)) ||
      failed(expectDim(op, "result 'slots'", *slotsType, 0, capacity,
                       capacityDesc)) ||
      failed(expectPositions(op, "result 'positions'", getPositions(),
                             idsType->getDimSize(0), topK)))
    return failure();
  return success();
}

LogicalResult SortByExpertOp::canonicalize(SortByExpertOp op,
                                           PatternRewriter &rewriter) {
  // Padding every group to a multiple of one is no padding.
  if (op.getAlign() == 1) {
    rewriter.modifyOpInPlace(op, [&] { op.removeAlignAttr(); });
    return success();
  }
  return failure();
}

//===----------------------------------------------------------------------===//
// PermuteOp
//===----------------------------------------------------------------------===//

LogicalResult PermuteOp::verify() {
  Operation *op = getOperation();
  auto tokensType = expectTensor(op, "operand 'tokens'", getTokens(), 2,
                                 [](Type) { return true; }, "any values");
  auto slotsType =
      expectTensor(op, "operand 'slots'", getSlots(), 1, isI32, kI32);
  if (failed(tokensType) || failed(slotsType) ||
      failed(expectOffsets(op, getOffsets())) ||
      failed(expectTopK(op, getK())))
    return failure();
  int64_t tokens = tokensType->getDimSize(0);
  int64_t rows = slotsType->getDimSize(0);
  if (failed(expectEnoughRows(op, "operand 'slots'", rows, tokens, getK())) ||
      failed(expectPositions(op, "operand 'positions'", getPositions(), tokens,
                             getK())))
    return failure();

  auto rowsType = expectTensor(op, "result 'rows'", getRows(), 2,
                               [](Type) { return true; }, "any values");
  if (failed(rowsType) ||
      failed(expectSameElementType(op, "result 'rows'", *rowsType,
                                   "operand 'tokens'", *tokensType)) ||
      failed(expectDim(op, "result 'rows'", *rowsType, 0, rows,
                       "the length of 'slots'")) ||
      failed(expectDim(op, "result 'rows'", *rowsType, 1,
                       tokensType->getDimSize(1),
                       "the hidden size of 'tokens'")))
    return failure();

  if (bool(getProbs()) != bool(getPermutedProbs()))
    return emitOpError() << "operand 'probs' and result 'permuted_probs' must "
                            "be given together";
  if (getProbs()) {
    auto probsType =
        expectTensor(op, "operand 'probs'", getProbs(), 2, isF32, kF32);
    auto outType = expectTensor(op, "result 'permuted_probs'",
                                getPermutedProbs(), 1, isF32, kF32);
    if (failed(probsType) || failed(outType) ||
        failed(expectDim(op, "operand 'probs'", *probsType, 0, tokens,
                         "the number of tokens")) ||
        failed(expectDim(op, "operand 'probs'", *probsType, 1, getK(),
                         "attribute 'k'")) ||
        failed(expectDim(op, "result 'permuted_probs'", *outType, 0, rows,
                         "the length of 'slots'")))
      return failure();
  }

  if (bool(getScales()) != bool(getPermutedScales()))
    return emitOpError() << "operand 'scales' and result 'permuted_scales' "
                            "must be given together";
  if (getScales()) {
    auto scalesType =
        expectTensor(op, "operand 'scales'", getScales(), 2, isF32, kF32);
    auto outType = expectTensor(op, "result 'permuted_scales'",
                                getPermutedScales(), 2, isF32, kF32);
    if (failed(scalesType) || failed(outType) ||
        failed(expectDim(op, "operand 'scales'", *scalesType, 0, tokens,
                         "the number of tokens")) ||
        failed(expectDim(op, "result 'permuted_scales'", *outType, 0, rows,
                         "the length of 'slots'")) ||
        failed(expectDim(op, "result 'permuted_scales'", *outType, 1,
                         scalesType->getDimSize(1),
                         "the scale groups of 'scales'")))
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// UnpermuteOp
//===----------------------------------------------------------------------===//

LogicalResult UnpermuteOp::verify() {
  Operation *op = getOperation();
  auto rowsType =
      expectTensor(op, "operand 'rows'", getRows(), 2, isWideFloat, kWideFloat);
  auto slotsType =
      expectTensor(op, "operand 'slots'", getSlots(), 1, isI32, kI32);
  auto outType =
      expectTensor(op, "result 'out'", getOut(), 2, isWideFloat, kWideFloat);
  if (failed(rowsType) || failed(slotsType) || failed(outType) ||
      failed(expectOffsets(op, getOffsets())) ||
      failed(expectTopK(op, getK())))
    return failure();
  int64_t rows = rowsType->getDimSize(0);
  int64_t tokens = outType->getDimSize(0);
  if (failed(expectDim(op, "operand 'slots'", *slotsType, 0, rows,
                       "the number of rows of 'rows'")) ||
      failed(expectDim(op, "result 'out'", *outType, 1,
                       rowsType->getDimSize(1), "the hidden size of 'rows'")) ||
      failed(expectEnoughRows(op, "operand 'rows'", rows, tokens, getK())) ||
      failed(expectPositions(op, "operand 'positions'", getPositions(), tokens,
                             getK())))
    return failure();
  if (Value weights = getWeights()) {
    auto weightsType =
        expectTensor(op, "operand 'weights'", weights, 2, isF32, kF32);
    if (failed(weightsType) ||
        failed(expectDim(op, "operand 'weights'", *weightsType, 0, tokens,
                         "the number of tokens of result 'out'")) ||
        failed(expectDim(op, "operand 'weights'", *weightsType, 1, getK(),
                         "attribute 'k'")))
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// PermuteGradOp / UnpermuteGradOp
//===----------------------------------------------------------------------===//

LogicalResult PermuteGradOp::verify() {
  Operation *op = getOperation();
  auto gradRowsType = expectTensor(op, "operand 'grad_rows'", getGradRows(), 2,
                                   isWideFloat, kWideFloat);
  auto slotsType =
      expectTensor(op, "operand 'slots'", getSlots(), 1, isI32, kI32);
  auto gradTokensType = expectTensor(op, "result 'grad_tokens'",
                                     getGradTokens(), 2, isWideFloat,
                                     kWideFloat);
  if (failed(gradRowsType) || failed(slotsType) || failed(gradTokensType) ||
      failed(expectOffsets(op, getOffsets())) ||
      failed(expectTopK(op, getK())))
    return failure();
  int64_t rows = gradRowsType->getDimSize(0);
  int64_t tokens = gradTokensType->getDimSize(0);
  if (failed(expectDim(op, "operand 'slots'", *slotsType, 0, rows,
                       "the number of rows of 'grad_rows'")) ||
      failed(expectDim(op, "result 'grad_tokens'", *gradTokensType, 1,
                       gradRowsType->getDimSize(1),
                       "the hidden size of 'grad_rows'")) ||
      failed(expectEnoughRows(op, "operand 'grad_rows'", rows, tokens,
                              getK())) ||
      failed(expectPositions(op, "operand 'positions'", getPositions(), tokens,
                             getK())))
    return failure();

  if (bool(getGradPermutedProbs()) != bool(getGradProbs()))
    return emitOpError() << "operand 'grad_permuted_probs' and result "
                            "'grad_probs' must be given together";
  if (getGradPermutedProbs()) {
    auto inType = expectTensor(op, "operand 'grad_permuted_probs'",
                               getGradPermutedProbs(), 1, isF32, kF32);
    auto outType = expectTensor(op, "result 'grad_probs'", getGradProbs(), 2,
                                isF32, kF32);
    if (failed(inType) || failed(outType) ||
        failed(expectDim(op, "operand 'grad_permuted_probs'", *inType, 0,
                         rows, "the number of rows of 'grad_rows'")) ||
        failed(expectDim(op, "result 'grad_probs'", *outType, 0, tokens,
                         "the number of tokens of result 'grad_tokens'")) ||
        failed(expectDim(op, "result 'grad_probs'", *outType, 1, getK(),
                         "attribute 'k'")))
      return failure();
  }
  return success();
}

LogicalResult UnpermuteGradOp::verify() {
  Operation *op = getOperation();
  auto gradOutType = expectTensor(op, "operand 'grad_out'", getGradOut(), 2,
                                  isWideFloat, kWideFloat);
  auto slotsType =
      expectTensor(op, "operand 'slots'", getSlots(), 1, isI32, kI32);
  if (failed(gradOutType) || failed(slotsType) ||
      failed(expectOffsets(op, getOffsets())) ||
      failed(expectTopK(op, getK())))
    return failure();
  int64_t rows = slotsType->getDimSize(0);
  int64_t tokens = gradOutType->getDimSize(0);
  int64_t hidden = gradOutType->getDimSize(1);
  if (failed(expectEnoughRows(op, "operand 'slots'", rows, tokens, getK())) ||
      failed(expectPositions(op, "operand 'positions'", getPositions(), tokens,
                             getK())))
    return failure();
  if (getGradRows()) {
    auto gradRowsType = expectTensor(op, "result 'grad_rows'", getGradRows(),
                                     2, isWideFloat, kWideFloat);
    if (failed(gradRowsType) ||
        failed(expectDim(op, "result 'grad_rows'", *gradRowsType, 0, rows,
                         "the length of 'slots'")) ||
        failed(expectDim(op, "result 'grad_rows'", *gradRowsType, 1, hidden,
                         "the hidden size of 'grad_out'")))
      return failure();
  } else if (!getWeights()) {
    return emitOpError() << "without result 'grad_rows' needs 'weights' (it "
                            "would compute nothing)";
  }

  if (bool(getWeights()) != bool(getRows()) ||
      bool(getWeights()) != bool(getGradWeights()))
    return emitOpError() << "operands 'weights' and 'rows' and result "
                            "'grad_weights' must be given together";
  if (getWeights()) {
    auto weightsType =
        expectTensor(op, "operand 'weights'", getWeights(), 2, isF32, kF32);
    auto rowsType = expectTensor(op, "operand 'rows'", getRows(), 2,
                                 isWideFloat, kWideFloat);
    auto outType = expectTensor(op, "result 'grad_weights'", getGradWeights(),
                                2, isF32, kF32);
    if (failed(weightsType) || failed(rowsType) || failed(outType) ||
        failed(expectDim(op, "operand 'weights'", *weightsType, 0, tokens,
                         "the number of tokens of 'grad_out'")) ||
        failed(expectDim(op, "operand 'weights'", *weightsType, 1, getK(),
                         "attribute 'k'")) ||
        failed(expectDim(op, "operand 'rows'", *rowsType, 0, rows,
                         "the length of 'slots'")) ||
        failed(expectDim(op, "operand 'rows'", *rowsType, 1, hidden,
                         "the hidden size of 'grad_out'")) ||
        failed(expectDim(op, "result 'grad_weights'", *outType, 0, tokens,
                         "the number of tokens of 'grad_out'")) ||
        failed(expectDim(op, "result 'grad_weights'", *outType, 1, getK(),
                         "attribute 'k'")))
      return failure();
  }
  return success();
}

LogicalResult PermuteProbsOp::verify() {
  Operation *op = getOperation();
  auto probsType =
      expectTensor(op, "operand 'probs'", getProbs(), 2, isF32, kF32);
  auto slotsType =
      expectTensor(op, "operand 'slots'", getSlots(), 1, isI32, kI32);
  auto outType = expectTensor(op, "result 'out'", getOut(), 1, isF32, kF32);
  if (failed(probsType) || failed(slotsType) || failed(outType) ||
      failed(expectOffsets(op, getOffsets())) ||
      failed(expectTopK(op, getK())))
    return failure();
  int64_t rows = slotsType->getDimSize(0);
  int64_t tokens = probsType->getDimSize(0);
  if (failed(expectDim(op, "operand 'probs'", *probsType, 1, getK(),
                       "attribute 'k'")) ||
      failed(expectEnoughRows(op, "operand 'slots'", rows, tokens, getK())) ||
      failed(expectDim(op, "result 'out'", *outType, 0, rows,
                       "the length of 'slots'")))
    return failure();
  if (!std::isfinite(getScale().convertToFloat()))
    return emitOpError() << "attribute 'scale' must be finite";
  return success();
}

//===----------------------------------------------------------------------===//
// SwigluOp / SwigluGradOp
//===----------------------------------------------------------------------===//

namespace {

/// Verifies a gate/up tensor [M, 2I] against an activated one [M, I].
LogicalResult verifyGateUpPair(Operation *op, StringRef gateUpWhat,
                               Value gateUp, StringRef activatedWhat,
                               Value activated) {
  auto gateUpType =
      expectTensor(op, gateUpWhat, gateUp, 2, isAnyFloat, kAnyFloat);
  auto activatedType =
      expectTensor(op, activatedWhat, activated, 2, isAnyFloat, kAnyFloat);
  if (failed(gateUpType) || failed(activatedType))
    return failure();
  int64_t width = gateUpType->getDimSize(1);
  if (!ShapedType::isDynamic(width) && width % 2 != 0)
    return op->emitOpError() << "dimension 1 of " << gateUpWhat
                             << " must be even (gate and up halves), got "
                             << width;
  int64_t half = ShapedType::isDynamic(width) ? width : width / 2;
  if (failed(expectDim(op, activatedWhat, *activatedType, 0,
                       gateUpType->getDimSize(0),
                       Twine("the rows of ") + gateUpWhat)) ||
      failed(expectDim(op, activatedWhat, *activatedType, 1, half,
                       Twine("half the width of ") + gateUpWhat)))
    return failure();
  return success();
}

} // namespace

LogicalResult SwigluOp::verify() {
  return verifyGateUpPair(getOperation(), "operand 'input'", getInput(),
                          "result 'output'", getOutput());
}

LogicalResult SwigluGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyGateUpPair(op, "operand 'input'", getInput(),
                              "operand 'grad_output'", getGradOutput())))
    return failure();
  auto inputType = cast<RankedTensorType>(getInput().getType());
  auto gradType = expectTensor(op, "result 'grad_input'", getGradInput(), 2,
                               isAnyFloat, kAnyFloat);
  if (failed(gradType))
    return failure();
  for (unsigned dim = 0; dim < 2; ++dim)
    if (failed(expectDim(op, "result 'grad_input'", *gradType, dim,
                         inputType.getDimSize(dim), "operand 'input'")))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// QuantizeOp / DequantizeOp
//===----------------------------------------------------------------------===//

/// moe.quantize {axis = blocks}: [E, N, K] expert weights in
/// group_size x group_size blocks, written as they are or (transpose) as
/// [E, K, N], with the scales in the same orientation as the data; with
/// transposed_data / transposed_scales, both.
static LogicalResult verifyQuantizeBlocks(QuantizeOp op) {
  Operation *raw = op.getOperation();
  if (failed(rejectOperand(raw, op.getOffsets(), "offsets",
                           "is only used with axis = colwise (axis = blocks "
                           "quantizes each expert's whole matrix)")))
    return failure();
  auto inputType = expectTensor(raw, "operand 'input' (axis = blocks)",
                                op.getInput(), 3, isWideFloat, kWideFloat);
  if (failed(inputType))
    return failure();
  if (!op.getTransposedData() != !op.getTransposedScales())
    return op.emitOpError()
           << "takes results 'transposed_data' and 'transposed_scales' "
              "together (the second layout's data and scales), got one";
  if (op.writesBothLayouts() && op.getTranspose())
    return op.emitOpError()
           << "with results 'transposed_data' and 'transposed_scales' "
              "writes the plain layout to 'data' and the transposed one to "
              "them: drop attribute 'transpose'";
  const int64_t g = op.getGroupSize();
  // One layout's data and scales: data dimension d holds input dimension
  // from[d], and the scales count its blocks along it.
  auto verifyLayout = [&](const char *dataName, const char *scalesName,
                          Value data, Value scales,
                          bool transposed) -> LogicalResult {
    std::string dataWhat = std::string("result '") + dataName + "'";
    std::string scalesWhat = std::string("result '") + scalesName + "'";
    auto dataType = expectTensor(raw, dataWhat + " (axis = blocks)",
                                 data, 3, isFP8, "f8E4M3FN or f8E5M2 values");
    if (failed(dataType))
      return failure();
    auto scalesType =
        expectTensor(raw, scalesWhat + " (axis = blocks)", scales,
                     3, isF32, kF32);
    if (failed(scalesType))
      return failure();
    const unsigned from[3] = {0, transposed ? 2u : 1u, transposed ? 1u : 2u};
    const char *names[3] = {"the experts", transposed ? "K" : "N",
                            transposed ? "N" : "K"};
    std::string dataLabel =
        dataWhat + (transposed && data == op.getData() ? " (transpose)" : "");
    for (unsigned d = 0; d < 3; ++d) {
      int64_t size = inputType->getDimSize(from[d]);
      std::string what = std::string(names[d]) + " of operand 'input'";
      if (failed(expectDim(raw, dataLabel, *dataType, d, size,
                           what)) ||
          failed(expectDim(raw, scalesWhat, *scalesType, d,
                           d == 0 ? size : ceilDiv(size, g),
                           d == 0 ? what
                                  : "ceil(" + std::string(names[d]) +
                                        " / group_size)")))
        return failure();
    }
    return success();
  };
  if (failed(verifyLayout("data", "scales", op.getData(), op.getScales(),
                          op.getTranspose())))
    return failure();
  if (!op.writesBothLayouts())
    return success();
  if (failed(verifyLayout("transposed_data", "transposed_scales",
                          op.getTransposedData(), op.getTransposedScales(),
                          /*transposed=*/true)))
    return failure();
  Type fp8 = cast<ShapedType>(op.getData().getType()).getElementType();
  Type other =
      cast<ShapedType>(op.getTransposedData().getType()).getElementType();
  if (other != fp8)
    return op.emitOpError()
           << "result 'transposed_data' must have the element type of "
              "result 'data' ("
           << fp8 << "), got " << other;
  return success();
}

LogicalResult QuantizeOp::verify() {
  Operation *op = getOperation();
  if (failed(expectPositive(op, "group_size", getGroupSize())))
    return failure();
  if (getAxis() == QuantAxis::blocks)
    return verifyQuantizeBlocks(*this);
  if (getTransposedData() || getTransposedScales())
    return emitOpError() << "results 'transposed_data' and "
                            "'transposed_scales' are only used with axis = "
                            "blocks (the expert weights' second layout)";
  auto inputType =
      expectTensor(op, "operand 'input'", getInput(), 2, isWideFloat, kWideFloat);
  auto dataType = expectTensor(op, "result 'data'", getData(), 2, isFP8,
                               "f8E4M3FN or f8E5M2 values");
  if (failed(inputType) || failed(dataType))
    return failure();
  if (getTranspose()) {
    // [K, group_size * B]: each expert's rows as columns, padded to blocks.
    if (getAxis() != QuantAxis::colwise)
      return emitOpError() << "attribute 'transpose' is only used with axis "
                              "= colwise (the FP8 weight gradient's layout) "
                              "or axis = blocks (expert weights)";
    if (!getOffsets())
      return emitOpError() << "axis = colwise requires operand 'offsets' "
                              "(the expert groups)";
    auto numExperts = expectOffsets(op, getOffsets());
    if (failed(numExperts) ||
        failed(expectDim(op, "result 'data' (transpose)", *dataType, 0,
                         inputType->getDimSize(1),
                         "the columns of operand 'input'")) ||
        failed(expectDim(
            op, "result 'data' (transpose)", *dataType, 1,
            transposedQuantColumns(inputType->getDimSize(0), *numExperts,
                                   getGroupSize()),
            "group_size * the scale rows (each expert padded to its blocks)")))
      return failure();
  } else {
    for (unsigned dim = 0; dim < 2; ++dim)
      if (failed(expectDim(op, "result 'data'", *dataType, dim,
                           inputType->getDimSize(dim), "operand 'input'")))
        return failure();
  }
  return verifyFP8Scales(op, getAxis(), getGroupSize(), *inputType,
                         "result 'scales'", getScales(), getOffsets());
}

LogicalResult DequantizeOp::verify() {
  Operation *op = getOperation();
  if (failed(expectPositive(op, "group_size", getGroupSize())))
    return failure();
  auto dataType = dyn_cast<RankedTensorType>(getData().getType());
  if (!dataType)
    return emitOpError() << "operand 'data' must be a ranked tensor, got "
                         << getData().getType();
  Type element = dataType.getElementType();

  if (isFP8(element)) {
    if (getAxis() == QuantAxis::blocks)
      return emitOpError() << "axis = blocks (FP8 expert weight blocks) is "
                              "not dequantized: moe.dequantize reads the "
                              "rowwise and colwise layouts";
    const char *reason = "is only used with packed NF4 'data' (ui8)";
    if (failed(rejectOperand(op, getCodebook(), "codebook", reason)) ||
        failed(rejectOperand(op, getExperts(), "experts", reason)))
      return failure();
    auto fp8Type = expectTensor(op, "operand 'data'", getData(), 2, isFP8,
                                "f8E4M3FN or f8E5M2 values");
    auto outType = expectTensor(op, "result 'output'", getOutput(), 2,
                                isWideFloat, kWideFloat);
    if (failed(fp8Type) || failed(outType))
      return failure();
    for (unsigned dim = 0; dim < 2; ++dim)
      if (failed(expectDim(op, "result 'output'", *outType, dim,
                           fp8Type->getDimSize(dim), "operand 'data'")))
        return failure();
    return verifyFP8Scales(op, getAxis(), getGroupSize(), *fp8Type,
                           "operand 'scales'", getScales(), getOffsets());
  }

  if (!isUI8(element))
    return emitOpError() << "operand 'data' must be a tensor of FP8 "
                            "(f8E4M3FN, f8E5M2) values, or of ui8 for packed "
                            "NF4, got "
                         << getData().getType();

  // Packed NF4 expert weights.
  if (failed(rejectOperand(op, getOffsets(), "offsets",
                           "is only used with FP8 'data'")))
    return failure();
  if (getAxis() != QuantAxis::rowwise)
    return emitOpError() << "attribute 'axis' applies to FP8 'data' only; "
                            "NF4 blocks run along each expert's elements";
  if (!getCodebook())
    return emitOpError() << "packed NF4 'data' (ui8) requires operand "
                            "'codebook'";
  auto codebookType =
      expectTensor(op, "operand 'codebook'", getCodebook(), 1, isF32, kF32);
  auto packedType = expectTensor(op, "operand 'data'", getData(), 3, isUI8,
                                 "ui8 values (two NF4 codes per byte)");
  auto absmaxType =
      expectTensor(op, "operand 'scales'", getScales(), 2, isF32, kF32);
  auto outType = expectTensor(op, "result 'output'", getOutput(), 3,
                              isWideFloat, kWideFloat);
  if (failed(codebookType) || failed(packedType) || failed(absmaxType) ||
      failed(outType) ||
      failed(expectDim(op, "operand 'codebook'", *codebookType, 0, 16,
                       "the 16 NF4 code values")))
    return failure();

  int64_t numExperts = packedType->getDimSize(0);
  int64_t rows = packedType->getDimSize(1);
  int64_t packedCols = packedType->getDimSize(2);
  int64_t cols =
      ShapedType::isDynamic(packedCols) ? packedCols : packedCols * 2;
  int64_t groupSize = getGroupSize();
  if (!ShapedType::isDynamic(rows) && !ShapedType::isDynamic(cols)) {
    if ((rows * cols) % groupSize != 0)
      return emitOpError() << "attribute 'group_size' (" << groupSize
                           << ") must divide the " << rows * cols
                           << " elements of each expert";
    if (failed(expectDim(op, "operand 'scales'", *absmaxType, 1,
                         rows * cols / groupSize,
                         "the blocks per expert (K * N / group_size)")))
      return failure();
  }
  if (failed(expectDim(op, "operand 'scales'", *absmaxType, 0, numExperts,
                       "the number of experts of 'data'")))
    return failure();

  int64_t outExperts = numExperts;
  StringRef outExpertsDesc = "the number of experts of 'data'";
  if (Value experts = getExperts()) {
    auto expertsType =
        expectTensor(op, "operand 'experts'", experts, 1, isI32, kI32);
    if (failed(expertsType))
      return failure();
    outExperts = expertsType->getDimSize(0);
    outExpertsDesc = "the length of 'experts'";
  }
  if (failed(expectDim(op, "result 'output'", *outType, 0, outExperts,
                       outExpertsDesc)) ||
      failed(expectDim(op, "result 'output'", *outType, 1, rows,
                       "dimension 1 of 'data'")) ||
      failed(expectDim(op, "result 'output'", *outType, 2, cols,
                       "twice dimension 2 of 'data' (two codes per byte)")))
    return failure();
  return success();
}

#define GET_OP_CLASSES
#include "moec/Dialect/Moe/IR/MoeOps.cpp.inc"
