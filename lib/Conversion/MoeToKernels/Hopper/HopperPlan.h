//===- HopperPlan.h - Plan of the sm_90a grouped matmul ---------*- C++ -*-===//
//
// Part of moec. The compile-time shape of the wgmma kernel (HopperKernel.h):
// block width, pipeline depth, tile order, warp roles, cluster size, operand
// layouts, and the target limits all of it must fit in. Nothing here emits
// IR: moe-select-kernel records a plan as #moe.wgmma_plan (selectPlan, the
// cost model), and the lowering builds what the attribute says
// (followPlan), after checking that it can.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_HOPPER_HOPPERPLAN_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_HOPPER_HOPPERPLAN_H

#include "moec/Conversion/TargetInfo.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Support/MoeShapes.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace moec::kernels::hopper {

constexpr int64_t kBlockM = 128;   ///< rows per block (2 warpgroups x 64)
constexpr int64_t kBlockK = 64;    ///< K per stage of 16-bit operands: one 128-byte row
/// K per stage of FP8 operands: one 128-byte row, and one block of the
/// 1x128 / 128x128 scales (each slice is promoted with its two scales).
constexpr int64_t kFp8BlockK = 128;
static_assert(kFp8BlockK == kFp8ScaleBlock && kBlockM == kFp8ScaleBlock,
              "an FP8 slice is one scale block, and the FP8 weight "
              "gradient's schedule counts each expert's blocks as m-tiles");
/// Output columns per block of an output of at most that many columns.
constexpr int64_t kNarrowBlockN = 64;
constexpr int64_t kMaxLoraRank = 128; ///< largest fused LoRA rank
constexpr int64_t kThreads = 256;  ///< 2 warpgroups
/// Warp-specialized blocks: a producer warpgroup then the 2 MMA warpgroups.
constexpr int64_t kSpecializedThreads = 384;
/// Threads of the producer warpgroup of a warp-specialized block.
constexpr int64_t kProducerThreads = 128;
/// Warps of the two MMA warpgroups: the arrivals that free a stage.
constexpr int64_t kMmaWarps = 8;
/// Registers a warp-specialized block starts with: 168 per thread of 384.
/// setmaxnreg moves them between the roles, never past this total.
constexpr int64_t kBlockRegisters = 168 * kSpecializedThreads;
/// Registers per MMA thread after setmaxnreg (the producer's are what is
/// left: 72): 128 accumulators of an n = 256 tile and the loop's state.
constexpr int64_t kConsumerRegisters = 216;
/// With a LoRA rank past 32, U's accumulators (R/2 registers) on top: at
/// 216, ptxas spilled 36-76 bytes in every r = 64 bench kernel, at 232
/// (the producer keeps 40, which its copies fit in) 4 bytes in one. FP8 at
/// n = 256 (128 accumulators and 64 partials): 72-108 bytes spilled at
/// 216 in test/Integration/fp8_matmul.mlir's kernels.
constexpr int64_t kWideConsumerRegisters = 232;
constexpr int64_t kRowBytes = 128; ///< bytes of a 64-element 16-bit row
constexpr int64_t kChunksPerRow = kRowBytes / 16;
/// Columns of one column block of an N-major (ExpertKN) B stage: the 64
/// elements of a 128-byte swizzled row.
constexpr int64_t kColumnBlock = 64;
/// Bytes of one column block: kBlockK rows of 128 bytes.
constexpr int64_t kColumnBlockBytes = kBlockK * kRowBytes;
/// Groups the schedule scan handles (experts + the tail), one table entry
/// per group in shared memory.
constexpr int64_t kMaxGroups = 1024;
/// m-tiles per band of the tile order (TileSchedule) unless the tile sets
/// `band_m`.
constexpr int64_t kDefaultBandM = 8;
/// Pipeline depth unless the tile sets `stages`: as many as fit, at most 6.
constexpr int64_t kMaxDefaultStages = 6;
/// FP8's pipeline depth unless the tile sets `stages` (HopperPlan.cpp).
constexpr int64_t kFp8DefaultStages = 4;

/// What the kernel must fit on the GPU it runs on. The defaults are the
/// H100/H200's.
struct HopperLimits {
  int64_t smCount = 132;               ///< blocks of the persistent grid
  int64_t maxSharedBytes = 227 * 1024; ///< dynamic shared memory per block
};

/// The limits of `target` (its SM count and shared memory per block).
HopperLimits limitsOf(const TargetInfo &target);

/// How the lhs (A) lies in global memory: what the producer copies from.
enum class LhsLayout {
  /// [rows, K], K contiguous: a block's A rows are 128 rows of the group
  /// (in order, or looked up through the gather slots).
  RowsK,
  /// The weight gradient's A = X_eᵀ: the expert's rows of [rows, K] (in
  /// order or gathered) are the reduction, 128 of its K columns the output
  /// rows of a block. A stage holds 64 rows of the group as two 64-column
  /// blocks (one per MMA warpgroup), M-major: wgmma reads A transposed.
  GroupRowsT,
  /// The FP8 weight gradient's A = X_eᵀ as moe.quantize {transpose} wrote
  /// it, [K, P]: the expert's rows, padded to 128-row blocks, are
  /// contiguous columns from 128 * (the blocks of the experts before it).
  /// A stage holds 128 of its K rows by one block of those columns,
  /// K-major as RowsK (FP8 wgmma reads K-major operands only), by TMA.
  PaddedRowsT,
};

/// How the rhs (B) lies in global memory: what the producer copies from
/// and how the MMA loop reads the stage.
enum class RhsLayout {
  /// [E, N, K] (or a dense [N, K]), K contiguous: a block's B rows are its
  /// output columns, K-major in shared memory (wgmma's "col" B).
  ExpertNK,
  /// [E, K, N] (or a dense [K, N]), N contiguous: the dX of a forward with
  /// [E, N, K] weights. A stage holds the block's columns as blockN / 64
  /// column blocks of 64 K rows x 64 columns (one 128-byte swizzled row per
  /// K), N-major in shared memory (wgmma's transposed B).
  ExpertKN,
  /// The weight gradient's B: the output gradient [rows, N] in the grouped
  /// row order, the expert's rows the reduction. Stages as ExpertKN, the
  /// group's rows in place of the K rows.
  GroupRowsN,
  /// The FP8 weight gradient's B = dYᵀ, [N, P] in the layout of
  /// LhsLayout::PaddedRowsT: stages as ExpertNK (the block's output
  /// columns as rows, the expert's rows along them), by TMA.
  PaddedRowsT,
};

/// The operand layouts of one kernel.
struct OperandLayout {
  LhsLayout lhs = LhsLayout::RowsK;
  RhsLayout rhs = RhsLayout::ExpertNK;
  /// `experts_in_columns`: an ExpertKN rhs is [K, E, N], or the weight
  /// gradient's output [K, E, N] (a LoRA B adapter [N, E*r] and its
  /// gradient, with no transposes around the matmul).
  bool expertsInColumns = false;
  /// The weight gradient of transposed weights, [E, N, K] = Σ dyᵀ · x: the
  /// op's output gradient dy is A and its lhs x is B (the kernel's usual
  /// [E, K, N] with the roles swapped), so a gather of x applies to B's
  /// rows (GroupRowsN), not A's.
  bool swappedOperands = false;
};

/// The compile-time shape of one Hopper grouped matmul kernel.
struct HopperPlan {
  int64_t blockN = 128; ///< B rows (output columns, or gate+up) per block
  int64_t stages = kMaxDefaultStages;
  int64_t bandM = kDefaultBandM;
  /// Slices the copies run ahead: one wgmma group stays in flight while the
  /// next slice's copies are issued, so the slot refilled is two back.
  int64_t ahead() const { return stages - 2; }
  int64_t experts = 0;
  int64_t k = 0; ///< reduction length (static); K of out [E, K, N] for
                 ///< the weight gradient
  int64_t slotsPerToken = 1;
  /// A row reduction with few output tiles split into this many chunks of
  /// rows per group: a dense Aᵀ·B (the router's weight gradient: one group
  /// of every token) or a grouped weight gradient (each expert's rows; then
  /// `experts` counts E * S groups, chunk s of expert e being group
  /// e * S + s). Each chunk is a group of the weight gradient's kernel
  /// writing f32 partial sums [groups, K, N] that a second kernel adds in
  /// chunk order (so the result stays bitwise deterministic); 1: not split.
  int64_t rowSplits = 1;
  bool swiglu = false;
  /// The epilogue writes swiglu_grad(h, y) [M, 2N] from the saved SwiGLU
  /// input h (the kernel's `swigluInput`) instead of y.
  bool swigluGrad = false;
  /// A LoRA adapter term s · (x · A_eᵀ) · B_eᵀ: its rank r, the rows R of
  /// its A tile per stage (r rounded up to 16, the wgmma K step of the
  /// epilogue's product) and its scaling s. The warp-specialized kernel
  /// takes ranks up to 64 (one pass of the epilogue's product).
  int64_t loraRank = 0, loraRows = 0;
  float loraScaling = 1.0f;
  bool lora() const { return loraRank > 0; }
  /// A producer warpgroup copies, the two MMA warpgroups only compute;
  /// they hand stages over through mbarriers instead of block barriers.
  bool warpSpecialized = false;
  /// Blocks per cluster (1 or 2; 2 only warp-specialized): the blocks of
  /// a pair compute m-tiles 2j and 2j+1 of the same expert and columns and
  /// each multicasts half of the weight tile to both.
  int64_t cluster = 1;
  mlir::NVVM::WGMMATypes elemType = mlir::NVVM::WGMMATypes::bf16;
  /// B's type: elemType, or the other FP8 format (the FP8 weight gradient
  /// of e4m3 activations and e5m2 gradients).
  mlir::NVVM::WGMMATypes rhsElemType = mlir::NVVM::WGMMATypes::bf16;
  /// Bytes per operand element: 2 (bf16, f16) or 1 (FP8). A stage row is
  /// 128 bytes either way, so the stage layout, the copies and the wgmma
  /// descriptors are the same in bytes; only K per slice differs.
  int64_t elemBytes = 2;
  /// K elements per stage (one 128-byte row): 64, or 128 for FP8.
  int64_t sliceK() const { return kRowBytes / elemBytes; }
  /// K of one wgmma instruction: 16, or 32 for FP8 (32 bytes either way).
  int64_t mmaK() const { return 32 / elemBytes; }
  /// FP8 block scales. The forward and the input gradient: lhs scales
  /// [rows, ceil(K/128)] (1x128), rhs scales [E, ceil(N/128), ceil(K/128)]
  /// (128x128 of [E, N, K] weights). Each 128-deep slice is accumulated by
  /// wgmma into a fresh partial accumulator, then multiplied by its lhs
  /// row's and its weight block's scales and added to the f32
  /// accumulators (two-level accumulation: FP8 wgmma accumulates with
  /// reduced precision, the promotion keeps the error at bf16's level).
  /// The weight gradient: one scale per 128-row block and row of A or
  /// column of B ([B, K], [B, N]; fp8WeightGrad).
  bool blockScales = false;
  /// The weight-scale segments of a block's B rows: each lies inside one
  /// 128-row block of the weights (planFor checks), so a thread needs one
  /// rhs scale per segment and slice. SwiGLU: the gate rows, then the up
  /// rows; otherwise one segment per 128 rows (block_n 64 or 128: one).
  int64_t scaleSegments() const {
    return swiglu ? 2 : std::max<int64_t>(1, blockN / kFp8BlockK);
  }
  /// Columns of one slice's partial accumulators (block scales). An FP8
  /// block of n = 256 runs each slice as two 128-column halves, each
  /// promoted into its half of the f32 accumulators before the next is
  /// issued: a thread holds 128 + 64 registers of them, where one n = 256
  /// partial set would need 128 + 128 (a thread gets 232 at most).
  int64_t partialN() const { return std::min<int64_t>(blockN, kFp8BlockK); }
  /// The FP8 weight gradient (PaddedRowsT operands, block scales): both
  /// operands' slices come by TMA alone (the quantize padded every expert
  /// to whole slices), and its scales are one per 128-row block of the
  /// reduction and output row of A ([B, K]) or output column of B
  /// ([B, N]), so a slice's partial sum (row, column) is multiplied by its
  /// row's and its column's scale.
  bool fp8WeightGrad() const { return layout.lhs == LhsLayout::PaddedRowsT; }
  OperandLayout layout;
  /// Blocks of the persistent grid (one per SM) and the dynamic shared
  /// memory a block may use: the target's (HopperLimits), set by planFor.
  int64_t persistentBlocks = HopperLimits().smCount;
  int64_t maxSharedBytes = HopperLimits().maxSharedBytes;

  int64_t threads() const {
    return warpSpecialized ? kSpecializedThreads : kThreads;
  }
  /// Threads that issue the copies: the producer warpgroup, or all.
  int64_t copyThreads() const {
    return warpSpecialized ? kProducerThreads : kThreads;
  }

  int64_t groups() const { return experts + 1; }
  /// A stage: 128 A rows, blockN B rows, then R rows of the LoRA A_e.
  int64_t stageBytes() const {
    return (kBlockM + blockN + loraRows) * kRowBytes;
  }
  /// Two ping-pong tables of the scan and the groups' first rows (plus
  /// the end of the last), rounded to 16 bytes.
  int64_t tableBytes() const {
    return (groups() * 8 + (groups() + 1) * 4 + 15) / 16 * 16;
  }
  /// LoRA in the warp-specialized kernel: the epilogue's product has its
  /// own shared memory after the stages (the producer keeps filling those
  /// with the next tile): s · U as a 128-row A tile, then B_e's rows for
  /// the block's columns, each row one 128-byte swizzled row of 64 ranks.
  bool loraUpTiles() const { return warpSpecialized && loraRows > 0; }
  /// LoRA with tiles of its own: a block computes this many n-tiles of one
  /// m-tile in a row, and only the first of them accumulates U = x · A_eᵀ
  /// in its k-loop; the others reuse s · U from the U tile (TileSchedule
  /// hands out such runs). The largest of 4, 3, 2, 1 that divides the
  /// n-tiles into at least two runs (no run has an empty slot); 1 without
  /// LoRA tiles or in a cluster.
  int64_t loraRunTiles = 1;
  /// Registers per thread of the MMA warpgroups and of the producer after
  /// setmaxnreg (warp-specialized only; planFor sets the defaults).
  int64_t mmaRegisters = kConsumerRegisters;
  int64_t producerRegisters =
      (kBlockRegisters - kThreads * kConsumerRegisters) / kProducerThreads;
  int64_t loraUpBytes() const {
    return loraUpTiles() ? (kBlockM + blockN) * kRowBytes : 0;
  }
  /// A "full" and an "empty" mbarrier per stage (warp-specialized only),
  /// and a pair for the LoRA B_e tile.
  int64_t barrierBytes() const {
    if (!warpSpecialized)
      return 0;
    return 16 * (stages + (loraUpTiles() ? 1 : 0));
  }
  /// The warp-specialized weight gradient with a 16-bit output stores
  /// each tile through a staging tile of its own after the stages, by bulk
  /// async copies (one per row), so that the MMA warpgroups go on to the
  /// next tile while the stores drain (its reductions are short).
  bool bulkStores = false;
  /// Staging rows: the tile's columns plus 8 (16 bytes) of padding, so that
  /// the pair writes of a warp's 8 rows hit different banks.
  int64_t stagingStride() const { return blockN + 8; }
  int64_t stagingBytes() const {
    return bulkStores ? kBlockM * stagingStride() * 2 : 0;
  }
  /// The FP8 weight gradient's scales of a stage's slice, after the
  /// staging tile: the 128 rows' of A, then the blockN columns' of B (f32),
  /// copied by the producer with the slice (ncu on the H200: with each MMA
  /// thread loading them from global memory, a third of its stall cycles
  /// waited for those loads).
  int64_t scaleStageBytes() const {
    return fp8WeightGrad() ? (kBlockM + blockN) * 4 : 0;
  }
  int64_t sharedBytes() const {
    // + 1024 to round the stages up to the swizzle's 1024-byte alignment.
    return tableBytes() + barrierBytes() + 1024 + stages * stageBytes() +
           loraUpBytes() + stagingBytes() + stages * scaleStageBytes();
  }
  /// The weight gradient (moe.grouped_weight_grad): out [E, K, N], tiles over
  /// (expert, K tile, n-tile), each reducing over its expert's rows.
  bool weightGrad() const {
    return layout.lhs == LhsLayout::GroupRowsT ||
           layout.lhs == LhsLayout::PaddedRowsT;
  }
  /// Output columns per block.
  int64_t outTileN() const { return swiglu ? blockN / 2 : blockN; }
  /// B stages that hold 64-column blocks of 64 rows, read N-major.
  bool nMajorB() const {
    return layout.rhs == RhsLayout::ExpertKN ||
           layout.rhs == RhsLayout::GroupRowsN;
  }
  /// B rows one TMA load brings (the rhs tensor map's box): all of them,
  /// or half (the gate or the up rows with SwiGLU, a block's half in a
  /// cluster of 2). With ExpertKN a box is one column block: 64 K rows of
  /// 64 columns.
  int64_t rhsBoxRows() const {
    if (nMajorB())
      return kBlockK;
    return swiglu || cluster > 1 ? blockN / 2 : blockN;
  }
  /// TMA loads of the rhs per stage (across the blocks of a cluster).
  int64_t rhsBoxes() const {
    if (nMajorB())
      return blockN / kColumnBlock;
    return blockN / rhsBoxRows();
  }
  /// The rhs tensor map's box, innermost dimension first: sliceK() elements
  /// (one 128-byte swizzled row) by rhsBoxRows(), one expert deep for [E, .., ..]
  /// (one expert wide for [K, E, N]).
  llvm::SmallVector<int64_t> rhsBox(int64_t rank) const {
    // [K, E, N]: 64 columns of one expert by 64 K rows (the same stage).
    if (layout.expertsInColumns)
      return {kColumnBlock, 1, kBlockK};
    llvm::SmallVector<int64_t> box = {sliceK(), rhsBoxRows()};
    if (rank == 3)
      box.push_back(1);
    return box;
  }
  /// K slices of one tile (the weight gradient's depend on the expert's
  /// rows: HopperKernel's slicesOf).
  int64_t kSlices() const { return (k + sliceK() - 1) / sliceK(); }

};

/// The tile the kernel of `plan` is built with (the bundle records it).
moe::TileAttr tileOf(mlir::MLIRContext *context, const HopperPlan &plan);

/// The kernels one op launches: `base` for the rows above every bucket,
/// and one plan per bucket (its max rows), in increasing max rows.
struct HopperKernelPlans {
  HopperPlan base;
  llvm::SmallVector<std::pair<int64_t, HopperPlan>> buckets;
};

/// `plan`'s decisions as the attribute moe-select-kernel records, with
/// `buckets` (an array of #moe.wgmma_bucket, or null).
moe::WgmmaPlanAttr planAttrOf(mlir::MLIRContext *context,
                              const HopperPlan &plan,
                              mlir::ArrayAttr buckets = {});

/// moe-select-kernel's plan for `op` asking for `tile` (the kernel's cost
/// model: hopperPlanFor), with its row buckets (the op's
/// `moe.tile_buckets`, else defaultBuckets for a weight gradient) less the
/// last ones that would build the base kernel again; failure with a
/// diagnostic on `op`.
mlir::FailureOr<moe::WgmmaPlanAttr>
selectPlan(mlir::Operation *op, moe::TileAttr tile,
           const HopperLimits &limits);

/// The kernels of `plan` for `op`, built exactly as written: failure with
/// a diagnostic naming the reason where the kernel cannot build it for the
/// op's types, sizes and attributes on the target (shared memory, row
/// splits, LoRA runs, bulk stores).
mlir::FailureOr<HopperKernelPlans> followPlan(mlir::Operation *op,
                                              moe::WgmmaPlanAttr plan,
                                              const HopperLimits &limits);

/// Whether `tile` has the form of this kernel's blocks: m = 128, n = 64,
/// 128 or 256, k = 64 (or 128: FP8 operands), 256 threads, or 384 of which 128 producers (warp
/// specialization, in clusters of 1 or 2: the verifier allows 2 only
/// there). planFor takes n = 64 only without LoRA, SwiGLU or a cluster.
bool isHopperTile(moe::TileAttr tile);

/// The plan for lhs [.., k] and output width `width` of 16-bit operands, or
/// nullopt where the kernel does not apply. `minBlockN` (128 for SwiGLU's
/// gate and up pairs) keeps narrow outputs off n = 64; `maxBlockN` (128
/// where the FP8 scales allow no wider block) bounds the default and the
/// tiles taken.
std::optional<HopperPlan> planFor(mlir::Type lhsElem, mlir::Type rhsElem,
                                  mlir::Type outElem, int64_t k, int64_t width,
                                  int64_t experts, moe::TileAttr tile,
                                  const HopperLimits &limits = {},
                                  int64_t loraRows = 0,
                                  int64_t minBlockN = kNarrowBlockN,
                                  int64_t maxBlockN = 256);

/// The plan of the wgmma kernel for `op` with `tile`, or nullopt where the
/// kernel does not apply.
std::optional<HopperPlan> groupedPlan(moe::GroupedMatmulOp op,
                                      moe::TileAttr tile,
                                      const HopperLimits &limits = {});
/// The weight gradient's plan [E, K, N] = Σ xᵀ · dy; with transpose_rhs
/// [E, N, K] = Σ dyᵀ · x, the same kernel with dy as A and x as B
/// (OperandLayout::swappedOperands), so that the output is written in place
/// instead of transposed.
std::optional<HopperPlan> groupedPlan(moe::GroupedWeightGradOp op,
                                      moe::TileAttr tile,
                                      const HopperLimits &limits = {});

/// The row buckets of `op` when neither a tile nor buckets are set on it
/// (else none), the rows above the last going to the op's plan for `tile`.
/// The weight gradient with a 16-bit output and a gathered operand runs the
/// warp-specialized kernel (bulk stores) while its experts average at most
/// kShortReduction rows (with its rows in order: at every row count,
/// without buckets); one added to an f32 gradient (accumulate) while they
/// average at most kShortAccumulation.
llvm::SmallVector<moe::TileBucketAttr>
defaultBuckets(moe::GroupedWeightGradOp op, moe::TileAttr tile,
               const HopperLimits &limits = {});

/// Rows per expert (on average) up to which the gathered weight gradient's
/// default is warp-specialized.
constexpr int64_t kShortReduction = 256;
/// The same for the f32 weight gradient with accumulate.
constexpr int64_t kShortAccumulation = 512;
/// At most this many row chunks per group (HopperPlan::rowSplits):
/// the f32 partial sums the second kernel reads grow with it.
constexpr int64_t kMaxRowSplits = 16;
/// A split grouped weight gradient of at most this many groups sorts its
/// chunks by rows in every block (TileSchedule::sortChunks: a loop over
/// the chunks per chunk, short enough here).
constexpr int64_t kMaxSortedChunks = 128;
/// Row chunks hold a multiple of this many rows (whole K
/// slices of the reduction), and at least kMinRowSplitRows: a chunk's tile
/// stores 128 KB of f32 partial sums, about as long as 4 slices of wgmmas
/// when every SM stores at once.
constexpr int64_t kRowSplitAlign = kBlockK;
constexpr int64_t kMinRowSplitRows = 4 * kBlockK;

/// The plan of the wgmma kernel for `op` (moe.grouped_matmul, or a
/// linalg.matmul reading B as [N, K]) with `tile`, or nullopt where the
/// kernel does not apply: what lowerMatmulHopper would build, without
/// emitting anything.
std::optional<HopperPlan> hopperPlanFor(mlir::Operation *op,
                                        moe::TileAttr tile,
                                        const HopperLimits &limits = {});

} // namespace moec::kernels::hopper

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_HOPPER_HOPPERPLAN_H
