//===- ScalarKernels.h - The `scalar` strategy ------------------*- C++ -*-===//
//
// Part of moec. One generator per op, mirroring the float64 reference loop
// by loop (lib/Reference): one thread per output element (or per token,
// per expert), f32 arithmetic, one rounding at the store. They apply to
// every op on every target: the strategy the others fall back to.
//
// Conventions: `ctx.launch` creates a kernel whose arguments are the given
// host operands, in order; a kernel over `n` work items is launched on
// ceil(n / threads) blocks and guards `id < n`. Sizes passed as index
// arguments become the kernel's scalar parameters.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_SCALAR_SCALARKERNELS_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_SCALAR_SCALARKERNELS_H

#include "../KernelPattern.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

namespace mlir::linalg {
class AddOp;
class FillOp;
class TransposeOp;
class MatmulOp;
} // namespace mlir::linalg

namespace mlir::tensor {
class CollapseShapeOp;
class ExpandShapeOp;
class ExtractSliceOp;
class PadOp;
} // namespace mlir::tensor

namespace moec::kernels::scalar {

#define MOEC_SCALAR_KERNEL(OpTy, Name)                                         \
  mlir::LogicalResult emit##Name(OpTy op, moe::TileAttr tile,                  \
                                 BufferMap buffer, LoweringContext &ctx);

MOEC_SCALAR_KERNEL(moe::RouterTopKOp, RouterTopK)       // Routing.cpp
MOEC_SCALAR_KERNEL(moe::RouterTopKGradOp, RouterTopKGrad) // Routing.cpp
MOEC_SCALAR_KERNEL(moe::SortByExpertOp, SortByExpert)   // Routing.cpp
MOEC_SCALAR_KERNEL(moe::PermuteOp, Permute)             // Permute.cpp
MOEC_SCALAR_KERNEL(moe::UnpermuteOp, Unpermute)         // Permute.cpp
MOEC_SCALAR_KERNEL(moe::PermuteGradOp, PermuteGrad)     // Permute.cpp
MOEC_SCALAR_KERNEL(moe::UnpermuteGradOp, UnpermuteGrad) // Permute.cpp
MOEC_SCALAR_KERNEL(moe::PermuteProbsOp, PermuteProbs)   // Permute.cpp
MOEC_SCALAR_KERNEL(moe::GroupedMatmulOp, GroupedMatmul) // Matmul.cpp
MOEC_SCALAR_KERNEL(moe::GroupedWeightGradOp, GroupedWeightGrad) // Matmul.cpp
MOEC_SCALAR_KERNEL(mlir::linalg::MatmulOp, DenseMatmul) // Matmul.cpp
MOEC_SCALAR_KERNEL(moe::LoraGradOp, LoraGrad)           // LoraGrad.cpp
MOEC_SCALAR_KERNEL(mlir::linalg::AddOp, ElementwiseAdd) // Elementwise.cpp
MOEC_SCALAR_KERNEL(mlir::linalg::TransposeOp, Transpose) // Elementwise.cpp
MOEC_SCALAR_KERNEL(mlir::linalg::FillOp, Fill)          // Elementwise.cpp
MOEC_SCALAR_KERNEL(mlir::tensor::ExpandShapeOp, ExpandShape) // Elementwise.cpp
MOEC_SCALAR_KERNEL(mlir::tensor::CollapseShapeOp, CollapseShape) // Elementwise.cpp
MOEC_SCALAR_KERNEL(mlir::tensor::PadOp, Pad)            // Elementwise.cpp
MOEC_SCALAR_KERNEL(mlir::tensor::ExtractSliceOp, ExtractSlice) // Elementwise.cpp
MOEC_SCALAR_KERNEL(moe::SwigluOp, Swiglu)               // Elementwise.cpp
MOEC_SCALAR_KERNEL(moe::SwigluGradOp, SwigluGrad)       // Elementwise.cpp
MOEC_SCALAR_KERNEL(moe::QuantizeOp, Quantize)           // Elementwise.cpp
MOEC_SCALAR_KERNEL(moe::DequantizeOp, Dequantize)       // Elementwise.cpp

#undef MOEC_SCALAR_KERNEL

} // namespace moec::kernels::scalar

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_SCALAR_SCALARKERNELS_H
