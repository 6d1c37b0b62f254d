//===- SharePositions.cpp - Pass sort_by_expert's slot rows on ----------===//
//
// Part of moec. The `moe-share-positions` pass: the token-order kernels
// (permute, unpermute, their gradients, and the combine of a grouped
// matmul's scatter) take the row of each slot from
// the moe.sort_by_expert that made their slots instead of rebuilding that
// inverse map with kernels of their own.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "FusionPatterns.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOESHAREPOSITIONSPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

// Declared in FusionPatterns.h.
SortByExpertOp moec::moe::withPositions(SortByExpertOp sort) {
  if (sort.getPositions())
    return sort;
  auto idsType = cast<RankedTensorType>(sort.getIds().getType());
  int64_t tokens = idsType.getDimSize(0), k = idsType.getDimSize(1);
  int64_t slots =
      ShapedType::isDynamic(tokens) ? ShapedType::kDynamic : tokens * k;
  auto positionsType = RankedTensorType::get({slots}, idsType.getElementType());
  OpBuilder builder(sort);
  auto copy = SortByExpertOp::create(
      builder, sort.getLoc(), sort.getSortedExpertIds().getType(),
      sort.getSlots().getType(), sort.getOffsets().getType(), positionsType,
      sort.getIds(), sort.getNumExpertsAttr(), sort.getAlignAttr());
  copy->setDiscardableAttrs(sort->getDiscardableAttrDictionary());
  for (auto [from, to] :
       llvm::zip(sort->getResults(), copy->getResults().take_front(3)))
    from.replaceAllUsesWith(to);
  sort.erase();
  return copy;
}

namespace {

/// The `positions` operand of a token-order op that reads `slots` as its
/// slots operand with `offsets` and `k`; none for any other use.
std::optional<MutableOperandRange> positionsOperand(OpOperand &use,
                                                    Value offsets, int64_t k) {
  Operation *user = use.getOwner();
  // All four ops take (x, slots, offsets) first and have `k` and an
  // optional `positions`.
  auto operandOf = [&](auto op) -> std::optional<MutableOperandRange> {
    if (&use != &op.getSlotsMutable() ||
        op.getOffsets() != offsets || op.getK() != uint64_t(k) ||
        op.getPositions())
      return std::nullopt;
    return op.getPositionsMutable();
  };
  return llvm::TypeSwitch<Operation *, std::optional<MutableOperandRange>>(
             user)
      .Case<PermuteOp, UnpermuteOp, PermuteGradOp, UnpermuteGradOp>(
          [&](auto op) { return operandOf(op); })
      .Case<GroupedMatmulOp>(
          [&](GroupedMatmulOp op) -> std::optional<MutableOperandRange> {
            // The combine of a scatter (moe-fuse-combine's unpermute).
            if (!op.getScatterSlots() ||
                &use != &op.getScatterSlotsMutable()[0] ||
                op.getOffsets() != offsets || op.getK() != uint64_t(k) ||
                op.getScatterPositions())
              return std::nullopt;
            return op.getScatterPositionsMutable();
          })
      .Default([](Operation *) { return std::nullopt; });
}

struct MoeSharePositionsPass
    : moec::moe::impl::MoeSharePositionsPassBase<MoeSharePositionsPass> {
  void runOnOperation() override {
    SmallVector<SortByExpertOp> sorts;
    getOperation()->walk([&](SortByExpertOp sort) { sorts.push_back(sort); });
    for (SortByExpertOp sort : sorts) {
      int64_t k = cast<RankedTensorType>(sort.getIds().getType()).getDimSize(1);
      // The users' operands stay valid when withPositions moves their
      // slots and offsets to a new sort: the users themselves are kept.
      SmallVector<MutableOperandRange> targets;
      for (OpOperand &use : sort.getSlots().getUses())
        if (auto positions = positionsOperand(use, sort.getOffsets(), k))
          targets.push_back(*positions);
      if (targets.empty())
        continue;
      SortByExpertOp shared = withPositions(sort);
      for (MutableOperandRange &positions : targets)
        positions.assign(shared.getPositions());
    }
  }
};

} // namespace
