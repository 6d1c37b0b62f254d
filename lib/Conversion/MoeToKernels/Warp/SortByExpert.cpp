//===- SortByExpert.cpp - sort_by_expert as a warp counting sort ----------===//
//
// Part of moec. A stable counting sort in three kernels (the scalar kernel
// walks all slots once per expert):
//   1. `rank`: blocks of 16 warps own chunks of 2048 slots. A warp ranks 32
//      slots per round by comparing each lane's expert with every lane's
//      (32 index shuffles), and keeps its per-expert running counts packed
//      as bytes in registers: lane l counts experts l, l+32, ... Per-warp
//      counts become per-chunk counts and prefixes after a barrier.
//   2. `scan`: one block; per expert the prefix over the chunks, then the
//      (padded) group offsets by a block-wide scan.
//   3. `place`: per slot its row (group start + chunk prefix + rank), per
//      row its expert id and the -1 of padding; with `positions`, each
//      slot's row in slot order as well.
//
// Needs warp shuffles and block barriers (the host runs the scalar kernel:
// KernelsToHost rejects barriers), at most 512 experts and a static k.
//
//===----------------------------------------------------------------------===//

#include "WarpKernels.h"
#include "WarpOps.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::warp;

namespace {

/// Rounds of 32 slots per warp, warps per block, and so the
/// slots of one block's chunk. A warp counts at most 128 slots per expert,
/// which fits the byte-packed counters.
constexpr int64_t kRounds = 4;
constexpr int64_t kSortWarps = 16;
constexpr int64_t kChunk = kRounds * kSortWarps * kWarp;
/// Threads of the one `scan` block.
constexpr int64_t kScanThreads = 1024;

Value load(KernelBuilder &b, Value buf, Value at) {
  return memref::LoadOp::create(b, buf, ValueRange{at});
}

void store(KernelBuilder &b, Value v, Value buf, Value at) {
  memref::StoreOp::create(b, v, buf, ValueRange{at});
}

/// One of a warp's slots in `rank`: its expert, whether it is counted, and
/// its rank among the warp's earlier slots of that expert.
struct RankedSlot {
  Value slot, expert, valid, rank;
};

/// A warp of `rank`: where its slots start, its lane, and the per-expert
/// running counts it keeps packed as bytes (lane l counts experts l, l+32,
/// ...; 4 byte counters per i32).
struct RankWarp {
  Value warpRow, firstSlot, laneIdx, lane;
  SmallVector<Value> counters;
};

/// A thread of `scan`: an expert (column) and its run [begin, end) of the
/// chunks.
struct ScanThread {
  Value thread, e, segment, live, column, begin, end;
};

/// What the three kernels of one sort_by_expert share: the static shape,
/// the buffers, and the layout of the scratch buffer.
struct SortByExpert {
  int64_t experts, k, align;
  int64_t expertsPadded, segments, perLane, words;
  Value ids, sorted, slots, offsets, scratch;
  Value numSlots, capacity, chunks;
  /// Offsets of the scratch buffer's parts (see `plan`).
  Value warpAt, chunkAt, segmentAt, warpSumAt, startAt, totalAt;

  static SortByExpert plan(moe::SortByExpertOp op, BufferMap buffer,
                           LoweringContext &ctx);

  /// at + row * E + column.
  Value cell(KernelBuilder &b, Value at, Value row, Value column) const {
    return b.add(at, b.add(b.mul(row, b.idx(experts)), column));
  }
  std::pair<Value, Value> expertOf(KernelBuilder &b, Value idsArg, Value s,
                                   Value n) const;

  LogicalResult emitRankKernel(LoweringContext &ctx) const;
  RankedSlot rankSlot(KernelBuilder &b, Value idsArg, Value n, int64_t round,
                      RankWarp &w) const;
  void storeWarpCounts(KernelBuilder &b, Value buf, Value warpCounts,
                       const RankWarp &w) const;
  void storeChunkPrefixes(KernelBuilder &b, Value buf, Value warpCounts,
                          Value chunkCounts, Value block, Value thread) const;

  LogicalResult emitScanKernel(LoweringContext &ctx) const;
  Value walkChunks(KernelBuilder &b, Value buf, Value chunkCounts,
                   const ScanThread &st, Value running, bool prefix) const;
  void emitGroupOffsets(KernelBuilder &b, ValueRange a, const ScanThread &st,
                        Value total) const;

  LogicalResult emitPlaceKernel(LoweringContext &ctx, Value positions) const;
};

SortByExpert SortByExpert::plan(moe::SortByExpertOp op, BufferMap buffer,
                                LoweringContext &ctx) {
  SortByExpert s;
  s.experts = op.getNumExperts();
  s.align = op.getAlign().value_or(1);
  s.ids = buffer(op.getIds());
  s.k = cast<MemRefType>(s.ids.getType()).getDimSize(1);
  s.sorted = buffer(op.getSortedExpertIds());
  s.slots = buffer(op.getSlots());
  s.offsets = buffer(op.getOffsets());
  KernelBuilder &h = ctx.host();
  s.numSlots = h.mul(ctx.sizes(s.ids)[0], h.idx(s.k));
  s.capacity = ctx.sizes(s.slots)[0];
  s.chunks = h.ceilDiv(s.numSlots, h.idx(kChunk));
  Value E = h.idx(s.experts);
  s.expertsPadded = llvm::alignTo(s.experts, kWarp);
  s.segments = kScanThreads / s.expertsPadded; // per expert in `scan`
  // One scratch buffer (not cleared by the runtime: each kernel writes the
  // parts it reads), laid out as:
  //   rank        [slots]              each slot's rank in its chunk
  //   warpCounts  [chunks * warps][E]  per warp its count, then its prefix
  //   chunkCounts [chunks][E]          per chunk its count, then its prefix
  //   segmentSums [segments][Epad]     `scan`'s partial sums
  //   warpSums    [Epad / 32]          `scan`'s per-warp group sizes
  //   starts, totals [E]               per expert its first row, its slots
  s.warpAt = s.numSlots;
  s.chunkAt = h.add(s.warpAt, h.mul(h.mul(s.chunks, h.idx(kSortWarps)), E));
  s.segmentAt = h.add(s.chunkAt, h.mul(s.chunks, E));
  s.warpSumAt = h.add(s.segmentAt, h.idx(kScanThreads));
  s.startAt = h.add(s.warpSumAt, h.idx(s.expertsPadded / kWarp));
  s.totalAt = h.add(s.startAt, E);
  Value scratchSize = h.add(s.totalAt, E);
  s.scratch = ctx.allocTemp(
      MemRefType::get({ShapedType::kDynamic}, h.getI32Type()), {scratchSize});
  s.perLane = llvm::divideCeil(s.experts, kWarp);
  s.words = llvm::divideCeil(s.perLane, 4); // 4 byte counters per i32
  return s;
}

/// The expert of slot s as i32, and whether it is a real slot with an id
/// in [0, E) (others are left out: out-of-range ids are undefined
/// behaviour, but never an out-of-bounds store).
std::pair<Value, Value> SortByExpert::expertOf(KernelBuilder &b, Value idsArg,
                                               Value s, Value n) const {
  Value in = b.ult(s, n);
  // Slots past the last read nothing: with no slots at all (T = 0 under an
  // aligned sort, whose place kernel still covers the padding rows) there
  // is no id to clamp to.
  Value e = b.ifElse(
      in, b.getI32Type(),
      [&] {
        return memref::LoadOp::create(
            b, idsArg, ValueRange{b.div(s, b.idx(k)), b.rem(s, b.idx(k))});
      },
      [&] { return b.i32(-1); });
  Value valid = b.land(
      in,
      b.land(arith::CmpIOp::create(b, arith::CmpIPredicate::sge, e, b.i32(0)),
             slt(b, e, b.i32(experts))));
  return std::make_pair(e, valid);
}

//===----------------------------------------------------------------------===//
// 1. `rank`: ranks within each chunk
//===----------------------------------------------------------------------===//

LogicalResult SortByExpert::emitRankKernel(LoweringContext &ctx) const {
  moe::TileAttr sortBlock =
      moe::TileAttr::get(ctx.host().getContext(), 1, 1, 1, kSortWarps * kWarp);
  return ctx.launch(
      "rank", chunks, sortBlock, {ids, scratch, numSlots, warpAt, chunkAt},
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value n = a[2], warpCounts = a[3], chunkCounts = a[4];
        RankWarp w;
        Value warp = b.div(thread, b.idx(kWarp));
        w.laneIdx = b.rem(thread, b.idx(kWarp));
        w.lane = toI32(b, w.laneIdx);
        w.warpRow = b.add(b.mul(block, b.idx(kSortWarps)), warp);
        w.firstSlot = b.mul(w.warpRow, b.idx(kRounds * kWarp));
        w.counters.assign(words, b.i32(0));
        SmallVector<RankedSlot> rounds;
        for (int64_t r = 0; r < kRounds; ++r)
          rounds.push_back(rankSlot(b, a[0], n, r, w));
        storeWarpCounts(b, a[1], warpCounts, w);
        gpu::BarrierOp::create(b);
        storeChunkPrefixes(b, a[1], warpCounts, chunkCounts, block, thread);
        gpu::BarrierOp::create(b);
        for (const RankedSlot &r : rounds)
          b.ifThen(r.valid, [&] {
            Value prefix = load(
                b, a[1], cell(b, warpCounts, w.warpRow, toIndex(b, r.expert)));
            store(b, b.add(r.rank, prefix), a[1], r.slot);
          });
      });
}

/// Round `round` of warp `w`: ranks the lane's slot among the warp's slots
/// of its expert, and counts the round's slots into `w.counters`.
RankedSlot SortByExpert::rankSlot(KernelBuilder &b, Value idsArg, Value n,
                                  int64_t round, RankWarp &w) const {
  Value s = b.add(w.firstSlot, b.add(b.idx(round * kWarp), w.laneIdx));
  auto [e, valid] = expertOf(b, idsArg, s, n);
  Value key = b.select(valid, e, b.i32(-1));
  // Count of this expert in the warp's earlier rounds, from the
  // lane that owns its counter.
  Value owner = band(b, key, kWarp - 1);
  Value column = shr(b, key, b.i32(5));
  Value word = b.i32(0);
  for (int64_t i = 0; i < words; ++i)
    word = b.select(b.eq(shr(b, column, b.i32(2)), b.i32(i)),
                    shuffleIdx(b, w.counters[i], owner), word);
  Value shift = b.mul(band(b, column, 3), b.i32(8));
  Value before = band(b, shr(b, word, shift), 255);
  // Compare with every lane: earlier equal lanes add to the
  // rank; each lane counts the experts it owns.
  for (int64_t src = 0; src < kWarp; ++src) {
    Value other = shuffleIdx(b, key, b.i32(src));
    Value same = b.land(b.eq(other, key), slt(b, b.i32(src), w.lane));
    before = b.add(before, arith::ExtUIOp::create(b, b.getI32Type(), same));
    Value owned = b.land(
        b.eq(band(b, other, kWarp - 1), w.lane),
        arith::CmpIOp::create(b, arith::CmpIPredicate::sge, other, b.i32(0)));
    Value otherColumn = shr(b, other, b.i32(5));
    Value one = shl(b, b.i32(1), b.mul(band(b, otherColumn, 3), b.i32(8)));
    Value otherWord = shr(b, otherColumn, b.i32(2));
    for (int64_t i = 0; i < words; ++i)
      w.counters[i] = b.add(
          w.counters[i],
          b.select(b.land(owned, b.eq(otherWord, b.i32(i))), one, b.i32(0)));
  }
  return {s, e, valid, before};
}

/// The warp's counts per expert, unpacked from the lanes' byte counters.
void SortByExpert::storeWarpCounts(KernelBuilder &b, Value buf,
                                   Value warpCounts, const RankWarp &w) const {
  for (int64_t j = 0; j < perLane; ++j) {
    Value e = b.add(b.idx(j * kWarp), w.laneIdx);
    Value count = band(b, shr(b, w.counters[j / 4], b.i32((j % 4) * 8)), 255);
    b.ifThen(b.ult(e, b.idx(experts)),
             [&] { store(b, count, buf, cell(b, warpCounts, w.warpRow, e)); });
  }
}

/// Per expert: warp counts to prefixes within the chunk; the chunk's count.
void SortByExpert::storeChunkPrefixes(KernelBuilder &b, Value buf,
                                      Value warpCounts, Value chunkCounts,
                                      Value block, Value thread) const {
  b.ifThen(b.ult(thread, b.idx(experts)), [&] {
    // Loads in batches of 8, each issued before its sums (and
    // not all at once, to keep the registers low).
    Value row0 = b.mul(block, b.idx(kSortWarps));
    Value running = b.i32(0);
    for (int64_t w0 = 0; w0 < kSortWarps; w0 += 8) {
      SmallVector<Value> at, counts;
      for (int64_t w = w0; w < w0 + 8; ++w) {
        at.push_back(cell(b, warpCounts, b.add(row0, b.idx(w)), thread));
        counts.push_back(load(b, buf, at.back()));
      }
      for (int64_t w = 0; w < 8; ++w) {
        store(b, running, buf, at[w]);
        running = b.add(running, counts[w]);
      }
    }
    store(b, running, buf, cell(b, chunkCounts, block, thread));
  });
}

//===----------------------------------------------------------------------===//
// 2. `scan`: prefixes over the chunks, group offsets
//===----------------------------------------------------------------------===//

/// One block: per expert the prefix over the chunks (each expert's chunks
/// split into `segments` runs, one thread each, so that the chain of loads
/// is short), then the padded group offsets (a scan over the experts).
LogicalResult SortByExpert::emitScanKernel(LoweringContext &ctx) const {
  KernelBuilder &h = ctx.host();
  return ctx.launch(
      "scan", h.idx(1),
      moe::TileAttr::get(h.getContext(), 1, 1, 1, kScanThreads),
      {scratch, offsets, chunks, chunkAt, segmentAt, warpSumAt, startAt,
       totalAt},
      [&](KernelBuilder &b, ValueRange a, Value, Value thread) {
        Value buf = a[0], numChunks = a[2], chunkCounts = a[3];
        Value segmentSums = a[4];
        ScanThread st;
        st.thread = thread;
        st.e = b.rem(thread, b.idx(expertsPadded));
        st.segment = b.div(thread, b.idx(expertsPadded));
        st.live = b.ult(st.e, b.idx(experts));
        st.column = b.minIdx(st.e, b.idx(experts - 1));
        Value length = b.ceilDiv(numChunks, b.idx(segments));
        st.begin = b.minIdx(b.mul(st.segment, length), numChunks);
        st.end = b.minIdx(b.add(st.begin, length), numChunks);
        Value mine =
            walkChunks(b, buf, chunkCounts, st, b.i32(0), /*prefix=*/false);
        store(b, mine, buf, b.add(segmentSums, thread));
        gpu::BarrierOp::create(b);
        Value before = b.i32(0), total = b.i32(0);
        for (int64_t q = 0; q < segments; ++q) {
          Value sum =
              load(b, buf,
                   b.add(segmentSums, b.add(b.idx(q * expertsPadded), st.e)));
          before = b.add(before,
                         b.select(b.ult(b.idx(q), st.segment), sum, b.i32(0)));
          total = b.add(total, sum);
        }
        walkChunks(b, buf, chunkCounts, st, before, /*prefix=*/true);
        emitGroupOffsets(b, a, st, total);
      });
}

/// Sums (and, with `prefix`, rewrites as exclusive prefixes) chunks
/// [begin, end) of the thread's expert, loads issued in batches.
Value SortByExpert::walkChunks(KernelBuilder &b, Value buf, Value chunkCounts,
                               const ScanThread &st, Value running,
                               bool prefix) const {
  constexpr int64_t unroll = 8;
  Value steps = b.ceilDiv(b.sub(st.end, st.begin), b.idx(unroll));
  return b.loop(
      b.idx(0), steps, {running},
      [&](Value step, ValueRange it) -> SmallVector<Value> {
        SmallVector<Value> in, at, counts;
        for (int64_t u = 0; u < unroll; ++u) {
          Value c =
              b.add(st.begin, b.add(b.mul(step, b.idx(unroll)), b.idx(u)));
          in.push_back(b.ult(c, st.end));
          at.push_back(cell(b, chunkCounts,
                            b.minIdx(c, b.sub(st.end, b.idx(1))), st.column));
          counts.push_back(load(b, buf, at.back()));
        }
        Value sum = it[0];
        for (int64_t u = 0; u < unroll; ++u) {
          if (prefix)
            b.ifThen(b.land(st.live, in[u]),
                     [&] { store(b, sum, buf, at[u]); });
          sum = b.add(sum, b.select(in[u], counts[u], b.i32(0)));
        }
        return {sum};
      })[0];
}

/// Group offsets: an inclusive scan of the padded sizes in each warp of the
/// first `Epad` threads, then over those warps; per expert its group's end
/// (in `offsets`), first row and slot count.
void SortByExpert::emitGroupOffsets(KernelBuilder &b, ValueRange a,
                                    const ScanThread &st, Value total) const {
  Value buf = a[0], warpSums = a[5];
  total = b.select(st.live, total, b.i32(0));
  Value padded =
      align > 1 ? b.mul(b.div(b.add(total, b.i32(align - 1)), b.i32(align)),
                        b.i32(align))
                : total;
  Value laneIdx = b.rem(st.thread, b.idx(kWarp));
  Value lane = toI32(b, laneIdx);
  Value groupEnd = padded;
  for (int64_t d = 1; d < kWarp; d *= 2) {
    Value up = shuffle(b, groupEnd, b.i32(d), gpu::ShuffleMode::UP);
    groupEnd = b.add(groupEnd, b.select(slt(b, lane, b.i32(d)), b.i32(0), up));
  }
  Value warp = b.div(st.thread, b.idx(kWarp));
  Value first = b.eq(st.segment, b.idx(0));
  b.ifThen(b.land(first, b.eq(laneIdx, b.idx(kWarp - 1))),
           [&] { store(b, groupEnd, buf, b.add(warpSums, warp)); });
  gpu::BarrierOp::create(b);
  for (int64_t w = 0; w + 1 < expertsPadded / kWarp; ++w) {
    Value sum = load(b, buf, b.add(warpSums, b.idx(w)));
    groupEnd = b.add(groupEnd, b.select(b.ult(b.idx(w), warp), sum, b.i32(0)));
  }
  b.ifThen(b.land(first, st.live), [&] {
    memref::StoreOp::create(b, groupEnd, a[1], {st.e});
    store(b, b.sub(groupEnd, padded), buf, b.add(a[6], st.e));
    store(b, total, buf, b.add(a[7], st.e));
  });
}

//===----------------------------------------------------------------------===//
// 3. `place`: rows of the slots, experts of the rows
//===----------------------------------------------------------------------===//

/// Per slot its row (and with `positions` that row stored in slot order,
/// coalesced); per row its expert id, and -1 for padding rows and rows past
/// the last group.
LogicalResult SortByExpert::emitPlaceKernel(LoweringContext &ctx,
                                            Value positions) const {
  moe::TileAttr placeBlock =
      moe::TileAttr::get(ctx.host().getContext(), 1, 1, 1, 256);
  SmallVector<Value> placeOperands = {ids,      scratch, offsets, sorted, slots,
                                      numSlots, chunkAt, startAt, totalAt};
  if (positions)
    placeOperands.push_back(positions);
  return launchPerItem(
      ctx, "place", capacity, placeBlock, placeOperands,
      [&](KernelBuilder &b, ValueRange a, Value i) {
        Value buf = a[1];
        auto [e, valid] = expertOf(b, a[0], i, a[5]);
        b.ifThen(valid, [&] {
          Value ei = toIndex(b, e);
          Value chunkPrefix =
              load(b, buf, cell(b, a[6], b.div(i, b.idx(kChunk)), ei));
          Value row = b.add(load(b, buf, b.add(a[7], ei)),
                            b.add(chunkPrefix, load(b, buf, i)));
          b.storeI32(i, a[4], {toIndex(b, row)});
          if (positions)
            store(b, row, a[9], i);
        });
        Value expert = toI32(b, firstGreater(b, a[2], experts, i));
        Value past = b.eq(expert, b.i32(experts));
        b.storeI32(toIndex(b, b.select(past, b.i32(-1), expert)), a[3], {i});
        Value at = toIndex(b, b.select(past, b.i32(0), expert));
        Value realEnd =
            b.add(load(b, buf, b.add(a[7], at)), load(b, buf, b.add(a[8], at)));
        Value padding = lor(b, past, b.ule(realEnd, toI32(b, i)));
        b.ifThen(padding, [&] { b.storeI32Const(-1, a[4], {i}); });
      });
}

} // namespace

bool warp::matchSortByExpert(moe::SortByExpertOp op, moe::TileAttr,
                             const TargetInfo &target) {
  int64_t k = cast<ShapedType>(op.getIds().getType()).getDimSize(1);
  return target.hasWarpShuffles() && op.getNumExperts() <= kMaxExperts &&
         !ShapedType::isDynamic(k);
}

LogicalResult warp::emitSortByExpert(moe::SortByExpertOp op, moe::TileAttr,
                                     BufferMap buffer, LoweringContext &ctx) {
  SortByExpert sort = SortByExpert::plan(op, buffer, ctx);
  if (failed(sort.emitRankKernel(ctx)) || failed(sort.emitScanKernel(ctx)))
    return failure();
  return sort.emitPlaceKernel(ctx, buffer(op.getPositions()));
}
