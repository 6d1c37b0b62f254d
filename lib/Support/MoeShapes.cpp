//===- MoeShapes.cpp - Size arithmetic shared by compiler and runtime -----===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Support/MoeShapes.h"

namespace moec {

bool isPowerOfTwo(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

int64_t ceilDiv(int64_t a, int64_t b) {
  if (isDynamicSize(a))
    return kDynamicSize;
  return (a + b - 1) / b;
}

int64_t sortedCapacity(int64_t tokens, int64_t topK, int64_t numExperts,
                       int64_t align) {
  if (isDynamicSize(tokens))
    return kDynamicSize;
  return tokens * topK + numExperts * (align - 1);
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
  return (rows + nonEmpty * (groupSize - 1)) / groupSize;
}

} // namespace moec
