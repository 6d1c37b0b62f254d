//===- VectorKernels.h - The `vector` strategy ------------------*- C++ -*-===//
//
// Part of moec. Kernels of the bandwidth-bound ops with 16-byte vector
// accesses (one chunk of a row per thread): they run on every target, the
// host included. Each op has a `match` (static shapes and types only) and
// an `emit`; Patterns.cpp registers them as the op's `vector` pattern.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORKERNELS_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORKERNELS_H

#include "../KernelPattern.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

namespace moec::kernels::vectorized {

#define MOEC_KERNEL_PATTERN_FUNCTIONS(OpTy, Name)                              \
  bool match##Name(moe::OpTy op, moe::TileAttr tile,                           \
                   const TargetInfo &target);                                  \
  mlir::LogicalResult emit##Name(moe::OpTy op, moe::TileAttr tile,             \
                                 BufferMap buffer, LoweringContext &ctx);

MOEC_KERNEL_PATTERN_FUNCTIONS(PermuteOp, Permute)             // Permute.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(UnpermuteOp, Unpermute)         // Permute.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(PermuteGradOp, PermuteGrad)     // Permute.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(UnpermuteGradOp, UnpermuteGrad) // Permute.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(SwigluOp, Swiglu)               // Swiglu.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(SwigluGradOp, SwigluGrad)       // Swiglu.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(QuantizeOp, Quantize)           // Quantize.cpp
MOEC_KERNEL_PATTERN_FUNCTIONS(DequantizeOp, Dequantize)       // Dequantize.cpp

#undef MOEC_KERNEL_PATTERN_FUNCTIONS

} // namespace moec::kernels::vectorized

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORKERNELS_H
