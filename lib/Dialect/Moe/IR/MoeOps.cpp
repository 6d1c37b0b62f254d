//===- MoeOps.cpp - Verifiers and canonicalizations of moe ops ------------===//
//
// Part of moec. Every diagnostic names the operand, result or attribute it is
// about, and where a size must match another it says which one.
//
//===----------------------------------------------------------------------===//

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

static_assert(kDynamicSize == ShapedType::kDynamic,
              "moec::kDynamicSize must match MLIR's dynamic size marker");

//===----------------------------------------------------------------------===//
// Verifier helpers
//===----------------------------------------------------------------------===//

namespace {

/// Element type classes accepted by the ops.
bool isAnyFloat(Type t) { return isa<FloatType>(t); }
bool isWideFloat(Type t) {
  return isa<BFloat16Type, Float16Type, Float32Type>(t);
}
bool isFP8(Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); }
bool isMatmulInput(Type t) { return isWideFloat(t) || isFP8(t); }
bool isI32(Type t) { return t.isSignlessInteger(32); }
bool isF32(Type t) { return t.isF32(); }
bool isUI8(Type t) { return t.isUnsignedInteger(8); }

const char *kAnyFloat = "floating-point values";
const char *kWideFloat = "bf16, f16 or f32 values";
const char *kMatmulInput = "bf16, f16, f32, f8E4M3FN or f8E5M2 values";
const char *kI32 = "i32 values";
const char *kF32 = "f32 values";

/// Verifies that `value` is a ranked tensor of rank `rank` whose element type
/// satisfies `isElement`; `what` names it ("operand 'logits'").
FailureOr<RankedTensorType> expectTensor(Operation *op, StringRef what,
                                         Value value, int64_t rank,
                                         function_ref<bool(Type)> isElement,
                                         StringRef elementDesc) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() != rank || !isElement(type.getElementType())) {
    op->emitOpError() << what << " must be a " << rank << "-D tensor of "
                      << elementDesc << ", got " << value.getType();
    return failure();
  }
  return type;
}

/// Verifies that dimension `dim` of `type` (named `what`) equals `expected`
/// when both are static. `expectedDesc` says where `expected` comes from.
LogicalResult expectDim(Operation *op, StringRef what, RankedTensorType type,
                        unsigned dim, int64_t expected,
                        const Twine &expectedDesc) {
  int64_t actual = type.getDimSize(dim);
  if (ShapedType::isDynamic(actual) || ShapedType::isDynamic(expected) ||
      actual == expected)
    return success();
  return op->emitOpError() << "dimension " << dim << " of " << what << " is "
                           << actual << " but must equal " << expectedDesc
                           << " (" << expected << ")";
}

/// Verifies an `offsets` operand, tensor<Exi32> with static E >= 1, and
/// returns E.
FailureOr<int64_t> expectOffsets(Operation *op, Value offsets) {
  auto type = expectTensor(op, "operand 'offsets'", offsets, 1, isI32, kI32);
  if (failed(type))
    return failure();
  int64_t numExperts = type->getDimSize(0);
  if (ShapedType::isDynamic(numExperts) || numExperts < 1 ||
      numExperts > kMaxNumExperts) {
    op->emitOpError() << "operand 'offsets' must have a static length in [1, "
                      << kMaxNumExperts << "] (the number of experts), got "
                      << offsets.getType();
    return failure();
  }
  return numExperts;
}

/// Counts (k, experts, group sizes, ...) are positive and index i32 slots and
/// offsets, so they must fit in i32 as well.
LogicalResult expectPositive(Operation *op, StringRef attrName, int64_t value) {
  if (value < 1)
    return op->emitOpError() << "attribute '" << attrName
                             << "' must be positive, got " << value;
  if (value > std::numeric_limits<int32_t>::max())
    return op->emitOpError() << "attribute '" << attrName
                             << "' must fit in i32, got " << value;
  return success();
}

/// `value` is positive and at most `limit`; `why` says what the limit
/// protects.
LogicalResult expectAtMost(Operation *op, StringRef attrName, int64_t value,
                           int64_t limit, StringRef why) {
  if (failed(expectPositive(op, attrName, value)))
    return failure();
  if (value > limit)
    return op->emitOpError() << "attribute '" << attrName << "' must be at most "
                             << limit << " (" << why << "), got " << value;
  return success();
}

/// Experts per token.
LogicalResult expectTopK(Operation *op, int64_t k) {
  return expectAtMost(op, "k", k, kMaxTopK,
                      "the kernels unroll their per-token loops over k");
}

/// A number of experts.
LogicalResult expectNumExperts(Operation *op, StringRef attrName,
                               int64_t experts) {
  return expectAtMost(op, attrName, experts, kMaxNumExperts,
                      "one table entry per expert");
}

LogicalResult expectSameElementType(Operation *op, StringRef what,
                                    RankedTensorType type, StringRef otherWhat,
                                    RankedTensorType other) {
  if (type.getElementType() == other.getElementType())
    return success();
  return op->emitOpError() << "element type of " << what << " ("
                           << type.getElementType() << ") must match "
                           << otherWhat << " (" << other.getElementType()
                           << ")";
}

/// Verifies a `positions` tensor (the row of each slot, as
/// moe.sort_by_expert returns it): tensor<Sxi32> with S = tokens * k.
/// `what` names it ("operand 'positions'"); a null value is fine.
LogicalResult expectPositions(Operation *op, StringRef what, Value positions,
                              int64_t tokens, int64_t topK) {
  if (!positions)
    return success();
  auto type = expectTensor(op, what, positions, 1, isI32, kI32);
  if (failed(type))
    return failure();
  int64_t slots = sortedCapacity(tokens, topK, /*numExperts=*/1, /*align=*/1);
  return expectDim(op, what, *type, 0, slots, "the number of slots tokens * k");
}

/// The rows of a permuted tensor must hold every one of the tokens*k slots.
LogicalResult expectEnoughRows(Operation *op, StringRef what, int64_t rows,
                               int64_t tokens, int64_t topK) {
  // An unaligned sort's capacity is exactly the tokens*k slots (dynamic when
  // unknown or overflowing).
  int64_t slots = sortedCapacity(tokens, topK, /*numExperts=*/1, /*align=*/1);
  if (ShapedType::isDynamic(rows) || ShapedType::isDynamic(slots) ||
      rows >= slots)
    return success();
  return op->emitOpError() << what << " has " << rows
                           << " rows, fewer than the " << slots
                           << " slots of " << tokens << " tokens with k = "
                           << topK;
}

LogicalResult rejectOperand(Operation *op, Value operand, StringRef name,
                            StringRef reason) {
  if (!operand)
    return success();
  return op->emitOpError() << "operand '" << name << "' " << reason;
}

/// Verifies the scale tensor of FP8 per-group (de)quantization of an [M, K]
/// tensor and the use of `offsets` that goes with `axis`.
LogicalResult verifyFP8Scales(Operation *op, QuantAxis axis, int64_t groupSize,
                              RankedTensorType dataType, StringRef scalesWhat,
                              Value scales, Value offsets) {
  auto scalesType = expectTensor(op, scalesWhat, scales, 2, isF32, kF32);
  if (failed(scalesType))
    return failure();
  int64_t rows = dataType.getDimSize(0), cols = dataType.getDimSize(1);
  if (axis == QuantAxis::rowwise) {
    if (failed(rejectOperand(op, offsets, "offsets",
                             "is only used with axis = colwise")))
      return failure();
    if (failed(expectDim(op, scalesWhat, *scalesType, 0, rows,
                         "the number of rows")) ||
        failed(expectDim(op, scalesWhat, *scalesType, 1,
                         rowwiseScaleCols(cols, groupSize),
                         "ceil(columns / group_size)")))
      return failure();
    return success();
  }
  if (!offsets)
    return op->emitOpError() << "axis = colwise requires operand 'offsets' "
                                "(the expert groups)";
  auto numExperts = expectOffsets(op, offsets);
  if (failed(numExperts))
    return failure();
  if (failed(expectDim(op, scalesWhat, *scalesType, 0,
                       colwiseScaleRows(rows, *numExperts, groupSize),
                       "(rows + min(E, rows) * (group_size - 1)) / group_size")) ||
      failed(expectDim(op, scalesWhat, *scalesType, 1, cols,
                       "the number of columns")))
    return failure();
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// RouterTopKOp
//===----------------------------------------------------------------------===//

LogicalResult RouterTopKOp::verify() {
  Operation *op = getOperation();
  auto logitsType =
      expectTensor(op, "operand 'logits'", getLogits(), 2, isAnyFloat, kAnyFloat);
  if (failed(logitsType))
    return failure();
  int64_t tokens = logitsType->getDimSize(0);
  int64_t numExperts = logitsType->getDimSize(1);
  if (ShapedType::isDynamic(numExperts) || numExperts > kMaxNumExperts)
    return emitOpError() << "expert dimension (1) of operand 'logits' must be "
                            "static and at most "
                         << kMaxNumExperts << ", got " << getLogits().getType();
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

  if (getOrder() == TopKOrder::topk_then_softmax &&
      getScoring() != Scoring::softmax)
    return emitOpError() << "order = topk_then_softmax requires scoring = "
                            "softmax, got scoring = "
                         << stringifyScoring(getScoring());

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

  float scale = getScalingFactor().convertToFloat();
  if (!(scale > 0.0f) || std::isinf(scale))
    return emitOpError() << "attribute 'scaling_factor' must be finite and "
                            "positive, got "
                         << scale;
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
  auto gradRowsType = expectTensor(op, "result 'grad_rows'", getGradRows(), 2,
                                   isWideFloat, kWideFloat);
  if (failed(gradOutType) || failed(slotsType) || failed(gradRowsType) ||
      failed(expectOffsets(op, getOffsets())) ||
      failed(expectTopK(op, getK())))
    return failure();
  int64_t rows = gradRowsType->getDimSize(0);
  int64_t tokens = gradOutType->getDimSize(0);
  int64_t hidden = gradOutType->getDimSize(1);
  if (failed(expectDim(op, "result 'grad_rows'", *gradRowsType, 0,
                       slotsType->getDimSize(0), "the length of 'slots'")) ||
      failed(expectDim(op, "result 'grad_rows'", *gradRowsType, 1, hidden,
                       "the hidden size of 'grad_out'")) ||
      failed(expectEnoughRows(op, "result 'grad_rows'", rows, tokens,
                              getK())) ||
      failed(expectPositions(op, "operand 'positions'", getPositions(), tokens,
                             getK())))
    return failure();

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
        failed(expectDim(op, "operand 'rows'", *rowsType, 0,
                         slotsType->getDimSize(0), "the length of 'slots'")) ||
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

//===----------------------------------------------------------------------===//
// GroupedMatmulOp
//===----------------------------------------------------------------------===//

namespace {

/// Verifies `mode = weight_grad`: [M, K]ᵀ · [M, N] per group -> [E, K, N].
LogicalResult verifyWeightGrad(GroupedMatmulOp op, RankedTensorType lhsType,
                               int64_t rows, int64_t numExperts) {
  Operation *raw = op.getOperation();
  const char *reason = "is not supported with mode = weight_grad";
  if (failed(rejectOperand(raw, op.getBias(), "bias", reason)) ||
      failed(rejectOperand(raw, op.getLoraA(), "lora_a", reason)) ||
      failed(rejectOperand(raw, op.getLoraB(), "lora_b", reason)) ||
      failed(rejectOperand(raw, op.getRowScale(), "row_scale", reason)) ||
      failed(rejectOperand(raw, op.getScatterSlots(), "scatter_slots",
                           reason)) ||
      failed(rejectOperand(raw, op.getScatterWeights(), "scatter_weights",
                           reason)) ||
      failed(rejectOperand(raw, op.getScatterPositions(), "scatter_positions",
                           reason)) ||
      failed(rejectOperand(raw, op.getLhsScales(), "lhs_scales", reason)) ||
      failed(rejectOperand(raw, op.getRhsScales(), "rhs_scales", reason)))
    return failure();
  if (!isWideFloat(lhsType.getElementType()))
    return op.emitOpError() << "mode = weight_grad needs bf16, f16 or f32 "
                               "operands, got 'lhs' of "
                            << lhsType;
  if (op.getTransposeRhs())
    return op.emitOpError() << "attribute 'transpose_rhs' " << reason;
  if (op.getActivation() != Activation::none)
    return op.emitOpError() << "attribute 'activation' " << reason;

  auto rhsType = expectTensor(raw, "operand 'rhs' (the output gradient)",
                              op.getRhs(), 2, isAnyFloat, kAnyFloat);
  auto outType = expectTensor(raw, "result 'out'", op.getOut(), 3,
                              isWideFloat, kWideFloat);
  if (failed(rhsType) || failed(outType) ||
      failed(expectSameElementType(raw, "operand 'rhs'", *rhsType,
                                   "operand 'lhs'", lhsType)) ||
      failed(expectDim(raw, "operand 'rhs'", *rhsType, 0, rows,
                       "the number of grouped rows")) ||
      failed(expectDim(raw, "result 'out'", *outType, 0, numExperts,
                       "the number of experts")) ||
      failed(expectDim(raw, "result 'out'", *outType, 1, lhsType.getDimSize(1),
                       "K, the columns of 'lhs'")) ||
      failed(expectDim(raw, "result 'out'", *outType, 2, rhsType->getDimSize(1),
                       "N, the columns of 'rhs'")))
    return failure();
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

  if (getMode() == MatmulMode::weight_grad)
    return verifyWeightGrad(*this, *lhsType, rows, *numExperts);

  auto rhsType = expectTensor(op, "operand 'rhs'", getRhs(), 3, isMatmulInput,
                              kMatmulInput);
  if (failed(rhsType) ||
      failed(expectSameElementType(op, "operand 'rhs'", *rhsType,
                                   "operand 'lhs'", *lhsType)) ||
      failed(expectDim(op, "operand 'rhs'", *rhsType, 0, *numExperts,
                       "the number of experts")))
    return failure();
  unsigned kDim = getTransposeRhs() ? 2 : 1, nDim = getTransposeRhs() ? 1 : 2;
  int64_t reduction = lhsType->getDimSize(1);
  int64_t cols = rhsType->getDimSize(nDim);
  if (failed(expectDim(op,
                       getTransposeRhs() ? "operand 'rhs' (transposed)"
                                         : "operand 'rhs'",
                       *rhsType, kDim, reduction, "K, the columns of 'lhs'")))
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
    auto aType = expectTensor(op, "operand 'lora_a'", getLoraA(), 2,
                              isAnyFloat, kAnyFloat);
    auto bType = expectTensor(op, "operand 'lora_b'", getLoraB(), 2,
                              isAnyFloat, kAnyFloat);
    if (failed(aType) || failed(bType))
      return failure();
    int64_t rankTimesExperts = aType->getDimSize(0);
    if (ShapedType::isDynamic(rankTimesExperts) || rankTimesExperts == 0 ||
        rankTimesExperts % *numExperts != 0)
      return emitOpError() << "dimension 0 of operand 'lora_a' must be a "
                              "static multiple of the number of experts ("
                           << *numExperts << ") with a rank r >= 1, got "
                           << getLoraA().getType();
    if (failed(expectDim(op, "operand 'lora_a'", *aType, 1, reduction,
                         "K, the columns of 'lhs'")) ||
        failed(expectDim(op, "operand 'lora_b'", *bType, 0, cols,
                         "N, the output columns of 'rhs'")) ||
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

LogicalResult QuantizeOp::verify() {
  Operation *op = getOperation();
  auto inputType =
      expectTensor(op, "operand 'input'", getInput(), 2, isWideFloat, kWideFloat);
  auto dataType = expectTensor(op, "result 'data'", getData(), 2, isFP8,
                               "f8E4M3FN or f8E5M2 values");
  if (failed(inputType) || failed(dataType) ||
      failed(expectPositive(op, "group_size", getGroupSize())))
    return failure();
  for (unsigned dim = 0; dim < 2; ++dim)
    if (failed(expectDim(op, "result 'data'", *dataType, dim,
                         inputType->getDimSize(dim), "operand 'input'")))
      return failure();
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
