//===- HopperMatmul.cpp - Grouped matmul on sm_90a (wgmma) ----------------===//
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
// Epilogue in registers: bias, SwiGLU (the block's B rows are BN/2 gate
// columns then the matching BN/2 up columns, so a thread holds both halves),
// row scale, then rounded stores; in the block-barrier kernel a plain
// epilogue goes through a padded shared-memory tile and out as 16-byte row
// stores (the warp-specialized one has no free stage for it).
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Conversion/TuningSpace.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

constexpr int64_t kBlockM = 128;   ///< rows per block (2 warpgroups x 64)
constexpr int64_t kBlockK = 64;    ///< K per stage: one 128-byte row
constexpr int64_t kThreads = 256;  ///< 2 warpgroups
/// Warp-specialized blocks: a producer warpgroup then the 2 MMA warpgroups.
constexpr int64_t kSpecializedThreads = 384;
/// Warps of the two MMA warpgroups: the arrivals that free a stage.
constexpr int64_t kMmaWarps = 8;
/// Registers per thread after setmaxnreg in a warp-specialized block: the
/// producer gives up what the MMA warpgroups take (72 x 128 + 216 x 256 =
/// the 168 x 384 a block of 384 threads starts with).
constexpr int64_t kProducerRegisters = 72;
constexpr int64_t kConsumerRegisters = 216;
constexpr int64_t kRowBytes = 128; ///< bytes of a 64-element 16-bit row
constexpr int64_t kChunksPerRow = kRowBytes / 16;
/// Persistent grid: one block per SM of an H100/H200 (132 SMs).
constexpr int64_t kPersistentBlocks = 132;
/// Groups the schedule scan handles (experts + the tail), one table entry
/// per group in shared memory.
constexpr int64_t kMaxGroups = 1024;
/// m-tiles per band of the tile order (see tileState) unless the tile
/// sets `band_m`.
constexpr int64_t kDefaultBandM = 8;
/// Pipeline depth unless the tile sets `stages`: as many as fit, at most 6.
constexpr int64_t kMaxDefaultStages = 6;
/// Dynamic shared memory a block of sm_90 may opt into (227 KiB).
constexpr int64_t kMaxSharedBytes = 227 * 1024;

/// The compile-time shape of one Hopper grouped matmul kernel.
struct HopperPlan {
  int64_t blockN = 128; ///< B rows (output columns, or gate+up) per block
  int64_t stages = kMaxDefaultStages;
  int64_t bandM = kDefaultBandM;
  /// Slices the copies run ahead: one wgmma group stays in flight while the
  /// next slice's copies are issued, so the slot refilled is two back.
  int64_t ahead() const { return stages - 2; }
  int64_t experts = 0;
  int64_t k = 0;        ///< reduction length (static)
  int64_t slotsPerToken = 1;
  bool swiglu = false;
  /// A producer warpgroup copies, the two MMA warpgroups only compute;
  /// they hand stages over through mbarriers instead of block barriers.
  bool warpSpecialized = false;
  /// Blocks per cluster (1 or 2; 2 only warp-specialized): the blocks of
  /// a pair compute m-tiles 2j and 2j+1 of the same expert and columns and
  /// each multicasts half of the weight tile to both.
  int64_t cluster = 1;
  NVVM::WGMMATypes elemType = NVVM::WGMMATypes::bf16;

  int64_t threads() const {
    return warpSpecialized ? kSpecializedThreads : kThreads;
  }
  /// Threads that issue the copies: the producer warpgroup, or all.
  int64_t copyThreads() const { return warpSpecialized ? 128 : kThreads; }

  int64_t groups() const { return experts + 1; }
  int64_t stageBytes() const { return (kBlockM + blockN) * kRowBytes; }
  /// Two ping-pong tables of the scan and the groups' first rows (plus
  /// the end of the last), rounded to 16 bytes.
  int64_t tableBytes() const {
    return (groups() * 8 + (groups() + 1) * 4 + 15) / 16 * 16;
  }
  /// A "full" and an "empty" mbarrier per stage (warp-specialized only).
  int64_t barrierBytes() const { return warpSpecialized ? 16 * stages : 0; }
  int64_t sharedBytes() const {
    // + 1024 to round the stages up to the swizzle's 1024-byte alignment.
    return tableBytes() + barrierBytes() + 1024 + stages * stageBytes();
  }
  /// Output columns per block.
  int64_t outTileN() const { return swiglu ? blockN / 2 : blockN; }
  /// B rows one TMA load brings (the rhs tensor map's box): all of them,
  /// or half (the gate or the up rows with SwiGLU, a block's half in a
  /// cluster of 2).
  int64_t rhsBoxRows() const {
    return swiglu || cluster > 1 ? blockN / 2 : blockN;
  }
};

/// The tile the kernel of `plan` is built with (the bundle records it).
moe::TileAttr tileOf(MLIRContext *context, const HopperPlan &plan) {
  return moe::TileAttr::get(context, kBlockM, plan.blockN, kBlockK,
                            plan.threads(), plan.stages, plan.bandM,
                            plan.warpSpecialized ? 128 : 0, plan.cluster);
}

/// Positions of the optional kernel arguments (-1 if absent). Without
/// offsets the matmul is dense: one group of all rows, rhs [N, K].
struct HopperArgs {
  int offsets = -1, gather = -1, bias = -1, rowScale = -1;
  int rhsMap = -1; ///< the rhs's TMA descriptor (warp-specialized)
  int lhsMap = -1; ///< the lhs's, when its rows are not gathered
};

Value toI64(KernelBuilder &b, Value index) {
  return arith::IndexCastOp::create(b, b.getI64Type(), index);
}
Value band(KernelBuilder &b, Value x, int64_t mask) {
  return arith::AndIOp::create(b, x, b.idx(mask));
}
Value bxor(KernelBuilder &b, Value x, Value y) {
  return arith::XOrIOp::create(b, x, y);
}
Value bor(KernelBuilder &b, Value x, Value y) {
  return arith::OrIOp::create(b, x, y);
}

/// The wgmma shared-memory descriptor of a 128-byte-swizzled, K-major tile
/// at shared address `address`: start address >> 4 in bits 0-13, leading
/// byte offset 16 (unused by this swizzle), stride byte offset 1024 (one
/// 8-row swizzle atom to the next) and the 128-byte swizzle mode in bits
/// 62-63.
Value descriptor(KernelBuilder &b, Value address) {
  Value start = arith::ShRUIOp::create(b, band(b, address, 0x3FFFF), b.idx(4));
  int64_t fixed = (int64_t(1) << 16) | (int64_t(1024 >> 4) << 32) |
                  (int64_t(1) << 62);
  return toI64(b, bor(b, start, b.idx(fixed)));
}

void emitKernel(KernelBuilder &b, ValueRange a, Value block, Value thread,
                const HopperPlan &plan, const HopperArgs &pos) {
  MLIRContext *ctx = b.getContext();
  Value lhs = a[0], rhs = a[1], out = a[2], rows = a.back();
  Value offsets = pos.offsets >= 0 ? a[pos.offsets] : Value();
  Value gather = pos.gather >= 0 ? a[pos.gather] : Value();
  Value bias = pos.bias >= 0 ? a[pos.bias] : Value();
  Value rowScale = pos.rowScale >= 0 ? a[pos.rowScale] : Value();
  Value rhsMap = pos.rhsMap >= 0 ? a[pos.rhsMap] : Value();
  Value lhsMap = pos.lhsMap >= 0 ? a[pos.lhsMap] : Value();
  // Arrivals that complete a stage's full barrier: every producer thread's
  // cp.async, unless the lhs comes by TMA too, plus the TMA thread's.
  int64_t fullArrivals =
      (lhsMap ? 0 : plan.copyThreads()) + (rhsMap ? 1 : 0);
  const int64_t G = plan.groups(), E = plan.experts, BN = plan.blockN;
  const int64_t S = plan.stages, K = plan.k, C = plan.cluster;
  assert((C == 1 || plan.warpSpecialized) && "clusters are warp-specialized");
  // The block's rank in its cluster (clusters are consecutive blocks along
  // x) and the cluster's index: the units the tile schedule hands out.
  Value rank = b.rem(block, b.idx(C));
  Value firstUnit = b.div(block, b.idx(C));
  Value outWidth = b.dim(out, 1);
  // Rows of one expert's rhs: N of [E, N, K] (or of a dense [N, K]).
  auto rhsType = cast<MemRefType>(rhs.getType());
  Value rhsRows = b.dim(rhs, rhsType.getRank() - 2);

  // Shared memory: the two scan tables, then the 1024-aligned stages.
  auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  Value smem = gpu::DynamicSharedMemoryOp::create(
      b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                         MemRefLayoutAttrInterface(), workgroup));
  auto tableType = MemRefType::get({ShapedType::kDynamic}, b.getI32Type(),
                                   MemRefLayoutAttrInterface(), workgroup);
  Value tables[2] = {
      memref::ViewOp::create(b, tableType, smem, b.idx(0),
                             ValueRange{b.idx(G)}),
      memref::ViewOp::create(b, tableType, smem, b.idx(G * 4),
                             ValueRange{b.idx(G)})};
  Value groupStarts = memref::ViewOp::create(
      b, tableType, smem, b.idx(G * 8), ValueRange{b.idx(G + 1)});
  Value barrierBase = b.add(addressOf(b, smem), b.idx(plan.tableBytes()));
  Value stageBase =
      band(b,
           b.add(barrierBase, b.idx(plan.barrierBytes() + 1023)), ~1023);
  // Warp-specialized: full[s] completes when the producer's 128 threads'
  // copies of stage s have landed (cp.async arrivals), empty[s] when the
  // 256 MMA threads are done reading it. The scan's barrier below makes
  // the initialization visible to the block.
  auto stageBarrier = [&](bool empty, Value slot) {
    Value index = empty ? b.add(slot, b.idx(S)) : slot;
    return pointerAt(b, b.add(barrierBase, b.mul(index, b.idx(8))), 3);
  };
  if (plan.warpSpecialized)
    b.ifThen(b.eq(thread, b.idx(0)), [&] {
      for (int64_t s = 0; s < S; ++s) {
        NVVM::MBarrierInitOp::create(b, stageBarrier(false, b.idx(s)),
                                     b.i32(fullArrivals), Value());
        NVVM::MBarrierInitOp::create(b, stageBarrier(true, b.idx(s)),
                                     b.i32(kMmaWarps * C), Value());
      }
      // Visible to the other block of the cluster (below) before its
      // multicasts and arrivals reach them.
      if (C > 1)
        NVVM::FenceMbarrierInitOp::create(b);
    });
  // Every block of the cluster has its barriers ready; this also keeps the
  // blocks resident together from here (cluster barriers at the end).
  auto clusterSync = [&] {
    NVVM::ClusterArriveOp::create(b, UnitAttr());
    NVVM::ClusterWaitOp::create(b, UnitAttr());
  };
  if (C > 1)
    clusterSync();

  // Rows [start, end) of group g: experts, then the tail up to `rows`.
  auto groupBounds = [&](Value g) -> std::pair<Value, Value> {
    if (!offsets) // dense: all rows, then an empty tail
      return {b.select(b.eq(g, b.idx(0)), b.idx(0), rows), rows};
    Value start = groupStart(b, offsets, g);
    Value end = b.ifElse(
        b.eq(g, b.idx(E)), b.getIndexType(), [&] { return rows; },
        [&] { return b.loadIdx(offsets, {g}); });
    return {start, b.select(b.ult(start, end), end, start)};
  };

  // m-tiles per group, then an inclusive Hillis-Steele scan across the
  // block, ping-ponging between the two tables.
  const int64_t threads = plan.threads();
  int64_t perThread = (G + threads - 1) / threads;
  auto forOwnGroups = [&](const std::function<void(Value)> &body) {
    for (int64_t q = 0; q < perThread; ++q) {
      Value g = b.add(thread, b.idx(q * threads));
      b.ifThen(b.ult(g, b.idx(G)), [&] { body(g); });
    }
  };
  forOwnGroups([&](Value g) {
    auto [start, end] = groupBounds(g);
    // m-tiles, in units of C (a cluster's blocks share a unit).
    b.storeI32(b.ceilDiv(b.ceilDiv(b.sub(end, start), b.idx(kBlockM)),
                         b.idx(C)),
               tables[0], {g});
    // The tiles read their group's rows from here, not from global memory.
    b.storeI32(start, groupStarts, {g});
    b.ifThen(b.eq(g, b.idx(G - 1)),
             [&] { b.storeI32(end, groupStarts, {b.idx(G)}); });
  });
  gpu::BarrierOp::create(b);
  int current = 0;
  for (int64_t d = 1; d < G; d *= 2) {
    Value src = tables[current], dst = tables[1 - current];
    forOwnGroups([&](Value g) {
      Value v = b.loadIdx(src, {g});
      Value has = b.ule(b.idx(d), g);
      Value before =
          b.loadIdx(src, {b.select(has, b.sub(g, b.idx(d)), b.idx(0))});
      b.storeI32(b.add(v, b.select(has, before, b.idx(0))), dst, {g});
    });
    gpu::BarrierOp::create(b);
    current = 1 - current;
  }
  Value tileEnds = tables[current];

  int64_t outTileN = plan.outTileN();
  Value nTiles = b.ceilDiv(outWidth, b.idx(outTileN));
  // Tiles of the schedule: (group, m-unit, n-tile); an m-unit is C m-tiles,
  // one per block of a cluster.
  Value unitsTotal = b.loadIdx(tileEnds, {b.idx(G - 1)});
  Value tilesTotal = b.mul(unitsTotal, nTiles);

  // Per-thread copy coordinates: chunk c of rows rowOf(i) = thread/8 + 32i;
  // the swizzled chunk is the same for all of them (32i keeps r % 8).
  Value chunk = b.rem(thread, b.idx(kChunksPerRow));
  Value row0 = b.div(thread, b.idx(kChunksPerRow));
  Value swizzled = b.mul(bxor(b, chunk, b.rem(row0, b.idx(8))), b.idx(16));
  int64_t rowsPerPass = plan.copyThreads() / kChunksPerRow;
  auto rowOf = [&](int64_t i) { return b.add(row0, b.idx(i * rowsPerPass)); };
  auto smemOffset = [&](int64_t i) {
    return b.add(b.mul(rowOf(i), b.idx(kRowBytes)), swizzled);
  };
  Value lhsBase = addressOf(b, lhs), rhsBase = addressOf(b, rhs);
  Value rowBytesK = b.idx(K * 2);

  // The MMA threads count from 0 (after the producer warpgroup).
  Value mathThread =
      plan.warpSpecialized ? b.sub(thread, b.idx(128)) : thread;
  Value warpgroup = b.div(mathThread, b.idx(128));
  Value lane = b.rem(thread, b.idx(32));
  Value warp = b.rem(b.div(thread, b.idx(32)), b.idx(4));
  auto accType = LLVM::LLVMStructType::getLiteral(
      ctx, SmallVector<Type>(BN / 2, b.getF32Type()));
  Value zeroF = b.f32(0);

  Value invalid = b.idx(-1);
  Value gridSize = gpu::GridDimOp::create(b, gpu::Dimension::x);
  Value tileStride = b.div(gridSize, b.idx(C));

  /// Where one tile is, and for a gathered lhs this thread's source rows
  /// (i32, -1: zero-fill). Carried from one tile to the next, so that the
  /// next tile's gather lookups overlap this tile's wgmmas and its first
  /// copies start before this tile's stores. Kept small: every value is
  /// live across the k-loop.
  struct TileState {
    Value group, rowStart, rowCount, colStart;
    SmallVector<Value> lhsRows;

    SmallVector<Value> values() const {
      SmallVector<Value> v = {group, rowStart, rowCount, colStart};
      llvm::append_range(v, lhsRows);
      return v;
    }
    static TileState from(ValueRange v) {
      TileState t{v[0], v[1], v[2], v[3], {}};
      t.lhsRows.assign(v.begin() + 4, v.end());
      return t;
    }
  };
  const int64_t lhsRowsPerThread = kBlockM / rowsPerPass;
  const int64_t rhsRowsPerThread = BN / rowsPerPass;
  auto toI32 = [&](Value index) {
    return arith::IndexCastOp::create(b, b.getI32Type(), index).getResult();
  };

  // Tile `tile` (< tilesTotal).
  auto tileState = [&](Value tile, bool withRows = true) {
    TileState t;
    // Group g owns tiles [before, end) * nTiles (its m-tiles times the
    // n-tiles).
    t.group = firstGreater(b, tileEnds, G, b.div(tile, nTiles));
    Value g = t.group;
    Value tilesBefore = b.ifElse(
        b.eq(g, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
        [&] { return b.loadIdx(tileEnds, {b.sub(g, b.idx(1))}); });
    Value mTiles = b.sub(b.loadIdx(tileEnds, {g}), tilesBefore);
    // Inside the group, bands of bandM m-tiles: a band's tiles go n-tile
    // by n-tile with the m-tiles fastest, so the blocks running together
    // share B tiles and the band's A rows stay in L2 over the n sweep (in
    // m-tile order, a large expert would stream all its weights once per
    // m-tile).
    // (mTiles and the band count m-units of C m-tiles.)
    Value local = b.sub(tile, b.mul(tilesBefore, nTiles));
    const int64_t bandM = std::max<int64_t>(1, plan.bandM / C);
    Value bandTiles = b.mul(b.idx(bandM), nTiles);
    Value band = b.div(local, bandTiles), inBand = b.rem(local, bandTiles);
    Value bandHeight =
        b.minIdx(b.idx(bandM), b.sub(mTiles, b.mul(band, b.idx(bandM))));
    Value nTile = b.div(inBand, bandHeight);
    Value mUnit = b.add(b.mul(band, b.idx(bandM)), b.rem(inBand, bandHeight));
    Value mLocal = C > 1 ? b.add(b.mul(mUnit, b.idx(C)), rank) : mUnit;
    Value groupBegin = b.loadIdx(groupStarts, {g});
    Value groupEnd = b.loadIdx(groupStarts, {b.add(g, b.idx(1))});
    groupEnd = b.select(b.ult(groupBegin, groupEnd), groupEnd, groupBegin);
    t.rowStart = b.add(groupBegin, b.mul(mLocal, b.idx(kBlockM)));
    t.rowCount = b.minIdx(b.sub(groupEnd, t.rowStart), b.idx(kBlockM));
    // The last unit of a group may leave a block of the cluster without
    // rows: it still loads and multicasts its half of the weights for its
    // partner, and stores nothing.
    if (C > 1)
      t.rowCount = b.select(b.ult(t.rowStart, groupEnd), t.rowCount, b.idx(0));
    t.colStart = b.mul(nTile, b.idx(outTileN));
    if (!gather || !withRows)
      return t;
    Value expert = b.ult(g, b.idx(E));
    for (int64_t i = 0; i < lhsRowsPerThread; ++i) {
      Value r = rowOf(i);
      Value inRange = b.land(expert, b.ult(r, t.rowCount));
      Value src = b.ifElse(
          inRange, b.getIndexType(),
          [&] {
            auto [slot, valid] = b.loadSigned(gather, {b.add(t.rowStart, r)});
            return b.select(valid, b.div(slot, b.idx(plan.slotsPerToken)),
                            invalid);
          },
          [&] { return invalid; });
      t.lhsRows.push_back(toI32(src));
    }
    return t;
  };
  // A tile past the end: no rows, no copies.
  auto noTile = [&] {
    TileState t{b.idx(E), b.idx(0), b.idx(0), b.idx(0), {}};
    if (gather)
      t.lhsRows.assign(lhsRowsPerThread, b.i32(-1));
    return t;
  };
  // Source byte offset of this thread's A row i of tile t (-1: zero-fill).
  auto lhsRowBytes = [&](const TileState &t, int64_t i) {
    Value row, valid;
    if (gather) {
      row = arith::IndexCastOp::create(b, b.getIndexType(), t.lhsRows[i]);
      valid = arith::CmpIOp::create(b, arith::CmpIPredicate::ne, t.lhsRows[i],
                                    b.i32(-1));
    } else {
      Value r = rowOf(i);
      row = b.add(t.rowStart, r);
      valid = b.land(b.ult(t.group, b.idx(E)), b.ult(r, t.rowCount));
    }
    return b.select(valid, b.mul(row, rowBytesK), invalid);
  };
  // Source byte offset of this thread's B row i: an output column, or the
  // gate then the up columns.
  auto rhsRowBytes = [&](const TileState &t, int64_t i) {
    Value r = rowOf(i);
    Value n, valid;
    if (plan.swiglu) {
      int64_t half = BN / 2;
      Value isUp = b.ule(b.idx(half), r);
      Value c = b.add(t.colStart, b.select(isUp, b.sub(r, b.idx(half)), r));
      valid = b.ult(c, outWidth);
      n = b.select(isUp, b.add(c, outWidth), c);
    } else {
      n = b.add(t.colStart, r);
      valid = b.ult(n, outWidth);
    }
    Value rowIndex = b.add(b.mul(t.group, rhsRows), n);
    return b.select(b.land(b.ult(t.group, b.idx(E)), valid),
                    b.mul(rowIndex, rowBytesK), invalid);
  };

  auto stageA = [&](Value slot) {
    return b.add(stageBase, b.mul(slot, b.idx(plan.stageBytes())));
  };
  auto stageB = [&](Value slot) {
    return b.add(stageA(slot), b.idx(kBlockM * kRowBytes));
  };
  auto cacheGlobal = NVVM::LoadCacheModifierKindAttr::get(
      ctx, NVVM::LoadCacheModifierKind::CG);
  auto copyChunk = [&](Value dst, Value base, Value rowBytes, Value kBytes,
                       Value kValid) {
    Value ok = b.land(kValid, arith::CmpIOp::create(
                                  b, arith::CmpIPredicate::ne, rowBytes,
                                  invalid));
    Value src = b.select(ok, b.add(base, b.add(rowBytes, kBytes)), base);
    Value bytes = b.select(ok, b.idx(16), b.idx(0));
    NVVM::CpAsyncOp::create(
        b, pointerAt(b, dst, 3), pointerAt(b, src, 1),
        b.getI32IntegerAttr(16), cacheGlobal,
        arith::IndexCastOp::create(b, b.getI32Type(), bytes));
  };
  // An operand with a tensor map comes by TMA (loadByTma), not here.
  auto loadStage = [&](const TileState &t, Value slot, Value kt) {
    Value kElem = b.add(b.mul(kt, b.idx(kBlockK)), b.mul(chunk, b.idx(8)));
    Value kValid = b.ult(kElem, b.idx(K));
    Value kBytes = b.mul(kElem, b.idx(2));
    if (!lhsMap)
      for (int64_t i = 0; i < lhsRowsPerThread; ++i)
        copyChunk(b.add(stageA(slot), smemOffset(i)), lhsBase,
                  lhsRowBytes(t, i), kBytes, kValid);
    if (rhsMap)
      return;
    for (int64_t i = 0; i < rhsRowsPerThread; ++i)
      copyChunk(b.add(stageB(slot), smemOffset(i)), rhsBase,
                rhsRowBytes(t, i), kBytes, kValid);
  };
  // Slice kt of the operands with tensor maps by TMA, completing on `full`
  // (the 1024-aligned stages match the maps' 128-byte swizzle). The rhs:
  // the block's columns, or their gate rows then their up rows, from a map
  // over [E, N, K] (or a dense [N, K]). The lhs: the tile's 128 rows from
  // a map over [rows, K] (rows past the group's end only reach output rows
  // the epilogue skips). Rows and K past the end arrive as zeros. One
  // thread issues it all; expect_tx is that thread's arrival on `full`.
  // In a cluster of 2, each block loads one half of the B rows (the gate
  // or the up rows with SwiGLU) and multicasts it to both blocks at the
  // same offset, completing on both blocks' `full`: a block's barrier
  // still expects the whole stage.
  auto loadByTma = [&](const TileState &t, Value slot, Value kt,
                       Value full) {
    const int64_t rows = plan.rhsBoxRows();
    int64_t bytes = (BN + (lhsMap ? kBlockM : 0)) * kRowBytes;
    NVVM::MBarrierArriveExpectTxOp::create(
        b, Type(), full, b.i32(bytes), NVVM::MemScopeKind::CTA, false,
        Value());
    auto cluster = LLVM::LLVMPointerType::get(ctx, 7);
    auto load = [&](Value map, Value stageAddress, ValueRange coords,
                    Value multicast) {
      Value dst =
          LLVM::AddrSpaceCastOp::create(b, cluster, pointerAt(b, stageAddress, 3));
      NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
          b, dst, map, coords, full, ValueRange(), multicast, Value(),
          NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
    };
    Value k0 = toI32(b.mul(kt, b.idx(kBlockK)));
    if (lhsMap)
      load(lhsMap, stageA(slot), ValueRange{k0, toI32(t.rowStart)}, Value());
    // B rows [l * rows, (l + 1) * rows) of the stage: output columns from
    // colStart, or (SwiGLU) the gate then the up columns.
    auto rhsRows = [&](Value l) {
      if (plan.swiglu)
        return b.add(t.colStart, b.mul(l, outWidth));
      return b.add(t.colStart, b.mul(l, b.idx(rows)));
    };
    auto loadRhs = [&](Value l, Value multicast) {
      SmallVector<Value> coords = {k0, toI32(rhsRows(l))};
      if (offsets)
        coords.push_back(toI32(t.group));
      load(rhsMap, b.add(stageB(slot), b.mul(l, b.idx(rows * kRowBytes))),
           coords, multicast);
    };
    if (C == 1) {
      for (int64_t l = 0; l < BN / rows; ++l)
        loadRhs(b.idx(l), Value());
      return;
    }
    // This block's half: rows [rank * BN / 2, (rank + 1) * BN / 2).
    Value both = arith::ConstantOp::create(b, b.getI16IntegerAttr(3));
    loadRhs(rank, both);
  };
  auto commit = [&] { NVVM::CpAsyncCommitGroupOp::create(b); };
  int64_t kSlices = (K + kBlockK - 1) / kBlockK;
  int64_t ahead = plan.ahead();
  // The first `ahead` slices of a tile, one commit group each (empty past
  // the last slice or for a tile without expert rows, which keeps every
  // thread's group count the same).
  auto loadPrologue = [&](const TileState &t) {
    for (int64_t s = 0; s < ahead; ++s) {
      if (s < kSlices)
        loadStage(t, b.idx(s), b.idx(s));
      commit();
    }
  };
  SmallVector<Type> stateTypes(4, b.getIndexType());
  if (gather)
    stateTypes.append(lhsRowsPerThread, b.getI32Type());
  auto nextState = [&](Value tile) {
    Value next = b.add(tile, gridSize);
    auto branch = scf::IfOp::create(b, stateTypes, b.ult(next, tilesTotal),
                                    /*withElse=*/true);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    scf::YieldOp::create(b, tileState(next).values());
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    scf::YieldOp::create(b, noTile().values());
    return TileState::from(branch.getResults());
  };

  auto shape = NVVM::MMAShapeAttr::get(ctx, 64, BN, 16);
  auto elem = NVVM::WGMMATypesAttr::get(ctx, plan.elemType);
  auto f32Type = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
  auto one = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
  auto accumulate = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one);
  auto kMajorA = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row);
  auto kMajorB = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col);

  // The 4 wgmmas (one commit group) of the K slice in stage `slot`, added
  // to the accumulators `current`.
  auto sliceMma = [&](Value current, Value slot) {
    Value aTile = b.add(stageA(slot), b.mul(warpgroup, b.idx(64 * kRowBytes)));
    Value bTile = stageB(slot);
    NVVM::WgmmaFenceAlignedOp::create(b);
    for (int64_t kk = 0; kk < kBlockK / 16; ++kk) {
      Value descA = descriptor(b, b.add(aTile, b.idx(kk * 32)));
      Value descB = descriptor(b, b.add(bTile, b.idx(kk * 32)));
      current = NVVM::WgmmaMmaAsyncOp::create(
          b, accType, current, descA, descB, shape, elem, elem, f32Type,
          accumulate, one, one, kMajorA, kMajorB, NVVM::MMAIntOverflowAttr());
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(b);
    return current;
  };
  auto zeroAccumulators = [&] {
    Value acc = LLVM::UndefOp::create(b, accType);
    for (int64_t i = 0; i < BN / 2; ++i)
      acc = LLVM::InsertValueOp::create(b, acc, zeroF, ArrayRef<int64_t>{i});
    return acc;
  };
  auto fenceAsyncShared = [&] {
    NVVM::FenceProxyOp::create(
        b, NVVM::ProxyKindAttr::get(ctx, NVVM::ProxyKind::async_shared),
        NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
  };

  // The k-loop of one tile whose prologue is in flight: the accumulators.
  auto mainLoop = [&](const TileState &t) -> Value {
    auto kLoop = scf::ForOp::create(b, b.idx(0), b.idx(kSlices), b.idx(1),
                                    ValueRange{zeroAccumulators()});
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(kLoop.getBody());
    Value kt = kLoop.getInductionVar();
    Value current = kLoop.getRegionIterArgs()[0];
    // Slice kt has landed (for this thread's copies), is visible to the
    // async proxy wgmma reads through, and to the whole block.
    NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(ahead - 1));
    fenceAsyncShared();
    gpu::BarrierOp::create(b);
    // The slot refilled now was read by the wgmmas of slice kt - 2, which
    // every warpgroup waited for before the barrier.
    Value next = b.add(kt, b.idx(ahead));
    b.ifThen(b.ult(next, b.idx(kSlices)),
             [&] { loadStage(t, b.rem(next, b.idx(S)), next); });
    commit();

    current = sliceMma(current, b.rem(kt, b.idx(S)));
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(1));
    scf::YieldOp::create(b, current);
    b.setInsertionPointAfter(kLoop);
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
    return kLoop.getResult(0);
  };

  // Accumulator 4j + 2h + q of a thread: row warpgroup*64 + warp*16 +
  // lane/4 + 8h, column 8j + 2(lane % 4) + q.
  Value rowInTile =
      b.add(b.add(b.mul(warpgroup, b.idx(64)), b.mul(warp, b.idx(16))),
            b.div(lane, b.idx(4)));
  Value colInTile = b.mul(b.rem(lane, b.idx(4)), b.idx(2));
  // The output tile goes through shared memory when it fits in the stages
  // the next tile's prologue leaves free: registers to a padded staging
  // tile (rows 16 bytes apart beyond the tile width, so the pair stores of
  // a warp's 8 rows hit different banks), then 16-byte row-contiguous
  // stores to global memory. Direct pair stores fill half of each 32-byte
  // sector. Only for a plain epilogue: with a gather, SwiGLU, bias or row
  // scale the kernel already needs all 255 registers, and staging spills
  // (ptxas, measured on the bench shapes).
  Type outElem = cast<MemRefType>(out.getType()).getElementType();
  int64_t outBytes = outElem.getIntOrFloatBitWidth() / 8;
  int64_t outVector = 16 / outBytes;
  int64_t stagingStride = outTileN + outVector; // elements
  // Also only for whole column tiles and whole K slices: with a partial
  // last tile (N = 264) or slice (K = 520) the staged kernel spilled 20-148
  // bytes (ptxas).
  int64_t outN = cast<MemRefType>(out.getType()).getDimSize(1);
  // Not warp-specialized: there the producer is already refilling every
  // stage with the next tile.
  bool staged = !plan.warpSpecialized && !plan.swiglu && !gather && !bias &&
                !rowScale &&
                !ShapedType::isDynamic(outN) && outN % outTileN == 0 &&
                K % kBlockK == 0 &&
                kBlockM * stagingStride * outBytes <=
                    (S - plan.ahead()) * plan.stageBytes();
  // Otherwise 16-bit outputs go out as 16-byte chunks gathered within each
  // quad of lanes (no shared memory, few registers): on the H200 the gathered
  // gate_up ran 3-12 % faster (Qwen3 T=8192 0.810 -> 0.736 ms). Not with
  // SwiGLU, where it measured 4-8 % slower at DeepSeek-V3 and the dense MLP.
  bool quadStores =
      !staged && !plan.swiglu && outBytes == 2 && outTileN % 32 == 0;
  auto epilogue = [&](const TileState &t, Value result) {
    Value g = t.group, rowStart = t.rowStart, rowCount = t.rowCount,
          colStart = t.colStart;
    // Built here, not once per kernel: nothing more stays live across the
    // k-loop.
    Value staging;
    if (staged) {
      Value byteShift =
          b.sub(stageA(b.idx(plan.ahead())), addressOf(b, smem));
      staging = memref::ViewOp::create(
          b,
          MemRefType::get({ShapedType::kDynamic}, outElem,
                          MemRefLayoutAttrInterface(), workgroup),
          smem, byteShift, ValueRange{b.idx(kBlockM * stagingStride)});
    }
    auto value = [&](int64_t index) {
      return LLVM::ExtractValueOp::create(b, result, ArrayRef<int64_t>{index})
          .getResult();
    };
    int64_t outChunks = outTileN / 8;
    // The output value of accumulator pair (h, j), element q of the pair:
    // bias, SwiGLU, row scale applied. `c` must be a column in range.
    auto outputAt = [&](int64_t h, int64_t j, int64_t q, Value c,
                        Value scale) {
      Value y = value(4 * j + 2 * h + q);
      if (plan.swiglu) {
        Value up = value(4 * (j + outChunks) + 2 * h + q);
        if (bias) {
          y = b.fadd(y, b.loadF(bias, {g, c}));
          up = b.fadd(up, b.loadF(bias, {g, b.add(c, outWidth)}));
        }
        y = b.fmul(b.fmul(y, b.sigmoid(y)), up);
      } else if (bias) {
        y = b.fadd(y, b.loadF(bias, {g, c}));
      }
      return scale ? b.fmul(y, scale) : y;
    };
    if (quadStores) {
      // The 4 lanes of a quad hold columns 8j + [0, 8) of one row as pairs:
      // a 4x4 transpose of 32-bit words through index shuffles gives lane q
      // all 8 columns of chunk 4m + q, one 16-byte store, so that a warp
      // store writes 8 rows x 64 bytes instead of 8 rows x 16 bytes.
      Type i32 = b.getI32Type();
      auto pairType = VectorType::get({2}, outElem);
      Value quadLane = b.rem(lane, b.idx(4));
      Value quadBase = b.sub(lane, quadLane);
      for (int64_t h = 0; h < 2; ++h) {
        Value r = b.add(rowInTile, b.idx(8 * h));
        Value rowOk = b.ult(r, rowCount);
        Value row = b.add(rowStart, r);
        Value scale = rowScale
                          ? b.loadF(rowScale, {b.select(rowOk, row, rowStart)})
                          : Value();
        for (int64_t m = 0; m < outChunks / 4; ++m) {
          // Lane q's words of chunks 4m .. 4m+3 (packed pairs).
          SmallVector<Value> words;
          for (int64_t d = 0; d < 4; ++d) {
            int64_t j = 4 * m + d;
            Value col = b.add(colStart, b.add(b.idx(8 * j), colInTile));
            Value c = b.minIdx(col, b.sub(outWidth, b.idx(2)));
            SmallVector<Value> pair;
            for (int64_t q = 0; q < 2; ++q)
              pair.push_back(arith::TruncFOp::create(
                  b, outElem, outputAt(h, j, q, b.add(c, b.idx(q)), scale)));
            Value word = vector::BitCastOp::create(
                b, VectorType::get({1}, i32),
                vector::FromElementsOp::create(b, pairType, pair));
            words.push_back(vector::ExtractOp::create(b, word, 0));
          }
          // Round d: lane q sends its word of chunk 4m + (q + d) % 4 to lane
          // (q + d) % 4 and receives, from lane (q - d) % 4, that lane's
          // word of chunk 4m + q, which is word (q - d) % 4 of the output.
          SmallVector<Value> gathered(4, b.i32(0));
          for (int64_t d = 0; d < 4; ++d) {
            Value sendIdx = b.rem(b.add(quadLane, b.idx(d)), b.idx(4));
            Value send = words[0];
            for (int64_t w = 1; w < 4; ++w)
              send = b.select(b.eq(sendIdx, b.idx(w)), words[w], send);
            Value fromIdx = b.rem(b.add(quadLane, b.idx(4 - d)), b.idx(4));
            Value got = send;
            if (d)
              got = gpu::ShuffleOp::create(
                        b, send,
                        arith::IndexCastOp::create(b, i32,
                                                   b.add(quadBase, fromIdx)),
                        b.i32(32), gpu::ShuffleMode::IDX)
                        .getShuffleResult();
            for (int64_t w = 0; w < 4; ++w)
              gathered[w] =
                  b.select(b.eq(fromIdx, b.idx(w)), got, gathered[w]);
          }
          Value chunk = b.add(b.idx(4 * m), quadLane);
          Value col = b.add(colStart, b.mul(chunk, b.idx(8)));
          b.ifThen(b.land(rowOk, b.ult(col, outWidth)), [&] {
            Value vec = vector::BitCastOp::create(
                b, VectorType::get({8}, outElem),
                vector::FromElementsOp::create(
                    b, VectorType::get({4}, i32), gathered));
            b.storeVec(vec, out, {row, col});
          });
        }
      }
      return;
    }
    for (int64_t h = 0; h < 2; ++h) {
      Value r = b.add(rowInTile, b.idx(8 * h));
      b.ifThen(b.ult(r, rowCount), [&] {
        Value row = b.add(rowStart, r);
        Value scale = rowScale ? b.loadF(rowScale, {row}) : Value();
        for (int64_t j = 0; j < outChunks; ++j) {
          Value colInOut = b.add(b.idx(8 * j), colInTile);
          Value col = b.add(colStart, colInOut);
          b.ifThen(b.ult(col, outWidth), [&] {
            SmallVector<Value> pair;
            for (int64_t q = 0; q < 2; ++q)
              pair.push_back(outputAt(h, j, q, b.add(col, b.idx(q)), scale));
            if (staged)
              b.storeVecF(pair, staging,
                          {b.add(b.mul(r, b.idx(stagingStride)), colInOut)});
            else
              b.storeVecF(pair, out, {row, col});
          });
        }
      });
    }
    if (!staged)
      return;
    gpu::BarrierOp::create(b);
    int64_t rowChunks = outTileN / outVector;
    for (int64_t q = 0; q < kBlockM * rowChunks / kThreads; ++q) {
      Value id = b.add(mathThread, b.idx(q * kThreads));
      Value r = b.div(id, b.idx(rowChunks));
      Value c = b.mul(b.rem(id, b.idx(rowChunks)), b.idx(outVector));
      Value col = b.add(colStart, c);
      b.ifThen(b.land(b.ult(r, rowCount), b.ult(col, outWidth)), [&] {
        Value v = b.loadVec(
            staging, {b.add(b.mul(r, b.idx(stagingStride)), c)}, outVector);
        b.storeVec(v, out, {b.add(rowStart, r), col});
      });
    }
  };
  // Rows past the last group: zeros.
  auto zeroFill = [&](const TileState &t) {
    int64_t width = std::min<int64_t>(
        8, KernelBuilder::vectorWidth(
               cast<MemRefType>(out.getType()).getElementType()));
    int64_t chunks = kBlockM * outTileN / width;
    for (int64_t q = 0; q < chunks / kThreads; ++q) {
      Value id = b.add(mathThread, b.idx(q * kThreads));
      Value r = b.div(id, b.idx(outTileN / width));
      Value col = b.add(t.colStart, b.mul(b.rem(id, b.idx(outTileN / width)),
                                          b.idx(width)));
      b.ifThen(b.land(b.ult(r, t.rowCount), b.ult(col, outWidth)), [&] {
        b.storeVecF(SmallVector<Value>(width, zeroF), out,
                    {b.add(t.rowStart, r), col});
      });
    }
  };

  if (plan.warpSpecialized) {
    // Both roles walk the same tiles and count the K slices they pass
    // through the stages: slice n uses stage n % S in its (n / S)-th round,
    // whose parity is the phase its barriers complete.
    auto slotOf = [&](Value n) { return b.rem(n, b.idx(S)); };
    auto waitRound = [&](bool empty, Value n, bool previous) {
      Value parity = b.rem(b.div(n, b.idx(S)), b.idx(2));
      if (previous) // the round before: a fresh barrier counts as done
        parity = b.sub(b.idx(1), parity);
      NVVM::MBarrierTryWaitParityOp::create(b, stageBarrier(empty, slotOf(n)),
                                            toI32(parity), b.i32(1000000));
    };
    auto tileLoop = [&](const std::function<Value(Value, Value)> &body) {
      auto loop = scf::ForOp::create(b, firstUnit, tilesTotal, tileStride,
                                     ValueRange{b.idx(0)});
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      scf::YieldOp::create(b, body(loop.getInductionVar(),
                                   loop.getRegionIterArgs()[0]));
    };
    auto regs = [&](int64_t count, NVVM::SetMaxRegisterAction action) {
      NVVM::SetMaxRegisterOp::create(
          b, b.getI32IntegerAttr(count),
          NVVM::SetMaxRegisterActionAttr::get(ctx, action));
    };
    auto roles = scf::IfOp::create(b, b.ult(thread, b.idx(128)),
                                   /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    // Producer: for each slice, wait until its stage is free, copy, and
    // let the stage's full barrier count the copies' completion.
    b.setInsertionPointToStart(&roles.getThenRegion().front());
    regs(kProducerRegisters, NVVM::SetMaxRegisterAction::decrease);
    tileLoop([&](Value tile, Value slices) -> Value {
      TileState t = tileState(tile);
      return b.ifElse(
          b.ult(t.group, b.idx(E)), b.getIndexType(),
          [&] {
            auto kLoop =
                scf::ForOp::create(b, b.idx(0), b.idx(kSlices), b.idx(1));
            OpBuilder::InsertionGuard inner(b);
            b.setInsertionPointToStart(kLoop.getBody());
            Value kt = kLoop.getInductionVar();
            Value n = b.add(slices, kt);
            waitRound(/*empty=*/true, n, /*previous=*/true);
            loadStage(t, slotOf(n), kt);
            if (rhsMap)
              b.ifThen(b.eq(thread, b.idx(0)), [&] {
                loadByTma(t, slotOf(n), kt, stageBarrier(false, slotOf(n)));
              });
            if (!lhsMap)
              NVVM::CpAsyncMBarrierArriveOp::create(
                  b, stageBarrier(false, slotOf(n)), b.getBoolAttr(true));
            b.setInsertionPointAfter(kLoop);
            return b.add(slices, b.idx(kSlices));
          },
          [&] { return slices; });
    });
    // Its last copies land before the producer exits (their arrivals are
    // tied to the issuing thread).
    NVVM::CpAsyncCommitGroupOp::create(b);
    NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(0));
    // MMA warpgroups: wgmmas on each slice once it has landed; a stage is
    // released once the wgmmas reading it are done (one group stays in
    // flight), then the tile's epilogue from registers while the producer
    // already fills the stages with the next tile.
    b.setInsertionPointToStart(&roles.getElseRegion().front());
    regs(kConsumerRegisters, NVVM::SetMaxRegisterAction::increase);
    // One arrival per MMA warp, by its lane 0: the warp's wgmma wait
    // (aligned) has retired the reads of all its lanes. In a cluster the
    // stage is also freed in the other block, whose multicasts write here.
    Value leader = b.eq(lane, b.idx(0));
    Value partner =
        C > 1 ? toI32(b.sub(b.idx(C - 1), rank)) : Value();
    auto release = [&](Value n) {
      b.ifThen(leader, [&] {
        Value local = stageBarrier(true, slotOf(n));
        NVVM::MBarrierArriveOp::create(b, Type(), local, Value());
        if (C == 1)
          return;
        Value remote = NVVM::MapaOp::create(
            b, LLVM::LLVMPointerType::get(ctx, 7), local, partner);
        // CTA scope, as CUTLASS's cluster barriers: the reads it orders
        // have retired already. With cluster scope every arrival waited on
        // a memory barrier (ncu, H200: 43 % of the warps' stall cycles,
        // the kernel 1.3x slower).
        NVVM::MBarrierArriveOp::create(b, Type(), remote, Value(),
                                       NVVM::MemScopeKind::CTA, false);
      });
    };
    tileLoop([&](Value tile, Value slices) -> Value {
      TileState t = tileState(tile, /*withRows=*/false);
      return b.ifElse(
          b.ult(t.group, b.idx(E)), b.getIndexType(),
          [&] {
            auto kLoop = scf::ForOp::create(b, b.idx(0), b.idx(kSlices),
                                            b.idx(1),
                                            ValueRange{zeroAccumulators()});
            {
              OpBuilder::InsertionGuard inner(b);
              b.setInsertionPointToStart(kLoop.getBody());
              Value kt = kLoop.getInductionVar();
              Value n = b.add(slices, kt);
              waitRound(/*empty=*/false, n, /*previous=*/false);
              // The copies were generic-proxy writes; wgmma reads through
              // the async proxy.
              fenceAsyncShared();
              Value acc = sliceMma(kLoop.getRegionIterArgs()[0], slotOf(n));
              NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(1));
              b.ifThen(b.ult(b.idx(0), kt),
                       [&] { release(b.sub(n, b.idx(1))); });
              scf::YieldOp::create(b, acc);
            }
            NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
            Value end = b.add(slices, b.idx(kSlices));
            release(b.sub(end, b.idx(1)));
            epilogue(t, kLoop.getResult(0));
            return end;
          },
          [&] {
            zeroFill(t);
            return slices;
          });
    });
    // No block leaves while its partner may still multicast into its
    // shared memory or arrive on its barriers.
    if (C > 1) {
      b.setInsertionPointAfter(roles);
      clusterSync();
    }
    return;
  }
  // The persistent loop: tiles block, block + gridDim, ... The first tile's
  // prologue goes out before the loop; each iteration finds the next tile
  // first (its lookups overlap the wgmmas), issues its prologue once this
  // tile's wgmmas are done, then stores this tile.
  TileState first = nextState(b.sub(block, gridSize));
  loadPrologue(first);
  auto tileLoop = scf::ForOp::create(b, block, tilesTotal, gridSize,
                                     first.values());
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tileLoop.getBody());
    TileState t = TileState::from(tileLoop.getRegionIterArgs());
    TileState next = nextState(tileLoop.getInductionVar());
    auto branch = scf::IfOp::create(b, b.eq(t.group, b.idx(E)),
                                    /*withElse=*/true);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    loadPrologue(next);
    zeroFill(t);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    Value result = mainLoop(t);
    // Every warpgroup is done with the stages before they are refilled.
    gpu::BarrierOp::create(b);
    loadPrologue(next);
    epilogue(t, result);
    b.setInsertionPointAfter(branch);
    scf::YieldOp::create(b, next.values());
  }
}

/// The operands of one wgmma matmul launch (null where absent).
struct HopperOperands {
  Value lhs, rhs, out, offsets, gather, bias, rowScale;
};

/// Launches the wgmma kernel for `plan` over the rows of `v.out`; with
/// `enabled` (a host index, 0 or 1) the grid is multiplied by it.
LogicalResult launchHopperMatmul(LoweringContext &ctx,
                                 const HopperOperands &v,
                                 const HopperPlan &plan, StringRef suffix,
                                 Value enabled = {}) {
  KernelBuilder &h = ctx.host();
  SmallVector<Value> operands = {v.lhs, v.rhs, v.out};
  HopperArgs pos;
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
  if (plan.warpSpecialized) {
    // The producer loads the rhs by TMA: boxes of 64 K-elements (one
    // 128-byte swizzled row) by rhsBoxRows() B rows, one expert deep.
    int64_t rank = cast<MemRefType>(v.rhs.getType()).getRank();
    SmallVector<int64_t> box = {kBlockK, plan.rhsBoxRows()};
    if (rank == 3)
      box.push_back(1);
    addOptional(tensorMapOperand(ctx.host(), v.rhs, box), pos.rhsMap);
    // Rows in order: the lhs too, 128 rows by 64 K-elements.
    if (!v.gather)
      addOptional(tensorMapOperand(ctx.host(), v.lhs, {kBlockK, kBlockM}),
                  pos.lhsMap);
  }
  SmallVector<Value> outSizes = ctx.sizes(v.out);
  Value rows = outSizes[0];
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
  Value tilesBound =
      h.mul(mTilesBound, h.ceilDiv(outSizes[1], h.idx(plan.outTileN())));
  Value grid = h.minIdx(tilesBound, h.idx(kPersistentBlocks / C));
  if (C > 1)
    grid = h.mul(grid, h.idx(C));
  if (enabled)
    grid = h.mul(grid, enabled);
  // The tile as built (the bundle records it): the stages and band taken.
  moe::TileAttr tile = tileOf(h.getContext(), plan);
  return ctx.launch(
      suffix, grid, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        emitKernel(b, a, block, thread, plan, pos);
      },
      plan.sharedBytes(), plan.cluster);
}

/// Whether `tile` has the form of this kernel's blocks: m = 128, n = 128 or
/// 256, k = 64, 256 threads, or 384 of which 128 producers (warp
/// specialization, in clusters of 1 or 2: the verifier allows 2 only
/// there).
bool isHopperTile(moe::TileAttr tile) {
  if (!tile || tile.getM() != kBlockM || tile.getK() != kBlockK ||
      (tile.getN() != 128 && tile.getN() != 256))
    return false;
  if (tile.getProducers() == 0)
    return tile.getThreads() == kThreads;
  return tile.getProducers() == 128 &&
         tile.getThreads() == kSpecializedThreads;
}

/// 1 when `rows` > `bound`, else 0, on the host (for launch grids).
Value above(KernelBuilder &h, Value rows, int64_t bound) {
  return h.minIdx(h.idx(1), h.div(rows, h.idx(bound + 1)));
}

/// Launches the kernel of `base`, or with the op's `moe.tile_buckets` one
/// variant per bucket: each launch's grid is 0 unless the row count of
/// `v.out` falls in its bucket (the base plan takes the rows above every
/// bucket). `planOf` makes the plan of a bucket's tile.
LogicalResult launchBucketed(
    LoweringContext &ctx, Operation *op, const HopperOperands &v,
    const HopperPlan &base,
    function_ref<std::optional<HopperPlan>(moe::TileAttr)> planOf) {
  auto bucketList = op->getAttrOfType<ArrayAttr>(moe::kTileBucketsAttrName);
  SmallVector<std::pair<moe::TileBucketAttr, HopperPlan>> buckets;
  if (bucketList)
    for (auto bucket : bucketList.getAsRange<moe::TileBucketAttr>()) {
      std::optional<HopperPlan> plan = planOf(bucket.getTile());
      if (!plan || !isHopperTile(bucket.getTile()))
        return op->emitOpError("has a tile bucket the sm90a matmul cannot "
                               "build: ")
               << bucket;
      buckets.push_back({bucket, *plan});
    }
  // Last buckets that would build the base kernel again: the base serves
  // their rows.
  MLIRContext *context = op->getContext();
  moe::TileAttr baseTile = tileOf(context, base);
  while (!buckets.empty() &&
         tileOf(context, buckets.back().second) == baseTile)
    buckets.pop_back();
  if (buckets.empty())
    return launchHopperMatmul(ctx, v, base, "wgmma");
  KernelBuilder &h = ctx.host();
  Value rows = ctx.sizes(v.out)[0];
  int64_t below = 0;
  for (auto &[bucket, plan] : buckets) {
    // rows in (below, max_rows]: above(below) - above(max_rows).
    Value enabled = h.sub(above(h, rows, below),
                          above(h, rows, bucket.getMaxRows()));
    std::string suffix = "wgmma_le" + std::to_string(bucket.getMaxRows());
    if (failed(launchHopperMatmul(ctx, v, plan, suffix, enabled)))
      return failure();
    below = bucket.getMaxRows();
  }
  return launchHopperMatmul(ctx, v, base, "wgmma", above(h, rows, below));
}

/// The plan for lhs [.., k] and output width `width` of 16-bit operands, or
/// nullopt where the kernel does not apply.
std::optional<HopperPlan> planFor(Type lhsElem, Type rhsElem, Type outElem,
                                  int64_t k, int64_t width, int64_t experts,
                                  moe::TileAttr tile) {
  if (lhsElem != rhsElem || !(lhsElem.isBF16() || lhsElem.isF16()))
    return std::nullopt;
  if (!(outElem.isBF16() || outElem.isF16() || outElem.isF32()))
    return std::nullopt;
  // 16-byte copies along K, pairs and 8-wide chunks along N.
  if (ShapedType::isDynamic(k) || ShapedType::isDynamic(width) || k % 8 ||
      width % 8 || experts + 1 > kMaxGroups)
    return std::nullopt;
  HopperPlan plan;
  plan.experts = experts;
  plan.k = k;
  plan.elemType =
      lhsElem.isBF16() ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
  // A tile of this kernel's form (m = 128, n = 128 or 256, k = 64, 256
  // threads) set on the op picks the block width, and its `stages` and
  // `band_m` (when set) the pipeline depth and the tile order. Otherwise
  // 256 (m64n256 wgmmas: measured faster on the H200 at most MoE shapes of
  // bench/grouped_gemm.py) unless the output is narrower than that.
  plan.blockN = width >= 256 ? 256 : 128;
  // n = 256 gets the warp-specialized kernel with TMA for the weights (and
  // for the lhs when its rows are in order). On the H200 it was faster than
  // the block-barrier kernel at every bench/grouped_gemm.py shape with
  // T >= 2048 we measured: gathered gate_up 1.00-1.16x (DeepSeek-V3 up to
  // 1.24x), down 1.00-1.20x, dense SwiGLU 1.07x
  // (bench/results/warp-specialization-h200.md). With cp.async for the
  // weights it had been slower at long K and DeepSeek-V3 SwiGLU; n = 128
  // (cp.async weights) was slower everywhere, so it keeps block barriers.
  plan.warpSpecialized = plan.blockN == 256;
  if (isHopperTile(tile)) {
    plan.blockN = tile.getN();
    plan.warpSpecialized = tile.getProducers() != 0;
    if (tile.getStages())
      plan.stages = tile.getStages();
    if (tile.getBandM())
      plan.bandM = tile.getBandM();
    plan.cluster = tile.getCluster();
  }
  // At most as many stages as fit in shared memory (a deeper pipeline asked
  // for gets the deepest that fits).
  while (plan.sharedBytes() > kMaxSharedBytes && plan.stages > 3)
    --plan.stages;
  if (plan.sharedBytes() > kMaxSharedBytes)
    return std::nullopt;
  return plan;
}

/// The plan of the wgmma kernel for `op` with `tile`, or nullopt where the
/// kernel does not apply.
std::optional<HopperPlan> groupedPlan(moe::GroupedMatmulOp op,
                                      moe::TileAttr tile) {
  if (op.getMode() != moe::MatmulMode::forward || !op.getTransposeRhs() ||
      op.getLoraA() || op.getLhsScales())
    return std::nullopt;
  auto lhsType = cast<ShapedType>(op.getLhs().getType());
  auto outType = cast<ShapedType>(op.getOut().getType());
  int64_t experts = cast<ShapedType>(op.getOffsets().getType()).getDimSize(0);
  std::optional<HopperPlan> plan = planFor(
      lhsType.getElementType(),
      cast<ShapedType>(op.getRhs().getType()).getElementType(),
      outType.getElementType(), lhsType.getDimSize(1), outType.getDimSize(1),
      experts, tile);
  if (plan) {
    plan->slotsPerToken = op.getK().value_or(1);
    plan->swiglu = op.getActivation() == moe::Activation::swiglu;
  }
  return plan;
}

std::optional<LogicalResult> lowerGrouped(moe::GroupedMatmulOp op,
                                          moe::TileAttr tile, BufferMap buffer,
                                          LoweringContext &ctx) {
  auto outType = cast<ShapedType>(op.getOut().getType());
  auto planOf = [&](moe::TileAttr tile) { return groupedPlan(op, tile); };
  std::optional<HopperPlan> plan = planOf(tile);
  if (!plan)
    return std::nullopt;

  HopperOperands v;
  v.lhs = buffer(op.getLhs());
  v.rhs = buffer(op.getRhs());
  v.offsets = buffer(op.getOffsets());
  v.gather = buffer(op.getGatherSlots());
  v.bias = buffer(op.getBias());
  v.rowScale = buffer(op.getRowScale());
  Value out = buffer(op.getOut());
  Value scatter = buffer(op.getScatterSlots());
  if (!scatter) {
    v.out = out;
    return launchBucketed(ctx, op, v, *plan, planOf);
  }
  // Combined in token order: the grouped rows go to a scratch buffer, then
  // unpermute's combine sums each token's k rows with its weights.
  KernelBuilder &h = ctx.host();
  Value groupedRows = ctx.sizes(scatter)[0];
  v.out = ctx.allocTemp(
      MemRefType::get({ShapedType::kDynamic, outType.getDimSize(1)},
                      outType.getElementType()),
      {groupedRows, h.idx(outType.getDimSize(1))});
  if (failed(launchBucketed(ctx, op, v, *plan, planOf)))
    return failure();
  std::optional<LogicalResult> combined =
      emitCombine(ctx, tile, v.out, scatter, v.offsets,
                  buffer(op.getScatterWeights()), out, plan->slotsPerToken,
                  buffer(op.getScatterPositions()));
  if (!combined)
    return op.emitOpError("has no vectorized combine for its output width");
  return *combined;
}

std::optional<LogicalResult> lowerDense(linalg::MatmulOp op,
                                        moe::TileAttr tile, BufferMap buffer,
                                        LoweringContext &ctx) {
  FailureOr<bool> transposed = matmulTransposesB(op);
  if (failed(transposed) || !*transposed)
    return std::nullopt;
  auto lhsType = cast<ShapedType>(op.getInputs()[0].getType());
  auto outType = cast<ShapedType>(op.getResult(0).getType());
  std::optional<HopperPlan> plan = planFor(
      lhsType.getElementType(),
      cast<ShapedType>(op.getInputs()[1].getType()).getElementType(),
      outType.getElementType(), lhsType.getDimSize(1), outType.getDimSize(1),
      /*experts=*/1, tile);
  if (!plan)
    return std::nullopt;
  HopperOperands v;
  v.lhs = buffer(op.getInputs()[0]);
  v.rhs = buffer(op.getInputs()[1]);
  v.out = buffer(op.getResult(0));
  return launchHopperMatmul(ctx, v, *plan, "wgmma");
}

} // namespace

std::optional<LogicalResult>
moec::kernels::lowerMatmulHopper(Operation *op, moe::TileAttr tile,
                                 BufferMap buffer, LoweringContext &ctx) {
  if (!ctx.target().hasWgmma())
    return std::nullopt;
  if (auto grouped = dyn_cast<moe::GroupedMatmulOp>(op))
    return lowerGrouped(grouped, tile, buffer, ctx);
  if (auto dense = dyn_cast<linalg::MatmulOp>(op))
    return lowerDense(dense, tile, buffer, ctx);
  return std::nullopt;
}

bool moec::kernels::hopperMatmulApplies(Operation *op, moe::TileAttr tile) {
  if (auto grouped = dyn_cast<moe::GroupedMatmulOp>(op))
    return groupedPlan(grouped, tile).has_value();
  auto dense = dyn_cast<linalg::MatmulOp>(op);
  if (!dense)
    return false;
  FailureOr<bool> transposed = matmulTransposesB(dense);
  if (failed(transposed) || !*transposed)
    return false;
  auto lhsType = cast<ShapedType>(dense.getInputs()[0].getType());
  auto outType = cast<ShapedType>(dense.getResult(0).getType());
  return planFor(lhsType.getElementType(),
                 cast<ShapedType>(dense.getInputs()[1].getType())
                     .getElementType(),
                 outType.getElementType(), lhsType.getDimSize(1),
                 outType.getDimSize(1), /*experts=*/1, tile)
      .has_value();
}

SmallVector<moe::TileAttr> moec::tuningCandidates(Operation *op,
                                                  StringRef target) {
  auto matmul = dyn_cast<moe::GroupedMatmulOp>(op);
  if (target != "sm_90a" || !matmul)
    return {};
  std::optional<HopperPlan> chosen = groupedPlan(matmul, {});
  if (!chosen)
    return {};
  MLIRContext *context = op->getContext();
  SmallVector<moe::TileAttr> tiles = {tileOf(context, *chosen)};
  auto outType = cast<ShapedType>(matmul.getOut().getType());
  SmallVector<int64_t> widths = {128};
  if (outType.getDimSize(1) >= 256)
    widths.insert(widths.begin(), 256);
  // Warp roles: with and without a producer warpgroup, at n = 256 (the
  // warp-specialized kernel at n = 128 measured slower at every bench
  // shape).
  for (int64_t n : widths)
    for (int64_t producers : {0, 128}) {
      if (producers && n != 256)
        continue;
      int64_t threads = producers ? kSpecializedThreads : kThreads;
      // The deepest pipeline that fits at this width (the plan clamps).
      std::optional<HopperPlan> deepest = groupedPlan(
          matmul, moe::TileAttr::get(context, kBlockM, n, kBlockK, threads,
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
            auto tile = moe::TileAttr::get(context, kBlockM, n, kBlockK,
                                           threads, stages, band, producers,
                                           cluster);
            if (groupedPlan(matmul, tile) && !llvm::is_contained(tiles, tile))
              tiles.push_back(tile);
          }
      }
    }
  return tiles;
}
