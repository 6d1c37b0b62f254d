//===- MoeShapes.h - Size arithmetic shared by compiler and runtime -*- C++ -*-===//
//
// Part of moec. Free of MLIR so that the runtime, which checks buffer sizes
// before a launch, and the verifiers, which check tensor types, agree on one
// definition of every derived size.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_SUPPORT_MOESHAPES_H
#define MOEC_SUPPORT_MOESHAPES_H

#include <cstdint>
#include <limits>

namespace moec {

/// A size unknown at compile time. Equal to mlir::ShapedType::kDynamic. The
/// functions below also return it when a size would overflow int64.
inline constexpr int64_t kDynamicSize = std::numeric_limits<int64_t>::min();

inline bool isDynamicSize(int64_t size) { return size == kDynamicSize; }

/// Limits the verifiers enforce, so that no attribute or static size makes
/// the compiler build unbounded code or the runtime unbounded tables.
/// Experts per token (`k`): the vector kernels unroll their per-token loops
/// over k (k = 64 compiles in about a second; real models use 1 - 16).
inline constexpr int64_t kMaxTopK = 64;
/// Experts (`num_experts`, the length of `offsets`, the router's logits
/// columns): the offsets and histogram tables have one entry per expert.
inline constexpr int64_t kMaxNumExperts = 65536;

/// True for 1, 2, 4, 8, ...
bool isPowerOfTwo(int64_t value);

/// ceil(a / b) for a >= 0, b > 0; dynamic if a is.
int64_t ceilDiv(int64_t a, int64_t b);

/// Rows produced by sorting `tokens * topK` slots over `numExperts` experts
/// when every group is padded to a multiple of `align` (align 1 = no padding):
/// tokens*topK + numExperts*(align-1). Dynamic if `tokens` is.
int64_t sortedCapacity(int64_t tokens, int64_t topK, int64_t numExperts,
                       int64_t align);

/// Columns of the scale tensor of row-wise quantization of `cols` columns in
/// groups of `groupSize`: ceil(cols / groupSize).
int64_t rowwiseScaleCols(int64_t cols, int64_t groupSize);

/// Rows of the scale tensor of column-wise quantization of `rows` grouped
/// rows over `numExperts` experts in blocks of `groupSize` rows that never
/// span two experts: (rows + min(numExperts, rows)*(groupSize-1)) / groupSize,
/// the most blocks any split of `rows` into `numExperts` groups can need.
int64_t colwiseScaleRows(int64_t rows, int64_t numExperts, int64_t groupSize);

/// Rows per scale block of the FP8 weight gradient (moe.grouped_weight_grad
/// with scales): its operands come from moe.quantize {axis = colwise,
/// transpose} with this group size, one block per wgmma slice of 128.
inline constexpr int64_t kFp8ScaleBlock = 128;

/// Columns of moe.quantize {transpose}'s data of `rows` grouped rows:
/// groupSize * colwiseScaleRows (each expert padded to its blocks).
int64_t transposedQuantColumns(int64_t rows, int64_t numExperts,
                               int64_t groupSize);

} // namespace moec

#endif // MOEC_SUPPORT_MOESHAPES_H
