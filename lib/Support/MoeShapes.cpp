//===- MoeShapes.cpp - Size arithmetic shared by compiler and runtime -----===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Support/MoeShapes.h"

namespace moec {

namespace {

/// a * b + c, or kDynamicSize when it overflows int64 (then no check can be
/// made at compile time; such sizes are rejected elsewhere as absurd).
int64_t mulAdd(int64_t a, int64_t b, int64_t c) {
  int64_t product, sum;
  if (__builtin_mul_overflow(a, b, &product) ||
      __builtin_add_overflow(product, c, &sum))
    return kDynamicSize;
  return sum;
}

} // namespace

bool isPowerOfTwo(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

int64_t ceilDiv(int64_t a, int64_t b) {
  if (isDynamicSize(a))
    return kDynamicSize;
  return a / b + (a % b != 0);
}

int64_t sortedCapacity(int64_t tokens, int64_t topK, int64_t numExperts,
                       int64_t align) {
  if (isDynamicSize(tokens))
    return kDynamicSize;
  int64_t padding = mulAdd(numExperts, align - 1, 0);
  if (isDynamicSize(padding))
    return kDynamicSize;
  return mulAdd(tokens, topK, padding);
}

int64_t rowwiseScaleCols(int64_t cols, int64_t groupSize) {
  return ceilDiv(cols, groupSize);
}

int64_t colwiseScaleRows(int64_t rows, int64_t numExperts, int64_t groupSize) {
  if (isDynamicSize(rows))
    return kDynamicSize;
  // Only non-empty groups add a partial block, and at most `rows` groups can
  // be non-empty.
  int64_t nonEmpty = numExperts < rows ? numExperts : rows;
  int64_t bound = mulAdd(nonEmpty, groupSize - 1, rows);
  return isDynamicSize(bound) ? kDynamicSize : bound / groupSize;
}

int64_t transposedQuantColumns(int64_t rows, int64_t numExperts,
                               int64_t groupSize) {
  int64_t blocks = colwiseScaleRows(rows, numExperts, groupSize);
  return isDynamicSize(blocks) ? kDynamicSize : blocks * groupSize;
}

} // namespace moec
