//===- Patterns.cpp - The `vector` strategy's patterns --------------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "VectorKernels.h"

using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::vectorized;

void kernels::populateVectorKernelPatterns(KernelPatternSet &patterns,
                                           const TargetInfo &) {
  constexpr auto vector = moe::KernelStrategy::vector;
  patterns.add<moe::PermuteOp>(vector, emitPermute, matchPermute);
  patterns.add<moe::UnpermuteOp>(vector, emitUnpermute, matchUnpermute);
  patterns.add<moe::PermuteGradOp>(vector, emitPermuteGrad, matchPermuteGrad);
  patterns.add<moe::UnpermuteGradOp>(vector, emitUnpermuteGrad,
                                     matchUnpermuteGrad);
  patterns.add<moe::SwigluOp>(vector, emitSwiglu, matchSwiglu);
  patterns.add<moe::SwigluGradOp>(vector, emitSwigluGrad, matchSwigluGrad);
  patterns.add<moe::QuantizeOp>(vector, emitQuantize, matchQuantize);
  patterns.add<moe::DequantizeOp>(vector, emitDequantize, matchDequantize);
  patterns.add<mlir::linalg::TransposeOp>(vector, emitTranspose,
                                          matchTranspose);
  patterns.add<mlir::linalg::AddOp>(vector, emitAdd, matchAdd);
}
