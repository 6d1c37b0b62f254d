//===- HopperLowering.cpp - Launches of the sm_90a grouped matmul ---------===//
//
// Part of moec. The host side of the wgmma kernel (HopperKernel.h): which
// ops it lowers, the launch operands (tensor maps included), the persistent
// grid, one launch per tile bucket, and the combine of a scattered output.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

namespace {

/// The operands of one wgmma matmul launch (null where absent).
struct HopperOperands {
  Value lhs, rhs, out, offsets, gather, bias, rowScale, loraA, loraB;
  Value swigluInput, accumulate;
  Value lhsScales, rhsScales; ///< FP8 block scales
};

/// The launch operands of `v` for `plan` (tensor maps included), and
/// where the kernel finds each in `pos`.
SmallVector<Value> launchOperands(LoweringContext &ctx,
                                  const HopperOperands &v,
                                  const HopperPlan &plan, HopperArgs &pos) {
  SmallVector<Value> operands = {v.lhs, v.rhs, v.out};
  auto addOptional = [&](Value value, int &at) {
    if (!value)
      return;
    at = operands.size();
    operands.push_back(value);
  };
  addOptional(v.offsets, pos.offsets);
  addOptional(v.gather, pos.gather);
  addOptional(v.bias, pos.bias);
  addOptional(v.rowScale, pos.rowScale);
  addOptional(v.swigluInput, pos.swigluInput);
  addOptional(v.loraA, pos.loraA);
  addOptional(v.loraB, pos.loraB);
  addOptional(v.accumulate, pos.accumulate);
  addOptional(v.lhsScales, pos.lhsScales);
  addOptional(v.rhsScales, pos.rhsScales);
  // The warp-specialized weight gradient with its rows in order: both
  // operands' whole 64-row slices by TMA, boxes of 64 columns by 64 rows
  // over [rows, K] and [rows, N] (ProducerPipeline::loadWeightGradSlice).
  // Not with a gathered operand: TMA for the other one alone ran
  // 0.91-1.03x cp.async for both on the H200 (bench/results/dw-tma-h200.md).
  if (plan.warpSpecialized && plan.weightGrad() && !plan.fp8WeightGrad()) {
    if (!v.gather) {
      addOptional(tensorMapOperand(ctx.host(), v.rhs, {kColumnBlock, kBlockK}),
                  pos.rhsMap);
      addOptional(tensorMapOperand(ctx.host(), v.lhs, {kColumnBlock, kBlockK}),
                  pos.lhsMap);
    }
  } else if (plan.warpSpecialized) {
    // The producer loads the rhs by TMA (HopperPlan::rhsBox).
    int64_t rank = cast<MemRefType>(v.rhs.getType()).getRank();
    addOptional(tensorMapOperand(ctx.host(), v.rhs, plan.rhsBox(rank)),
                pos.rhsMap);
    // Rows in order: the lhs too, 128 rows by one slice of K. (The FP8
    // weight gradient: [K, P] and [N, P] by 128 rows and one block.)
    if (!v.gather)
      addOptional(tensorMapOperand(ctx.host(), v.lhs, {plan.sliceK(), kBlockM}),
                  pos.lhsMap);
  }
  return operands;
}

/// The rows the groups split (host index): the output's, or (weight
/// gradient) those of the output gradient: B, or A with the operands
/// swapped (B's rows may then be gathered tokens); the FP8 weight
/// gradient's padded rows (the columns of its transposed operands).
Value groupedRows(LoweringContext &ctx, const HopperOperands &v,
                  const HopperPlan &plan) {
  if (!plan.weightGrad())
    return ctx.sizes(v.out)[0];
  if (plan.fp8WeightGrad())
    return ctx.sizes(v.lhs)[1];
  return ctx.sizes(plan.layout.swappedOperands ? v.lhs : v.rhs)[0];
}

/// Launches the wgmma kernel for `plan` over the rows of `v.out`; with
/// `enabled` (a host index, 0 or 1) the grid is multiplied by it.
LogicalResult launchHopperMatmul(LoweringContext &ctx,
                                 const HopperOperands &v,
                                 const HopperPlan &plan, StringRef suffix,
                                 Value enabled = {}) {
  KernelBuilder &h = ctx.host();
  HopperArgs pos;
  SmallVector<Value> operands = launchOperands(ctx, v, plan, pos);
  SmallVector<Value> outSizes = ctx.sizes(v.out);
  Value rows = groupedRows(ctx, v, plan);
  operands.push_back(rows);

  // Blocks: the persistent count, or fewer when there are fewer tiles
  // (upper bound: rows / 128 + groups m-tiles, times the n-tiles).
  // In clusters of C: units of C m-tiles (each group's last unit rounded
  // up: at most one more m-tile per group), C blocks per unit.
  const int64_t C = plan.cluster;
  Value mTilesBound =
      h.add(h.div(rows, h.idx(kBlockM)), h.idx(plan.groups()));
  if (C > 1)
    mTilesBound = h.ceilDiv(h.add(mTilesBound, h.idx(plan.groups())),
                            h.idx(C));
  Value outWidth = plan.swigluGrad ? h.div(outSizes.back(), h.idx(2))
                                   : outSizes.back();
  Value nTiles = h.ceilDiv(outWidth, h.idx(plan.outTileN()));
  Value tilesBound = h.mul(mTilesBound, nTiles);
  // The weight gradient: every expert's K tiles times n-tiles.
  if (plan.weightGrad())
    tilesBound =
        h.mul(h.idx(plan.experts * ((plan.k + kBlockM - 1) / kBlockM)), nTiles);
  Value grid = h.minIdx(tilesBound, h.idx(plan.persistentBlocks / C));
  if (C > 1)
    grid = h.mul(grid, h.idx(C));
  if (enabled)
    grid = h.mul(grid, enabled);
  // The tile as built (the bundle records it): the stages and band taken.
  moe::TileAttr tile = tileOf(h.getContext(), plan);
  return ctx.launch(
      suffix, grid, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        HopperKernel(b, a, block, thread, plan, pos).emit();
      },
      plan.sharedBytes(), plan.cluster);
}

/// 1 when `rows` > `bound`, else 0, on the host (for launch grids).
Value above(KernelBuilder &h, Value rows, int64_t bound) {
  return h.minIdx(h.idx(1), h.div(rows, h.idx(bound + 1)));
}

/// out = Σ_s part[g * S + s] (f32, in order s = 0, 1, ...) for every group
/// g of a row reduction split S ways (HopperPlan::rowSplits): out [K, N]
/// for a dense Aᵀ·B (one group of `rows` rows), else [E, K, N] with the
/// groups' rows from `offsets`, plus `accumulate` where given. Only the
/// chunks that have rows count (rowSplitChunk; the others were not
/// written); rounded once to out's type; four columns per thread where the
/// row length allows (16-byte loads of the partial sums). With `enabled`
/// (a host index, 0 or 1) the item count is multiplied by it.
LogicalResult sumRowSplits(LoweringContext &ctx, moe::TileAttr tile,
                           Value part, int64_t S, Value rows, Value offsets,
                           Value accumulate, Value out, Value enabled) {
  KernelBuilder &h = ctx.host();
  const int64_t rank = cast<MemRefType>(out.getType()).getRank();
  std::optional<int64_t> width = staticDim(out, rank - 1);
  const int64_t n = width && *width % 4 == 0 ? 4 : 1;
  Value items = h.idx(1);
  for (Value size : ctx.sizes(out))
    items = h.mul(items, size);
  items = h.div(items, h.idx(n));
  if (enabled)
    items = h.mul(items, enabled);
  SmallVector<Value> operands = {part, rows, out};
  if (offsets)
    operands.push_back(offsets);
  if (accumulate)
    operands.push_back(accumulate);
  return launchPerItem(
      ctx, "sum_row_splits", items, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value columns = b.div(b.dim(a[2], rank - 1), b.idx(n));
        Value tileItems = b.mul(b.dim(a[2], rank - 2), columns);
        Value g = b.div(id, tileItems), inTile = b.rem(id, tileItems);
        Value r = b.div(inTile, columns);
        Value c = b.mul(b.rem(inTile, columns), b.idx(n));
        Value groupRows = a[1], least;
        if (offsets) {
          // As the matmul's schedule reads them (TileSchedule::groupBounds).
          Value start = groupStart(b, a[3], g), end = b.loadIdx(a[3], {g});
          groupRows = b.sub(b.select(b.ult(start, end), end, start), start);
          least = leastChunkRows(b, a[1], b.dim(a[2], 0));
        }
        Value used =
            b.ceilDiv(groupRows, rowSplitChunk(b, groupRows, S, least));
        auto vec = VectorType::get({n}, b.getF32Type());
        SmallVector<Value> at = {r, c};
        if (rank == 3)
          at.insert(at.begin(), g);
        Value sum = accumulate ? b.loadVecF32(a.back(), at, n)
                               : b.zeroVec(vec);
        // Unrolled, so that the chunks' loads are in flight together.
        Value first = b.mul(g, b.idx(S));
        for (int64_t s = 0; s < S; ++s) {
          Value more = b.ifElse(
              b.ult(b.idx(s), used), vec,
              [&] {
                return b.loadVecF32(a[0], {b.add(first, b.idx(s)), r, c}, n);
              },
              [&] { return b.zeroVec(vec); });
          sum = arith::AddFOp::create(b, sum, more);
        }
        b.storeVecF32(sum, a[2], at);
      });
}

/// A row reduction split S ways (HopperPlan::rowSplits): the wgmma kernel
/// writes f32 partial sums [groups, K, N] (S chunks per group; `accumulate`
/// is added by the sum, not by the kernel), then sumRowSplits adds them
/// into `out`; both launches gated by `enabled` as launchHopperMatmul's.
LogicalResult lowerSplitRows(LoweringContext &ctx, moe::TileAttr tile,
                             HopperOperands v, const HopperPlan &plan,
                             Value out, StringRef suffix = "wgmma",
                             Value enabled = {}) {
  KernelBuilder &h = ctx.host();
  const int64_t S = plan.rowSplits;
  auto outType = cast<MemRefType>(out.getType());
  SmallVector<Value> outSizes = ctx.sizes(out);
  ArrayRef<int64_t> shape = outType.getShape().take_back(2);
  const int64_t groups = plan.experts; // S chunks of each group
  Value accumulate = v.accumulate;
  v.accumulate = Value();
  v.out = ctx.allocTemp(
      MemRefType::get({groups, shape[0], shape[1]}, h.getF32Type()),
      {h.idx(groups), outSizes[outSizes.size() - 2], outSizes.back()});
  if (failed(launchHopperMatmul(ctx, v, plan, suffix, enabled)))
    return failure();
  return sumRowSplits(ctx, tile, v.out, S, groupedRows(ctx, v, plan),
                      v.offsets, accumulate, out, enabled);
}

/// The kernels of `plan` writing `v.out`: one, or with rowSplits the
/// split matmul and its sum.
LogicalResult launchPlan(LoweringContext &ctx, moe::TileAttr tile,
                         const HopperOperands &v, const HopperPlan &plan,
                         StringRef suffix, Value enabled = {}) {
  if (plan.rowSplits > 1)
    return lowerSplitRows(ctx, tile, v, plan, v.out, suffix, enabled);
  return launchHopperMatmul(ctx, v, plan, suffix, enabled);
}

/// Launches the kernels of `plans`: the base plan's, or one variant per
/// bucket, each launch's grid 0 unless the row count (groupedRows) falls
/// in its bucket (the first bucket from 0 rows, the base plan the rows
/// above every bucket); a plan that splits its rows launches its sum too,
/// gated the same way.
LogicalResult launchBucketed(LoweringContext &ctx, moe::TileAttr tile,
                             const HopperOperands &v,
                             const HopperKernelPlans &plans) {
  const HopperPlan &base = plans.base;
  if (plans.buckets.empty())
    return launchPlan(ctx, tile, v, base, "wgmma");
  KernelBuilder &h = ctx.host();
  Value rows = groupedRows(ctx, v, base);
  int64_t below = 0;
  for (auto &[maxRows, plan] : plans.buckets) {
    // rows in (below, max_rows]: above(below) - above(max_rows); the first
    // bucket takes no rows too, so that some launch writes the output (a
    // weight gradient of no rows is zeros, not untouched memory).
    Value from = below == 0 ? h.idx(1) : above(h, rows, below);
    Value enabled = h.sub(from, above(h, rows, maxRows));
    std::string suffix = "wgmma_le" + std::to_string(maxRows);
    if (failed(launchPlan(ctx, tile, v, plan, suffix, enabled)))
      return failure();
    below = maxRows;
  }
  return launchPlan(ctx, tile, v, base, "wgmma", above(h, rows, below));
}

LogicalResult lowerGrouped(moe::GroupedMatmulOp op, moe::TileAttr tile,
                           const HopperKernelPlans &plans, BufferMap buffer,
                           LoweringContext &ctx) {
  auto outType = cast<ShapedType>(op.getOut().getType());
  HopperOperands v;
  v.lhs = buffer(op.getLhs());
  v.rhs = buffer(op.getRhs());
  v.offsets = buffer(op.getOffsets());
  v.gather = buffer(op.getGatherSlots());
  v.bias = buffer(op.getBias());
  v.rowScale = buffer(op.getRowScale());
  v.swigluInput = buffer(op.getActivationInput());
  v.loraA = buffer(op.getLoraA());
  v.loraB = buffer(op.getLoraB());
  v.lhsScales = buffer(op.getLhsScales());
  v.rhsScales = buffer(op.getRhsScales());
  Value out = buffer(op.getOut());
  Value scatter = buffer(op.getScatterSlots());
  if (!scatter) {
    v.out = out;
    return launchBucketed(ctx, tile, v, plans);
  }
  // Combined in token order: the grouped rows go to a scratch buffer, then
  // unpermute's combine sums each token's k rows with its weights.
  KernelBuilder &h = ctx.host();
  Value slotRows = ctx.sizes(scatter)[0];
  v.out = ctx.allocTemp(
      MemRefType::get({ShapedType::kDynamic, outType.getDimSize(1)},
                      outType.getElementType()),
      {slotRows, h.idx(outType.getDimSize(1))});
  if (failed(launchBucketed(ctx, tile, v, plans)))
    return failure();
  std::optional<LogicalResult> combined =
      emitCombine(ctx, tile, v.out, scatter, v.offsets,
                  buffer(op.getScatterWeights()), out,
                  plans.base.slotsPerToken, buffer(op.getScatterPositions()));
  if (!combined)
    return op.emitOpError("has no vectorized combine for its output width");
  return *combined;
}

LogicalResult lowerWeightGrad(moe::GroupedWeightGradOp op, moe::TileAttr tile,
                              const HopperKernelPlans &plans, BufferMap buffer,
                              LoweringContext &ctx) {
  HopperOperands v;
  v.lhs = buffer(op.getLhs());
  v.rhs = buffer(op.getGradOut());
  v.lhsScales = buffer(op.getLhsScales());
  v.rhsScales = buffer(op.getGradScales());
  // The weight gradient of transposed weights: dy is A, x is B (FP8: each
  // with its scales).
  if (plans.base.layout.swappedOperands) {
    std::swap(v.lhs, v.rhs);
    std::swap(v.lhsScales, v.rhsScales);
  }
  v.offsets = buffer(op.getOffsets());
  v.gather = buffer(op.getGatherSlots());
  v.accumulate = buffer(op.getAccumulate());
  v.out = buffer(op.getOut());
  return launchBucketed(ctx, tile, v, plans);
}

LogicalResult lowerDense(linalg::MatmulOp op, moe::TileAttr tile,
                         const HopperKernelPlans &plans, BufferMap buffer,
                         LoweringContext &ctx) {
  HopperOperands v;
  v.lhs = buffer(op.getInputs()[0]);
  v.rhs = buffer(op.getInputs()[1]);
  v.out = buffer(op.getResult(0));
  // A·B, or Aᵀ·B on the weight gradient's kernel without offsets: one
  // group of all rows, or rowSplits chunks of them (the kernel computes
  // their bounds) writing f32 partial sums [S, K, N]; then out = their sum
  // in chunk order, rounded once to out's type.
  return launchPlan(ctx, tile, v, plans.base, "wgmma");
}

} // namespace

LogicalResult hopper::lowerMatmulHopper(Operation *op, moe::TileAttr tile,
                                        const HopperKernelPlans &plans,
                                        BufferMap buffer,
                                        LoweringContext &ctx) {
  if (auto grouped = dyn_cast<moe::GroupedMatmulOp>(op))
    return lowerGrouped(grouped, tile, plans, buffer, ctx);
  if (auto wgrad = dyn_cast<moe::GroupedWeightGradOp>(op))
    return lowerWeightGrad(wgrad, tile, plans, buffer, ctx);
  return lowerDense(cast<linalg::MatmulOp>(op), tile, plans, buffer, ctx);
}
