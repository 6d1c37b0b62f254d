//===- FuseCombine.cpp - Fuse moe.unpermute into the grouped matmul -------===//
//
// Part of moec. The `moe-fuse-combine` pass: the unpermute (weighted combine
// back to token order) of a grouped matmul's rows becomes the matmul's
// `scatter` epilogue, so the per-slot rows are never written.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "FusionPatterns.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEFUSECOMBINEPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

/// unpermute(grouped_matmul(...), slots, offsets, k) [weights(w)]
///     [positions(p)]
///   -> grouped_matmul(...) scatter(slots) [scatter_weights(w)]
///     [scatter_positions(p)] {k}
///
/// unpermute computes out[t] = sum_j w[t, j] * rows[pos(t*k + j)], dropping
/// padding rows; scatter computes out[t] = sum over rows i with
/// slots[i] / k == t of w[t, slots[i] % k] * y_i, dropping padding rows. With
/// t = s / k and j = s % k for the slot s of row i these are the same sum.
struct FuseUnpermuteIntoMatmul : OpRewritePattern<UnpermuteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(UnpermuteOp unpermute,
                                PatternRewriter &rewriter) const override {
    auto matmul = unpermute.getRows().getDefiningOp<GroupedMatmulOp>();
    if (!matmul)
      return rewriter.notifyMatchFailure(unpermute,
                                         "rows are not a grouped matmul");
    if (matmul.getScatterSlots() || !matmul->hasOneUse())
      return rewriter.notifyMatchFailure(unpermute,
                                         "matmul scatters or has other users");
    if (matmul.getActivationInput())
      return rewriter.notifyMatchFailure(
          unpermute, "swiglu_grad's rows are not combined into tokens");
    if (matmul.getOffsets() != unpermute.getOffsets())
      return rewriter.notifyMatchFailure(unpermute, "offsets differ");
    int64_t k = unpermute.getK();
    if (std::optional<int64_t> matmulK = matmul.getK(); matmulK && *matmulK != k)
      return rewriter.notifyMatchFailure(unpermute, "gather uses another k");
    auto outType = cast<RankedTensorType>(unpermute.getOut().getType());
    // Gather and scatter share the token count: out has lhs's T rows.
    if (matmul.getGatherSlots()) {
      int64_t gathered =
          cast<RankedTensorType>(matmul.getLhs().getType()).getDimSize(0);
      int64_t tokens = outType.getDimSize(0);
      if (!ShapedType::isDynamic(gathered) && !ShapedType::isDynamic(tokens) &&
          gathered != tokens)
        return rewriter.notifyMatchFailure(unpermute,
                                           "gathered token count differs");
    }
    // Slots and weights become operands of the matmul and must dominate it:
    // move the matmul (pure, used only here) next to the unpermute.
    if (matmul->getBlock() != unpermute->getBlock())
      return rewriter.notifyMatchFailure(unpermute, "matmul in another block");

    rewriter.moveOpBefore(matmul, unpermute);
    rewriter.modifyOpInPlace(matmul, [&] {
      matmul.getScatterSlotsMutable().assign(unpermute.getSlots());
      if (Value weights = unpermute.getWeights())
        matmul.getScatterWeightsMutable().assign(weights);
      if (Value positions = unpermute.getPositions())
        matmul.getScatterPositionsMutable().assign(positions);
      matmul.setK(k);
      matmul.getOut().setType(outType);
    });
    rewriter.replaceOp(unpermute, matmul.getOut());
    return success();
  }
};

struct MoeFuseCombinePass
    : moec::moe::impl::MoeFuseCombinePassBase<MoeFuseCombinePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseUnpermuteIntoMatmul>(&getContext());
    if (failed(applyFusionPatterns(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
