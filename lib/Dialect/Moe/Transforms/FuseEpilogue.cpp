//===- FuseEpilogue.cpp - Fuse SwiGLU and row scaling into the matmul -----===//
//
// Part of moec. The `moe-fuse-epilogue` pass: element-wise work on a grouped
// matmul's output (the SwiGLU activation or its gradient, a per-row scale)
// moves into the matmul's epilogue, so the intermediate is never written.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "FusionPatterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEFUSEEPILOGUEPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

/// The matmul's result type holds bf16, f16 or f32 values only.
bool isMatmulResultElement(Type type) {
  return isa<BFloat16Type, Float16Type, Float32Type>(type);
}

/// A grouped matmul whose output `value` can take an epilogue: no
/// scatter (its rows are combined into tokens) and no other user.
GroupedMatmulOp getFusableMatmul(Value value, PatternRewriter &rewriter,
                                 Operation *consumer) {
  auto matmul = value.getDefiningOp<GroupedMatmulOp>();
  if (!matmul) {
    (void)rewriter.notifyMatchFailure(consumer, "input is not a grouped matmul");
    return {};
  }
  if (matmul.getScatterSlots() || !matmul->hasOneUse()) {
    (void)rewriter.notifyMatchFailure(consumer,
                                      "matmul scatters or has other users");
    return {};
  }
  return matmul;
}

/// swiglu(grouped_matmul(...)) -> grouped_matmul(...) {activation = swiglu}
struct FuseSwiglu : OpRewritePattern<SwigluOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SwigluOp swiglu,
                                PatternRewriter &rewriter) const override {
    // The matmul's epilogue reads gate and up as halves of the row.
    if (swiglu.getLayout() != GateUpLayout::halves)
      return rewriter.notifyMatchFailure(swiglu, "not the halves layout");
    GroupedMatmulOp matmul =
        getFusableMatmul(swiglu.getInput(), rewriter, swiglu);
    if (!matmul)
      return failure();
    // row_scale applies after the activation: fusing would move it before.
    if (matmul.getActivation() != Activation::none || matmul.getRowScale())
      return rewriter.notifyMatchFailure(
          swiglu, "matmul already has an activation or a row scale");
    auto outType = dyn_cast<RankedTensorType>(swiglu.getOutput().getType());
    if (!outType || !isMatmulResultElement(outType.getElementType()))
      return rewriter.notifyMatchFailure(swiglu,
                                         "result is not bf16, f16 or f32");

    rewriter.modifyOpInPlace(matmul, [&] {
      matmul.setActivation(Activation::swiglu);
      matmul.getOut().setType(outType);
    });
    rewriter.replaceOp(swiglu, matmul.getOut());
    return success();
  }
};

/// swiglu_grad(h, grouped_matmul(...))
///   -> grouped_matmul(...) activation_input(h) {activation = swiglu_grad}
/// In a backward: the down projection's input gradient goes straight to the
/// gradient of the gate_up output.
struct FuseSwigluGrad : OpRewritePattern<SwigluGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SwigluGradOp grad,
                                PatternRewriter &rewriter) const override {
    if (grad.getLayout() != GateUpLayout::halves)
      return rewriter.notifyMatchFailure(grad, "not the halves layout");
    GroupedMatmulOp matmul =
        getFusableMatmul(grad.getGradOutput(), rewriter, grad);
    if (!matmul)
      return failure();
    // A row scale may stay: swiglu_grad is linear in the output gradient.
    if (matmul.getActivation() != Activation::none)
      return rewriter.notifyMatchFailure(grad,
                                         "matmul already has an activation");
    auto inputType = dyn_cast<RankedTensorType>(grad.getInput().getType());
    auto outType = dyn_cast<RankedTensorType>(grad.getGradInput().getType());
    if (!inputType || !isMatmulResultElement(inputType.getElementType()) ||
        !outType || !isMatmulResultElement(outType.getElementType()))
      return rewriter.notifyMatchFailure(
          grad, "input or result is not bf16, f16 or f32");
    // The saved input becomes an operand of the matmul and must dominate
    // it: move the matmul (pure, used only here) next to the gradient.
    if (matmul->getBlock() != grad->getBlock())
      return rewriter.notifyMatchFailure(grad, "matmul in another block");

    rewriter.moveOpBefore(matmul, grad);
    rewriter.modifyOpInPlace(matmul, [&] {
      matmul.setActivation(Activation::swiglu_grad);
      matmul.getActivationInputMutable().assign(grad.getInput());
      matmul.getOut().setType(outType);
    });
    rewriter.replaceOp(grad, matmul.getOut());
    return success();
  }
};

/// Matches `linalg.generic` computing out[i, j] = y[i, j] * s[i] with y the
/// matmul result (identity map) and s a [M] f32 vector (map (d0, d1) -> d0),
/// and returns s. The body may extend y to f32 and truncate the product.
Value matchRowScale(linalg::GenericOp generic, Value &matrix) {
  if (generic.getNumDpsInputs() != 2 || generic.getNumDpsInits() != 1 ||
      generic->getNumResults() != 1 || generic.getNumLoops() != 2 ||
      generic.getNumParallelLoops() != 2)
    return {};
  // The init's contents must not matter.
  OpOperand *init = generic.getDpsInitOperand(0);
  if (generic.payloadUsesValueFromOperand(init) ||
      !generic.getMatchingIndexingMap(init).isIdentity())
    return {};

  MLIRContext *ctx = generic.getContext();
  AffineMap rowMap = AffineMap::get(
      /*dimCount=*/2, /*symbolCount=*/0, getAffineDimExpr(0, ctx));
  OpOperand *matrixOperand = nullptr, *scaleOperand = nullptr;
  for (OpOperand *input : generic.getDpsInputOperands()) {
    AffineMap map = generic.getMatchingIndexingMap(input);
    if (map.isIdentity())
      matrixOperand = input;
    else if (map == rowMap)
      scaleOperand = input;
  }
  if (!matrixOperand || !scaleOperand)
    return {};
  auto scaleType = dyn_cast<RankedTensorType>(scaleOperand->get().getType());
  if (!scaleType || scaleType.getRank() != 1 ||
      !scaleType.getElementType().isF32())
    return {};

  // Body: [extf y] ; mulf (y, s) in either order ; [truncf] ; yield.
  Block *body = generic.getBody();
  BlockArgument y = generic.getMatchingBlockArgument(matrixOperand);
  BlockArgument s = generic.getMatchingBlockArgument(scaleOperand);
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  Value result = yield.getValues().front();
  if (auto trunc = result.getDefiningOp<arith::TruncFOp>())
    result = trunc.getIn();
  auto mul = result.getDefiningOp<arith::MulFOp>();
  if (!mul || !mul.getType().isF32())
    return {};
  auto isMatrixValue = [&](Value v) {
    if (auto ext = v.getDefiningOp<arith::ExtFOp>())
      v = ext.getIn();
    return v == y;
  };
  bool matches = (isMatrixValue(mul.getLhs()) && mul.getRhs() == s) ||
                 (isMatrixValue(mul.getRhs()) && mul.getLhs() == s);
  if (!matches)
    return {};
  // Nothing else may happen in the body.
  for (Operation &op : body->without_terminator())
    if (!isa<arith::ExtFOp, arith::MulFOp, arith::TruncFOp>(op))
      return {};
  matrix = matrixOperand->get();
  return scaleOperand->get();
}

/// out = y * s[row] (linalg.generic) with y = grouped_matmul(...)
///   -> grouped_matmul(...) row_scale(s)
struct FuseRowScale : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp generic,
                                PatternRewriter &rewriter) const override {
    Value matrix;
    Value scale = matchRowScale(generic, matrix);
    if (!scale)
      return rewriter.notifyMatchFailure(generic, "not a row scaling");
    GroupedMatmulOp matmul = getFusableMatmul(matrix, rewriter, generic);
    if (!matmul)
      return failure();
    if (matmul.getRowScale())
      return rewriter.notifyMatchFailure(generic,
                                         "matmul already has a row scale");
    auto outType = dyn_cast<RankedTensorType>(generic->getResult(0).getType());
    if (!outType || !isMatmulResultElement(outType.getElementType()))
      return rewriter.notifyMatchFailure(generic,
                                         "result is not bf16, f16 or f32");
    // The scale becomes an operand of the matmul and must dominate it: move
    // the matmul (pure, used only here) next to the scaling.
    if (matmul->getBlock() != generic->getBlock())
      return rewriter.notifyMatchFailure(generic, "matmul in another block");

    rewriter.moveOpBefore(matmul, generic);
    rewriter.modifyOpInPlace(matmul, [&] {
      matmul.getRowScaleMutable().assign(scale);
      matmul.getOut().setType(outType);
    });
    rewriter.replaceOp(generic, matmul.getOut());
    return success();
  }
};

struct MoeFuseEpiloguePass
    : moec::moe::impl::MoeFuseEpiloguePassBase<MoeFuseEpiloguePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseSwiglu, FuseSwigluGrad, FuseRowScale>(&getContext());
    if (failed(applyFusionPatterns(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
