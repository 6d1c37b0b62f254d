//===- FusionPatterns.h - Shared driver of the fusion passes ----*- C++ -*-===//
//
// Part of moec (internal to lib/Dialect/Moe/Transforms).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_DIALECT_MOE_TRANSFORMS_FUSIONPATTERNS_H
#define MOEC_LIB_DIALECT_MOE_TRANSFORMS_FUSIONPATTERNS_H

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec::moe {

/// The sort with a `positions` result: `sort` itself, or a copy of it with
/// the result added (the old op's uses move to the copy, which takes its
/// place; `sort` is erased). Shared by moe-share-positions and
/// moe-autodiff.
SortByExpertOp withPositions(SortByExpertOp sort);

/// moe-fuse-permute's forward rewrite: a grouped matmul whose lhs is a
/// permute's rows reads the token rows by slot (`gather`). Shared by
/// moe-fuse-permute and moe-autodiff.
void populatePermuteIntoMatmulPatterns(mlir::RewritePatternSet &patterns);

/// Applies fusion patterns greedily and nothing else: folding and region
/// simplification are canonicalize's job.
inline mlir::LogicalResult applyFusionPatterns(mlir::Operation *op,
                                               mlir::RewritePatternSet &&patterns) {
  mlir::GreedyRewriteConfig config;
  config.enableFolding(false).setRegionSimplificationLevel(
      mlir::GreedySimplifyRegionLevel::Disabled);
  return mlir::applyPatternsGreedily(op, std::move(patterns), config);
}

} // namespace moec::moe

#endif // MOEC_LIB_DIALECT_MOE_TRANSFORMS_FUSIONPATTERNS_H
