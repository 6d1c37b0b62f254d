//===- KernelPattern.cpp - Choosing a lowering strategy per op ------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "KernelPattern.h"

#include "moec/Dialect/Moe/Transforms/Tiling.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

const KernelPattern *
KernelPatternSet::find(Operation *op, moe::KernelStrategy strategy) const {
  StringRef name = op->getName().getStringRef();
  for (const auto &pattern : patterns)
    if (pattern->getOpName() == name && pattern->getStrategy() == strategy)
      return pattern.get();
  return nullptr;
}

std::pair<const KernelPattern *, moe::TileAttr>
KernelPatternSet::select(Operation *op, moe::TileAttr tile) const {
  // Fastest first: the strategies in decreasing enum value.
  for (auto strategy :
       {moe::KernelStrategy::sm90_wgmma, moe::KernelStrategy::warp,
        moe::KernelStrategy::vector, moe::KernelStrategy::scalar}) {
    const KernelPattern *pattern = find(op, strategy);
    moe::TileAttr strategyTile = tileForStrategy(tile, strategy);
    if (pattern && pattern->matches(op, strategyTile))
      return {pattern, strategyTile};
  }
  return {nullptr, {}};
}

FailureOr<std::pair<const KernelPattern *, moe::TileAttr>>
KernelPatternSet::kernelFor(Operation *op) const {
  auto kernel = op->getAttrOfType<moe::KernelAttr>(moe::kKernelAttrName);
  if (!kernel) {
    auto chosen = select(op, requestedTile(op));
    if (!chosen.first)
      return op->emitOpError("has no kernel for target '")
             << target.kind() << "'";
    return chosen;
  }
  moe::KernelStrategy strategy = kernel.getStrategy();
  const KernelPattern *pattern = find(op, strategy);
  if (!pattern)
    return op->emitOpError("has no '")
           << moe::stringifyKernelStrategy(strategy) << "' kernel for target '"
           << target.kind() << "' (its " << moe::kKernelAttrName << ")";
  if (kernel.getTile().getProducers() != 0 &&
      strategy != moe::KernelStrategy::sm90_wgmma)
    return op->emitOpError("'")
           << moe::stringifyKernelStrategy(strategy)
           << "' kernels have no producer warpgroup: its "
           << moe::kKernelAttrName << " tile needs producers = 0";
  if (!pattern->matches(op, kernel.getTile()))
    return op->emitOpError("'")
           << moe::stringifyKernelStrategy(strategy)
           << "' kernel does not apply to its types, sizes or tile (its "
           << moe::kKernelAttrName << ")";
  if (kernel.getPlan() && failed(pattern->verifyPlan(op, kernel.getPlan())))
    return failure();
  return std::make_pair(pattern, kernel.getTile());
}

moe::TileAttr kernels::tileForStrategy(moe::TileAttr tile,
                                       moe::KernelStrategy strategy) {
  if (!tile || tile.getProducers() == 0 ||
      strategy == moe::KernelStrategy::sm90_wgmma)
    return tile;
  return moe::TileAttr::get(tile.getContext(), tile.getM(), tile.getN(),
                            tile.getK(),
                            tile.getThreads() - tile.getProducers(),
                            tile.getStages(), tile.getBandM(),
                            /*producers=*/0);
}

bool kernels::isAccumulatorFill(Operation *op) {
  auto fill = dyn_cast<linalg::FillOp>(op);
  if (!fill || !fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() ||
      !matchPattern(fill.getInputs()[0], m_AnyZeroFloat()))
    return false;
  return llvm::all_of(fill.getResult(0).getUsers(), [](Operation *user) {
    return isa<linalg::MatmulOp>(user);
  });
}

moe::TileAttr kernels::requestedTile(Operation *op) {
  // The scalar dense matmul's block (the sm90_wgmma one picks its own).
  if (isa<linalg::MatmulOp>(op))
    return moe::TileAttr::get(op->getContext(), 16, 16, 32, 256);
  // One thread per element of a linalg.add, transpose, fill, reshape, pad
  // or slice.
  if (isa<linalg::AddOp, linalg::TransposeOp, linalg::FillOp,
          tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::PadOp,
          tensor::ExtractSliceOp>(op))
    return moe::TileAttr::get(op->getContext(), 1, 1, 1, 256);
  if (auto tile = op->getAttrOfType<moe::TileAttr>(moe::kTileAttrName))
    return tile;
  return moe::defaultTileFor(op);
}

FailureOr<moe::TargetAttr> kernels::resolveKernelTarget(ModuleOp module,
                                                        StringRef kind) {
  auto attr = module->getAttrOfType<moe::TargetAttr>(moe::kTargetAttrName);
  if (kind.empty())
    return attr ? attr
                : TargetInfo::defaultAttr(module.getContext(), "generic");
  moe::TargetAttr named = TargetInfo::defaultAttr(module.getContext(), kind);
  if (!named)
    return module.emitError("unknown target '")
           << kind << "' (expected " << TargetInfo::kKinds << ")";
  if (attr && attr.getKind() != kind)
    return module.emitError("kernel target '")
           << kind << "' disagrees with the module's " << moe::kTargetAttrName
           << " " << attr;
  return attr ? attr : named;
}

void kernels::populateMoeToKernelsPatterns(KernelPatternSet &patterns,
                                           const TargetInfo &target) {
  populateHopperKernelPatterns(patterns, target);
  populateWarpKernelPatterns(patterns, target);
  populateVectorKernelPatterns(patterns, target);
  populateScalarKernelPatterns(patterns, target);
}
