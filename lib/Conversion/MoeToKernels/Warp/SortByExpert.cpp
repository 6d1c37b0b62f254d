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

} // namespace

bool warp::matchSortByExpert(moe::SortByExpertOp op, moe::TileAttr,
                             const TargetInfo &target) {
  int64_t k = cast<ShapedType>(op.getIds().getType()).getDimSize(1);
  return target.hasWarpShuffles() && op.getNumExperts() <= kMaxExperts &&
         !ShapedType::isDynamic(k);
}

LogicalResult warp::emitSortByExpert(moe::SortByExpertOp op, moe::TileAttr,
                                     BufferMap buffer, LoweringContext &ctx) {
  int64_t experts = op.getNumExperts();
  int64_t align = op.getAlign().value_or(1);
  Value ids = buffer(op.getIds());
  int64_t k = cast<MemRefType>(ids.getType()).getDimSize(1);
  Value sorted = buffer(op.getSortedExpertIds());
  Value slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets());
  KernelBuilder &h = ctx.host();
  MLIRContext *mlirCtx = op.getContext();
  Type i32 = h.getI32Type();
  Value numSlots = h.mul(ctx.sizes(ids)[0], h.idx(k));
  Value capacity = ctx.sizes(slots)[0];
  Value chunks = h.ceilDiv(numSlots, h.idx(kChunk));
  Value E = h.idx(experts);
  constexpr int64_t scanThreads = 1024;
  int64_t expertsPadded = llvm::alignTo(experts, kWarp);
  int64_t segments = scanThreads / expertsPadded; // per expert in `scan`
  // One scratch buffer (not cleared by the runtime: each kernel writes the
  // parts it reads), laid out as:
  //   rank        [slots]              each slot's rank in its chunk
  //   warpCounts  [chunks * warps][E]  per warp its count, then its prefix
  //   chunkCounts [chunks][E]          per chunk its count, then its prefix
  //   segmentSums [segments][Epad]     `scan`'s partial sums
  //   warpSums    [Epad / 32]          `scan`'s per-warp group sizes
  //   starts, totals [E]               per expert its first row, its slots
  Value warpAt = numSlots;
  Value chunkAt = h.add(warpAt, h.mul(h.mul(chunks, h.idx(kSortWarps)), E));
  Value segmentAt = h.add(chunkAt, h.mul(chunks, E));
  Value warpSumAt = h.add(segmentAt, h.idx(scanThreads));
  Value startAt = h.add(warpSumAt, h.idx(expertsPadded / kWarp));
  Value totalAt = h.add(startAt, E);
  Value scratchSize = h.add(totalAt, E);
  Value scratch = ctx.allocTemp(MemRefType::get({ShapedType::kDynamic}, i32),
                                {scratchSize});
  auto load = [](KernelBuilder &b, Value buf, Value at) -> Value {
    return memref::LoadOp::create(b, buf, ValueRange{at});
  };
  auto store = [](KernelBuilder &b, Value v, Value buf, Value at) {
    memref::StoreOp::create(b, v, buf, ValueRange{at});
  };
  /// at + row * E + column.
  auto cell = [&](KernelBuilder &b, Value at, Value row, Value column) {
    return b.add(at, b.add(b.mul(row, b.idx(experts)), column));
  };
  int64_t perLane = llvm::divideCeil(experts, kWarp);
  int64_t words = llvm::divideCeil(perLane, 4); // 4 byte counters per i32

  /// The expert of slot s as i32, and whether it is a real slot with an id
  /// in [0, E) (others are left out: out-of-range ids are undefined
  /// behaviour, but never an out-of-bounds store).
  auto expertOf = [&](KernelBuilder &b, Value idsArg, Value s, Value n) {
    Value in = b.ult(s, n);
    Value clamped = b.minIdx(s, b.sub(n, b.idx(1)));
    Value e = memref::LoadOp::create(
        b, idsArg,
        ValueRange{b.div(clamped, b.idx(k)), b.rem(clamped, b.idx(k))});
    Value valid = b.land(
        in,
        b.land(arith::CmpIOp::create(b, arith::CmpIPredicate::sge, e, b.i32(0)),
               slt(b, e, b.i32(experts))));
    return std::make_pair(e, valid);
  };

  // 1. Ranks within each chunk.
  moe::TileAttr sortBlock =
      moe::TileAttr::get(mlirCtx, 1, 1, 1, kSortWarps * kWarp);
  if (failed(ctx.launch(
          "rank", chunks, sortBlock, {ids, scratch, numSlots, warpAt, chunkAt},
          [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
            Value n = a[2], warpCounts = a[3], chunkCounts = a[4];
            Value warp = b.div(thread, b.idx(kWarp));
            Value laneIdx = b.rem(thread, b.idx(kWarp));
            Value lane = toI32(b, laneIdx);
            Value warpRow = b.add(b.mul(block, b.idx(kSortWarps)), warp);
            Value firstSlot = b.mul(warpRow, b.idx(kRounds * kWarp));
            SmallVector<Value> counters(words, b.i32(0));
            struct Round {
              Value slot, expert, valid, rank;
            };
            SmallVector<Round> rounds;
            for (int64_t r = 0; r < kRounds; ++r) {
              Value s = b.add(firstSlot, b.add(b.idx(r * kWarp), laneIdx));
              auto [e, valid] = expertOf(b, a[0], s, n);
              Value key = b.select(valid, e, b.i32(-1));
              // Count of this expert in the warp's earlier rounds, from the
              // lane that owns its counter.
              Value owner = band(b, key, kWarp - 1);
              Value column = shr(b, key, b.i32(5));
              Value word = b.i32(0);
              for (int64_t w = 0; w < words; ++w)
                word = b.select(b.eq(shr(b, column, b.i32(2)), b.i32(w)),
                                shuffleIdx(b, counters[w], owner), word);
              Value shift = b.mul(band(b, column, 3), b.i32(8));
              Value before = band(b, shr(b, word, shift), 255);
              // Compare with every lane: earlier equal lanes add to the
              // rank; each lane counts the experts it owns.
              for (int64_t src = 0; src < kWarp; ++src) {
                Value other = shuffleIdx(b, key, b.i32(src));
                Value same = b.land(b.eq(other, key), slt(b, b.i32(src), lane));
                before = b.add(before, arith::ExtUIOp::create(b, i32, same));
                Value owned =
                    b.land(b.eq(band(b, other, kWarp - 1), lane),
                           arith::CmpIOp::create(b, arith::CmpIPredicate::sge,
                                                 other, b.i32(0)));
                Value otherColumn = shr(b, other, b.i32(5));
                Value one =
                    shl(b, b.i32(1), b.mul(band(b, otherColumn, 3), b.i32(8)));
                Value otherWord = shr(b, otherColumn, b.i32(2));
                for (int64_t w = 0; w < words; ++w)
                  counters[w] =
                      b.add(counters[w],
                            b.select(b.land(owned, b.eq(otherWord, b.i32(w))),
                                     one, b.i32(0)));
              }
              rounds.push_back({s, e, valid, before});
            }
            // The warp's counts per expert.
            for (int64_t j = 0; j < perLane; ++j) {
              Value e = b.add(b.idx(j * kWarp), laneIdx);
              Value count =
                  band(b, shr(b, counters[j / 4], b.i32((j % 4) * 8)), 255);
              b.ifThen(b.ult(e, b.idx(experts)), [&] {
                store(b, count, a[1], cell(b, warpCounts, warpRow, e));
              });
            }
            gpu::BarrierOp::create(b);
            // Per expert: warp counts to prefixes within the chunk; the
            // chunk's count.
            b.ifThen(b.ult(thread, b.idx(experts)), [&] {
              // Loads in batches of 8, each issued before its sums (and
              // not all at once, to keep the registers low).
              Value row0 = b.mul(block, b.idx(kSortWarps));
              Value running = b.i32(0);
              for (int64_t w0 = 0; w0 < kSortWarps; w0 += 8) {
                SmallVector<Value> at, counts;
                for (int64_t w = w0; w < w0 + 8; ++w) {
                  at.push_back(
                      cell(b, warpCounts, b.add(row0, b.idx(w)), thread));
                  counts.push_back(load(b, a[1], at.back()));
                }
                for (int64_t w = 0; w < 8; ++w) {
                  store(b, running, a[1], at[w]);
                  running = b.add(running, counts[w]);
                }
              }
              store(b, running, a[1], cell(b, chunkCounts, block, thread));
            });
            gpu::BarrierOp::create(b);
            for (const Round &r : rounds)
              b.ifThen(r.valid, [&] {
                Value prefix =
                    load(b, a[1],
                         cell(b, warpCounts, warpRow, toIndex(b, r.expert)));
                store(b, b.add(r.rank, prefix), a[1], r.slot);
              });
          })))
    return failure();

  // 2. One block: per expert the prefix over the chunks (each expert's
  //    chunks split into `segments` runs, one thread each, so that the
  //    chain of loads is short), then the padded group offsets (a scan over
  //    the experts).
  if (failed(ctx.launch(
          "scan", h.idx(1), moe::TileAttr::get(mlirCtx, 1, 1, 1, scanThreads),
          {scratch, offsets, chunks, chunkAt, segmentAt, warpSumAt, startAt,
           totalAt},
          [&](KernelBuilder &b, ValueRange a, Value, Value thread) {
            Value buf = a[0], numChunks = a[2], chunkCounts = a[3];
            Value segmentSums = a[4], warpSums = a[5];
            Value e = b.rem(thread, b.idx(expertsPadded));
            Value segment = b.div(thread, b.idx(expertsPadded));
            Value live = b.ult(e, b.idx(experts));
            Value column = b.minIdx(e, b.idx(experts - 1));
            Value length = b.ceilDiv(numChunks, b.idx(segments));
            Value begin = b.minIdx(b.mul(segment, length), numChunks);
            Value end = b.minIdx(b.add(begin, length), numChunks);
            // Sums (and, with `prefix`, rewrites as exclusive prefixes)
            // chunks [begin, end) of the expert, loads issued in batches.
            constexpr int64_t unroll = 8;
            auto walk = [&](Value running, bool prefix) {
              Value steps = b.ceilDiv(b.sub(end, begin), b.idx(unroll));
              return b.loop(
                  b.idx(0), steps, {running},
                  [&](Value step, ValueRange it) -> SmallVector<Value> {
                    SmallVector<Value> in, at, counts;
                    for (int64_t u = 0; u < unroll; ++u) {
                      Value c = b.add(
                          begin, b.add(b.mul(step, b.idx(unroll)), b.idx(u)));
                      in.push_back(b.ult(c, end));
                      at.push_back(cell(b, chunkCounts,
                                        b.minIdx(c, b.sub(end, b.idx(1))),
                                        column));
                      counts.push_back(load(b, buf, at.back()));
                    }
                    Value sum = it[0];
                    for (int64_t u = 0; u < unroll; ++u) {
                      if (prefix)
                        b.ifThen(b.land(live, in[u]),
                                 [&] { store(b, sum, buf, at[u]); });
                      sum = b.add(sum, b.select(in[u], counts[u], b.i32(0)));
                    }
                    return {sum};
                  })[0];
            };
            Value mine = walk(b.i32(0), /*prefix=*/false);
            store(b, mine, buf, b.add(segmentSums, thread));
            gpu::BarrierOp::create(b);
            Value before = b.i32(0), total = b.i32(0);
            for (int64_t q = 0; q < segments; ++q) {
              Value sum =
                  load(b, buf,
                       b.add(segmentSums, b.add(b.idx(q * expertsPadded), e)));
              before = b.add(before,
                             b.select(b.ult(b.idx(q), segment), sum, b.i32(0)));
              total = b.add(total, sum);
            }
            walk(before, /*prefix=*/true);

            // Group offsets: an inclusive scan of the padded sizes in each
            // warp of the first `Epad` threads, then over those warps.
            total = b.select(live, total, b.i32(0));
            Value padded =
                align > 1
                    ? b.mul(b.div(b.add(total, b.i32(align - 1)), b.i32(align)),
                            b.i32(align))
                    : total;
            Value laneIdx = b.rem(thread, b.idx(kWarp));
            Value lane = toI32(b, laneIdx);
            Value groupEnd = padded;
            for (int64_t d = 1; d < kWarp; d *= 2) {
              Value up = shuffle(b, groupEnd, b.i32(d), gpu::ShuffleMode::UP);
              groupEnd = b.add(groupEnd,
                               b.select(slt(b, lane, b.i32(d)), b.i32(0), up));
            }
            Value warp = b.div(thread, b.idx(kWarp));
            Value first = b.eq(segment, b.idx(0));
            b.ifThen(b.land(first, b.eq(laneIdx, b.idx(kWarp - 1))),
                     [&] { store(b, groupEnd, buf, b.add(warpSums, warp)); });
            gpu::BarrierOp::create(b);
            for (int64_t w = 0; w + 1 < expertsPadded / kWarp; ++w) {
              Value sum = load(b, buf, b.add(warpSums, b.idx(w)));
              groupEnd = b.add(groupEnd,
                               b.select(b.ult(b.idx(w), warp), sum, b.i32(0)));
            }
            b.ifThen(b.land(first, live), [&] {
              memref::StoreOp::create(b, groupEnd, a[1], {e});
              store(b, b.sub(groupEnd, padded), buf, b.add(a[6], e));
              store(b, total, buf, b.add(a[7], e));
            });
          })))
    return failure();

  // 3. Per slot its row (and with `positions` that row stored in slot
  //    order, coalesced); per row its expert id, and -1 for padding rows and
  //    rows past the last group.
  moe::TileAttr placeBlock = moe::TileAttr::get(mlirCtx, 1, 1, 1, 256);
  Value positions = buffer(op.getPositions());
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
