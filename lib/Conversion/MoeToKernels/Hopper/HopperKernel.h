//===- HopperKernel.h - Grouped matmul on sm_90a (wgmma) --------*- C++ -*-===//
//
// Part of moec. The grouped matmul of the `sm90a` target: warpgroup MMA
// (wgmma) from shared memory fed by a multi-stage pipeline (TMA and
// cp.async), in a persistent grid that walks the ragged (expert, m-tile,
// n-tile) schedule. Two kernels: one with block barriers, described first,
// and a warp-specialized one (the default at n = 256), described after.
//
// Block: 128 x BN output tile, 2 MMA warpgroups, each owning 64 rows and
// issuing m64nBNk16 wgmmas over a 64-wide K slice. Shared
// memory holds `stages` K slices of A (128 rows) and B (BN rows), each row
// 64 elements = 128 bytes, in the 128-byte swizzle wgmma reads (16-byte chunk
// c of row r at chunk c ^ (r % 8)). In the block-barrier kernel (256
// threads) every thread copies 16-byte chunks with cp.async, which also
// gathers the rows of a gathered lhs (the row index is looked up per row, a
// missing row is zero-filled): the path TMA cannot give on sm_90. Loads run
// `stages - 2` slices ahead; one wgmma group stays in flight while the next
// slice's copies are issued, and a block barrier separates the slices.
//
// Each block first builds the m-tile prefix of the groups (experts, then the
// rows past the last group, written as zeros) and the groups' first rows in
// shared memory with a parallel scan, then takes tiles blockIdx,
// blockIdx + gridDim, ... and finds each tile's group by binary search in
// shared memory: no host synchronization, no serial walk over the experts,
// no global reads per tile beyond a gathered lhs's row indices. Inside a
// group, tiles go in bands of 8 m-tiles, n-tile by n-tile (B reuse in L2).
//
// Warp-specialized variant (tile `producers = 128`, 384 threads): a
// producer warpgroup issues every copy and the two MMA warpgroups only
// compute. The rhs (weights) tile comes by TMA, one cp.async.bulk.tensor
// per stage (two with SwiGLU: gate rows, up rows) from a tensor map the
// runtime encodes per launch and passes by value (a 128-byte grid-constant
// parameter); lhs rows in order come by TMA too, gathered ones by the
// producer threads' cp.async.
// Each stage has a "full" mbarrier (completed by the producer threads'
// cp.async arrivals and the TMA's bytes) and an "empty" one (completed
// when the 256 MMA threads have retired the wgmmas reading it), so the
// roles hand stages over without block barriers, the producer runs up to
// `stages - 1` slices ahead, and it fills the next tile's stages during
// this tile's epilogue. setmaxnreg moves registers from the producer to
// the MMA warpgroups.
//
// Clusters (tile `cluster = 2`, warp-specialized only): the blocks of a
// cluster take m-tiles 2j and 2j+1 of one expert and n-tile (the schedule
// counts m-units of 2 m-tiles), each loads half of the B rows by TMA
// multicast into both blocks, and a stage's "empty" barrier counts the MMA
// warps of both blocks (remote arrivals through mapa). A pair whose expert
// has an odd m-tile count leaves its second block without rows: it still
// loads its half of B and keeps the barriers in step.
//
// Operand layouts (HopperPlan::layout): the rhs is [E, N, K] (the forward,
// K-major B stages) or [E, K, N] (the dX of a backward: a B stage holds
// blockN / 64 column blocks of 64 K rows, loaded by TMA one 64 x 64 box
// each or by cp.async one 16-byte chunk along N each, and wgmma reads it
// N-major with its B transposed).
//
// LoRA (HopperPlan::loraRank): a stage also holds R rows of the adapter's
// A_e (r rounded up to 16, zeros past r; cp.async by the copy threads),
// and each K step adds one m64nRk16 wgmma of the A rows times them into a
// second, small accumulator U = x · A_eᵀ. After the k-loop, s · U goes to
// shared memory as an A tile (bf16 in the 128-byte swizzle) and B_e's rows
// for the tile's columns as a B tile, and R / 16 more wgmmas add U · B_eᵀ
// to the tile's accumulators before the epilogue. The block-barrier kernel
// uses the last stage for both (in passes of 64 rank columns past r = 64;
// the next tile's prologue leaves that stage free). The warp-specialized
// one (r <= 64) has tiles of its own after the stages: the producer loads
// B_e once it has issued the tile's last slice (a full/empty mbarrier pair
// hands the tile over, like a stage), and each MMA warpgroup writes and
// reads only its own 64 rows of s · U, behind a warpgroup barrier. There a
// block takes runs of loraRunTiles n-tiles of one m-tile: only the first
// loads A_e and accumulates U; the others run a k-loop without the U
// wgmmas and reuse s · U from its tile (TileSchedule::locateRun).
//
// FP8 (HopperPlan::blockScales, warp-specialized only): a stage row is
// still 128 bytes, now 128 e4m3 / e5m2 elements, so the stages, copies,
// tensor maps and descriptors are the same in bytes and a K slice is 128
// deep: one block of the 1x128 lhs and 128x128 weight scales. Each slice's
// four m64nBNk32 wgmmas start fresh partial sums (scale-d = 0); once
// waited for, the MMA thread multiplies them by its two rows' lhs scales
// and its columns' weight scale (one per scale segment: the gate and the
// up rows with SwiGLU) and adds them to the f32 accumulators, so the
// reduced-precision FP8 accumulation never spans more than 128 of K. The
// scales are read from global memory (they are small and stay in L2),
// issued before the slice's stage is waited for. The FP8 weight gradient
// (LhsLayout::PaddedRowsT) reduces over each expert's rows, which FP8
// wgmma needs K-major: moe.quantize {transpose} writes both operands as
// [K, P] / [N, P] with every expert padded to whole 128-row blocks, so the
// forward's TMA boxes and K-major stages load them unchanged (no cp.async,
// no partial slice), the tile schedule's scan of the experts' blocks gives
// each expert's first column, and a partial sum (row, column) is promoted
// with its row's and its column's scale of the block.
//
// Epilogue in registers: bias, SwiGLU (the block's B rows are BN/2 gate
// columns then the matching BN/2 up columns, so a thread holds both halves),
// row scale, then rounded stores; in the block-barrier kernel a plain
// epilogue goes through a padded shared-memory tile and out as 16-byte row
// stores (the warp-specialized one has no free stage for it). The
// warp-specialized weight gradient with a 16-bit output has a staging tile
// of its own after the stages: its rows go out as bulk async copies that
// the MMA warpgroups wait for only when they next write the staging tile,
// so a tile's stores overlap the next tile's wgmmas (a weight gradient's
// reduction is often only a few slices long).
//
// The kernel is built from parts, each a class below with its own file:
//   TileSchedule      the shared-memory scan and the tile -> (group, rows,
//                     columns) lookup (TileSchedule.cpp);
//   ProducerPipeline  the copies into the stages (cp.async, gathers, TMA)
//                     and the full/empty mbarrier handover
//                     (ProducerPipeline.cpp);
//   MmaLoop           the wgmmas over a tile's K slices, behind block
//                     barriers or mbarriers (MmaLoop.cpp);
//   Epilogue          bias, SwiGLU, row scale and the stores (Epilogue.cpp);
//   ClusterPart       rank, multicast, remote arrivals, cluster barriers
//                     (Cluster.cpp).
// HopperKernel (HopperKernel.cpp) composes them: the block-barrier kernel
// runs producer and MMA loop in every thread, the warp-specialized one
// gives each its own warpgroups, and a cluster kernel is the
// warp-specialized one with an active ClusterPart. What depends on how
// the operands lie in memory switches on HopperPlan::layout, so that a new
// operand layout is a new case at each of those places.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_HOPPER_HOPPERKERNEL_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_HOPPER_HOPPERKERNEL_H

#include "HopperPlan.h"

#include "../LoweringContext.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace moec::kernels::hopper {

/// Positions of the optional kernel arguments (-1 if absent). Without
/// offsets the matmul is dense: one group of all rows, rhs [N, K].
struct HopperArgs {
  int offsets = -1, gather = -1, bias = -1, rowScale = -1;
  int swigluInput = -1; ///< swiglu_grad's saved SwiGLU input [M, 2N]
  int loraA = -1, loraB = -1; ///< a fused LoRA adapter's A and B
  int accumulate = -1; ///< the weight gradient added to (same layout as out)
  int rhsMap = -1; ///< the rhs's TMA descriptor (warp-specialized)
  int lhsMap = -1; ///< the lhs's, when its rows are not gathered
  int lhsScales = -1, rhsScales = -1; ///< FP8 block scales
};

/// The kernel's arguments by role (null where absent).
struct KernelArgs {
  KernelArgs(mlir::ValueRange a, const HopperArgs &pos);
  mlir::Value lhs, rhs, out, rows;
  mlir::Value offsets, gather, bias, rowScale, swigluInput, rhsMap, lhsMap;
  mlir::Value loraA, loraB, accumulate;
  mlir::Value lhsScales, rhsScales;
};

struct TileState;

/// What every part reads: the builder, the plan, the arguments, the
/// block's ids, and where shared memory puts the scan tables, the
/// barriers and the stages.
struct KernelEnv {
  KernelBuilder &b;
  const HopperPlan &plan;
  KernelArgs args;
  mlir::Value block, thread;
  /// Output columns (the matmul's: half the output's with swiglu_grad), the
  /// rows of one expert's rhs (N of [E, N, K], K of
  /// [E, K, N]) and its row length (K, or N).
  mlir::Value outWidth, rhsRows, rhsWidth;
  mlir::Value smem, tables[2], groupStarts, barrierBase, stageBase;

  /// outWidth, rhsRows and rhsWidth.
  void readShapes();
  /// The two scan tables and the groups' first rows, then the barriers,
  /// then the 1024-aligned stages.
  void carveSharedMemory();
  /// The K slices of tile `t`: the plan's, or those of the expert's rows.
  mlir::Value slicesOf(const TileState &t);
  /// The output indices of row `row` (of the tile's rows) and column `col`:
  /// [row, col], or [expert, row, col] for the weight gradient.
  llvm::SmallVector<mlir::Value> outIndices(const TileState &t, mlir::Value row,
                                            mlir::Value col);
  /// Shared addresses of stage `slot`'s A (128 rows) and B tiles.
  mlir::Value stageA(mlir::Value slot);
  mlir::Value stageB(mlir::Value slot);
  /// Shared address of stage `slot`'s LoRA A_e tile (R rows).
  mlir::Value stageLora(mlir::Value slot);
  /// The full (or empty) mbarrier of stage `slot` (warp-specialized).
  mlir::Value stageBarrier(bool empty, mlir::Value slot);
  /// LoRA, warp-specialized: shared addresses of the epilogue product's
  /// s · U tile (128 rows) and B_e tile (blockN rows) after the stages, and
  /// the full (or empty) mbarrier of the B_e tile.
  mlir::Value loraUpA();
  mlir::Value loraUpB();
  mlir::Value loraBarrier(bool empty);
  /// Bulk stores: shared address of the staging tile, after the stages.
  mlir::Value stagingTile();
  /// The FP8 weight gradient: shared address of stage `slot`'s scales
  /// (HopperPlan::scaleStageBytes), after the staging tile.
  mlir::Value scaleStage(mlir::Value slot);
  /// A view of `count` elements of `elem` at shared address `address`.
  mlir::Value sharedView(mlir::Value address, mlir::Type elem, int64_t count);
};

/// Where one tile is, and for a gathered lhs this thread's source rows
/// (i32, -1: zero-fill). Carried from one tile to the next, so that the
/// next tile's gather lookups overlap this tile's wgmmas and its first
/// copies start before this tile's stores. Kept small: every value is
/// live across the k-loop.
///
/// The weight gradient's tile: rowStart / rowCount are its output rows
/// within the expert (K columns of the lhs), reduceStart / reduceRows the
/// expert's rows it sums over (null in the other kernels); in the FP8
/// weight gradient reduceStart is the expert's first column of the padded
/// operands (128 times its first block).
struct TileState {
  mlir::Value group, rowStart, rowCount, colStart;
  mlir::Value reduceStart, reduceRows;
  llvm::SmallVector<mlir::Value> lhsRows;
  /// LoRA runs (HopperPlan::loraRunTiles > 1): whether this tile is the
  /// first of its run and computes U (i1); null: every tile does. Not
  /// carried (the block-barrier kernel has no runs).
  mlir::Value computesU = {};

  llvm::SmallVector<mlir::Value> values() const;
  static TileState from(mlir::ValueRange v, bool reduce);
};

/// The blocks of a cluster: their rank, the unit of the schedule they
/// share, the barriers that keep them resident together, and the remote
/// arrivals and multicasts between them. With a cluster of 1 only the
/// rank (0) and unit (the block) are used.
class ClusterPart {
public:
  explicit ClusterPart(KernelEnv &env) : env(env) {}
  bool active() const { return env.plan.cluster > 1; }
  /// rank and firstUnit.
  void place();
  /// Makes the mbarrier initialization visible to the other blocks.
  void fenceBarrierInit();
  /// arrive + wait of every thread of every block of the cluster.
  void sync();
  /// The multicast mask of a TMA load into every block of the cluster.
  mlir::Value multicastMask();
  /// The other block's rank (i32).
  mlir::Value partnerRank();
  /// An arrival on the barrier at `local`'s offset in block `partner`.
  void arriveRemote(mlir::Value local, mlir::Value partner);

  /// The block's rank in its cluster (clusters are consecutive blocks
  /// along x) and the cluster's index: the units the schedule hands out.
  mlir::Value rank, firstUnit;

private:
  KernelEnv &env;
};

/// The ragged tile schedule: each block scans the groups' m-tile counts
/// into shared memory, then finds any tile's group by binary search.
class TileSchedule {
public:
  TileSchedule(KernelEnv &env, const ClusterPart &cluster)
      : env(env), cluster(cluster) {}
  /// The scan: tileEnds, nTiles, tilesTotal.
  void scan();
  /// gridSize, tileStride, loopEnd (and with LoRA runs the runs in
  /// tilesTotal, fullRounds and runTiles).
  void placeGrid();
  /// Tile `tile` (< loopEnd), without gathered rows.
  TileState locate(mlir::Value tile);
  /// A tile past the end: no rows, no copies.
  TileState none();

  /// tilesTotal counts the schedule's units: tiles, or with LoRA runs runs
  /// of HopperPlan::loraRunTiles n-tiles. The blocks' loops go up to
  /// loopEnd. LoRA runs: the m-units, the rounds in which every block
  /// takes a run, and the tiles of those rounds (locateRun).
  mlir::Value tileEnds, nTiles, tilesTotal, gridSize, tileStride, loopEnd;
  mlir::Value mUnitsTotal, fullRounds, runTiles;
  /// The weight gradient's tiles along K per expert.
  mlir::Value kTiles;
  /// A split grouped weight gradient's chunks with rows, largest first
  /// (sortChunks; null where not sorted).
  mlir::Value chunkOrder;

private:
  TileState locateWeightGrad(mlir::Value tile);
  /// Unit `unit` of the banded order over (group, m-unit, column), with
  /// `columns` n-tiles (or runs) per m-unit: the tile of column 0 of it.
  TileState locateUnit(mlir::Value unit, mlir::Value columns,
                       mlir::Value &column);
  TileState locateRun(mlir::Value tile);
  std::pair<mlir::Value, mlir::Value> groupBounds(mlir::Value g);
  void sortChunks(mlir::Value order);
  void forOwnGroups(const std::function<void(mlir::Value)> &body);
  KernelEnv &env;
  const ClusterPart &cluster;
};

/// The copies into the stages: cp.async 16-byte chunks (gathered lhs rows
/// and, without tensor maps, everything), TMA for the operands with tensor
/// maps, and the full/empty mbarriers of the warp-specialized handover.
class ProducerPipeline {
public:
  ProducerPipeline(KernelEnv &env, ClusterPart &cluster)
      : env(env), cluster(cluster) {}
  /// Warp-specialized: the full and empty mbarriers of every stage.
  void initBarriers();
  /// This thread's copy coordinates and the operands' base addresses.
  void placeThreads();
  /// The -1 that marks a row without a source (zero-fill).
  void placeInvalid();
  /// A gathered lhs: the source rows of this thread's copies of tile `t`.
  void lookupRows(TileState &t);
  /// A gathered lhs: no source rows (a tile past the end).
  void clearRows(TileState &t);
  /// The element types of TileState::values() (block-barrier carry).
  llvm::SmallVector<mlir::Type> stateTypes();

  /// This thread's cp.async copies of slice `kt` into stage `slot`: of the
  /// operands without a tensor map, or of all (`ignoreMaps`: the weight
  /// gradient's partial slices).
  void loadStage(const TileState &t, mlir::Value slot, mlir::Value kt,
                 bool ignoreMaps = false);
  /// The TMA loads of slice `kt`, completing on `full`.
  void loadByTma(const TileState &t, mlir::Value slot, mlir::Value kt,
                 mlir::Value full);
  void commit();
  /// The first `ahead` slices of a tile, one commit group each.
  void loadPrologue(const TileState &t);
  /// LoRA: this thread's copies of B_e's rows for the tile's columns
  /// (`width` rank columns from group * r + first, zeros past r) into the
  /// B tile at shared address `tileB`, in the K-major layout of an
  /// [E, N, K] B stage.
  void loadLoraUp(const TileState &t, mlir::Value tileB, int64_t first,
                  int64_t width);
  /// LoRA, warp-specialized: once the MMA warpgroups are done with the
  /// B_e tile of the block's tile before (round - 1), this thread's copies
  /// of tile `t`'s, completing on the B_e tile's full mbarrier.
  void loadLoraUpTile(const TileState &t, mlir::Value round);
  /// Waits for the phase of `round` (or the round before: a fresh barrier
  /// counts as done) on `barrier`.
  void waitPhase(mlir::Value barrier, mlir::Value round, bool previous);

  /// Slice `n` of the role's walk: its stage, and waiting for the phase
  /// of its round (or the round before) on the stage's barrier.
  mlir::Value slotOf(mlir::Value n);
  void waitRound(bool empty, mlir::Value n, bool previous);
  /// The producer role's k-loop over tile `t` (slices counted from
  /// `slices`): the count after it.
  mlir::Value produceTile(const TileState &t, mlir::Value slices);
  /// The producer's last copies land before it exits.
  void drain();

  /// The rhs row (of [E, N, K]) of column `c` of the block's B rows:
  /// colStart + c, or with SwiGLU the gate rows then the up rows; `valid`
  /// says whether it is an output column.
  mlir::Value rhsColumn(const TileState &t, mlir::Value c, mlir::Value &valid);

  mlir::Value invalid;

private:
  /// Whether the producer threads copy into every stage with cp.async (a
  /// gathered lhs, operands without tensor maps, LoRA's A_e rows, the
  /// weight gradient's partial slices, the FP8 weight gradient's scales):
  /// then each arrives on the stage's full barrier.
  bool cpAsyncArrivals() const {
    return !env.args.lhsMap || env.plan.lora() || env.plan.weightGrad();
  }
  /// The FP8 weight gradient: this thread's scales of slice kt into stage
  /// `slot`'s scales (KernelEnv::scaleStage), one 4-byte cp.async each:
  /// A row i's and B column i's for producer thread i, zeros past the
  /// tile's rows and the output's columns.
  void loadSliceScales(const TileState &t, mlir::Value slot, mlir::Value kt);
  /// The weight gradient's slice kt with tensor maps: TMA while the slice
  /// is all the tile's rows, cp.async for a partial last one.
  void loadWeightGradSlice(const TileState &t, mlir::Value slot,
                           mlir::Value kt);
  mlir::Value rowOf(int64_t i);
  mlir::Value smemOffset(int64_t i);
  int64_t lhsRowsPerThread() const;
  int64_t rhsRowsPerThread() const;
  mlir::Value lhsRowBytes(const TileState &t, int64_t i, mlir::Value kt);
  mlir::Value groupRow(const TileState &t, mlir::Value r, mlir::Value kt,
                       mlir::Value &valid);
  mlir::Value gatheredRow(mlir::Value grouped, mlir::Value &valid);
  /// The weight gradient's reduction row (`valid`: within the expert's rows
  /// and not a padding slot) of this thread's A (or B, `rhs`) stage row i
  /// in slice kt: the grouped row, or the token row for the gathered
  /// operand. Memoized per loadStage: a thread meets each of its slice rows
  /// once per 64-column block, and one slot lookup serves them all.
  mlir::Value sliceRow(const TileState &t, int64_t i, mlir::Value kt, bool rhs,
                       mlir::Value &valid);
  mlir::Value rhsRowBytes(const TileState &t, int64_t i, mlir::Value kt);
  /// A 16-byte cp.async from base + rowBytes (+ chunkBytes when given),
  /// zero-filled where rowBytes is `invalid` or `kValid` (when given) is
  /// false.
  void copyChunk(mlir::Value dst, mlir::Value base, mlir::Value rowBytes,
                 mlir::Value chunkBytes, mlir::Value kValid);
  void tmaLoad(mlir::Value map, mlir::Value stageAddress,
               mlir::ValueRange coords, mlir::Value multicast,
               mlir::Value full);
  void loadRhsByTma(const TileState &t, mlir::Value slot, mlir::Value k0,
                    mlir::Value l, mlir::Value multicast, mlir::Value full);

  KernelEnv &env;
  ClusterPart &cluster;
  mlir::Value chunk, row0, swizzled, lhsBase, rhsBase, rowBytesK;
  mlir::Value loraABase, loraBBase;
  /// sliceRow's memo: (row, valid) by operand and slice row offset.
  llvm::SmallDenseMap<int64_t, std::pair<mlir::Value, mlir::Value>>
      sliceRows;
};

/// The wgmmas of a tile: accumulators in registers, one commit group per
/// K slice, behind block barriers or the stages' mbarriers.
class MmaLoop {
public:
  MmaLoop(KernelEnv &env, ProducerPipeline &producer, ClusterPart &cluster)
      : env(env), producer(producer), cluster(cluster) {}
  /// The MMA thread's warpgroup, warp and lane, the accumulator type.
  void placeThreads();
  /// Block-barrier kernel: the k-loop of one tile whose prologue is in
  /// flight, issuing the copies `ahead` slices on: the accumulators.
  mlir::Value blockBarrierLoop(const TileState &t);
  /// LoRA (block-barrier kernel): after blockBarrierLoop, `current` plus
  /// s · U · B_eᵀ, with U = x · A_eᵀ the accumulators `down` the k-loop
  /// built (loraDown) and B_e loaded for the tile's columns, through the
  /// last stage (free until the next tile's second slice).
  mlir::Value loraUp(const TileState &t, mlir::Value current,
                     mlir::Value down);
  /// LoRA: the U accumulators of the last blockBarrierLoop or
  /// specializedLoop.
  mlir::Value loraDown;
  /// LoRA, warp-specialized: specializedLoop for tile `t`, and, where the
  /// tile computes U, s · U into the U tile after it (a tile later in a
  /// LoRA run finds it there and skips the U wgmmas).
  mlir::Value loraSpecializedLoop(const TileState &t, mlir::Value slices,
                                  mlir::Value count);
  /// LoRA, warp-specialized: `current` plus s · U · B_eᵀ through the LoRA
  /// tiles after the stages, B_e's being the producer's `round`-th.
  mlir::Value loraUpSpecialized(mlir::Value current, mlir::Value round);
  /// Warp-specialized kernel: the k-loop over slices `slices`.. as the
  /// producer fills them, releasing each stage once read: the
  /// accumulators (the last slice's stage is not yet released). With
  /// `withU`, LoRA's U accumulators too (loraDown).
  mlir::Value specializedLoop(mlir::Value slices, mlir::Value count,
                              bool withU = false);
  /// FP8 block scales (warp-specialized): the k-loop of tile `t` over
  /// slices `slices`.., each slice's wgmmas into fresh partial
  /// accumulators that are then multiplied by the slice's lhs-row and
  /// weight-block scales and added to the f32 accumulators (returned).
  /// Every stage, the last one too, is released inside the loop.
  mlir::Value scaledLoop(const TileState &t, mlir::Value slices,
                         mlir::Value count);
  /// Warp-specialized: the lane 0s that release stages (and their
  /// partner block in a cluster).
  void placeReleasers();
  /// Frees the stage of slice `n` (in both blocks of a cluster).
  void release(mlir::Value n);

  mlir::Value mathThread, warpgroup, lane, warp, zeroF;
  mlir::Type accType, loraAccType;
  /// FP8's partial accumulators: HopperPlan::partialN columns.
  mlir::Type partialType;

private:
  mlir::scf::ForOp accumulatorLoop(mlir::Value count, bool withU);
  /// This thread's fragment of s · U, rank columns [first, first + width),
  /// into the 128-row A tile at shared address `tileA` (bf16 or f16 in the
  /// 128-byte swizzle, column first at column 0).
  void storeScaledU(mlir::Value down, mlir::Value tileA, int64_t first,
                    int64_t width);
  /// `current` plus the warpgroup's rows of the A tile at `tileA` times the
  /// K-major B tile at `tileB`, `width` deep: one commit group, waited for.
  mlir::Value upMmas(mlir::Value current, mlir::Value tileA,
                     mlir::Value tileB, int64_t width);
  mlir::Value zeroAccumulators(mlir::Type type, int64_t count);
  /// This thread's first accumulator row in the tile (warpgroup * 64 +
  /// warp * 16 + lane / 4; the second is 8 below).
  mlir::Value fragmentRow();
  /// The wgmmas of the K slice in stage `slot` added to `current`; with
  /// `down` (LoRA) also x · A_eᵀ added to *down.
  mlir::Value sliceMma(mlir::Value current, mlir::Value slot,
                       mlir::Value *down = nullptr, bool fresh = false,
                       int64_t half = -1);
  /// Where this thread's scales of tile `t` come from: the lhs scale row of
  /// each of its two fragment rows (and whether it has one: a row past the
  /// group or a padding slot gets scale 0), and the weight-scale block of
  /// each of the plan's scale segments. The FP8 weight gradient: where (f32
  /// elements) a stage's scales hold its two rows and its column pairs'
  /// first columns.
  struct ScaleSources {
    llvm::SmallVector<mlir::Value, 2> rows, rowValid;
    llvm::SmallVector<mlir::Value, 2> blocks;
    llvm::SmallVector<mlir::Value> columns;
  };
  ScaleSources scaleSources(const TileState &t);
  /// The scales of slice `kt`: for fragment row h and segment s, entry
  /// h * segments + s is the lhs row's scale times the weight block's. The
  /// FP8 weight gradient: the two rows' scales, then the columns', from the
  /// scales of stage `kt` (a slot, once the stage is full).
  llvm::SmallVector<mlir::Value> sliceScales(const TileState &t,
                                             const ScaleSources &from,
                                             mlir::Value kt);
  /// `acc` + `partial` * its scale, element by element; `partial` holds
  /// the partialN columns from tile column `first` on. The FP8 weight
  /// gradient at n = 256: `scales` has the rows' alone, and the columns'
  /// are read from the slice's scales `stage` where `from` says.
  mlir::Value promote(mlir::Value acc, mlir::Value partial,
                      llvm::ArrayRef<mlir::Value> scales, int64_t first = 0,
                      const ScaleSources *from = nullptr,
                      mlir::Value stage = {});
  /// The FP8 weight gradient: the scales of stage `slot` as f32 elements.
  mlir::Value scaleStageView(mlir::Value slot);

  KernelEnv &env;
  ProducerPipeline &producer;
  ClusterPart &cluster;
  mlir::Value leader, partner;
};

/// From the accumulators to the output: the element-wise steps (bias,
/// SwiGLU, row scale) of outputAt, then one of three ways to store.
class Epilogue {
public:
  Epilogue(KernelEnv &env, const MmaLoop &mma);
  /// Row and column of this thread's first accumulator in the tile.
  void placeFragment();
  /// The tile's outputs from the accumulators `result`.
  void emit(const TileState &t, mlir::Value result);
  /// Rows past the last group: zeros.
  void zeroFill(const TileState &t);
  /// With accumulate: the tile's part of the gradient added to, into L2
  /// (before the k-loop, so that pairStores' loads find it there).
  void prefetchAccumulate(const TileState &t);
  /// Bulk stores: the last tile's copies have landed (before the MMA
  /// threads exit).
  void drain();

private:
  /// emit's stores (Stores picks how).
  void store(const TileState &t, mlir::Value result);
  /// Pairs: every thread stores its column pairs. QuadGather: a quad of
  /// lanes trades words so that each stores 16 bytes. Staged: through a
  /// padded shared-memory tile, then 16-byte row stores. Bulk
  /// (HopperPlan::bulkStores): through a padded staging tile of its own,
  /// then one asynchronous bulk copy per row that the MMA threads do not
  /// wait for until the staging tile is written again.
  enum class Stores { Pairs, QuadGather, Staged, Bulk, SwigluGrad,
                      SwigluGradQuad };

  mlir::Value accumulator(mlir::Value result, int64_t index);
  mlir::Value outputAt(mlir::Value result, mlir::Value group, int64_t h,
                       int64_t j, int64_t q, mlir::Value c,
                       mlir::Value scale);
  void quadStores(const TileState &t, mlir::Value result);
  llvm::SmallVector<mlir::Value> quadWords(const TileState &t,
                                           mlir::Value result, int64_t h,
                                           int64_t m, mlir::Value scale);
  llvm::SmallVector<mlir::Value> quadTranspose(
      llvm::ArrayRef<mlir::Value> words, mlir::Value quadLane,
      mlir::Value quadBase);
  /// This thread's two fragment rows in range: body(h, row in tile, row,
  /// row scale or null).
  void forFragmentRows(
      const TileState &t,
      llvm::function_ref<void(int64_t, mlir::Value, mlir::Value, mlir::Value)>
          body);
  void pairStores(const TileState &t, mlir::Value result,
                  mlir::Value staging);
  /// swiglu_grad: every thread's column pairs are output gradients; the
  /// gate and up gradients, from the saved input's pairs, go to both halves
  /// of the row.
  void swigluGradStores(const TileState &t, mlir::Value result);
  /// The same with 16-bit input and output: each lane of a quad gets the 8
  /// output gradients of one chunk (quadTranspose of the f32 values) and
  /// reads and writes 16 bytes per half.
  void swigluGradQuadStores(const TileState &t, mlir::Value result);
  void stagedStores(const TileState &t, mlir::Value staging);
  void bulkStores(const TileState &t, mlir::Value result);
  /// A barrier of the 256 MMA threads (named barrier 3).
  void mmaThreadsBarrier();
  /// The (row, column-in-tile, column) of this thread's `width`-element
  /// chunks of the tile, those in range.
  void forRowChunks(
      const TileState &t, int64_t width,
      llvm::function_ref<void(mlir::Value, mlir::Value, mlir::Value)> body);

  KernelEnv &env;
  const MmaLoop &mma;
  mlir::Type outElem;
  int64_t outBytes, outVector, stagingStride, outChunks;
  Stores stores;
  mlir::Value rowInTile, colInTile;
};

/// One grouped matmul kernel: the parts above, composed into the
/// block-barrier or the warp-specialized (optionally clustered) kernel.
class HopperKernel {
public:
  HopperKernel(KernelBuilder &b, mlir::ValueRange args, mlir::Value block,
               mlir::Value thread, const HopperPlan &plan,
               const HopperArgs &pos);
  void emit();

private:
  /// What every variant sets up first, in this order (the order of the
  /// values in the generated kernel).
  void emitPreamble();
  void emitBlockBarrier();
  void emitWarpSpecialized();
  void producerRole();
  void consumerRole();
  /// A loop over this block's tiles carrying the slice count and, with
  /// LoRA tiles, the expert tiles so far (the rounds of the B_e tile; null
  /// without).
  void tileLoop(const std::function<std::pair<mlir::Value, mlir::Value>(
                    mlir::Value, mlir::Value, mlir::Value)> &body);
  /// `rounds` plus one for an expert tile (null stays null).
  mlir::Value nextRound(mlir::Value rounds, mlir::Value expert);
  TileState tileState(mlir::Value tile, bool withRows = true);
  TileState noTile();
  /// The state of the tile after `tile` (or of none).
  TileState nextState(mlir::Value tile);

  KernelEnv env;
  ClusterPart cluster;
  TileSchedule schedule;
  ProducerPipeline producer;
  MmaLoop mma;
  Epilogue epilogue;
};

/// Small index helpers of the parts.
mlir::Value toI32(KernelBuilder &b, mlir::Value index);
mlir::Value bitAnd(KernelBuilder &b, mlir::Value x, int64_t mask);
/// Makes this thread's generic-proxy writes to shared memory visible to
/// the async proxy (wgmma and bulk copies read through it).
void fenceAsyncShared(KernelBuilder &b);
/// Rows per chunk of a group of `rows` rows split `splits` ways
/// (HopperPlan::rowSplits): ceil(rows / splits), at least `least` where
/// given, rounded up to kRowSplitAlign, at least kMinRowSplitRows. Chunk s
/// holds the group's rows [s * chunk, (s + 1) * chunk) of those that
/// exist: the last ones may have none. The kernel's schedule and
/// sumRowSplits both use it.
mlir::Value rowSplitChunk(KernelBuilder &b, mlir::Value rows, int64_t splits,
                          mlir::Value least = {});
/// The least chunk of a grouped weight gradient's split: 1.25 times the
/// experts' average rows (`rows` over `experts`). With balanced routing
/// every expert then stays one chunk (random top-k routing kept the
/// largest within 10 % of the average in bench/small_wgrad.py), and only
/// experts well above the average split, into up to HopperPlan::rowSplits
/// chunks: the block that would reduce all of a large expert's rows
/// reduces one chunk of them.
mlir::Value leastChunkRows(KernelBuilder &b, mlir::Value rows,
                           mlir::Value experts);

/// Lowers a grouped matmul, weight gradient or dense linalg.matmul with the
/// wgmma kernels of `plans` (followPlan's), asked for with `tile` (the
/// combine and row-split sum launches use it): one launch per bucket.
mlir::LogicalResult lowerMatmulHopper(mlir::Operation *op, moe::TileAttr tile,
                                      const HopperKernelPlans &plans,
                                      BufferMap buffer, LoweringContext &ctx);

} // namespace moec::kernels::hopper

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_HOPPER_HOPPERKERNEL_H
