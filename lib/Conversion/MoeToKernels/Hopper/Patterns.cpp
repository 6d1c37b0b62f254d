//===- Patterns.cpp - The `sm90_wgmma` strategy's patterns ----------------===//
//
// Part of moec. The warpgroup-MMA grouped matmul (HopperKernel.h) for
// moe.grouped_matmul, moe.grouped_weight_grad and linalg.matmul A·Bᵀ, on
// targets with wgmma. moe-select-kernel records its whole plan
// (#moe.wgmma_plan, HopperPlan.h's selectPlan); the lowering follows the
// recorded plan (followPlan), and selects one the same way for an op that
// reaches it without.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

#include "../KernelPattern.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

template <typename OpTy> class WgmmaPattern : public OpKernelPattern<OpTy> {
public:
  explicit WgmmaPattern(const TargetInfo &target)
      : OpKernelPattern<OpTy>(moe::KernelStrategy::sm90_wgmma, target) {}

  bool match(OpTy op, moe::TileAttr tile) const override {
    return hopper::hopperPlanFor(op, tile, limits()).has_value();
  }
  FailureOr<moe::WgmmaPlanAttr> selectPlan(Operation *op,
                                           moe::TileAttr tile) const override {
    return hopper::selectPlan(op, tile, limits());
  }
  LogicalResult verifyPlan(Operation *op,
                           moe::WgmmaPlanAttr plan) const override {
    return hopper::followPlan(op, plan, limits());
  }
  LogicalResult emit(OpTy op, moe::TileAttr tile, BufferMap buffer,
                     LoweringContext &ctx) const override {
    moe::WgmmaPlanAttr plan;
    if (auto kernel = op->template getAttrOfType<moe::KernelAttr>(
            moe::kKernelAttrName))
      plan = kernel.getPlan();
    if (!plan) {
      FailureOr<moe::WgmmaPlanAttr> selected = selectPlan(op, tile);
      if (failed(selected))
        return failure();
      plan = *selected;
    }
    FailureOr<hopper::HopperKernelPlans> plans =
        hopper::followPlan(op, plan, limits());
    if (failed(plans))
      return failure();
    return hopper::lowerMatmulHopper(op, tile, *plans, buffer, ctx);
  }

private:
  hopper::HopperLimits limits() const {
    return hopper::limitsOf(this->getTarget());
  }
};

} // namespace

void kernels::populateHopperKernelPatterns(KernelPatternSet &patterns,
                                           const TargetInfo &target) {
  if (!target.hasWgmma())
    return;
  patterns.add<WgmmaPattern<moe::GroupedMatmulOp>>();
  patterns.add<WgmmaPattern<moe::GroupedWeightGradOp>>();
  patterns.add<WgmmaPattern<linalg::MatmulOp>>();
}
