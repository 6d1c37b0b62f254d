//===- TileSchedule.cpp - Ragged tile schedule of the sm_90a matmul -------===//
//
// Part of moec. Each block scans the groups' m-tile counts into shared
// memory (no host synchronization, no serial walk over the experts), then
// maps a tile index to its group by binary search and to its rows and
// columns by the banded tile order.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

Value moec::kernels::hopper::rowSplitChunk(KernelBuilder &b, Value rows,
                                           int64_t splits, Value least) {
  Value even = b.ceilDiv(rows, b.idx(splits));
  if (least)
    even = b.select(b.ult(even, least), least, even);
  even = b.mul(b.ceilDiv(even, b.idx(kRowSplitAlign)), b.idx(kRowSplitAlign));
  return b.select(b.ult(even, b.idx(kMinRowSplitRows)),
                  b.idx(kMinRowSplitRows), even);
}

Value moec::kernels::hopper::leastChunkRows(KernelBuilder &b, Value rows,
                                            Value experts) {
  Value average = b.ceilDiv(rows, experts);
  return b.add(average, b.ceilDiv(average, b.idx(4)));
}

// Rows [start, end) of group g: experts, then the tail up to `rows`.
std::pair<Value, Value> TileSchedule::groupBounds(Value g) {
  KernelBuilder &b = env.b;
  Value rows = env.args.rows;
  // A dense Aᵀ·B's chunks, computed here (no offsets); the tail (g = S)
  // starts at `rows`.
  if (env.plan.rowSplits > 1 && !env.args.offsets) {
    Value chunk = rowSplitChunk(b, rows, env.plan.rowSplits);
    Value start = b.minIdx(rows, b.mul(g, chunk));
    return {start, b.minIdx(rows, b.add(start, chunk))};
  }
  if (!env.args.offsets) // dense: all rows, then an empty tail
    return {b.select(b.eq(g, b.idx(0)), b.idx(0), rows), rows};
  // A grouped weight gradient split S ways: group g is chunk g % S of
  // expert g / S's rows (the tail g = E * S: the rows past the experts').
  const int64_t S = env.plan.rowSplits, E = env.plan.experts / S;
  Value e = S > 1 ? b.div(g, b.idx(S)) : g;
  Value start = groupStart(b, env.args.offsets, e);
  Value end = b.ifElse(
      b.eq(e, b.idx(E)), b.getIndexType(),
      [&] { return rows; },
      [&] { return b.loadIdx(env.args.offsets, {e}); });
  end = b.select(b.ult(start, end), end, start);
  if (S == 1)
    return {start, end};
  Value chunk = rowSplitChunk(b, b.sub(end, start), S,
                              leastChunkRows(b, rows, b.idx(E)));
  Value from =
      b.minIdx(end, b.add(start, b.mul(b.rem(g, b.idx(S)), chunk)));
  return {from, b.minIdx(end, b.add(from, chunk))};
}

// The groups this thread handles in the scan: thread, thread + threads, ...
void TileSchedule::forOwnGroups(const std::function<void(Value)> &body) {
  KernelBuilder &b = env.b;
  const int64_t G = env.plan.groups(), threads = env.plan.threads();
  int64_t perThread = (G + threads - 1) / threads;
  for (int64_t q = 0; q < perThread; ++q) {
    Value g = b.add(env.thread, b.idx(q * threads));
    b.ifThen(b.ult(g, b.idx(G)), [&] { body(g); });
  }
}

// m-tiles per group, then an inclusive Hillis-Steele scan across the
// block, ping-ponging between the two tables.
void TileSchedule::scan() {
  KernelBuilder &b = env.b;
  const int64_t G = env.plan.groups(), C = env.plan.cluster;
  const bool chunks = env.plan.weightGrad() && env.plan.rowSplits > 1;
  forOwnGroups([&](Value g) {
    auto [start, end] = groupBounds(g);
    // m-tiles, in units of C (a cluster's blocks share a unit); a split
    // weight gradient's chunk: 1 with rows, else 0 (no tiles: a block
    // would otherwise take such empty tiles where others take full ones;
    // the tail, g = E * S, has no partial sums to write).
    Value units = chunks ? b.select(b.land(b.ult(start, end),
                                           b.ult(g, b.idx(env.plan.experts))),
                                    b.idx(1), b.idx(0))
                         : b.ceilDiv(b.ceilDiv(b.sub(end, start),
                                               b.idx(kBlockM)),
                                     b.idx(C));
    b.storeI32(units, env.tables[0], {g});
    // The tiles read their group's rows from here, not from global memory.
    b.storeI32(start, env.groupStarts, {g});
    b.ifThen(b.eq(g, b.idx(G - 1)),
             [&] { b.storeI32(end, env.groupStarts, {b.idx(G)}); });
  });
  gpu::BarrierOp::create(b);
  nTiles = b.ceilDiv(env.outWidth, b.idx(env.plan.outTileN()));
  if (env.plan.weightGrad()) {
    // Every expert (or chunk with rows) has the same tiles: K tiles times
    // n-tiles. The FP8 weight gradient scans its groups' 128-row blocks
    // (their m-tiles: kBlockM is the scale block) for where each expert's
    // blocks start in the padded operands.
    kTiles = b.idx((env.plan.k + kBlockM - 1) / kBlockM);
    tilesTotal = b.mul(b.idx(env.plan.experts), b.mul(kTiles, nTiles));
    if (!chunks && !env.plan.fp8WeightGrad())
      return;
  }
  int current = 0;
  for (int64_t d = 1; d < G; d *= 2) {
    Value src = env.tables[current], dst = env.tables[1 - current];
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
  tileEnds = env.tables[current];
  if (env.plan.fp8WeightGrad())
    return;
  if (chunks) {
    tilesTotal = b.mul(b.loadIdx(tileEnds, {b.idx(G - 1)}),
                       b.mul(kTiles, nTiles));
    if (env.args.offsets && G <= kMaxSortedChunks)
      sortChunks(env.tables[1 - current]);
    return;
  }

  // Tiles of the schedule: (group, m-unit, n-tile); an m-unit is C m-tiles,
  // one per block of a cluster.
  mUnitsTotal = b.loadIdx(tileEnds, {b.idx(G - 1)});
  tilesTotal = b.mul(mUnitsTotal, nTiles);
}

// First row and rows of group g from the scan's table (its end is the next
// group's start: an expert's chunks are contiguous, the tail follows).
static std::pair<Value, Value> groupRows(KernelBuilder &b, Value groupStarts,
                                         Value g) {
  Value start = b.loadIdx(groupStarts, {g});
  Value end = b.loadIdx(groupStarts, {b.add(g, b.idx(1))});
  return {start, b.select(b.ult(start, end), b.sub(end, start), b.idx(0))};
}

// The chunks with rows by decreasing rows (ties by index) into `order`:
// chunk g's place is the number of chunks ahead of it, counted over all
// E * S of them (G <= kMaxSortedChunks keeps that loop short).
void TileSchedule::sortChunks(Value order) {
  KernelBuilder &b = env.b;
  const int64_t chunksTotal = env.plan.experts; // E * S, without the tail
  forOwnGroups([&](Value g) {
    b.ifThen(b.ult(g, b.idx(chunksTotal)), [&] {
      Value rows = groupRows(b, env.groupStarts, g).second;
      auto loop = scf::ForOp::create(b, b.idx(0), b.idx(chunksTotal),
                                     b.idx(1), ValueRange{b.idx(0)});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value h = loop.getInductionVar();
        Value other = groupRows(b, env.groupStarts, h).second;
        Value ahead = b.select(
            b.eq(other, rows), b.ult(h, g), b.ult(rows, other));
        Value count = b.add(loop.getRegionIterArgs()[0],
                            b.select(ahead, b.idx(1), b.idx(0)));
        scf::YieldOp::create(b, count);
      }
      b.ifThen(b.ult(b.idx(0), rows),
               [&] { b.storeI32(g, order, {loop.getResult(0)}); });
    });
  });
  gpu::BarrierOp::create(b);
  chunkOrder = order;
}

void TileSchedule::placeGrid() {
  KernelBuilder &b = env.b;
  gridSize = gpu::GridDimOp::create(b, gpu::Dimension::x);
  tileStride = b.div(gridSize, b.idx(env.plan.cluster));
  loopEnd = tilesTotal;
  const int64_t run = env.plan.loraRunTiles;
  if (run == 1 || env.plan.weightGrad())
    return;
  // LoRA runs: the runs of whole rounds (every block one run), then the
  // tiles of the runs left over one by one, so that the tail costs what it
  // costs single tiles (with runs there too, at Qwen3.5 gate_up 4.2
  // rounds of 4-tile runs would take 20 tile slots for 17 rounds' tiles).
  Value J = b.idx(run);
  tilesTotal = b.mul(mUnitsTotal, b.ceilDiv(nTiles, J));
  fullRounds = b.div(tilesTotal, tileStride);
  runTiles = b.mul(b.mul(fullRounds, tileStride), J);
  loopEnd = b.mul(tilesTotal, J);
}

// The weight gradient's tile `tile`: expert by expert, and inside an
// expert in bands of bandM K tiles, a band n-tile by n-tile with the K
// tiles fastest. The blocks running together then read a few lhs and
// output-gradient column blocks over the same rows at about the same time
// (L2 hits), where with n-tiles fastest each block read its own
// output-gradient columns (Mixtral dW of gate_up: 0.57x torch). A tile
// sums over all the expert's rows (split: over one chunk of them).
TileState TileSchedule::locateWeightGrad(Value tile) {
  KernelBuilder &b = env.b;
  TileState t;
  Value perExpert = b.mul(kTiles, nTiles);
  if (chunkOrder) {
    // Sorted chunks, largest first. Where they take one round and part of
    // a second, the blocks of the second round (block < rem) take the
    // smallest tiles of the first, and the other blocks the largest: the
    // pairs even out (a greedy longest-first schedule, without a queue).
    Value stride = tileStride;
    Value rem = b.sub(tilesTotal, stride);
    Value paired = b.land(b.ult(stride, tilesTotal),
                          b.land(b.ult(rem, stride), b.ult(tile, stride)));
    Value last = b.sub(stride, b.idx(1));
    Value first = b.select(b.ult(tile, rem), b.sub(last, tile),
                           b.sub(tile, rem));
    tile = b.select(paired, first, tile);
  }
  t.group = b.div(tile, perExpert);
  // Split: the tiles of the chunks with rows only, by decreasing rows
  // (sortChunks) or in group order.
  if (chunkOrder)
    t.group = b.loadIdx(chunkOrder, {t.group});
  else if (env.plan.rowSplits > 1)
    t.group = firstGreater(b, tileEnds, env.plan.groups(), t.group);
  Value local = b.rem(tile, perExpert);
  Value bandM = b.idx(env.plan.bandM);
  Value bandTiles = b.mul(bandM, nTiles);
  Value band = b.div(local, bandTiles), inBand = b.rem(local, bandTiles);
  Value bandHeight = b.minIdx(bandM, b.sub(kTiles, b.mul(band, bandM)));
  Value kTile = b.add(b.mul(band, bandM), b.rem(inBand, bandHeight));
  t.rowStart = b.mul(kTile, b.idx(kBlockM));
  t.rowCount = b.minIdx(b.sub(b.idx(env.plan.k), t.rowStart), b.idx(kBlockM));
  t.colStart = b.mul(b.div(inBand, bandHeight), b.idx(env.plan.outTileN()));
  std::tie(t.reduceStart, t.reduceRows) =
      groupRows(b, env.groupStarts, t.group);
  // FP8: the expert's columns in the padded operands start at 128 times
  // the blocks before it (moe.quantize {transpose}).
  if (env.plan.fp8WeightGrad())
    t.reduceStart = b.mul(
        b.ifElse(
            b.eq(t.group, b.idx(0)), b.getIndexType(),
            [&] { return b.idx(0); },
            [&] { return b.loadIdx(tileEnds, {b.sub(t.group, b.idx(1))}); }),
        b.idx(kFp8ScaleBlock));
  return t;
}

TileState TileSchedule::locate(Value tile) {
  KernelBuilder &b = env.b;
  if (env.plan.weightGrad())
    return locateWeightGrad(tile);
  if (env.plan.loraRunTiles > 1)
    return locateRun(tile);
  Value nTile;
  TileState t = locateUnit(tile, nTiles, nTile);
  t.colStart = b.mul(nTile, b.idx(env.plan.outTileN()));
  return t;
}

// LoRA runs: below runTiles, the block's tiles block + i * stride are, for
// i = q * run + j, tile j of run q * stride + block: `run` n-tiles of one
// m-tile in a row, of which only the first computes U. The blocks running
// together take consecutive runs (the banded order, with runs as its
// columns), so they still share B tiles as single tiles do. Past
// runTiles, tile runTiles + i is tile i % run of the i / run-th run left.
TileState TileSchedule::locateRun(Value tile) {
  KernelBuilder &b = env.b;
  Value run = b.idx(env.plan.loraRunTiles);
  Value inRuns = b.ult(tile, runTiles);
  Value round = b.div(tile, tileStride);
  Value runUnit = b.add(b.mul(b.div(round, run), tileStride),
                        b.rem(tile, tileStride));
  Value left = b.sub(b.select(inRuns, runTiles, tile), runTiles);
  Value leftUnit = b.add(b.mul(fullRounds, tileStride), b.div(left, run));
  Value unit = b.select(inRuns, runUnit, leftUnit);
  Value j = b.select(inRuns, b.rem(round, run), b.rem(left, run));
  Value inRange = b.ult(unit, tilesTotal);
  Value runIndex;
  TileState t = locateUnit(b.select(inRange, unit, b.idx(0)),
                           b.ceilDiv(nTiles, run), runIndex);
  Value nTile = b.add(b.mul(runIndex, run), j);
  // Past the last run (or the last n-tile): a tile with no rows.
  Value valid = b.land(inRange, b.ult(nTile, nTiles));
  t.group = b.select(valid, t.group, b.idx(env.plan.experts));
  t.rowStart = b.select(valid, t.rowStart, b.idx(0));
  t.rowCount = b.select(valid, t.rowCount, b.idx(0));
  t.colStart = b.mul(nTile, b.idx(env.plan.outTileN()));
  // Every tile left over computes its own U.
  t.computesU = b.eq(b.select(inRuns, j, b.idx(0)), b.idx(0));
  return t;
}

TileState TileSchedule::locateUnit(Value unit, Value columns, Value &column) {
  KernelBuilder &b = env.b;
  const int64_t G = env.plan.groups(), C = env.plan.cluster;
  TileState t;
  // Group g owns tiles [before, end) * columns (its m-tiles times the
  // columns).
  t.group = firstGreater(b, tileEnds, G, b.div(unit, columns));
  Value g = t.group;
  Value tilesBefore = b.ifElse(
      b.eq(g, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
      [&] { return b.loadIdx(tileEnds, {b.sub(g, b.idx(1))}); });
  Value mTiles = b.sub(b.loadIdx(tileEnds, {g}), tilesBefore);
  // Inside the group, bands of bandM m-tiles: a band's tiles go column
  // by column (n-tile, or LoRA run) with the m-tiles fastest, so the blocks running together
  // share B tiles and the band's A rows stay in L2 over the n sweep (in
  // m-tile order, a large expert would stream all its weights once per
  // m-tile).
  // (mTiles and the band count m-units of C m-tiles.)
  Value local = b.sub(unit, b.mul(tilesBefore, columns));
  const int64_t bandM = std::max<int64_t>(1, env.plan.bandM / C);
  Value bandTiles = b.mul(b.idx(bandM), columns);
  Value band = b.div(local, bandTiles), inBand = b.rem(local, bandTiles);
  Value bandHeight =
      b.minIdx(b.idx(bandM), b.sub(mTiles, b.mul(band, b.idx(bandM))));
  Value nTile = b.div(inBand, bandHeight);
  Value mUnit = b.add(b.mul(band, b.idx(bandM)), b.rem(inBand, bandHeight));
  Value mLocal =
      C > 1 ? b.add(b.mul(mUnit, b.idx(C)), cluster.rank) : mUnit;
  Value groupBegin = b.loadIdx(env.groupStarts, {g});
  Value groupEnd = b.loadIdx(env.groupStarts, {b.add(g, b.idx(1))});
  groupEnd = b.select(b.ult(groupBegin, groupEnd), groupEnd, groupBegin);
  t.rowStart = b.add(groupBegin, b.mul(mLocal, b.idx(kBlockM)));
  t.rowCount = b.minIdx(b.sub(groupEnd, t.rowStart), b.idx(kBlockM));
  // The last unit of a group may leave a block of the cluster without
  // rows: it still loads and multicasts its half of the weights for its
  // partner, and stores nothing.
  if (C > 1)
    t.rowCount = b.select(b.ult(t.rowStart, groupEnd), t.rowCount, b.idx(0));
  column = nTile;
  return t;
}

TileState TileSchedule::none() {
  KernelBuilder &b = env.b;
  TileState t{
      b.idx(env.plan.experts), b.idx(0), b.idx(0), b.idx(0), {}, {}, {}};
  if (env.plan.weightGrad())
    t.reduceStart = t.reduceRows = b.idx(0);
  return t;
}
