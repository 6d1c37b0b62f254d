//===- Patterns.cpp - The `sm90_wgmma` strategy's patterns ----------------===//
//
// Part of moec. The warpgroup-MMA grouped matmul (HopperKernel.h) for
// moe.grouped_matmul, moe.grouped_weight_grad and linalg.matmul A·Bᵀ, on
// targets with wgmma.
//
//===----------------------------------------------------------------------===//

#include "HopperPlan.h"

#include "../KernelPattern.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

template <typename OpTy>
bool matchWgmma(OpTy op, moe::TileAttr tile, const TargetInfo &target) {
  return hopper::hopperPlanFor(op, tile, hopper::limitsOf(target))
      .has_value();
}

template <typename OpTy>
LogicalResult emitWgmma(OpTy op, moe::TileAttr tile, BufferMap buffer,
                        LoweringContext &ctx) {
  return *lowerMatmulHopper(op, tile, buffer, ctx);
}

} // namespace

void kernels::populateHopperKernelPatterns(KernelPatternSet &patterns,
                                           const TargetInfo &target) {
  if (!target.hasWgmma())
    return;
  constexpr auto wgmma = moe::KernelStrategy::sm90_wgmma;
  patterns.add<moe::GroupedMatmulOp>(wgmma, emitWgmma<moe::GroupedMatmulOp>,
                                     matchWgmma<moe::GroupedMatmulOp>);
  patterns.add<moe::GroupedWeightGradOp>(
      wgmma, emitWgmma<moe::GroupedWeightGradOp>,
      matchWgmma<moe::GroupedWeightGradOp>);
  patterns.add<linalg::MatmulOp>(wgmma, emitWgmma<linalg::MatmulOp>,
                                 matchWgmma<linalg::MatmulOp>);
}
