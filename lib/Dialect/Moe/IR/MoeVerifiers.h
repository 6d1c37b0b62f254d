//===- MoeVerifiers.h - Helpers the moe ops' verifiers share ---*- C++ -*-===//
//
// Part of moec. Type predicates and checks that name the operand, result or
// attribute they are about, so every verifier's diagnostics read alike
// (MoeOps.cpp, MoeMatmulOps.cpp). Internal to the dialect library.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_DIALECT_MOE_IR_MOEVERIFIERS_H
#define MOEC_LIB_DIALECT_MOE_IR_MOEVERIFIERS_H

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Support/MoeShapes.h"

#include "mlir/IR/BuiltinTypes.h"

namespace moec::moe::verifiers {

using namespace mlir;

/// Element type classes accepted by the ops.
inline bool isAnyFloat(Type t) { return isa<FloatType>(t); }
inline bool isWideFloat(Type t) {
  return isa<BFloat16Type, Float16Type, Float32Type>(t);
}
inline bool isFP8(Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); }
inline bool isMatmulInput(Type t) { return isWideFloat(t) || isFP8(t); }
inline bool isI32(Type t) { return t.isSignlessInteger(32); }
inline bool isF32(Type t) { return t.isF32(); }
inline bool isUI8(Type t) { return t.isUnsignedInteger(8); }

inline constexpr const char *kAnyFloat = "floating-point values";
inline constexpr const char *kWideFloat = "bf16, f16 or f32 values";
inline constexpr const char *kMatmulInput =
    "bf16, f16, f32, f8E4M3FN or f8E5M2 values";
inline constexpr const char *kI32 = "i32 values";
inline constexpr const char *kF32 = "f32 values";

/// Verifies that `value` is a ranked tensor of rank `rank` whose element type
/// satisfies `isElement`; `what` names it ("operand 'logits'").
inline FailureOr<RankedTensorType>
expectTensor(Operation *op, StringRef what, Value value, int64_t rank,
             function_ref<bool(Type)> isElement, StringRef elementDesc) {
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
inline LogicalResult expectDim(Operation *op, StringRef what,
                               RankedTensorType type, unsigned dim,
                               int64_t expected, const Twine &expectedDesc) {
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
inline FailureOr<int64_t> expectOffsets(Operation *op, Value offsets) {
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
inline LogicalResult expectPositive(Operation *op, StringRef attrName,
                                    int64_t value) {
  if (value < 1)
    return op->emitOpError()
           << "attribute '" << attrName << "' must be positive, got " << value;
  if (value > std::numeric_limits<int32_t>::max())
    return op->emitOpError()
           << "attribute '" << attrName << "' must fit in i32, got " << value;
  return success();
}

/// `value` is positive and at most `limit`; `why` says what the limit
/// protects.
inline LogicalResult expectAtMost(Operation *op, StringRef attrName,
                                  int64_t value, int64_t limit, StringRef why) {
  if (failed(expectPositive(op, attrName, value)))
    return failure();
  if (value > limit)
    return op->emitOpError()
           << "attribute '" << attrName << "' must be at most " << limit << " ("
           << why << "), got " << value;
  return success();
}

/// Experts per token.
inline LogicalResult expectTopK(Operation *op, int64_t k) {
  return expectAtMost(op, "k", k, kMaxTopK,
                      "the kernels unroll their per-token loops over k");
}

/// A number of experts.
inline LogicalResult expectNumExperts(Operation *op, StringRef attrName,
                                      int64_t experts) {
  return expectAtMost(op, attrName, experts, kMaxNumExperts,
                      "one table entry per expert");
}

inline LogicalResult expectSameElementType(Operation *op, StringRef what,
                                           RankedTensorType type,
                                           StringRef otherWhat,
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
inline LogicalResult expectPositions(Operation *op, StringRef what,
                                     Value positions, int64_t tokens,
                                     int64_t topK) {
  if (!positions)
    return success();
  auto type = expectTensor(op, what, positions, 1, isI32, kI32);
  if (failed(type))
    return failure();
  int64_t slots = sortedCapacity(tokens, topK, /*numExperts=*/1, /*align=*/1);
  return expectDim(op, what, *type, 0, slots, "the number of slots tokens * k");
}

/// The rows of a permuted tensor must hold every one of the tokens*k slots.
inline LogicalResult expectEnoughRows(Operation *op, StringRef what,
                                      int64_t rows, int64_t tokens,
                                      int64_t topK) {
  // An unaligned sort's capacity is exactly the tokens*k slots (dynamic when
  // unknown or overflowing).
  int64_t slots = sortedCapacity(tokens, topK, /*numExperts=*/1, /*align=*/1);
  if (ShapedType::isDynamic(rows) || ShapedType::isDynamic(slots) ||
      rows >= slots)
    return success();
  return op->emitOpError() << what << " has " << rows
                           << " rows, fewer than the " << slots << " slots of "
                           << tokens << " tokens with k = " << topK;
}

inline LogicalResult rejectOperand(Operation *op, Value operand, StringRef name,
                                   StringRef reason) {
  if (!operand)
    return success();
  return op->emitOpError() << "operand '" << name << "' " << reason;
}

/// Verifies the scale tensor of FP8 per-group (de)quantization of an [M, K]
/// tensor and the use of `offsets` that goes with `axis`.
inline LogicalResult verifyFP8Scales(Operation *op, QuantAxis axis,
                                     int64_t groupSize,
                                     RankedTensorType dataType,
                                     StringRef scalesWhat, Value scales,
                                     Value offsets) {
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
  if (failed(
          expectDim(op, scalesWhat, *scalesType, 0,
                    colwiseScaleRows(rows, *numExperts, groupSize),
                    "(rows + min(E, rows) * (group_size - 1)) / group_size")) ||
      failed(expectDim(op, scalesWhat, *scalesType, 1, cols,
                       "the number of columns")))
    return failure();
  return success();
}

} // namespace moec::moe::verifiers

#endif // MOEC_LIB_DIALECT_MOE_IR_MOEVERIFIERS_H
