//===- Patterns.cpp - The `scalar` strategy's patterns --------------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "ScalarKernels.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::scalar;

namespace {

/// A dense matmul with A and B each plain or transposed.
bool matchDenseMatmul(linalg::MatmulOp op, moe::TileAttr, const TargetInfo &) {
  return succeeded(matmulLayout(op));
}

} // namespace

void kernels::populateScalarKernelPatterns(KernelPatternSet &patterns,
                                           const TargetInfo &) {
  constexpr auto scalar = moe::KernelStrategy::scalar;
  patterns.add<moe::RouterTopKOp>(scalar, emitRouterTopK);
  patterns.add<moe::RouterTopKGradOp>(scalar, emitRouterTopKGrad);
  patterns.add<moe::SortByExpertOp>(scalar, emitSortByExpert);
  patterns.add<moe::PermuteOp>(scalar, emitPermute);
  patterns.add<moe::UnpermuteOp>(scalar, emitUnpermute);
  patterns.add<moe::PermuteGradOp>(scalar, emitPermuteGrad);
  patterns.add<moe::UnpermuteGradOp>(scalar, emitUnpermuteGrad);
  patterns.add<moe::PermuteProbsOp>(scalar, emitPermuteProbs);
  patterns.add<moe::GroupedMatmulOp>(scalar, emitGroupedMatmul);
  patterns.add<moe::GroupedWeightGradOp>(scalar, emitGroupedWeightGrad);
  patterns.add<linalg::MatmulOp>(scalar, emitDenseMatmul, matchDenseMatmul);
  patterns.add<moe::LoraGradOp>(scalar, emitLoraGrad);
  patterns.add<linalg::AddOp>(scalar, emitElementwiseAdd);
  patterns.add<linalg::TransposeOp>(scalar, emitTranspose);
  patterns.add<linalg::FillOp>(scalar, emitFill);
  patterns.add<tensor::ExpandShapeOp>(scalar, emitExpandShape);
  patterns.add<tensor::CollapseShapeOp>(scalar, emitCollapseShape);
  patterns.add<tensor::PadOp>(scalar, emitPad);
  patterns.add<tensor::ExtractSliceOp>(scalar, emitExtractSlice);
  patterns.add<moe::SwigluOp>(scalar, emitSwiglu);
  patterns.add<moe::SwigluGradOp>(scalar, emitSwigluGrad);
  patterns.add<moe::QuantizeOp>(scalar, emitQuantize);
  patterns.add<moe::DequantizeOp>(scalar, emitDequantize);
}
