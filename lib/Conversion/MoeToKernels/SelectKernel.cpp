//===- SelectKernel.cpp - moe-select-kernel -------------------------------===//
//
// Part of moec. Writes each op's lowering strategy, tile and, for the
// sm90_wgmma kernel, its whole plan (#moe.kernel) and the module's target
// (#moe.target), so that the choice convert-moe-to-kernels follows is
// visible, testable and overridable on its own.
//
//===----------------------------------------------------------------------===//

#include "KernelPattern.h"

#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/TuningCache.h"

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

  /// The autotuner's cache of the `tuning-cache` option (none without);
  /// failure with a diagnostic.
  FailureOr<std::optional<moe::TuningCache>> loadCache(ModuleOp module) {
    if (tuningCache.empty())
      return std::optional<moe::TuningCache>();
    auto prefix = [&] {
      return module.emitError() << "moe-select-kernel: ";
    };
    if (tuningTarget.empty())
      return prefix() << "'tuning-cache' needs 'tuning-target' (the compile "
                         "target the tiles were measured on, e.g. sm_90a)";
    FailureOr<moe::TuningCache> loaded =
        moe::TuningCache::load(tuningCache, &getContext(), prefix);
    if (failed(loaded))
      return failure();
    return std::optional<moe::TuningCache>(std::move(*loaded));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<moe::TargetAttr> targetAttr = resolveKernelTarget(module, target);
    if (failed(targetAttr))
      return signalPassFailure();
    FailureOr<std::optional<moe::TuningCache>> cache = loadCache(module);
    if (failed(cache))
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
      // Measured tiles, unless the op asks for its own. On sm_90a (a kernel
      // per bucket) they are row ranges, and the cost model's tile serves
      // the rows above them.
      if (*cache && !op->hasAttr(moe::kTileAttrName) &&
          !op->hasAttr(moe::kTileBucketsAttrName) &&
          !op->hasAttr(moe::kKernelAttrName))
        (*cache)->apply(op, tuningTarget,
                        /*perBucketKernels=*/tuningTarget == "sm_90a");
      auto kernel = patterns.kernelFor(op);
      if (failed(kernel))
        return WalkResult::interrupt();
      auto [pattern, tile] = *kernel;
      // A plan written on the op was checked by kernelFor and is kept.
      moe::WgmmaPlanAttr plan;
      if (auto written = op->getAttrOfType<moe::KernelAttr>(
              moe::kKernelAttrName))
        plan = written.getPlan();
      if (!plan) {
        FailureOr<moe::WgmmaPlanAttr> selected = pattern->selectPlan(op, tile);
        if (failed(selected))
          return WalkResult::interrupt();
        plan = *selected;
      }
      op->setAttr(moe::kKernelAttrName,
                  moe::KernelAttr::get(context, pattern->getStrategy(), tile,
                                       plan));
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
