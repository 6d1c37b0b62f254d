//===- MoeShapesTest.cpp - Tests of the shared size arithmetic ------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Support/MoeShapes.h"

#include <gtest/gtest.h>

using namespace moec;

TEST(MoeShapes, PowerOfTwo) {
  EXPECT_TRUE(isPowerOfTwo(1));
  EXPECT_TRUE(isPowerOfTwo(128));
  EXPECT_FALSE(isPowerOfTwo(0));
  EXPECT_FALSE(isPowerOfTwo(-4));
  EXPECT_FALSE(isPowerOfTwo(96));
}

TEST(MoeShapes, CeilDiv) {
  EXPECT_EQ(ceilDiv(0, 128), 0);
  EXPECT_EQ(ceilDiv(1, 128), 1);
  EXPECT_EQ(ceilDiv(128, 128), 1);
  EXPECT_EQ(ceilDiv(129, 128), 2);
  EXPECT_TRUE(isDynamicSize(ceilDiv(kDynamicSize, 128)));
}

TEST(MoeShapes, SortedCapacity) {
  // Unaligned: every slot is one row.
  EXPECT_EQ(sortedCapacity(8192, 8, 128, 1), 65536);
  // Aligned: each of the E groups may gain up to align-1 padding rows.
  EXPECT_EQ(sortedCapacity(3, 2, 4, 16), 6 + 4 * 15);
  EXPECT_TRUE(isDynamicSize(sortedCapacity(kDynamicSize, 8, 128, 16)));
}

TEST(MoeShapes, ScaleShapes) {
  EXPECT_EQ(rowwiseScaleCols(2048, 128), 16);
  EXPECT_EQ(rowwiseScaleCols(2050, 128), 17);
  // 1 row over 2 experts in blocks of 4: one block at most.
  EXPECT_EQ(colwiseScaleRows(1, 2, 4), 1);
  // 10 rows over 3 experts in blocks of 4: splits 4+3+3 need 3 blocks,
  // 8+1+1 need 4 blocks, and no split needs more.
  EXPECT_EQ(colwiseScaleRows(10, 3, 4), 4);
  EXPECT_TRUE(isDynamicSize(colwiseScaleRows(kDynamicSize, 3, 4)));
}

/// Brute force: the colwise bound is the largest block count over every
/// split of `rows` into `experts` groups.
static int64_t maxBlocks(int64_t rows, int64_t experts, int64_t block) {
  if (experts == 1)
    return ceilDiv(rows, block);
  int64_t best = 0;
  for (int64_t first = 0; first <= rows; ++first)
    best = std::max(best, ceilDiv(first, block) +
                              maxBlocks(rows - first, experts - 1, block));
  return best;
}

TEST(MoeShapes, ColwiseBoundIsTight) {
  for (int64_t rows = 0; rows <= 12; ++rows)
    for (int64_t experts = 1; experts <= 3; ++experts)
      for (int64_t block = 1; block <= 5; ++block)
        EXPECT_EQ(colwiseScaleRows(rows, experts, block),
                  maxBlocks(rows, experts, block))
            << "rows=" << rows << " experts=" << experts
            << " block=" << block;
}

TEST(MoeShapes, OverflowIsUnknownNotWrapped) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ceilDiv(big, big), 1);
  EXPECT_EQ(rowwiseScaleCols(4, big), 1);
  EXPECT_TRUE(isDynamicSize(sortedCapacity(big / 2, 4, 8, 1)));
  EXPECT_TRUE(isDynamicSize(sortedCapacity(8, 2, big / 2, 4)));
  EXPECT_TRUE(isDynamicSize(colwiseScaleRows(big - 1, 8, 4)));
}
