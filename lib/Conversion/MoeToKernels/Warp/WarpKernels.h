//===- WarpKernels.h - The `warp` strategy ----------------------*- C++ -*-===//
//
// Part of moec. Kernels that give a token (or a chunk of slots, or a
// quantization group) to a warp and exchange values with shuffles: targets
// with warp shuffles (TargetInfo::hasWarpShuffles). Each op has a `match`
// and an `emit`; Patterns.cpp registers them as the op's `warp` pattern.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPKERNELS_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPKERNELS_H

#include "../KernelPattern.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

namespace moec::kernels::warp {

// RouterTopK.cpp
MOEC_DECLARE_KERNEL_PATTERN(moe::RouterTopKOp, RouterTopK)
// SortByExpert.cpp
MOEC_DECLARE_KERNEL_PATTERN(moe::SortByExpertOp, SortByExpert)
// QuantizeRowwise.cpp: row-wise groups, and the blocks of expert weights
// (QuantizeBlocks.cpp) through the two below.
MOEC_DECLARE_KERNEL_PATTERN(moe::QuantizeOp, Quantize)
bool matchQuantizeBlocks(moe::QuantizeOp op, moe::TileAttr tile,
                         const TargetInfo &target);
mlir::LogicalResult emitQuantizeBlocks(moe::QuantizeOp op, BufferMap buffer,
                                       LoweringContext &ctx);

} // namespace moec::kernels::warp

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPKERNELS_H
