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

#define MOEC_KERNEL_PATTERN_FUNCTIONS(OpTy, Name)                              \
  bool match##Name(moe::OpTy op, moe::TileAttr tile,                           \
                   const TargetInfo &target);                                  \
  mlir::LogicalResult emit##Name(moe::OpTy op, moe::TileAttr tile,             \
                                 BufferMap buffer, LoweringContext &ctx);

MOEC_KERNEL_PATTERN_FUNCTIONS(RouterTopKOp, RouterTopK)     // RouterTopK.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(SortByExpertOp, SortByExpert) // SortByExpert.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(QuantizeOp, Quantize) // QuantizeRowwise.cpp

#undef MOEC_KERNEL_PATTERN_FUNCTIONS

} // namespace moec::kernels::warp

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPKERNELS_H
