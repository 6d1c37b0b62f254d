//===- Tile.cpp - Attach #moe.tile configurations to moe ops --------------===//
//
// Part of moec. The `moe-tile` pass: every moe op without a `moe.tile`
// attribute gets the cost model's tile (Tiling.h), with the matmul tile
// overridden by pass options (the compiler runs it for those only).
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"
#include "moec/Dialect/Moe/Transforms/Tiling.h"

#include "mlir/IR/Diagnostics.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOETILEPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

struct MoeTilePass : moec::moe::impl::MoeTilePassBase<MoeTilePass> {
  using MoeTilePassBase::MoeTilePassBase;

  /// `tile` with the fields given as pass options replaced.
  std::array<int64_t, 4> applyOptions(TileAttr tile) const {
    auto pick = [](int64_t option, int64_t model) {
      return option != 0 ? option : model;
    };
    return {pick(tileM, tile.getM()), pick(tileN, tile.getN()),
            pick(tileK, tile.getK()), pick(threads, tile.getThreads())};
  }

  bool hasOverride() const {
    return tileM != 0 || tileN != 0 || tileK != 0 || threads != 0;
  }

  /// The tile of a matmul-like op, or null after reporting at `op` that the
  /// options make an invalid tile.
  TileAttr matmulTile(Operation *op, TileAttr model) const {
    if (!hasOverride())
      return model;
    auto [m, n, k, t] = applyOptions(model);
    return TileAttr::getChecked(
        [&] {
          return op->emitError() << "moe-tile: the options m=" << tileM
                                 << " n=" << tileN << " k=" << tileK
                                 << " threads=" << threads
                                 << " give an invalid tile for this op: ";
        },
        op->getContext(), m, n, k, t);
  }

  void runOnOperation() override {
    Operation *root = getOperation();
    MLIRContext *ctx = &getContext();

    // Reject bad options even when no matmul is there to use them: check
    // them against the model's usual matmul tile.
    if (hasOverride()) {
      auto [m, n, k, t] =
          applyOptions(TileAttr::get(ctx, /*m=*/16, /*n=*/16, /*k=*/32,
                                     /*threads=*/256));
      // Report at the location only: the op is the whole input.
      auto emitOptionError = [&] {
        return mlir::emitError(root->getLoc())
               << "moe-tile: invalid matmul tile options: ";
      };
      if (failed(TileAttr::verify(emitOptionError, m, n, k, t, 0, 0, 0, 1, 0)))
        return signalPassFailure();
    }

    WalkResult result = root->walk([&](Operation *op) {
      if (!isa_and_nonnull<MoeDialect>(op->getDialect()) ||
          op->hasAttr(kTileAttrName))
        return WalkResult::advance();
      TileAttr tile = defaultTileFor(op);
      if (hasMatmulTile(op))
        tile = matmulTile(op, tile);
      if (!tile)
        return WalkResult::interrupt();
      op->setAttr(kTileAttrName, tile);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
