//===- FusePermute.cpp - Fuse moe.permute into the grouped matmul ---------===//
//
// Part of moec. The `moe-fuse-permute` pass: a grouped matmul whose lhs is a
// permute's rows gathers the token rows itself (its `gather` prologue), so
// the permuted copy of the activations is never written.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "FusionPatterns.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEFUSEPERMUTEPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

/// grouped_matmul(permute(x, slots, offsets, k), w, offsets)
///   -> grouped_matmul(x, w, offsets) gather(slots) {k}
struct FusePermuteIntoMatmul : OpRewritePattern<GroupedMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GroupedMatmulOp matmul,
                                PatternRewriter &rewriter) const override {
    auto permute = matmul.getLhs().getDefiningOp<PermuteOp>();
    if (!permute)
      return rewriter.notifyMatchFailure(matmul, "lhs is not a moe.permute");
    // The passengers would be left without their permute.
    if (permute.getProbs() || permute.getScales())
      return rewriter.notifyMatchFailure(matmul,
                                         "permute carries probs or scales");
    if (matmul.getMode() != MatmulMode::forward)
      return rewriter.notifyMatchFailure(matmul, "not a forward matmul");
    if (matmul.getGatherSlots())
      return rewriter.notifyMatchFailure(matmul, "matmul already gathers");
    // FP8 lhs scales are per permuted row; a gathered lhs needs them per
    // token.
    if (matmul.getLhsScales())
      return rewriter.notifyMatchFailure(matmul, "matmul has lhs scales");
    // Other offsets would group the rows differently from the permute's
    // padding.
    if (matmul.getOffsets() != permute.getOffsets())
      return rewriter.notifyMatchFailure(matmul, "offsets differ");
    int64_t k = permute.getK();
    if (std::optional<int64_t> matmulK = matmul.getK(); matmulK && *matmulK != k)
      return rewriter.notifyMatchFailure(matmul, "scatter uses another k");
    // Gather and scatter share the token count: out has the tokens' T rows.
    if (matmul.getScatterSlots()) {
      int64_t tokens =
          cast<RankedTensorType>(permute.getTokens().getType()).getDimSize(0);
      int64_t scattered =
          cast<RankedTensorType>(matmul.getOut().getType()).getDimSize(0);
      if (!ShapedType::isDynamic(tokens) && !ShapedType::isDynamic(scattered) &&
          tokens != scattered)
        return rewriter.notifyMatchFailure(matmul,
                                           "scattered token count differs");
    }

    rewriter.modifyOpInPlace(matmul, [&] {
      matmul.getLhsMutable().assign(permute.getTokens());
      matmul.getGatherSlotsMutable().assign(permute.getSlots());
      matmul.setK(k);
    });
    if (permute->use_empty())
      rewriter.eraseOp(permute);
    return success();
  }
};

struct MoeFusePermutePass
    : moec::moe::impl::MoeFusePermutePassBase<MoeFusePermutePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FusePermuteIntoMatmul>(&getContext());
    if (failed(applyFusionPatterns(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
