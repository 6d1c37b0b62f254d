//===- PadLoraRank.cpp - LoRA ranks padded to a multiple of 8 -------------===//
//
// Part of moec. The `moe-pad-lora-rank` pass: 16-bit LoRA adapters whose
// rank is not a multiple of 8 are zero-padded to the next one, so that the
// wgmma grouped matmul (16-byte copies of B_e's rows) and the decomposed
// adapter gradients take them; the gradients are sliced back to the rank.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEPADLORARANKPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

/// The rank multiple the fused kernels take (16-byte rows of 16-bit B_e).
constexpr int64_t kRankMultiple = 8;

/// The adapter shape both ops share: A's dimension 0 and B's dimension 1
/// are E*r (either form of the grouped matmul: [E*r, K] and [N, E*r], or
/// with transpose_lora [E*r, N] and [K, E*r]).
struct Adapters {
  int64_t experts = 0, rank = 0, padded = 0;
};

/// The adapters' rank and its padding, or nullopt where nothing is padded:
/// 16-bit static adapters (the only ones the wgmma kernel fuses) whose rank
/// is not a multiple of 8.
std::optional<Adapters> adaptersToPad(Value offsets, Value a, Value b) {
  auto offsetsType = cast<ShapedType>(offsets.getType());
  auto aType = dyn_cast<RankedTensorType>(a.getType());
  auto bType = dyn_cast<RankedTensorType>(b.getType());
  if (!offsetsType.hasStaticShape() || !aType || !bType ||
      !aType.hasStaticShape() || !bType.hasStaticShape() ||
      aType.getRank() != 2 || bType.getRank() != 2)
    return std::nullopt;
  Type elem = aType.getElementType();
  if (!(elem.isBF16() || elem.isF16()) || bType.getElementType() != elem)
    return std::nullopt;
  Adapters adapters;
  adapters.experts = offsetsType.getDimSize(0);
  if (adapters.experts < 1 || aType.getDimSize(0) % adapters.experts ||
      aType.getDimSize(0) != bType.getDimSize(1))
    return std::nullopt;
  adapters.rank = aType.getDimSize(0) / adapters.experts;
  if (adapters.rank < 1 || adapters.rank % kRankMultiple == 0)
    return std::nullopt;
  adapters.padded = llvm::alignTo(adapters.rank, kRankMultiple);
  return adapters;
}

/// `value` [.., E*r at `dim`, ..] (rank 2) as [.., E, r, ..]: the
/// reassociation and the split shape.
std::pair<SmallVector<ReassociationIndices>, SmallVector<int64_t>>
splitExperts(RankedTensorType type, int64_t dim, int64_t experts,
             int64_t rank) {
  SmallVector<ReassociationIndices> groups;
  SmallVector<int64_t> shape;
  for (int64_t d = 0, next = 0; d < type.getRank(); ++d) {
    if (d == dim) {
      groups.push_back({next, next + 1});
      shape.append({experts, rank});
      next += 2;
    } else {
      groups.push_back({next++});
      shape.push_back(type.getDimSize(d));
    }
  }
  return {groups, shape};
}

/// Padded adapters by (adapter, dimension, experts): a backward's input
/// gradient and adapter gradients read the same adapters, padded once (the
/// expert count sets the rank: 48 rows are 4 x 12 or 8 x 6). Pads of block
/// arguments go to the block's start in the order they were made.
struct PaddedAdapters {
  DenseMap<std::tuple<Value, int64_t, int64_t>, Value> byAdapter;
  DenseMap<Block *, Operation *> lastAtBlockStart;
};

/// [.., E*r, ..] -> [.., E*p, ..]: each expert's r rows (or columns)
/// followed by p - r zero ones (tensor.pad between two reshapes, which
/// lower to views), right after `value` is defined so that every user of
/// the adapter can share it.
Value padExperts(PaddedAdapters &padded, Value value, int64_t dim,
                 const Adapters &adapters) {
  Value &known = padded.byAdapter[{value, dim, adapters.experts}];
  if (known)
    return known;
  OpBuilder builder(value.getContext());
  auto argument = dyn_cast<BlockArgument>(value);
  Operation *&last =
      padded.lastAtBlockStart[argument ? argument.getOwner() : nullptr];
  if (argument && last)
    builder.setInsertionPointAfter(last);
  else
    builder.setInsertionPointAfterValue(value);
  Location loc = value.getLoc();
  auto type = cast<RankedTensorType>(value.getType());
  Type elem = type.getElementType();
  auto [groups, shape] =
      splitExperts(type, dim, adapters.experts, adapters.rank);
  Value split = tensor::ExpandShapeOp::create(
      builder, loc, RankedTensorType::get(shape, elem), value, groups);
  SmallVector<OpFoldResult> low(shape.size(), builder.getIndexAttr(0));
  SmallVector<OpFoldResult> high(shape.size(), builder.getIndexAttr(0));
  high[dim + 1] = builder.getIndexAttr(adapters.padded - adapters.rank);
  shape[dim + 1] = adapters.padded;
  Value zero = arith::ConstantOp::create(builder, loc, elem,
                                         builder.getZeroAttr(elem));
  Value pad = tensor::PadOp::create(builder, loc,
                                    RankedTensorType::get(shape, elem), split,
                                    low, high, zero);
  SmallVector<int64_t> joined(type.getShape());
  joined[dim] = adapters.experts * adapters.padded;
  auto collapse = tensor::CollapseShapeOp::create(
      builder, loc, RankedTensorType::get(joined, elem), pad, groups);
  if (argument)
    last = collapse;
  known = collapse;
  return known;
}

/// [.., E*p, ..] -> [.., E*r, ..]: each expert's first r rows (or columns)
/// of a gradient computed on padded adapters.
Value sliceExperts(OpBuilder &builder, Location loc, Value value, int64_t dim,
                   const Adapters &adapters) {
  auto type = cast<RankedTensorType>(value.getType());
  Type elem = type.getElementType();
  auto [groups, shape] =
      splitExperts(type, dim, adapters.experts, adapters.padded);
  Value split = tensor::ExpandShapeOp::create(
      builder, loc, RankedTensorType::get(shape, elem), value, groups);
  SmallVector<int64_t> sizes(shape);
  sizes[dim + 1] = adapters.rank;
  SmallVector<int64_t> offsets(shape.size(), 0), strides(shape.size(), 1);
  Value sliced = tensor::ExtractSliceOp::create(
      builder, loc, RankedTensorType::get(sizes, elem), split, ValueRange(),
      ValueRange(), ValueRange(), offsets, sizes, strides);
  SmallVector<int64_t> joined(type.getShape());
  joined[dim] = adapters.experts * adapters.rank;
  return tensor::CollapseShapeOp::create(
      builder, loc, RankedTensorType::get(joined, elem), sliced, groups);
}

/// `type` with dimension `dim` E*r made E*p.
RankedTensorType paddedType(Type type, int64_t dim, const Adapters &adapters) {
  auto ranked = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(ranked.getShape());
  shape[dim] = adapters.experts * adapters.padded;
  return RankedTensorType::get(shape, ranked.getElementType());
}

void padMatmul(GroupedMatmulOp op, PaddedAdapters &padded) {
  std::optional<Adapters> adapters =
      adaptersToPad(op.getOffsets(), op.getLoraA(), op.getLoraB());
  if (!adapters)
    return;
  // The adapter term only reads u's columns through B_e's zero columns, so
  // the output is unchanged; the padded A rows make those columns zero.
  op.getLoraAMutable().assign(
      padExperts(padded, op.getLoraA(), 0, *adapters));
  op.getLoraBMutable().assign(
      padExperts(padded, op.getLoraB(), 1, *adapters));
}

void padGrad(LoraGradOp op, PaddedAdapters &padded) {
  std::optional<Adapters> adapters =
      adaptersToPad(op.getOffsets(), op.getLoraA(), op.getLoraB());
  if (!adapters)
    return;
  // The padded rows of dA are du's zero columns (B_e's zero columns) times
  // x, the padded columns of dB dy times u's zero columns: sliced off.
  Value a = padExperts(padded, op.getLoraA(), 0, *adapters);
  Value b = padExperts(padded, op.getLoraB(), 1, *adapters);
  OpBuilder builder(op);
  Location loc = op.getLoc();
  auto grads = LoraGradOp::create(
      builder, loc, paddedType(op.getGradA().getType(), 0, *adapters),
      paddedType(op.getGradB().getType(), 1, *adapters), op.getLhs(),
      op.getGradOut(), op.getOffsets(), a, b, op.getGatherSlots(),
      op.getKAttr(), op.getLoraScalingAttr());
  grads->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  op.getGradA().replaceAllUsesWith(
      sliceExperts(builder, loc, grads.getGradA(), 0, *adapters));
  op.getGradB().replaceAllUsesWith(
      sliceExperts(builder, loc, grads.getGradB(), 1, *adapters));
  op.erase();
}

struct MoePadLoraRankPass
    : moec::moe::impl::MoePadLoraRankPassBase<MoePadLoraRankPass> {
  void runOnOperation() override {
    SmallVector<GroupedMatmulOp> matmuls;
    SmallVector<LoraGradOp> grads;
    getOperation()->walk([&](Operation *op) {
      if (auto matmul = dyn_cast<GroupedMatmulOp>(op);
          matmul && matmul.getLoraA())
        matmuls.push_back(matmul);
      else if (auto grad = dyn_cast<LoraGradOp>(op))
        grads.push_back(grad);
    });
    PaddedAdapters padded;
    for (GroupedMatmulOp matmul : matmuls)
      padMatmul(matmul, padded);
    for (LoraGradOp grad : grads)
      padGrad(grad, padded);
  }
};

} // namespace
