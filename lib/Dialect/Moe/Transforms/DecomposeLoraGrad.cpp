//===- DecomposeLoraGrad.cpp - moe.lora_grad as four grouped matmuls ------===//
//
// Part of moec. The `moe-decompose-lora-grad` pass: on sm90a, the LoRA
// adapter gradients become four grouped matmuls that the wgmma kernel runs
// (two forward products for u and du, two weight gradients for dB and dA).
// B and dB stay in their [N, E*r] layout (`experts_in_columns`), dA is
// written in A's [E*r, K] (`transpose_rhs`): no copies around them.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "Transposed.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEDECOMPOSELORAGRADPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

/// The groups the sm90a grouped matmul takes (kMaxGroups - 1 in
/// lib/Conversion/MoeToKernels/Hopper/HopperPlan.h).
constexpr int64_t kMaxExperts = 1023;

/// Whether the four matmuls fit the wgmma kernel (the conditions of
/// hopper::planFor, HopperPlan.cpp): 16-bit operands of one type, static
/// K and N and rank a multiple of 8 (16-byte copies).
bool decomposable(LoraGradOp op) {
  auto lhs = cast<RankedTensorType>(op.getLhs().getType());
  auto dy = cast<RankedTensorType>(op.getGradOut().getType());
  auto a = cast<RankedTensorType>(op.getLoraA().getType());
  auto b = cast<RankedTensorType>(op.getLoraB().getType());
  int64_t experts = cast<RankedTensorType>(op.getOffsets().getType())
                        .getDimSize(0);
  Type elem = lhs.getElementType();
  if (!(elem.isBF16() || elem.isF16()) || dy.getElementType() != elem ||
      a.getElementType() != elem || b.getElementType() != elem)
    return false;
  int64_t k = lhs.getDimSize(1), n = dy.getDimSize(1);
  if (ShapedType::isDynamic(k) || ShapedType::isDynamic(n) || k % 8 ||
      n % 8 || ShapedType::isDynamic(experts) || experts < 1 ||
      experts > kMaxExperts || !a.hasStaticShape() || !b.hasStaticShape())
    return false;
  int64_t rank = a.getDimSize(0) / experts;
  return rank >= 8 && rank % 8 == 0;
}

/// [E, r, X] -> [E*r, X] and the like (dimensions joined by `groups`).
Value joinLast(OpBuilder &builder, Location loc, Value value,
               ArrayRef<ReassociationIndices> groups) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape;
  for (const ReassociationIndices &group : groups) {
    int64_t size = 1;
    for (int64_t d : group)
      size *= type.getDimSize(d);
    shape.push_back(size);
  }
  return tensor::CollapseShapeOp::create(
      builder, loc, RankedTensorType::get(shape, type.getElementType()), value,
      groups);
}

void decompose(LoraGradOp op) {
  OpBuilder builder(op);
  Location loc = op.getLoc();
  MLIRContext *ctx = op.getContext();
  Value x = op.getLhs(), dy = op.getGradOut(), offsets = op.getOffsets();
  Value slots = op.getGatherSlots();
  auto aType = cast<RankedTensorType>(op.getLoraA().getType());
  auto bType = cast<RankedTensorType>(op.getLoraB().getType());
  auto gradAType = cast<RankedTensorType>(op.getGradA().getType());
  auto gradBType = cast<RankedTensorType>(op.getGradB().getType());
  int64_t experts =
      cast<RankedTensorType>(offsets.getType()).getDimSize(0);
  int64_t rank = aType.getDimSize(0) / experts;
  int64_t k = aType.getDimSize(1), n = bType.getDimSize(0);
  Type elem = aType.getElementType();
  auto none = ActivationAttr::get(ctx, Activation::none);
  FloatAttr one = builder.getF32FloatAttr(1.0f);
  UnitAttr transposeRhs = builder.getUnitAttr();
  IntegerAttr slotsPerToken = slots ? op.getKAttr() : IntegerAttr();

  // s on u and du, as row scales: dB = Σ dyᵀ·(s·u), dA = Σ (s·du)ᵀ·x.
  float scaling = op.getLoraScaling().convertToFloat();
  Value scale;
  if (scaling != 1.0f) {
    Value rows = tensor::DimOp::create(builder, loc, dy, 0);
    Value init = tensor::EmptyOp::create(
        builder, loc, ArrayRef<OpFoldResult>{rows}, builder.getF32Type());
    Value value = arith::ConstantOp::create(builder, loc,
                                            builder.getF32FloatAttr(scaling));
    scale = linalg::FillOp::create(builder, loc, value, init).getResult(0);
  }
  auto narrow = RankedTensorType::get({ShapedType::kDynamic, rank}, elem);

  // u = x · A_eᵀ: A [E*r, K] is [E, r, K] (transpose_rhs), x as the
  // forward read it (gathered by slot).
  Value a3 = splitExpertRows(builder, loc, op.getLoraA(), experts);
  Value u = GroupedMatmulOp::create(
      builder, loc, narrow, x, a3, offsets, slots, Value(), Value(), Value(),
      scale, Value(), Value(), Value(), Value(), Value(), Value(), transposeRhs,
      slotsPerToken, one, none);
  // du = dy · B_e: B [N, E*r] is [N, E, r], B_e = B[:, e, :] its
  // [K = N, r] (experts_in_columns: read in place, no transpose).
  auto bColumns = RankedTensorType::get({n, experts, rank}, elem);
  Value b3 = tensor::ExpandShapeOp::create(
      builder, loc, bColumns, op.getLoraB(),
      ArrayRef<ReassociationIndices>{{0}, {1, 2}});
  auto duOp = GroupedMatmulOp::create(
      builder, loc, narrow, dy, b3, offsets, Value(), Value(), Value(), Value(),
      scale, Value(), Value(), Value(), Value(), Value(), Value(), UnitAttr(),
      IntegerAttr(), one, none);
  duOp.setExpertsInColumns(true);
  Value du = duOp;

  // dB_e = Σ dy_iᵀ · u_i, written as [N, E, r] (experts_in_columns), which
  // is B's [N, E*r].
  Value db3 = GroupedWeightGradOp::create(
      builder, loc,
      RankedTensorType::get({n, experts, rank}, gradBType.getElementType()), dy,
      u, offsets, /*gather_slots=*/Value(), /*accumulate=*/Value(),
      /*lhs_scales=*/Value(), /*grad_scales=*/Value(),
      /*transpose_rhs=*/UnitAttr(), /*experts_in_columns=*/builder.getUnitAttr(),
      IntegerAttr());
  Value gradB = joinLast(builder, loc, db3, {{0}, {1, 2}});

  // dA_e = Σ du_iᵀ · x_i: [E, r, K], which is A's [E*r, K]. Gathered rows
  // through transpose_rhs (the weight gradient gathers its lhs, and writes
  // the gradient of [E, r, K] weights in their layout), else du times x.
  Value da3 = GroupedWeightGradOp::create(
      builder, loc,
      RankedTensorType::get({experts, rank, k}, gradAType.getElementType()),
      slots ? x : du, slots ? du : x, offsets, slots, /*accumulate=*/Value(),
      /*lhs_scales=*/Value(), /*grad_scales=*/Value(),
      slots ? transposeRhs : UnitAttr(), /*experts_in_columns=*/UnitAttr(),
      slotsPerToken);
  Value gradA = joinLast(builder, loc, da3, {{0, 1}, {2}});
  op.getGradA().replaceAllUsesWith(gradA);
  op.getGradB().replaceAllUsesWith(gradB);
  op.erase();
}

struct MoeDecomposeLoraGradPass
    : moec::moe::impl::MoeDecomposeLoraGradPassBase<MoeDecomposeLoraGradPass> {
  using Base::Base;

  void runOnOperation() override {
    // The kernel target: the option, else the module's #moe.target.
    std::string kind = target;
    if (kind.empty()) {
      Operation *module = getOperation();
      if (!isa<ModuleOp>(module))
        module = module->getParentOfType<ModuleOp>();
      if (module)
        if (auto attr = module->getAttrOfType<TargetAttr>(kTargetAttrName))
          kind = attr.getKind().str();
    }
    // Elsewhere the fused SIMT kernel beats four scalar matmuls.
    if (kind != "sm90a")
      return;
    SmallVector<LoraGradOp> ops;
    getOperation()->walk([&](LoraGradOp op) {
      if (decomposable(op))
        ops.push_back(op);
    });
    for (LoraGradOp op : ops)
      decompose(op);
  }
};

} // namespace
