//===- FusePermute.cpp - Fuse moe.permute into the grouped matmul ---------===//
//
// Part of moec. The `moe-fuse-permute` pass: a grouped matmul whose lhs is a
// permute's rows gathers the token rows itself (its `gather` prologue), so
// the permuted copy of the activations is never written. Likewise in the
// backward: matmuls reading unpermute_grad's row gradients gather the token
// gradients and scale by the routing weights, so those rows are never
// written.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "FusionPatterns.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <map>

namespace moec::moe {
#define GEN_PASS_DEF_MOEFUSEPERMUTEPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

/// Makes `op` (a grouped matmul or weight gradient) gather its lhs rows
/// from `tokens` by `slots`.
template <typename OpTy>
void gatherLhs(PatternRewriter &rewriter, OpTy op, Value tokens, Value slots,
               int64_t k) {
  rewriter.modifyOpInPlace(op, [&] {
    op.getLhsMutable().assign(tokens);
    op.getGatherSlotsMutable().assign(slots);
    op.setK(k);
  });
}

/// grouped_matmul(permute(x, slots, offsets, k), w, offsets)
///   -> grouped_matmul(x, w, offsets) gather(slots) {k}
struct FusePermuteIntoMatmul : OpRewritePattern<GroupedMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GroupedMatmulOp matmul,
                                PatternRewriter &rewriter) const override {
    auto permute = matmul.getLhs().getDefiningOp<PermuteOp>();
    if (!permute)
      return rewriter.notifyMatchFailure(matmul, "lhs is not a moe.permute");
    // The passengers would be left without their permute; but FP8 rows'
    // scales permuted with them are what a gathered matmul reads per token.
    bool tokenScales = permute.getScales() && matmul.getLhsScales() &&
                       matmul.getLhsScales() == permute.getPermutedScales();
    if (permute.getProbs() || (permute.getScales() && !tokenScales))
      return rewriter.notifyMatchFailure(matmul,
                                         "permute carries probs or scales");
    if (matmul.getGatherSlots())
      return rewriter.notifyMatchFailure(matmul, "matmul already gathers");
    // Other FP8 lhs scales are per permuted row; a gathered lhs needs them
    // per token.
    if (matmul.getLhsScales() && !tokenScales)
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

    gatherLhs(rewriter, matmul, permute.getTokens(), permute.getSlots(), k);
    if (tokenScales)
      rewriter.modifyOpInPlace(matmul, [&] {
        matmul.getLhsScalesMutable().assign(permute.getScales());
      });
    if (permute->use_empty())
      rewriter.eraseOp(permute);
    return success();
  }
};

/// The constant a row scale multiplies by: 1 without one, c for a
/// linalg.fill of the constant c; none otherwise.
std::optional<float> splatRowScale(Value rowScale) {
  if (!rowScale)
    return 1.0f;
  auto fill = rowScale.getDefiningOp<linalg::FillOp>();
  APFloat value(0.0f);
  if (!fill || !matchPattern(fill.value(), m_ConstantFloat(&value)) ||
      !value.isFinite())
    return std::nullopt;
  return value.convertToFloat();
}

/// How one reader of the row gradients takes the fusion: the matmul or
/// weight gradient that gathers them, and the matmul whose rows take the
/// routing weights (the same one, or a weight gradient's grad_out).
struct RowGradReader {
  Operation *gathers; ///< a GroupedMatmulOp or GroupedWeightGradOp
  GroupedMatmulOp scaled;
  float scale;
};

/// Why the forward matmul `matmul` cannot gather the token gradients in
/// place of its lhs rows (empty if it can).
std::string forwardReaderOf(GroupedMatmulOp matmul, UnpermuteGradOp grad,
                            RowGradReader &reader) {
  if (matmul.getRhs() == matmul.getLhs())
    return "a matmul reads the row gradients other than as its lhs";
  if (matmul.getGatherSlots() || matmul.getScatterSlots() ||
      matmul.getLhsScales())
    return "a matmul gathers, scatters or has FP8 scales";
  if (matmul.getOffsets() != grad.getOffsets())
    return "a matmul groups by other offsets";
  // The routing weight scales the output row: right where the output is
  // linear in the lhs row.
  if (matmul.getBias() || (matmul.getActivation() != Activation::none &&
                           matmul.getActivation() != Activation::swiglu_grad))
    return "a forward matmul has a bias or a non-linear activation";
  reader.gathers = matmul;
  reader.scaled = matmul;
  return "";
}

/// Why the weight gradient `wgrad` cannot gather the token gradients in
/// place of its lhs rows (empty if it can).
std::string weightGradReaderOf(GroupedWeightGradOp wgrad, UnpermuteGradOp grad,
                               RowGradReader &reader) {
  if (wgrad.getGradOut() == wgrad.getLhs())
    return "a matmul reads the row gradients other than as its lhs";
  if (wgrad.getGatherSlots())
    return "a weight gradient already gathers";
  if (wgrad.getOffsets() != grad.getOffsets())
    return "a matmul groups by other offsets";
  // Σ (w_i g_i)ᵀ r_i = Σ g_iᵀ (w_i r_i): the weight scales the grad_out
  // rows, which a forward matmul with no other reader writes.
  auto rhs = wgrad.getGradOut().getDefiningOp<GroupedMatmulOp>();
  if (!rhs || !rhs->hasOneUse() || rhs.getScatterSlots() ||
      rhs.getOffsets() != grad.getOffsets())
    return "a weight gradient's grad_out is not a grouped forward matmul "
           "that only it reads";
  // The weights are made next to the unpermute_grad: they must be there
  // before the rhs is computed.
  if (rhs->getBlock() != grad->getBlock() || !grad->isBeforeInBlock(rhs))
    return "a weight gradient's grad_out is computed before the "
           "unpermute_grad";
  reader.gathers = wgrad;
  reader.scaled = rhs;
  return "";
}

/// Why `use` of unpermute_grad's row gradients cannot read the token
/// gradients instead (empty if it can), and how.
std::string readerOf(OpOperand &use, UnpermuteGradOp grad,
                     RowGradReader &reader) {
  if (use.getOperandNumber() != 0)
    return "a matmul reads the row gradients other than as its lhs";
  std::string why =
      llvm::TypeSwitch<Operation *, std::string>(use.getOwner())
          .Case([&](GroupedMatmulOp matmul) {
            return forwardReaderOf(matmul, grad, reader);
          })
          .Case([&](GroupedWeightGradOp wgrad) {
            return weightGradReaderOf(wgrad, grad, reader);
          })
          .Default([](Operation *) {
            return "a reader is not a moe.grouped_matmul or "
                   "moe.grouped_weight_grad";
          });
  if (!why.empty())
    return why;
  std::optional<float> scale = splatRowScale(reader.scaled.getRowScale());
  if (!scale)
    return "a row scale is not a constant";
  reader.scale = *scale;
  return "";
}

/// unpermute_grad's row gradients g_i = w_i · dy[t_i], read by grouped
/// matmuls, become matmuls that gather dy by slot and take w as a row
/// scale (of their output, or of a weight gradient's other operand), so
/// that the [M, H] row gradients are never written:
///
///   %dr, %dw = moe.unpermute_grad %dy, %slots, %offsets k weights(%w, %y)
///   %dx = moe.grouped_matmul %dr, %wd, %offsets
///   // becomes
///   %dw = moe.unpermute_grad %dy, %slots, %offsets k weights(%w, %y)
///   %ws = moe.permute_probs %w, %slots, %offsets k
///   %dx = moe.grouped_matmul %dy, %wd, %offsets gather(%slots)
///         row_scale(%ws) {k}
///
/// All readers or none: one left unfused would keep the rows written.
struct FuseUnpermuteGradIntoMatmuls : OpRewritePattern<UnpermuteGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(UnpermuteGradOp grad,
                                PatternRewriter &rewriter) const override {
    Value rows = grad.getGradRows();
    if (!rows)
      return rewriter.notifyMatchFailure(grad, "no row gradients");
    // The readers would read dy in place of the rows: one element type.
    if (getElementTypeOrSelf(grad.getGradOut()) != getElementTypeOrSelf(rows))
      return rewriter.notifyMatchFailure(
          grad, "the row gradients change the element type");
    SmallVector<RowGradReader> readers;
    SmallVector<tensor::DimOp> dims;
    for (OpOperand &use : rows.getUses()) {
      // A size of the rows (the LoRA decomposition's row count) is read
      // from the slots or dy instead.
      if (auto dim = dyn_cast<tensor::DimOp>(use.getOwner())) {
        if (!dim.getConstantIndex())
          return rewriter.notifyMatchFailure(grad, "a dynamic dimension");
        dims.push_back(dim);
        continue;
      }
      RowGradReader reader;
      std::string why = readerOf(use, grad, reader);
      if (!why.empty())
        return rewriter.notifyMatchFailure(grad, why);
      // One op scaled for two readers (a weight gradient whose rhs reads
      // the rows too) would carry the weight once where the product has
      // it twice.
      if (llvm::any_of(readers, [&](const RowGradReader &other) {
            return other.scaled == reader.scaled;
          }))
        return rewriter.notifyMatchFailure(grad, "an op would be scaled twice");
      readers.push_back(reader);
    }

    Location loc = grad.getLoc();
    Value weights = grad.getWeights();
    // One permute_probs per constant, next to the unpermute_grad.
    std::map<float, Value> scaledWeights;
    auto weightsTimes = [&](float scale) {
      Value &value = scaledWeights[scale];
      if (!value) {
        rewriter.setInsertionPoint(grad);
        auto type = RankedTensorType::get(
            {cast<RankedTensorType>(rows.getType()).getDimSize(0)},
            rewriter.getF32Type());
        value = PermuteProbsOp::create(
            rewriter, loc, type, weights, grad.getSlots(), grad.getOffsets(),
            grad.getKAttr(), rewriter.getF32FloatAttr(scale));
      }
      return value;
    };
    for (RowGradReader &reader : readers) {
      if (auto matmul = dyn_cast<GroupedMatmulOp>(reader.gathers))
        gatherLhs(rewriter, matmul, grad.getGradOut(), grad.getSlots(),
                  grad.getK());
      else
        gatherLhs(rewriter, cast<GroupedWeightGradOp>(reader.gathers),
                  grad.getGradOut(), grad.getSlots(), grad.getK());
      // Without weights every weight is 1: the row scale stays as it is.
      if (weights) {
        Value scale = weightsTimes(reader.scale);
        rewriter.modifyOpInPlace(reader.scaled, [&] {
          reader.scaled.getRowScaleMutable().assign(scale);
        });
      }
    }

    for (tensor::DimOp dim : dims) {
      bool rowCount = *dim.getConstantIndex() == 0;
      rewriter.setInsertionPoint(dim);
      rewriter.replaceOpWithNewOp<tensor::DimOp>(
          dim, rowCount ? grad.getSlots() : grad.getGradOut(),
          rowCount ? 0 : 1);
    }

    // The rows have no reader left.
    if (!weights) {
      rewriter.eraseOp(grad);
      return success();
    }
    // The routing weights' gradient alone.
    rewriter.setInsertionPoint(grad);
    auto weightsOnly = UnpermuteGradOp::create(
        rewriter, loc, Type(), grad.getGradWeights().getType(),
        grad.getGradOut(), grad.getSlots(), grad.getOffsets(), weights,
        grad.getRows(), grad.getKAttr(), grad.getPositions());
    rewriter.replaceAllUsesWith(grad.getGradWeights(),
                                weightsOnly.getGradWeights());
    rewriter.eraseOp(grad);
    return success();
  }
};

struct MoeFusePermutePass
    : moec::moe::impl::MoeFusePermutePassBase<MoeFusePermutePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populatePermuteIntoMatmulPatterns(patterns);
    patterns.add<FuseUnpermuteGradIntoMatmuls>(&getContext());
    if (failed(applyFusionPatterns(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void moec::moe::populatePermuteIntoMatmulPatterns(RewritePatternSet &patterns) {
  patterns.add<FusePermuteIntoMatmul>(patterns.getContext());
}
