//===- SelectKernel.cpp - moe-select-kernel -------------------------------===//
//
// Part of moec. Writes each op's lowering strategy and tile (#moe.kernel)
// and the module's target (#moe.target), so that the choice
// convert-moe-to-kernels follows is visible and testable on its own.
//
//===----------------------------------------------------------------------===//

#include "KernelPattern.h"

#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace moec {
#define GEN_PASS_DEF_MOESELECTKERNEL
#include "moec/Conversion/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

struct MoeSelectKernelPass
    : public moec::impl::MoeSelectKernelBase<MoeSelectKernelPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<moe::TargetAttr> targetAttr = resolveKernelTarget(module, target);
    if (failed(targetAttr))
      return signalPassFailure();
    std::unique_ptr<TargetInfo> targetInfo = TargetInfo::create(*targetAttr);
    KernelPatternSet patterns(*targetInfo);
    populateMoeToKernelsPatterns(patterns, *targetInfo);
    module->setAttr(moe::kTargetAttrName, *targetAttr);

    MLIRContext *context = &getContext();
    WalkResult walked = module.walk([&](Operation *op) {
      // The conversion lowers matmuls, adds, transposes, fills, reshapes,
      // pads and slices on tensors (it rejects others).
      if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
          linalgOp && !linalgOp.hasPureTensorSemantics())
        return WalkResult::advance();
      if (!isa<linalg::MatmulOp, linalg::AddOp, linalg::TransposeOp,
               linalg::FillOp, tensor::ExpandShapeOp,
               tensor::CollapseShapeOp, tensor::PadOp,
               tensor::ExtractSliceOp>(op) &&
          !isa_and_nonnull<moe::MoeDialect>(op->getDialect()))
        return WalkResult::advance();
      // A matmul's zero accumulator is no kernel of its own.
      if (isAccumulatorFill(op))
        return WalkResult::advance();
      auto kernel = patterns.kernelFor(op);
      if (failed(kernel))
        return WalkResult::interrupt();
      auto [pattern, tile] = *kernel;
      op->setAttr(moe::kKernelAttrName,
                  moe::KernelAttr::get(context, pattern->getStrategy(), tile));
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
