//===- MoeResultShapes.cpp - How each op's result sizes follow from its operands
//===//
//
// Part of moec. ReifyRankedShapedTypeOpInterface for every moe op: the size
// of each result dimension as an index value (tensor.dim of operands and
// arith on index) or a constant. convert-moe-to-kernels sizes buffers and
// records the bundle's size expressions from these; the checker reads them
// back from the bundle. A static dimension comes from the result type.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec::moe;

namespace {

/// Builds index arithmetic on sizes. Operations on two constants fold; any
/// other builds the arith op (the lowering translates each one to the host).
class SizeBuilder {
public:
  SizeBuilder(OpBuilder &builder, Operation *op,
              ReifiedRankedShapedTypeDims &out)
      : builder(builder), loc(op->getLoc()), out(out) {}

  OpFoldResult dim(Value tensor, int64_t d) {
    return tensor::getMixedSize(builder, loc, tensor, d);
  }
  OpFoldResult constant(int64_t v) { return builder.getIndexAttr(v); }

  OpFoldResult add(OpFoldResult a, OpFoldResult b) {
    return binary<arith::AddIOp>(a, b,
                                 [](int64_t x, int64_t y) { return x + y; });
  }
  OpFoldResult mul(OpFoldResult a, OpFoldResult b) {
    return binary<arith::MulIOp>(a, b,
                                 [](int64_t x, int64_t y) { return x * y; });
  }
  OpFoldResult floorDiv(OpFoldResult a, OpFoldResult b) {
    return binary<arith::DivUIOp>(a, b,
                                  [](int64_t x, int64_t y) { return x / y; });
  }
  OpFoldResult ceilDiv(OpFoldResult a, OpFoldResult b) {
    return binary<arith::CeilDivUIOp>(
        a, b, [](int64_t x, int64_t y) { return (x + y - 1) / y; });
  }
  OpFoldResult min(OpFoldResult a, OpFoldResult b) {
    return binary<arith::MinUIOp>(
        a, b, [](int64_t x, int64_t y) { return std::min(x, y); });
  }

  /// Records `result`'s sizes: static ones from its type, the others from
  /// `dynamic(d)`; fails when `dynamic` gives none.
  bool fill(Value result, llvm::function_ref<OpFoldResult(int64_t)> dynamic) {
    auto type = cast<ShapedType>(result.getType());
    SmallVector<OpFoldResult> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      OpFoldResult size =
          type.isDynamicDim(d) ? dynamic(d) : constant(type.getDimSize(d));
      if (!size)
        return false;
      sizes.push_back(size);
    }
    out.push_back(sizes);
    return true;
  }

private:
  template <typename OpT, typename Fold>
  OpFoldResult binary(OpFoldResult a, OpFoldResult b, Fold fold) {
    std::optional<int64_t> x = getConstantIntValue(a),
                           y = getConstantIntValue(b);
    // Folding is only for sizes that are small constants (type sizes).
    if (x && y && *y != 0)
      return constant(fold(*x, *y));
    return OpT::create(builder, loc, materialize(a), materialize(b))
        .getResult();
  }
  Value materialize(OpFoldResult size) {
    if (auto value = dyn_cast<Value>(size))
      return value;
    return arith::ConstantIndexOp::create(builder, loc,
                                          *getConstantIntValue(size));
  }

  OpBuilder &builder;
  Location loc;
  ReifiedRankedShapedTypeDims &out;
};

} // namespace

LogicalResult
RouterTopKOp::reifyResultShapes(OpBuilder &builder,
                                ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  // [T, k]: T from the logits; k is the attribute (and the static type).
  for (Value result : getResults())
    if (!s.fill(result, [&](int64_t d) {
          return d == 0 ? s.dim(getLogits(), 0) : OpFoldResult();
        }))
      return failure();
  return success();
}

LogicalResult
RouterTopKGradOp::reifyResultShapes(OpBuilder &builder,
                                    ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  s.fill(getGradLogits(), [&](int64_t d) { return s.dim(getLogits(), d); });
  return success();
}

LogicalResult
SortByExpertOp::reifyResultShapes(OpBuilder &builder,
                                  ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  OpFoldResult numSlots = s.mul(s.dim(getIds(), 0), s.dim(getIds(), 1));
  OpFoldResult capacity = numSlots;
  int64_t align = getAlign().value_or(1);
  if (align > 1)
    capacity = s.add(capacity, s.constant(getNumExperts() * (align - 1)));
  for (Value result : getResults())
    s.fill(result, [&](int64_t) {
      return result == getPositions() ? numSlots : capacity;
    });
  return success();
}

LogicalResult
PermuteOp::reifyResultShapes(OpBuilder &builder,
                             ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  OpFoldResult rows = s.dim(getSlots(), 0);
  OpFoldResult hidden = s.dim(getTokens(), 1);
  s.fill(getRows(), [&](int64_t d) { return d == 0 ? rows : hidden; });
  if (getPermutedProbs())
    s.fill(getPermutedProbs(), [&](int64_t) { return rows; });
  if (getPermutedScales()) {
    OpFoldResult groups = s.dim(getScales(), 1);
    s.fill(getPermutedScales(),
           [&](int64_t d) { return d == 0 ? rows : groups; });
  }
  return success();
}

LogicalResult
PermuteProbsOp::reifyResultShapes(OpBuilder &builder,
                                  ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  return success(
      s.fill(getOut(), [&](int64_t) { return s.dim(getSlots(), 0); }));
}

LogicalResult
UnpermuteOp::reifyResultShapes(OpBuilder &builder,
                               ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  OpFoldResult hidden = s.dim(getRows(), 1);
  // The token count: the weights' rows, or the slot count over k (the
  // positions have one entry per slot, no padding rows).
  OpFoldResult tokens;
  if (getWeights())
    tokens = s.dim(getWeights(), 0);
  else if (getPositions())
    tokens = s.floorDiv(s.dim(getPositions(), 0), s.constant(getK()));
  return success(
      s.fill(getOut(), [&](int64_t d) { return d == 0 ? tokens : hidden; }));
}

LogicalResult
PermuteGradOp::reifyResultShapes(OpBuilder &builder,
                                 ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  // The token count is not in the operands (the slots are padded rows):
  // only a static one is known here.
  OpFoldResult hidden = s.dim(getGradRows(), 1);
  auto dims = [&](int64_t d) { return d == 1 ? hidden : OpFoldResult(); };
  if (!s.fill(getGradTokens(), dims))
    return failure();
  return success(!getGradProbs() || s.fill(getGradProbs(), dims));
}

LogicalResult
UnpermuteGradOp::reifyResultShapes(OpBuilder &builder,
                                   ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  OpFoldResult rows = s.dim(getSlots(), 0);
  if (getGradRows())
    s.fill(getGradRows(),
           [&](int64_t d) { return d == 0 ? rows : s.dim(getGradOut(), 1); });
  if (getGradWeights())
    s.fill(getGradWeights(), [&](int64_t) { return s.dim(getGradOut(), 0); });
  return success();
}

LogicalResult
GroupedWeightGradOp::reifyResultShapes(OpBuilder &builder,
                                       ReifiedRankedShapedTypeDims &shapes) {
  // [E, K, N] ([K, E, N] with experts_in_columns, [E, N, K] with
  // transpose_rhs): K from the lhs, N from the grouped gradient.
  SizeBuilder s(builder, *this, shapes);
  // With FP8 scales both operands are transposed: K and N are their rows.
  int64_t kDim = getExpertsInColumns() ? 0 : getTransposeRhs() ? 2 : 1;
  int64_t nDim = getTransposeRhs() ? 1 : 2;
  int64_t sizeDim = getLhsScales() ? 0 : 1;
  s.fill(getOut(), [&](int64_t d) -> OpFoldResult {
    return d == kDim   ? s.dim(getLhs(), sizeDim)
           : d == nDim ? s.dim(getGradOut(), sizeDim)
                       : OpFoldResult();
  });
  return success();
}

LogicalResult
GroupedMatmulOp::reifyResultShapes(OpBuilder &builder,
                                   ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  OpFoldResult n = s.dim(getRhs(), getTransposeRhs() ? 1 : 2);
  if (getActivation() == Activation::swiglu)
    n = s.floorDiv(n, s.constant(2));
  if (getActivationInput())
    n = s.dim(getActivationInput(), 1);
  OpFoldResult rows;
  if (getScatterSlots()) {
    // Scattered into tokens: their count, from the weights or (gathered
    // rows are token rows) the lhs.
    if (getScatterWeights())
      rows = s.dim(getScatterWeights(), 0);
    else if (getGatherSlots())
      rows = s.dim(getLhs(), 0);
    else if (getScatterPositions())
      rows = s.floorDiv(s.dim(getScatterPositions(), 0),
                        s.constant(static_cast<int64_t>(*getK())));
  } else {
    rows = getGatherSlots() ? s.dim(getGatherSlots(), 0) : s.dim(getLhs(), 0);
  }
  return success(
      s.fill(getOut(), [&](int64_t d) { return d == 0 ? rows : n; }));
}

LogicalResult SwigluOp::reifyResultShapes(OpBuilder &builder,
                                          ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  s.fill(getOutput(), [&](int64_t d) {
    return d == 0 ? s.dim(getInput(), 0)
                  : s.floorDiv(s.dim(getInput(), 1), s.constant(2));
  });
  return success();
}

LogicalResult
SwigluGradOp::reifyResultShapes(OpBuilder &builder,
                                ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  s.fill(getGradInput(), [&](int64_t d) { return s.dim(getInput(), d); });
  return success();
}

LogicalResult
LoraGradOp::reifyResultShapes(OpBuilder &builder,
                              ReifiedRankedShapedTypeDims &shapes) {
  // Each gradient has its adapter's (static) shape.
  SizeBuilder s(builder, *this, shapes);
  s.fill(getGradA(), [&](int64_t d) { return s.dim(getLoraA(), d); });
  s.fill(getGradB(), [&](int64_t d) { return s.dim(getLoraB(), d); });
  return success();
}

LogicalResult
QuantizeOp::reifyResultShapes(OpBuilder &builder,
                              ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  int64_t g = getGroupSize();
  if (getAxis() == QuantAxis::blocks) {
    // [E, N, K] (transposed: [E, K, N]) and its blocks along each.
    auto from = [&](int64_t d) {
      return s.dim(getInput(), d == 0 || !getTranspose() ? d : 3 - d);
    };
    s.fill(getData(), from);
    s.fill(getScales(), [&](int64_t d) -> OpFoldResult {
      return d == 0 ? from(d) : s.ceilDiv(from(d), s.constant(g));
    });
    if (writesBothLayouts()) {
      // The second layout: always [E, K, N].
      auto fromT = [&](int64_t d) {
        return s.dim(getInput(), d == 0 ? d : 3 - d);
      };
      s.fill(getTransposedData(), fromT);
      s.fill(getTransposedScales(), [&](int64_t d) -> OpFoldResult {
        return d == 0 ? fromT(d) : s.ceilDiv(fromT(d), s.constant(g));
      });
    }
    return success();
  }
  if (!getTranspose())
    s.fill(getData(), [&](int64_t d) { return s.dim(getInput(), d); });
  if (getAxis() == QuantAxis::rowwise) {
    s.fill(getScales(), [&](int64_t d) {
      return d == 0 ? s.dim(getInput(), 0)
                    : s.ceilDiv(s.dim(getInput(), 1), s.constant(g));
    });
    return success();
  }
  // Column-wise: (M + min(E, M)·(g − 1)) / g blocks bound the groups'
  // blocks (colwiseScaleRows).
  int64_t experts = cast<ShapedType>(getOffsets().getType()).getDimSize(0);
  OpFoldResult m = s.dim(getInput(), 0);
  auto blocks = [&] {
    return s.floorDiv(
        s.add(m, s.mul(s.min(s.constant(experts), m), s.constant(g - 1))),
        s.constant(g));
  };
  // Transposed: [K, g * blocks].
  if (getTranspose())
    s.fill(getData(), [&](int64_t d) -> OpFoldResult {
      return d == 0 ? s.dim(getInput(), 1) : s.mul(blocks(), s.constant(g));
    });
  s.fill(getScales(), [&](int64_t d) -> OpFoldResult {
    return d != 0 ? s.dim(getInput(), 1) : blocks();
  });
  return success();
}

LogicalResult
DequantizeOp::reifyResultShapes(OpBuilder &builder,
                                ReifiedRankedShapedTypeDims &shapes) {
  SizeBuilder s(builder, *this, shapes);
  // NF4 packs two values per byte of the last dimension; an expert list
  // selects its rows.
  bool nf4 = cast<ShapedType>(getData().getType())
                 .getElementType()
                 .isUnsignedInteger(8);
  s.fill(getOutput(), [&](int64_t d) -> OpFoldResult {
    if (!nf4)
      return s.dim(getData(), d);
    if (d == 0)
      return getExperts() ? s.dim(getExperts(), 0) : s.dim(getData(), 0);
    return d == 1 ? s.dim(getData(), 1)
                  : s.mul(s.dim(getData(), 2), s.constant(2));
  });
  return success();
}

std::string moec::moe::unreifiableShapeReason(Operation *op) {
  auto dynamicDim0 = [](Value v) {
    return v && cast<ShapedType>(v.getType()).isDynamicDim(0);
  };
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case([&](RouterTopKOp) { return "dynamic k"; })
      .Case([&](UnpermuteOp) {
        return "a dynamic token count needs `weights` or `positions` (the "
               "number of tokens is the weights' first dimension, the "
               "positions' over k)";
      })
      .Case([&](PermuteGradOp p) {
        return dynamicDim0(p.getGradTokens())
                   ? "a dynamic token count is not in the operands (the "
                     "slots are padded rows)"
                   : "";
      })
      .Case([&](GroupedMatmulOp) {
        return "a scatter with a dynamic token count needs `scatter_weights`, "
               "`scatter_positions` or `gather`";
      })
      .Default([](Operation *) { return ""; });
}
