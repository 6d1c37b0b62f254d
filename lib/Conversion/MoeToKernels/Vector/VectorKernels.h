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

#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace moec::kernels::vectorized {

// Add.cpp
MOEC_DECLARE_KERNEL_PATTERN(mlir::linalg::AddOp, Add)
// Permute.cpp
MOEC_DECLARE_KERNEL_PATTERN(moe::PermuteOp, Permute)
MOEC_DECLARE_KERNEL_PATTERN(moe::UnpermuteOp, Unpermute)
MOEC_DECLARE_KERNEL_PATTERN(moe::PermuteGradOp, PermuteGrad)
MOEC_DECLARE_KERNEL_PATTERN(moe::UnpermuteGradOp, UnpermuteGrad)
// Swiglu.cpp
MOEC_DECLARE_KERNEL_PATTERN(moe::SwigluOp, Swiglu)
MOEC_DECLARE_KERNEL_PATTERN(moe::SwigluGradOp, SwigluGrad)
// Quantize.cpp
MOEC_DECLARE_KERNEL_PATTERN(moe::QuantizeOp, Quantize)
// Dequantize.cpp
MOEC_DECLARE_KERNEL_PATTERN(moe::DequantizeOp, Dequantize)
MOEC_DECLARE_KERNEL_PATTERN(mlir::linalg::TransposeOp, Transpose)

} // namespace moec::kernels::vectorized

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORKERNELS_H
