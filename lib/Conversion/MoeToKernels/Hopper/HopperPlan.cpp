//===- HopperPlan.cpp - Plan of the sm_90a grouped matmul -----------------===//
//
// Part of moec. Which ops, types, shapes and tiles the wgmma kernel applies
// to, the plan it builds them with, and the tiles the autotuner measures.
//
//===----------------------------------------------------------------------===//

#include "HopperPlan.h"

#include "../LoweringContext.h"

#include "moec/Conversion/TuningSpace.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

HopperLimits hopper::limitsOf(const TargetInfo &target) {
  return {target.smCount(), target.sharedMemoryPerBlock()};
}

moe::TileAttr hopper::tileOf(MLIRContext *context, const HopperPlan &plan) {
  return moe::TileAttr::get(context, kBlockM, plan.blockN, plan.sliceK(),
                            plan.threads(), plan.stages, plan.bandM,
                            plan.warpSpecialized ? kProducerThreads : 0,
                            plan.cluster,
                            plan.rowSplits > 1 ? plan.rowSplits : 0);
}

/// `tile` with its `row_splits` set to `splits`.
static moe::TileAttr withRowSplits(moe::TileAttr tile, int64_t splits) {
  return moe::TileAttr::get(tile.getContext(), tile.getM(), tile.getN(),
                            tile.getK(), tile.getThreads(), tile.getStages(),
                            tile.getBandM(), tile.getProducers(),
                            tile.getCluster(), splits);
}

/// Output tiles of one group of a row reduction into [k, width].
static int64_t outTilesPerGroup(const HopperPlan &plan, int64_t width) {
  return llvm::divideCeil(plan.k, kBlockM) *
         llvm::divideCeil(width, plan.outTileN());
}

/// The row splits a tile asks for: 0 (the kernel's choice) without one.
static int64_t askedRowSplits(moe::TileAttr tile) {
  return tile ? tile.getRowSplits() : 0;
}

/// At most as many stages as fit in shared memory (a deeper pipeline asked
/// for gets the deepest that fits, at least 3): whether it fits.
static bool fitStages(HopperPlan &plan) {
  while (plan.sharedBytes() > plan.maxSharedBytes && plan.stages > 3)
    --plan.stages;
  return plan.sharedBytes() <= plan.maxSharedBytes;
}

/// The default block width for an output `width` columns wide: 256 from
/// 256 columns, 64 for at most 64 where `narrowOk`, else (and for a
/// dynamic width) 128.
static int64_t defaultBlockN(int64_t width, bool narrowOk) {
  if (ShapedType::isDynamic(width))
    return 128;
  return width >= 256                        ? 256
         : narrowOk && width <= kNarrowBlockN ? kNarrowBlockN
                                              : 128;
}

bool hopper::isHopperTile(moe::TileAttr tile) {
  if (!tile || tile.getM() != kBlockM ||
      (tile.getK() != kBlockK && tile.getK() != kFp8BlockK) ||
      (tile.getN() != kNarrowBlockN && tile.getN() != 128 &&
       tile.getN() != 256))
    return false;
  if (tile.getProducers() == 0)
    return tile.getThreads() == kThreads;
  return tile.getProducers() == kProducerThreads &&
         tile.getThreads() == kSpecializedThreads;
}

std::optional<HopperPlan>
hopper::planFor(Type lhsElem, Type rhsElem, Type outElem, int64_t k,
                int64_t width, int64_t experts, moe::TileAttr tile,
                const HopperLimits &limits, int64_t loraRows,
                int64_t minBlockN, int64_t maxBlockN) {
  auto isFp8 = [](Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); };
  bool fp8 = isFp8(lhsElem);
  // One type, or two FP8 formats (wgmma takes e4m3 x e5m2).
  if ((lhsElem != rhsElem && !(fp8 && isFp8(rhsElem))) ||
      !(lhsElem.isBF16() || lhsElem.isF16() || fp8))
    return std::nullopt;
  if (!(outElem.isBF16() || outElem.isF16() || outElem.isF32()))
    return std::nullopt;
  HopperPlan plan;
  plan.elemBytes = fp8 ? 1 : 2;
  // 16-byte copies along K, pairs and 8-wide chunks along N.
  if (ShapedType::isDynamic(k) || ShapedType::isDynamic(width) ||
      (k * plan.elemBytes) % 16 || width % 8 || experts + 1 > kMaxGroups)
    return std::nullopt;
  plan.experts = experts;
  plan.k = k;
  auto wgmmaType = [&](Type t) {
    return isa<Float8E4M3FNType>(t)   ? NVVM::WGMMATypes::e4m3
           : isa<Float8E5M2Type>(t)   ? NVVM::WGMMATypes::e5m2
           : t.isBF16()               ? NVVM::WGMMATypes::bf16
                                      : NVVM::WGMMATypes::f16;
  };
  plan.elemType = wgmmaType(lhsElem);
  plan.rhsElemType = wgmmaType(rhsElem);
  plan.persistentBlocks = limits.smCount;
  plan.maxSharedBytes = limits.maxSharedBytes;
  // A tile of this kernel's form (m = 128, n = 64, 128 or 256, k = 64, 256
  // threads) set on the op picks the block width, and its `stages` and
  // `band_m` (when set) the pipeline depth and the tile order. Otherwise
  // 256 (m64n256 wgmmas: measured faster on the H200 at most MoE shapes of
  // bench/grouped_gemm.py) unless the output is narrower than that.
  // Outputs of at most 64 columns without LoRA (moe-decompose-lora-grad's
  // rank-wide products, a router's experts) get n = 64 with block
  // barriers: at n = 128 half the wgmma work is padding at r = 64, 7/8 at
  // r = 16. On the H200 those products ran 0.98-1.19x as fast as at
  // n = 128 (geomeans 1.05-1.08), and dA + dB at the warp-specialized
  // n = 64 0.92-0.99x the block-barrier one
  // (bench/results/lora-grad-narrow-h200.md).
  plan.blockN = std::min(
      defaultBlockN(width, loraRows == 0 && minBlockN <= kNarrowBlockN),
      maxBlockN);
  // n = 256 gets the warp-specialized kernel with TMA for the weights (and
  // for the lhs when its rows are in order). On the H200 it was faster than
  // the block-barrier kernel at every bench/grouped_gemm.py shape with
  // T >= 2048 we measured: gathered gate_up 1.00-1.16x (DeepSeek-V3 up to
  // 1.24x), down 1.00-1.20x, dense SwiGLU 1.07x
  // (bench/results/warp-specialization-h200.md). With cp.async for the
  // weights it had been slower at long K and DeepSeek-V3 SwiGLU; n = 128
  // (cp.async weights) was slower everywhere, so it keeps block barriers.
  // LoRA up to rank 64 takes the warp-specialized kernel too (its
  // epilogue's product through shared memory of its own, B_e loaded by the
  // producer during the k-loop): on the H200 1.08-1.49x faster than the
  // block-barrier kernel at every bench/lora_kernels.py forward and dX
  // shape at r = 16 and 64 (bench/results/lora-kernels-ws-h200.md). Past
  // 64 the U accumulators (R/2 registers) on top of an n = 256 tile's 128
  // would not fit: n = 128 and block barriers, whose product passes
  // through the last stage.
  plan.warpSpecialized = plan.blockN == 256 && loraRows <= kBlockK;
  if (loraRows > kBlockK)
    plan.blockN = 128;
  plan.loraRows = loraRows;
  // The register split of the warp-specialized roles: the MMA warpgroups'
  // share holds an n = 256 tile's accumulators (and U's past rank 32), the
  // producer keeps the rest.
  plan.mmaRegisters =
      loraRows > 32 ? kWideConsumerRegisters : kConsumerRegisters;
  plan.producerRegisters =
      (kBlockRegisters - kThreads * plan.mmaRegisters) / kProducerThreads;
  // FP8 (block scales): the warp-specialized kernel, n = 256 from 256
  // columns as for 16-bit operands. Each slice's wgmmas go to partial
  // accumulators that are promoted into the f32 ones, 128 columns at a
  // time (HopperPlan::partialN). On the H200 n = 256 ran 1.02-1.15x as
  // fast as n = 128 at Qwen3-30B-A3B, Mixtral-8x7B and DeepSeek-V3
  // forward and input gradient, T = 8192 and 32768, except DeepSeek-V3's
  // forward at T = 32768 (0.95x; bench/results/fp8-kernels-h200.md). The
  // producer's TMA loads keep the MMA warpgroups free for the promotion.
  // 4 stages: on the H200 (Qwen3-30B-A3B, Mixtral-8x7B and DeepSeek-V3
  // forward at T = 8192, same call) 1.02-1.18x as fast as 6, the depth that
  // fits (0.488 -> 0.471, 4.011 -> 3.925, 5.813 -> 4.917 ms).
  if (fp8) {
    plan.blockScales = true;
    plan.warpSpecialized = true;
    plan.stages = kFp8DefaultStages;
    if (loraRows > 0)
      return std::nullopt;
  }
  if (isHopperTile(tile)) {
    if (tile.getK() != plan.sliceK() || tile.getN() > maxBlockN ||
        (fp8 && tile.getProducers() == 0))
      return std::nullopt;
    plan.blockN = tile.getN();
    plan.warpSpecialized = tile.getProducers() != 0;
    if (tile.getStages())
      plan.stages = tile.getStages();
    if (tile.getBandM())
      plan.bandM = tile.getBandM();
    plan.cluster = tile.getCluster();
    // Nor with a tile that asks for n = 256 or a producer warpgroup.
    if (loraRows > kBlockK && (plan.blockN == 256 || plan.warpSpecialized))
      return std::nullopt;
    // n = 64 neither with LoRA nor in a cluster (one 64-column block to
    // multicast), nor where the caller needs wider blocks.
    if (plan.blockN == kNarrowBlockN &&
        (loraRows > 0 || plan.cluster > 1 || minBlockN > kNarrowBlockN))
      return std::nullopt;
  }
  if (fp8 && plan.blockN > 128) {
    plan.mmaRegisters = kWideConsumerRegisters;
    plan.producerRegisters =
        (kBlockRegisters - kThreads * plan.mmaRegisters) / kProducerThreads;
  }
  // The persistent grid needs a whole cluster of SMs (fewer would launch
  // no blocks at all).
  if (plan.persistentBlocks < plan.cluster)
    return std::nullopt;
  // The default LoRA plan falls back to block barriers where the LoRA
  // tiles leave too little room (scan tables of many experts at r = 64).
  if (!fitStages(plan) && !isHopperTile(tile) && plan.loraUpTiles()) {
    plan.warpSpecialized = false;
    plan.stages = kMaxDefaultStages;
  }
  if (!fitStages(plan))
    return std::nullopt;
  return plan;
}

/// The warp-specialized weight gradient with a 16-bit output stores by
/// bulk copies where the staging tile fits beside 3 stages or more, and
/// beside as many as the tile asks for when it sets them.
static void preferBulkStores(HopperPlan &plan, moe::TileAttr tile,
                             Type outElem) {
  if (outElem.getIntOrFloatBitWidth() != 16)
    return;
  HopperPlan bulk = plan;
  bulk.bulkStores = true;
  if (fitStages(bulk) &&
      (!tile || !tile.getStages() || bulk.stages == plan.stages))
    plan = bulk;
}

/// The weight gradient out [E, K, N] = X_eᵀ · dY_e: block barriers at
/// n = 256 (128 for narrower outputs) unless the tile says otherwise (with
/// rows in order and a 16-bit output of 256 columns or more:
/// warp-specialized, groupedPlan; else a 16-bit output or an f32 one
/// with accumulate: the row bucket of defaultBuckets for short
/// reductions); no clusters. The warp-specialized kernel loads whole
/// 64-row slices by TMA and an expert's partial last slice by cp.async,
/// which reads zeros past its rows where a tensor map over all rows
/// cannot. On an H100 at the Mixtral, Qwen3 and DeepSeek-V3 shapes
/// (bench/training_kernels.py, with cp.async) n = 128 ran 0.57-0.80x
/// torch._grouped_mm; n = 256 with block barriers 0.86-1.22x and with a
/// producer warpgroup 0.80-1.13x, ahead only at short reductions
/// (DeepSeek-V3 T=8192); the tuner picks per shape.
/// lhs [M, K] and rhs [M, N] reduced over their rows per group into
/// [K, width]: the weight gradient's plan (also a dense Aᵀ·B's, one group).
static std::optional<HopperPlan>
rowReductionPlan(ShapedType lhsType, Type rhsElem, Type outElem, int64_t width,
                 int64_t experts, moe::TileAttr tile,
                 const HopperLimits &limits) {
  if (isHopperTile(tile) && tile.getCluster() > 1)
    return std::nullopt;
  // Without a tile: block barriers at planFor's width (n = 64 for narrow
  // outputs, such as moe-decompose-lora-grad's dB).
  moe::TileAttr chosen = tile;
  if (!isHopperTile(tile))
    chosen = moe::TileAttr::get(lhsType.getContext(), kBlockM,
                                defaultBlockN(width, /*narrowOk=*/true),
                                kBlockK, kThreads, 0, 0, 0);
  std::optional<HopperPlan> plan =
      planFor(lhsType.getElementType(), rhsElem, outElem, lhsType.getDimSize(1),
              width, experts, chosen, limits);
  if (!plan)
    return plan;
  plan->layout = {LhsLayout::GroupRowsT, RhsLayout::GroupRowsN};
  if (plan->warpSpecialized)
    preferBulkStores(*plan, tile, outElem);
  return plan;
}

/// The warp-specialized weight gradient's tile at n = 256 (never split).
static moe::TileAttr specializedWeightGradTile(MLIRContext *context) {
  return moe::TileAttr::get(context, kBlockM, 256, kBlockK,
                            kSpecializedThreads, 0, 0, kProducerThreads,
                            /*cluster=*/1, /*row_splits=*/1);
}

/// Whether the weight gradient without a tile runs the warp-specialized
/// kernel at every row count: rows in order (no gather) and a 16-bit output
/// (bulk stores) of at least 256 columns. With whole slices by TMA it ran
/// 1.03-1.12x the block-barrier kernel at 512-8192 rows per expert on the
/// H200; with cp.async, 0.98-1.09x in the same call (0.85-1.03x in an
/// earlier one, which set the old 256-row bucket;
/// bench/results/dw-tma-h200.md). Narrower outputs keep block barriers:
/// LoRA's dB (16-64 columns) ran 0.83-1.01x that way with TMA
/// (bench/results/lora-grad-ws-tma-h200.md).
static bool specializedByDefault(moe::GroupedWeightGradOp op) {
  auto outType = cast<ShapedType>(op.getOut().getType());
  return !op.getGatherSlots() &&
         outType.getElementType().getIntOrFloatBitWidth() == 16 &&
         outType.getDimSize(outType.getRank() - 1) >= 256;
}

/// The FP8 weight gradient (scales): A and B as moe.quantize {transpose}
/// wrote them, [K, P] and [N, P] (with transpose_rhs dy is A), read by
/// the forward's FP8 kernel (K-major stages by TMA, slices promoted with
/// their scales) over the weight gradient's tiles (expert, K tile, n-tile),
/// each summing the expert's padded blocks. Never split (a tile's
/// row_splits is rejected); bulk stores for a 16-bit output where they fit.
static std::optional<HopperPlan> fp8WeightGradPlan(moe::GroupedWeightGradOp op,
                                                   moe::TileAttr tile,
                                                   const HopperLimits &limits) {
  if (askedRowSplits(tile) > 1 || (isHopperTile(tile) && tile.getCluster() > 1))
    return std::nullopt;
  auto outType = cast<ShapedType>(op.getOut().getType());
  bool swapped = op.getTransposeRhs();
  auto a = cast<ShapedType>((swapped ? op.getGradOut() : op.getLhs()).getType());
  auto b = cast<ShapedType>((swapped ? op.getLhs() : op.getGradOut()).getType());
  // planFor's k is the output rows here (A's rows); its 16-byte rule is
  // for copies along the reduction, which here runs over whole blocks.
  int64_t rows = a.getDimSize(0);
  if (ShapedType::isDynamic(rows))
    return std::nullopt;
  std::optional<HopperPlan> plan = planFor(
      a.getElementType(), b.getElementType(), outType.getElementType(),
      llvm::alignTo(rows, 16), outType.getDimSize(2),
      cast<ShapedType>(op.getOffsets().getType()).getDimSize(0), tile, limits);
  if (!plan)
    return plan;
  plan->k = rows;
  plan->layout = {LhsLayout::PaddedRowsT, RhsLayout::PaddedRowsT};
  plan->layout.swappedOperands = swapped;
  preferBulkStores(*plan, tile, outType.getElementType());
  return plan;
}

std::optional<HopperPlan> hopper::groupedPlan(moe::GroupedWeightGradOp op,
                                              moe::TileAttr tile,
                                              const HopperLimits &limits) {
  if (op.getLhsScales())
    return fp8WeightGradPlan(op, tile, limits);
  auto outType = cast<ShapedType>(op.getOut().getType());
  bool swapped = op.getTransposeRhs();
  auto a =
      cast<ShapedType>((swapped ? op.getGradOut() : op.getLhs()).getType());
  auto b =
      cast<ShapedType>((swapped ? op.getLhs() : op.getGradOut()).getType());
  moe::TileAttr chosen = tile;
  if (!isHopperTile(tile) && specializedByDefault(op))
    chosen = specializedWeightGradTile(op->getContext());
  std::optional<HopperPlan> plan = rowReductionPlan(
      a, b.getElementType(), outType.getElementType(), outType.getDimSize(2),
      cast<ShapedType>(op.getOffsets().getType()).getDimSize(0), chosen,
      limits);
  if (!plan)
    return plan;
  plan->slotsPerToken = op.getK().value_or(1);
  plan->layout.expertsInColumns = op.getExpertsInColumns();
  plan->layout.swappedOperands = swapped;
  // Fewer output tiles than SMs (Mixtral's LoRA dA: 16 per expert, 128 in
  // all): with skewed routing one expert's few tiles carried most rows
  // while the other SMs idled (0.67-0.79x torch at Z = 2 and 8). Without a
  // tile set: split each expert's rows into up to rowSplits chunks (groups
  // e * S + s), so that one expert's tiles can fill half the grid, never
  // shorter than leastChunkRows (balanced routing keeps one chunk per
  // expert); f32 partial sums [E*S, K, N] that a second kernel adds. On
  // the H200 skewed Mixtral dA ran 1.2-2.3x faster (1.25-1.52x torch),
  // uniform +6 us for the sum (1.31-1.55x torch, was 1.58-1.80x;
  // bench/results/grouped-row-split-h200.md). A tile's `row_splits` sets
  // S (1: no split), which the tuner measures (each row bucket's tile
  // too). Not for [K, E, N] outputs (the partial sums keep the kernel's
  // own [group, K, N]).
  int64_t experts = plan->experts;
  int64_t perExpert = outTilesPerGroup(*plan, outType.getDimSize(2));
  int64_t splits = askedRowSplits(tile);
  if (splits == 0)
    splits = experts * perExpert >= plan->persistentBlocks
                 ? 1
                 : std::clamp<int64_t>(plan->persistentBlocks / (2 * perExpert),
                                       1, kMaxRowSplits);
  if (splits == 1 || op.getExpertsInColumns())
    return plan;
  while (splits > 1 && experts * splits + 1 > kMaxGroups)
    --splits;
  if (splits == 1)
    return plan;
  std::optional<HopperPlan> split =
      rowReductionPlan(a, b.getElementType(), Float32Type::get(op.getContext()),
                       outType.getDimSize(2), experts * splits, tile, limits);
  if (!split)
    return plan;
  split->slotsPerToken = plan->slotsPerToken;
  split->layout.swappedOperands = swapped;
  split->rowSplits = splits;
  return split;
}

/// A LoRA adapter the wgmma kernel fuses: the forward's (not transposed),
/// of the operands' type, rank a multiple of 8 (16-byte copies of B_e's
/// rows) up to 128 (the epilogue's product goes through shared memory in
/// passes of one K slice; U's accumulators take R/2 registers), without a
/// cluster (planFor also keeps ranks past 64 off the warp-specialized
/// kernel). 0 when there is none; nullopt when there is one the kernel
/// cannot fuse.
static std::optional<int64_t> fusableLoraRank(moe::GroupedMatmulOp op,
                                              moe::TileAttr tile) {
  if (!op.getLoraA())
    return 0;
  auto aType = cast<ShapedType>(op.getLoraA().getType());
  auto bType = cast<ShapedType>(op.getLoraB().getType());
  Type elem = cast<ShapedType>(op.getLhs().getType()).getElementType();
  int64_t experts = cast<ShapedType>(op.getOffsets().getType()).getDimSize(0);
  int64_t rank = aType.getDimSize(0) / experts;
  if (op.getTransposeLora() || aType.getElementType() != elem ||
      bType.getElementType() != elem || rank % 8 != 0 ||
      rank > kMaxLoraRank || (isHopperTile(tile) && tile.getCluster() > 1))
    return std::nullopt;
  return rank;
}

// On the H200 (bench/training_kernels.py, same call; bench/results/
// training-kernels-h200.md) the warp-specialized weight gradient with bulk
// stores, with cp.async for both operands, ran 1.03-1.21x as fast as the
// block-barrier one where the experts average 64-256 rows (Qwen3, Qwen3.5,
// OLMoE and DeepSeek-V3 at T = 2048, Qwen3.5 and DeepSeek-V3 at T = 8192)
// and 0.85-1.03x at 512 rows and more. That still holds where a gathered
// operand keeps it on cp.async; with rows in order the operands come by
// TMA and it runs at every row count (specializedByDefault). With an f32
// gradient added to (accumulate; pair stores, no bulk copies) it ran
// 1.00-1.20x at 64-512 rows and 0.97-1.07x at 1024 and more
// (bench/results/dw-accumulate-ws-h200.md).
SmallVector<moe::TileBucketAttr>
hopper::defaultBuckets(moe::GroupedWeightGradOp op, moe::TileAttr tile,
                       const HopperLimits &limits) {
  auto outType = cast<ShapedType>(op.getOut().getType());
  // Measured at n = 256 only: not for narrower outputs, nor FP8.
  if (isHopperTile(tile) || op->hasAttr(moe::kTileBucketsAttrName) ||
      op.getLhsScales() ||
      outType.getDimSize(outType.getRank() - 1) < 256)
    return {};
  // Rows in order with a 16-bit output: at every row count (groupedPlan).
  if (specializedByDefault(op))
    return {};
  // A bucket is one kernel: never split.
  std::optional<HopperPlan> plan =
      groupedPlan(op, specializedWeightGradTile(op->getContext()), limits);
  if (!plan || (!plan->bulkStores && !op.getAccumulate()))
    return {};
  int64_t rows = plan->bulkStores ? kShortReduction : kShortAccumulation;
  int64_t experts = cast<ShapedType>(op.getOffsets().getType()).getDimSize(0);
  return {moe::TileBucketAttr::get(op->getContext(), rows * experts,
                                   tileOf(op->getContext(), *plan))};
}

/// The matmul's columns: the output's, half of them with swiglu_grad.
static int64_t matmulWidth(moe::GroupedMatmulOp op) {
  int64_t width = cast<ShapedType>(op.getOut().getType()).getDimSize(1);
  if (op.getActivation() == moe::Activation::swiglu_grad &&
      !ShapedType::isDynamic(width))
    width /= 2;
  return width;
}

std::optional<HopperPlan> hopper::groupedPlan(moe::GroupedMatmulOp op,
                                              moe::TileAttr tile,
                                              const HopperLimits &limits) {
  std::optional<int64_t> loraRank = fusableLoraRank(op, tile);
  // FP8 block scales: 1x128 and 128x128 blocks (one slice of K each) of
  // K-major weights [E, N, K]: FP8 wgmma reads both operands K-major only,
  // so [E, K, N] FP8 weights (a forward's dX read in place) have no wgmma
  // kernel; the input gradient takes a second, transposed FP8 copy.
  if (!loraRank || (op.getLhsScales() && (!op.getTransposeRhs() ||
                                          op.getScaleGroup() != kFp8BlockK)))
    return std::nullopt;
  auto lhsType = cast<ShapedType>(op.getLhs().getType());
  auto outType = cast<ShapedType>(op.getOut().getType());
  int64_t experts = cast<ShapedType>(op.getOffsets().getType()).getDimSize(0);
  bool swigluGrad = op.getActivation() == moe::Activation::swiglu_grad;
  int64_t width = matmulWidth(op);
  std::optional<HopperPlan> plan = planFor(
      lhsType.getElementType(),
      cast<ShapedType>(op.getRhs().getType()).getElementType(),
      outType.getElementType(), lhsType.getDimSize(1), width, experts, tile,
      limits, /*loraRows=*/(*loraRank + 15) / 16 * 16,
      /*minBlockN=*/swigluGrad || op.getActivation() == moe::Activation::swiglu
          ? 128
          : kNarrowBlockN,
      // FP8 SwiGLU at n = 256: a block's 128 up rows start at `width` past
      // its gate rows and must lie in one weight-scale block as they do.
      /*maxBlockN=*/op.getLhsScales() &&
              op.getActivation() == moe::Activation::swiglu && width % 128
          ? 128
          : 256);
  // FP8 SwiGLU: the up rows of a block start at `width` past the gate
  // rows, and must lie in one 128-row weight-scale block as the gate rows
  // do (HopperPlan::scaleSegments).
  if (plan && plan->blockScales &&
      op.getActivation() == moe::Activation::swiglu &&
      width % (plan->blockN / 2) != 0)
    return std::nullopt;
  if (plan) {
    plan->loraRank = *loraRank;
    plan->loraScaling = op.getLoraScaling().convertToFloat();
    plan->slotsPerToken = op.getK().value_or(1);
    plan->swiglu = op.getActivation() == moe::Activation::swiglu;
    plan->swigluGrad = swigluGrad;
    // Without transpose_rhs the weights are [E, K, N]: the dX of a forward
    // with [E, N, K] weights.
    if (!op.getTransposeRhs())
      plan->layout.rhs = RhsLayout::ExpertKN;
    plan->layout.expertsInColumns = op.getExpertsInColumns(); // [K, E, N]
    // Recomputing U for every n-tile cost r / blockN of the tile's MMA work
    // in narrow m64nRk16 wgmmas (+12 to +22 % over the same matmul without
    // LoRA at r = 16 on the H200, bench/results/lora-kernels-ws-h200.md).
    // At least two runs per m-tile: with one (3 or 4 n-tiles in all) the
    // blocks running together each read their own m-tile's rows J times,
    // which no longer stay in L2 (on the H200 Qwen3.5 gate_up, Qwen3,
    // OLMoE and Qwen3.5 down dX ran 4-6 % slower at r = 16;
    // bench/results/lora-runs-h200.md).
    if (plan->loraUpTiles() && plan->cluster == 1) {
      int64_t nTiles = (width + plan->outTileN() - 1) / plan->outTileN();
      for (int64_t run = 4; run > 1 && plan->loraRunTiles == 1; --run)
        if (nTiles % run == 0 && nTiles / run >= 2)
          plan->loraRunTiles = run;
    }
  }
  return plan;
}

/// The plan for a dense A·Bᵀ (B read as [N, K]) or A·B (B [K, N]): one
/// group of all rows; or for Aᵀ·B (A read as [K, M], B [K, N]: a weight
/// gradient such as the router's), the weight gradient's kernel with one
/// group of all rows, or with few output tiles rowSplits groups of chunks
/// of them (no offsets: the kernel computes the groups' bounds).
static std::optional<HopperPlan> densePlan(linalg::MatmulOp op,
                                           moe::TileAttr tile,
                                           const HopperLimits &limits) {
  FailureOr<MatmulLayout> layout = matmulLayout(op);
  if (failed(layout))
    return std::nullopt;
  auto lhsType = cast<ShapedType>(op.getInputs()[0].getType());
  auto outType = cast<ShapedType>(op.getResult(0).getType());
  Type rhsElem = cast<ShapedType>(op.getInputs()[1].getType()).getElementType();
  if (layout->transposeA) {
    if (layout->transposeB)
      return std::nullopt;
    std::optional<HopperPlan> whole =
        rowReductionPlan(lhsType, rhsElem, outType.getElementType(),
                         outType.getDimSize(1), /*experts=*/1, tile, limits);
    if (!whole)
      return whole;
    // One block per output tile reduces over all T rows: with few tiles
    // (the router's gradient: 8 to 56) most SMs sit idle, and the time
    // grew with T alone (0.08 ms at T = 8192, 0.30 at 32768 on the H200
    // at every model, 0.13-0.59x torch.mm; bench/results/
    // small-wgrad-h200.md). Split the rows so that the tiles of all chunks
    // fill the persistent grid once; a tile's `row_splits` sets the count
    // (1: no split).
    auto splitsOf = [&](const HopperPlan &plan) {
      return std::clamp<int64_t>(
          plan.persistentBlocks / outTilesPerGroup(plan, outType.getDimSize(1)),
          1, kMaxRowSplits);
    };
    int64_t asked = askedRowSplits(tile);
    int64_t splits = asked ? asked : splitsOf(*whole);
    // Without a tile set: 128-column tiles where they halve the chunks, and
    // so the partial sums written and read back (Qwen3's and OLMoE's router
    // gradient: 16 chunks at n = 256, 8 at n = 128, 1.02-1.21x faster on
    // the H200; at 8 chunks or fewer, as Mixtral's and DeepSeek-V3's, the
    // narrower tiles ran up to 1.39x slower:
    // bench/results/router-grad-split-h200.md).
    moe::TileAttr chosen = tile;
    if (!isHopperTile(tile) && !asked && splits > kMaxRowSplits / 2 &&
        whole->blockN > 128) {
      auto narrowTile = moe::TileAttr::get(op.getContext(), kBlockM, 128,
                                           kBlockK, kThreads, 0, 0, 0);
      std::optional<HopperPlan> narrower =
          rowReductionPlan(lhsType, rhsElem, outType.getElementType(),
                           outType.getDimSize(1), 1, narrowTile, limits);
      if (narrower && splitsOf(*narrower) < splits) {
        chosen = narrowTile;
        splits = splitsOf(*narrower);
      }
    }
    if (splits == 1)
      return whole;
    std::optional<HopperPlan> split = rowReductionPlan(
        lhsType, rhsElem, Float32Type::get(op.getContext()),
        outType.getDimSize(1), splits, chosen, limits);
    if (split)
      split->rowSplits = splits;
    return split;
  }
  bool transposed = layout->transposeB;
  std::optional<HopperPlan> plan = planFor(
      lhsType.getElementType(),
      cast<ShapedType>(op.getInputs()[1].getType()).getElementType(),
      outType.getElementType(), lhsType.getDimSize(1), outType.getDimSize(1),
      /*experts=*/1, tile, limits);
  if (plan && !transposed)
    plan->layout.rhs = RhsLayout::ExpertKN; // B is [K, N]
  return plan;
}

std::optional<HopperPlan> hopper::hopperPlanFor(Operation *op,
                                                moe::TileAttr tile,
                                                const HopperLimits &limits) {
  if (auto grouped = dyn_cast<moe::GroupedMatmulOp>(op)) {
    std::optional<HopperPlan> plan = groupedPlan(grouped, tile, limits);
    // FP8 operands need their block scales.
    if (plan && plan->blockScales && !grouped.getLhsScales())
      return std::nullopt;
    return plan;
  }
  // FP8 operands of a weight gradient come with its scales (the verifier
  // says so); those of a dense matmul have none, and no wgmma kernel.
  if (auto wgrad = dyn_cast<moe::GroupedWeightGradOp>(op))
    return groupedPlan(wgrad, tile, limits);
  std::optional<HopperPlan> plan;
  if (auto dense = dyn_cast<linalg::MatmulOp>(op))
    plan = densePlan(dense, tile, limits);
  if (plan && plan->blockScales)
    return std::nullopt;
  return plan;
}

moe::WgmmaPlanAttr hopper::planAttrOf(MLIRContext *context,
                                      const HopperPlan &plan,
                                      ArrayAttr buckets) {
  bool ws = plan.warpSpecialized;
  return moe::WgmmaPlanAttr::get(
      context, kBlockM, plan.blockN, plan.sliceK(), plan.stages, plan.bandM,
      ws ? kProducerThreads : 0, ws ? plan.mmaRegisters : 0,
      ws ? plan.producerRegisters : 0, plan.cluster, plan.rowSplits,
      plan.loraRunTiles, plan.bulkStores, buckets);
}

/// The row buckets `op` asks for with `tile` (as moe.tile_buckets): its
/// own, else a weight gradient's defaults (none under a row split: those
/// were measured without); a dense matmul has none.
static SmallVector<moe::TileBucketAttr>
askedBuckets(Operation *op, moe::TileAttr tile, const HopperPlan &base,
             const HopperLimits &limits) {
  if (isa<linalg::MatmulOp>(op))
    return {};
  if (auto list = op->getAttrOfType<ArrayAttr>(moe::kTileBucketsAttrName))
    return llvm::to_vector(list.getAsRange<moe::TileBucketAttr>());
  auto wgrad = dyn_cast<moe::GroupedWeightGradOp>(op);
  if (!wgrad || base.rowSplits > 1)
    return {};
  return defaultBuckets(wgrad, tile, limits);
}

FailureOr<moe::WgmmaPlanAttr>
hopper::selectPlan(Operation *op, moe::TileAttr tile,
                   const HopperLimits &limits) {
  std::optional<HopperPlan> base = hopperPlanFor(op, tile, limits);
  if (!base)
    return op->emitOpError("has no sm90_wgmma kernel for its tile ") << tile;
  MLIRContext *context = op->getContext();
  SmallVector<std::pair<int64_t, HopperPlan>> buckets;
  for (moe::TileBucketAttr bucket : askedBuckets(op, tile, *base, limits)) {
    std::optional<HopperPlan> plan =
        hopperPlanFor(op, bucket.getTile(), limits);
    if (!plan || !isHopperTile(bucket.getTile()))
      return op->emitOpError("has a tile bucket the sm90a matmul cannot "
                             "build: ")
             << bucket;
    buckets.push_back({bucket.getMaxRows(), *plan});
  }
  // Last buckets that would build the base kernel again: the base serves
  // their rows.
  moe::TileAttr baseTile = tileOf(context, *base);
  while (!buckets.empty() &&
         tileOf(context, buckets.back().second) == baseTile)
    buckets.pop_back();
  SmallVector<Attribute> entries;
  for (auto &[maxRows, plan] : buckets)
    entries.push_back(moe::WgmmaBucketAttr::get(context, maxRows,
                                                planAttrOf(context, plan)));
  return planAttrOf(context, *base,
                    entries.empty() ? ArrayAttr()
                                    : ArrayAttr::get(context, entries));
}

/// Whether the kernel of `plan` may store its tiles by bulk copies: the
/// warp-specialized weight gradient (or dense Aᵀ·B) writing a 16-bit
/// output itself (not split into f32 partial sums).
static bool bulkStoresFit(Operation *op, const HopperPlan &plan) {
  auto out = cast<ShapedType>(op->getResult(0).getType());
  return plan.weightGrad() && plan.warpSpecialized && plan.rowSplits == 1 &&
         out.getElementType().getIntOrFloatBitWidth() == 16;
}

/// The kernel of one plan (no buckets) for `op`, as written.
static FailureOr<HopperPlan> followOne(Operation *op, moe::WgmmaPlanAttr attr,
                                       const HopperLimits &limits) {
  auto fail = [&] {
    return op->emitOpError("cannot follow its sm90_wgmma plan ")
           << attr << ": ";
  };
  int64_t producers = attr.getProducers();
  moe::TileAttr tile = moe::TileAttr::get(
      op->getContext(), attr.getBlockM(), attr.getBlockN(), attr.getBlockK(),
      producers ? kSpecializedThreads : kThreads, attr.getStages(),
      attr.getBandM(), producers, attr.getCluster(), attr.getRowSplits());
  std::optional<HopperPlan> plan = hopperPlanFor(op, tile, limits);
  if (!plan)
    return fail() << "the kernel has no such block, warp roles or cluster "
                     "for the op's types, sizes and attributes on this "
                     "target (e.g. block_k is 64 for 16-bit operands, 128 "
                     "for FP8, which also needs producers, and block_n <= "
                     "128 for its weight gradient and a SwiGLU whose up "
                     "rows start inside a 128-row scale block; block_n = 64 takes no LoRA, SwiGLU or "
                     "cluster; LoRA past rank 64 needs block_n = 128 and no "
                     "producers; a cluster needs as many SMs; 3 stages must fit in "
                     "shared memory)";
  if (plan->rowSplits != attr.getRowSplits())
    return fail() << "row_splits = " << attr.getRowSplits()
                  << " is not possible here (only a row reduction splits "
                     "its rows, not into a [K, E, N] output, and into at "
                     "most 1024 groups)";
  plan->stages = attr.getStages();
  plan->bulkStores = attr.getBulkStores();
  if (plan->bulkStores && !bulkStoresFit(op, *plan))
    return fail() << "bulk_stores needs the warp-specialized weight "
                     "gradient writing a 16-bit output, not split";
  plan->loraRunTiles = attr.getLoraRunTiles();
  if (plan->loraRunTiles > 1) {
    auto matmul = dyn_cast<moe::GroupedMatmulOp>(op);
    int64_t width = matmul ? matmulWidth(matmul) : 0;
    int64_t nTiles = llvm::divideCeil(width, plan->outTileN());
    if (!plan->loraUpTiles() || plan->cluster > 1 ||
        nTiles % plan->loraRunTiles != 0)
      return fail() << "lora_run_tiles = " << plan->loraRunTiles
                    << " needs a fused LoRA term in the warp-specialized "
                       "kernel without a cluster, and n-tiles it divides";
  }
  if (plan->warpSpecialized) {
    plan->mmaRegisters = attr.getMmaRegisters();
    plan->producerRegisters = attr.getProducerRegisters();
  }
  if (plan->sharedBytes() > plan->maxSharedBytes)
    return fail() << plan->stages << " stages need " << plan->sharedBytes()
                  << " bytes of shared memory per block, the target has "
                  << plan->maxSharedBytes;
  return *plan;
}

FailureOr<HopperKernelPlans>
hopper::followPlan(Operation *op, moe::WgmmaPlanAttr plan,
                   const HopperLimits &limits) {
  FailureOr<HopperPlan> base = followOne(op, plan, limits);
  if (failed(base))
    return failure();
  HopperKernelPlans plans{*base, {}};
  // A dense matmul has one launch: its rows are not known per group.
  if (plan.getBuckets() && isa<linalg::MatmulOp>(op))
    return op->emitOpError("cannot follow its sm90_wgmma plan: a dense "
                           "matmul has one kernel, no 'buckets'");
  if (ArrayAttr buckets = plan.getBuckets())
    for (auto bucket : buckets.getAsRange<moe::WgmmaBucketAttr>()) {
      FailureOr<HopperPlan> kernel = followOne(op, bucket.getPlan(), limits);
      if (failed(kernel))
        return failure();
      plans.buckets.push_back({bucket.getMaxRows(), *kernel});
    }
  return plans;
}

SmallVector<moe::TileAttr> moec::tuningCandidates(Operation *op,
                                                  StringRef target) {
  // A LoRA matmul's tiles are those groupedPlan accepts for it (no cluster;
  // n = 128 and block barriers past rank 64): the loops below filter.
  if (target != "sm_90a" ||
      !isa<moe::GroupedMatmulOp, moe::GroupedWeightGradOp>(op))
    return {};
  // Not the FP8 weight gradient yet: its operands' padded columns must
  // hold the blocks of its offsets, which the tuner's random inputs (rows
  // sized by one symbol) do not keep.
  if (auto wgrad = dyn_cast<moe::GroupedWeightGradOp>(op);
      wgrad && wgrad.getLhsScales())
    return {};
  std::optional<HopperPlan> chosen = hopperPlanFor(op, {});
  if (!chosen)
    return {};
  MLIRContext *context = op->getContext();
  SmallVector<moe::TileAttr> tiles;
  // A tile as its plan builds it (row_splits the chunks taken), and where
  // that splits the rows, the same tile unsplit.
  auto add = [&](moe::TileAttr tile) {
    std::optional<HopperPlan> plan = hopperPlanFor(op, tile);
    if (!plan)
      return;
    for (int64_t splits : {plan->rowSplits > 1 ? plan->rowSplits : 0,
                           int64_t(1)}) {
      moe::TileAttr candidate = withRowSplits(tile, splits);
      if (!llvm::is_contained(tiles, candidate))
        tiles.push_back(candidate);
      if (plan->rowSplits == 1)
        break;
    }
  };
  add(tileOf(context, *chosen));
  auto outType = cast<ShapedType>(op->getResult(0).getType());
  int64_t outWidth = outType.getDimSize(outType.getRank() - 1);
  SmallVector<int64_t> widths = {128};
  if (outWidth >= 256)
    widths.insert(widths.begin(), 256);
  if (outWidth <= kNarrowBlockN)
    widths.insert(widths.begin(), kNarrowBlockN);
  // Warp roles: with and without a producer warpgroup, at n = 256 and 64
  // (the warp-specialized kernel at n = 128 measured slower at every bench
  // shape).
  for (int64_t n : widths)
    for (int64_t producers : {int64_t(0), kProducerThreads}) {
      // (FP8 has only the warp-specialized kernel.)
      if (producers && n == 128 && !chosen->blockScales)
        continue;
      int64_t threads = producers ? kSpecializedThreads : kThreads;
      // The deepest pipeline that fits at this width (the plan clamps).
      std::optional<HopperPlan> deepest = hopperPlanFor(
          op, moe::TileAttr::get(context, kBlockM, n, chosen->sliceK(), threads,
                                     /*stages=*/16, /*band_m=*/0, producers));
      if (!deepest)
        continue;
      // Clusters of 2 (weights multicast) only with warp specialization.
      for (int64_t cluster : {1, 2}) {
        if (cluster > 1 && !producers)
          continue;
        for (int64_t stages = deepest->stages;
             stages >= std::max<int64_t>(3, deepest->stages - 1); --stages)
          for (int64_t band : {4, 8, 16}) {
            add(moe::TileAttr::get(context, kBlockM, n, chosen->sliceK(), threads,
                                   stages, band, producers, cluster));
          }
      }
    }
  return tiles;
}
