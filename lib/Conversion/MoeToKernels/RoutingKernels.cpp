//===- RoutingKernels.cpp - Warp-level routing kernels (NVVM, ROCDL) ------===//
//
// Part of moec. Routing moves few bytes (the logits and a few words per
// token) so its cost is latency: the number of launches and the length of
// each thread's dependent chain. The scalar kernels of Kernels.cpp loop over
// all experts per token and over all slots per expert; these use warps:
//
// * router_topk: one warp per token. Lane l holds experts [l*V, (l+1)*V)
//   (V = E/32) in registers; softmax sums and each of the k arg-max rounds
//   are xor-shuffle reductions, and DeepSeek-style group scores are merged
//   over the lanes of a group.
// * sort_by_expert: a stable counting sort in three kernels.
//   1. `rank`: blocks of 32 warps own chunks of 4096 slots. A warp ranks 32
//      slots per round by comparing each lane's expert with every lane's
//      (32 index shuffles), and keeps its per-expert running counts packed
//      as bytes in registers: lane l counts experts l, l+32, ... Per-warp
//      counts become per-block counts and prefixes after a barrier.
//   2. `scan`: one block; per expert the prefix over the chunks, then the
//      (padded) group offsets by a block-wide scan.
//   3. `place`: per slot its row (group start + chunk prefix + rank), per
//      row its expert id and the -1 of padding.
//
// Both need warp shuffles and, for the sort, block barriers: the host runs
// the scalar kernels instead (KernelsToHost rejects both). Each generator
// returns std::nullopt where the shapes do not fit (E not a multiple of 32,
// E > 512, k > 32, groups that do not align with lanes).
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

using Lowered = std::optional<LogicalResult>;

constexpr int64_t kWarp = 32;
/// Largest expert count of the warp kernels: 16 per lane.
constexpr int64_t kMaxExperts = 16 * kWarp;
/// sort_by_expert: rounds of 32 slots per warp, warps per block, and so the
/// slots of one block's chunk. A warp counts at most 128 slots per expert,
/// which fits the byte-packed counters.
constexpr int64_t kRounds = 4;
constexpr int64_t kSortWarps = 16;
constexpr int64_t kChunk = kRounds * kSortWarps * kWarp;

Value shuffle(KernelBuilder &b, Value value, Value laneOrOffset,
              gpu::ShuffleMode mode) {
  return gpu::ShuffleOp::create(b, value, laneOrOffset, b.i32(kWarp),
                                gpu::ShuffleModeAttr::get(b.getContext(), mode))
      .getShuffleResult();
}
Value shuffleXor(KernelBuilder &b, Value value, int64_t mask) {
  return shuffle(b, value, b.i32(mask), gpu::ShuffleMode::XOR);
}
Value shuffleIdx(KernelBuilder &b, Value value, Value lane) {
  return shuffle(b, value, lane, gpu::ShuffleMode::IDX);
}

Value toI32(KernelBuilder &b, Value index) {
  return arith::IndexCastOp::create(b, b.getI32Type(), index);
}
Value toIndex(KernelBuilder &b, Value i32) {
  return arith::IndexCastOp::create(b, b.getIndexType(), i32);
}
Value lor(KernelBuilder &b, Value x, Value y) {
  return arith::OrIOp::create(b, x, y);
}
Value slt(KernelBuilder &b, Value x, Value y) {
  return arith::CmpIOp::create(b, arith::CmpIPredicate::slt, x, y);
}
Value feq(KernelBuilder &b, Value x, Value y) {
  return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, x, y);
}
Value shl(KernelBuilder &b, Value x, Value y) {
  return arith::ShLIOp::create(b, x, y);
}
Value shr(KernelBuilder &b, Value x, Value y) {
  return arith::ShRUIOp::create(b, x, y);
}
Value band(KernelBuilder &b, Value x, int64_t mask) {
  return arith::AndIOp::create(b, x, b.i32(mask));
}

/// Sum (or max) of a f32 over the 32 lanes of a warp, in every lane.
Value warpReduce(KernelBuilder &b, Value v, bool max) {
  for (int64_t mask = kWarp / 2; mask > 0; mask /= 2) {
    Value other = shuffleXor(b, v, mask);
    v = max ? b.fmax(v, other) : b.fadd(v, other);
  }
  return v;
}

//===----------------------------------------------------------------------===//
// router_topk
//===----------------------------------------------------------------------===//

/// One candidate of an arg-max: the selection value, the weight it carries
/// and the expert id (i32; `none` when there is no candidate).
struct Candidate {
  Value value, weight, id;
};

/// Whether `x` beats `y`: a candidate beats none; a higher value wins and
/// ties go to the lower expert id, as in the scalar kernel's ascending scan.
Value beats(KernelBuilder &b, const Candidate &x, const Candidate &y,
            Value none) {
  Value xSome = arith::CmpIOp::create(b, arith::CmpIPredicate::ne, x.id, none);
  Value tie = b.land(feq(b, x.value, y.value), slt(b, x.id, y.id));
  Value wins = lor(b, b.eq(y.id, none), lor(b, b.fgt(x.value, y.value), tie));
  return b.land(xSome, wins);
}

Candidate pick(KernelBuilder &b, Value cond, const Candidate &x,
               const Candidate &y) {
  return {b.select(cond, x.value, y.value), b.select(cond, x.weight, y.weight),
          b.select(cond, x.id, y.id)};
}

Lowered lowerRouterTopKWarp(moe::RouterTopKOp op, moe::TileAttr tile,
                            BufferMap buffer, LoweringContext &ctx) {
  Value logits = buffer(op.getLogits());
  Value bias = buffer(op.getSelectionBias());
  auto logitsType = cast<MemRefType>(logits.getType());
  int64_t experts = logitsType.getDimSize(1);
  int64_t k = op.getK();
  int64_t groups = op.getNumGroups().value_or(0);
  int64_t topkGroups = op.getTopkGroups().value_or(0);
  int64_t threads = tile.getThreads();
  if (ShapedType::isDynamic(experts) || experts % kWarp ||
      experts > kMaxExperts || k > kWarp || threads % kWarp)
    return std::nullopt;
  int64_t perLane = experts / kWarp;
  // A group must be whole lanes, a power of two of them.
  int64_t groupLanes = groups ? kWarp / groups : 0;
  if (groups && (kWarp % groups || !llvm::isPowerOf2_64(groups)))
    return std::nullopt;
  int64_t groupSize = groups ? experts / groups : 0;
  Type elem = logitsType.getElementType();
  // The widest power-of-two access that divides a lane's experts.
  int64_t access = std::min<int64_t>(KernelBuilder::vectorWidth(elem),
                                     int64_t(1) << llvm::countr_zero(
                                         uint64_t(perLane)));
  if (access < 1)
    return std::nullopt;

  bool softmax = op.getScoring() == moe::Scoring::softmax;
  bool topkThenSoftmax = op.getOrder() == moe::TopKOrder::topk_then_softmax;
  bool renormalize = op.getRenormalize();
  double scaling = op.getScalingFactor().convertToDouble();
  // As in the scalar kernel: without a bias the ranking of the scores is
  // that of the logits, so select on the logits.
  bool selectOnScores = bias && !topkThenSoftmax;

  SmallVector<Value> operands = {logits, buffer(op.getWeights()),
                                 buffer(op.getIds())};
  if (bias)
    operands.push_back(bias);
  KernelBuilder &h = ctx.host();
  Value tokens = ctx.sizes(logits)[0];
  int64_t tokensPerBlock = threads / kWarp;
  return ctx.launch(
      "warp", h.ceilDiv(tokens, h.idx(tokensPerBlock)), tile,
      operands,
      [&](KernelBuilder &b, ValueRange args, Value block, Value thread) {
        Value lg = args[0], weights = args[1], ids = args[2];
        Value laneIdx = b.rem(thread, b.idx(kWarp));
        Value t = b.add(b.mul(block, b.idx(tokensPerBlock)),
                        b.div(thread, b.idx(kWarp)));
        // The condition is the same for the whole warp: every lane of a
        // live warp takes part in the shuffles.
        b.ifThen(b.ult(t, b.dim(lg, 0)), [&] {
          Value lane = toI32(b, laneIdx);
          Value first = b.mul(laneIdx, b.idx(perLane));
          SmallVector<Value> x, biasValues;
          for (int64_t c = 0; c < perLane; c += access) {
            llvm::append_range(
                x, b.loadVecF(lg, {t, b.add(first, b.idx(c))}, access));
            if (bias)
              llvm::append_range(
                  biasValues,
                  b.loadVecF(args[3], {b.add(first, b.idx(c))}, access));
          }

          // Scores.
          SmallVector<Value> score(x);
          if (topkThenSoftmax) {
            // Raw logits; the k picked are normalized at the end.
          } else if (softmax) {
            Value peak = x[0];
            for (Value v : x)
              peak = b.fmax(peak, v);
            peak = warpReduce(b, peak, /*max=*/true);
            Value sum = b.f32(0);
            for (Value &s : score) {
              s = b.exp(b.fsub(s, peak));
              sum = b.fadd(sum, s);
            }
            sum = warpReduce(b, sum, /*max=*/false);
            for (Value &s : score)
              s = b.fdiv(s, sum);
          } else {
            for (Value &s : score)
              s = b.sigmoid(s);
          }
          SmallVector<Value> select;
          for (int64_t i = 0; i < perLane; ++i) {
            Value v = selectOnScores ? score[i] : x[i];
            select.push_back(bias ? b.fadd(v, biasValues[i]) : v);
          }

          // Group-limited routing: a group scores the sum of its two best
          // selection values; the lane's experts stay available if its
          // group ranks among the `topk_groups` best (ties: lower group).
          Value available = arith::ConstantIntOp::create(b, b.getI1Type(), 1);
          if (groups) {
            Value negInf = b.f32(-std::numeric_limits<float>::infinity());
            Value best = negInf, second = negInf;
            for (Value v : select) {
              Value isFirst = b.fgt(v, best);
              second = b.select(isFirst, best,
                                b.select(b.fgt(v, second), v, second));
              best = b.select(isFirst, v, best);
            }
            for (int64_t mask = groupLanes / 2; mask > 0; mask /= 2) {
              Value otherBest = shuffleXor(b, best, mask);
              Value otherSecond = shuffleXor(b, second, mask);
              Value low = arith::MinimumFOp::create(b, best, otherBest);
              second = b.fmax(low, b.fmax(second, otherSecond));
              best = b.fmax(best, otherBest);
            }
            Value mine = groupSize > 1 ? b.fadd(best, second) : best;
            Value group = b.div(lane, b.i32(groupLanes));
            Value rank = b.i32(0);
            for (int64_t g = 0; g < groups; ++g) {
              Value other = shuffleIdx(b, mine, b.i32(g * groupLanes));
              Value before =
                  lor(b, b.fgt(other, mine),
                      b.land(feq(b, other, mine), slt(b, b.i32(g), group)));
              rank = b.add(rank, arith::ExtUIOp::create(b, b.getI32Type(),
                                                        before));
            }
            available = slt(b, rank, b.i32(topkGroups));
          }
          SmallVector<Value> open(perLane, available);

          // k arg-max rounds; round j's winner ends up in lane j.
          Value none = b.i32(experts);
          Value firstId = toI32(b, first);
          Value myId = b.i32(0), myWeight = b.f32(0), sumWeights = b.f32(0);
          SmallVector<Value> picked;
          for (int64_t j = 0; j < k; ++j) {
            Candidate best{b.f32(0), b.f32(0), none};
            for (int64_t i = 0; i < perLane; ++i) {
              Candidate mine{select[i], score[i],
                             b.add(firstId, b.i32(i))};
              Value better =
                  b.land(open[i], beats(b, mine, best, none));
              best = pick(b, better, mine, best);
            }
            for (int64_t mask = kWarp / 2; mask > 0; mask /= 2) {
              Candidate other{shuffleXor(b, best.value, mask),
                              shuffleXor(b, best.weight, mask),
                              shuffleXor(b, best.id, mask)};
              best = pick(b, beats(b, other, best, none), other, best);
            }
            for (int64_t i = 0; i < perLane; ++i)
              open[i] = b.land(open[i],
                               arith::CmpIOp::create(
                                   b, arith::CmpIPredicate::ne, best.id,
                                   b.add(firstId, b.i32(i))));
            Value isMine = b.eq(lane, b.i32(j));
            myId = b.select(isMine, best.id, myId);
            myWeight = b.select(isMine, best.weight, myWeight);
            sumWeights = b.fadd(sumWeights, best.weight);
            picked.push_back(best.weight);
          }

          // Weights: softmax over the k picked logits, renormalization,
          // scaling.
          if (topkThenSoftmax) {
            Value top = picked[0];
            for (Value w : picked)
              top = b.fmax(top, w);
            Value sum = b.f32(0);
            for (Value w : picked)
              sum = b.fadd(sum, b.exp(b.fsub(w, top)));
            myWeight = b.fdiv(b.exp(b.fsub(myWeight, top)), sum);
            sumWeights = b.f32(1.0);
          }
          if (renormalize || scaling != 1.0) {
            Value factor = b.f32(scaling);
            if (renormalize)
              factor = b.fdiv(factor, sumWeights);
            myWeight = b.fmul(myWeight, factor);
          }
          b.ifThen(b.ult(laneIdx, b.idx(k)), [&] {
            memref::StoreOp::create(b, myWeight, weights, {t, laneIdx});
            memref::StoreOp::create(b, myId, ids, {t, laneIdx});
          });
        });
      });
}

//===----------------------------------------------------------------------===//
// sort_by_expert
//===----------------------------------------------------------------------===//

Lowered lowerSortByExpertWarp(moe::SortByExpertOp op, BufferMap buffer,
                              LoweringContext &ctx) {
  int64_t experts = op.getNumExperts();
  int64_t align = op.getAlign().value_or(1);
  Value ids = buffer(op.getIds());
  int64_t k = cast<MemRefType>(ids.getType()).getDimSize(1);
  if (experts > kMaxExperts || ShapedType::isDynamic(k))
    return std::nullopt;
  Value sorted = buffer(op.getSortedExpertIds());
  Value slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets());
  KernelBuilder &h = ctx.host();
  MLIRContext *mlirCtx = op.getContext();
  Value numSlots = h.mul(ctx.sizes(ids)[0], h.idx(k));
  Value capacity = ctx.sizes(slots)[0];
  Value chunks = h.ceilDiv(numSlots, h.idx(kChunk));
  Type i32 = h.getI32Type();
  auto dyn = ShapedType::kDynamic;
  // Per slot its rank in its chunk; per (chunk, warp) and expert the warp's
  // count, then its prefix in the chunk; per expert and chunk the chunk's
  // count, then its prefix over the chunks; per expert the group start and
  // real row count.
  Value rank = ctx.allocTemp(MemRefType::get({dyn}, i32), {numSlots});
  Value warpCounts =
      ctx.allocTemp(MemRefType::get({dyn, experts}, i32),
                    {h.mul(chunks, h.idx(kSortWarps)), h.idx(experts)});
  Value chunkCounts = ctx.allocTemp(MemRefType::get({experts, dyn}, i32),
                                    {h.idx(experts), chunks});
  Value starts = ctx.allocTemp(MemRefType::get({experts}, i32),
                               {h.idx(experts)});
  Value totals = ctx.allocTemp(MemRefType::get({experts}, i32),
                               {h.idx(experts)});
  int64_t perLane = llvm::divideCeil(experts, kWarp);
  int64_t words = llvm::divideCeil(perLane, 4); // 4 byte counters per i32

  /// The expert of slot s as i32, and whether it is a real slot with an id
  /// in [0, E) (others are left out: out-of-range ids are undefined
  /// behaviour, but never an out-of-bounds store).
  auto expertOf = [&](KernelBuilder &b, Value idsArg, Value s, Value n) {
    Value in = b.ult(s, n);
    Value clamped = b.minIdx(s, b.sub(n, b.idx(1)));
    Value e = memref::LoadOp::create(
        b, idsArg, ValueRange{b.div(clamped, b.idx(k)), b.rem(clamped, b.idx(k))});
    Value valid = b.land(in, b.land(arith::CmpIOp::create(
                                        b, arith::CmpIPredicate::sge, e,
                                        b.i32(0)),
                                    slt(b, e, b.i32(experts))));
    return std::make_pair(e, valid);
  };

  // 1. Ranks within each chunk.
  moe::TileAttr sortBlock =
      moe::TileAttr::get(mlirCtx, 1, 1, 1, kSortWarps * kWarp);
  if (failed(ctx.launch(
          "rank", chunks, sortBlock,
          {ids, rank, warpCounts, chunkCounts, numSlots, chunks},
          [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
            Value n = a[4];
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
                Value same = b.land(b.eq(other, key),
                                    slt(b, b.i32(src), lane));
                before = b.add(before, arith::ExtUIOp::create(b, i32, same));
                Value owned =
                    b.land(b.eq(band(b, other, kWarp - 1), lane),
                           arith::CmpIOp::create(b, arith::CmpIPredicate::sge,
                                                 other, b.i32(0)));
                Value otherColumn = shr(b, other, b.i32(5));
                Value one = shl(b, b.i32(1),
                                b.mul(band(b, otherColumn, 3), b.i32(8)));
                Value otherWord = shr(b, otherColumn, b.i32(2));
                for (int64_t w = 0; w < words; ++w)
                  counters[w] = b.add(
                      counters[w],
                      b.select(b.land(owned, b.eq(otherWord, b.i32(w))), one,
                               b.i32(0)));
              }
              rounds.push_back({s, e, valid, before});
            }
            // The warp's counts per expert.
            for (int64_t j = 0; j < perLane; ++j) {
              Value e = b.add(b.idx(j * kWarp), laneIdx);
              Value count = band(b, shr(b, counters[j / 4],
                                        b.i32((j % 4) * 8)),
                                 255);
              b.ifThen(b.ult(e, b.idx(experts)), [&] {
                memref::StoreOp::create(b, count, a[2], {warpRow, e});
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
                SmallVector<Value> counts;
                for (int64_t w = w0; w < w0 + 8; ++w)
                  counts.push_back(memref::LoadOp::create(
                      b, a[2], ValueRange{b.add(row0, b.idx(w)), thread}));
                for (int64_t w = w0; w < w0 + 8; ++w) {
                  memref::StoreOp::create(b, running, a[2],
                                          {b.add(row0, b.idx(w)), thread});
                  running = b.add(running, counts[w - w0]);
                }
              }
              memref::StoreOp::create(b, running, a[3], {thread, block});
            });
            gpu::BarrierOp::create(b);
            for (const Round &r : rounds)
              b.ifThen(r.valid, [&] {
                Value prefix = memref::LoadOp::create(
                    b, a[2], ValueRange{warpRow, toIndex(b, r.expert)});
                memref::StoreOp::create(b, b.add(r.rank, prefix), a[1],
                                        {r.slot});
              });
          })))
    return failure();

  // 2. One block: per expert the prefix over the chunks, then the padded
  //    group offsets (a block-wide scan over the experts).
  int64_t scanThreads = llvm::alignTo(experts, kWarp);
  int64_t scanWarps = scanThreads / kWarp;
  Value warpSums = ctx.allocTemp(MemRefType::get({scanWarps}, i32),
                                 {h.idx(scanWarps)});
  constexpr int64_t unroll = 8;
  if (failed(ctx.launch(
          "scan", h.idx(1), moe::TileAttr::get(mlirCtx, 1, 1, 1, scanThreads),
          {chunkCounts, offsets, starts, totals, warpSums, chunks},
          [&](KernelBuilder &b, ValueRange a, Value, Value e) {
            Value numChunks = a[5];
            Value live = b.ult(e, b.idx(experts));
            Value row = b.minIdx(e, b.idx(experts - 1));
            // Loads of `unroll` chunks are issued before their sum.
            Value steps = b.ceilDiv(numChunks, b.idx(unroll));
            Value total =
                b.loop(b.idx(0), steps, {b.i32(0)},
                       [&](Value step, ValueRange it) -> SmallVector<Value> {
                         SmallVector<Value> at, counts;
                         for (int64_t u = 0; u < unroll; ++u) {
                           Value c = b.add(b.mul(step, b.idx(unroll)),
                                           b.idx(u));
                           at.push_back(c);
                           Value clamped =
                               b.minIdx(c, b.sub(numChunks, b.idx(1)));
                           counts.push_back(memref::LoadOp::create(
                               b, a[0], ValueRange{row, clamped}));
                         }
                         Value running = it[0];
                         for (int64_t u = 0; u < unroll; ++u) {
                           Value in = b.ult(at[u], numChunks);
                           b.ifThen(b.land(live, in), [&] {
                             memref::StoreOp::create(b, running, a[0],
                                                     {row, at[u]});
                           });
                           running = b.add(running,
                                           b.select(in, counts[u], b.i32(0)));
                         }
                         return {running};
                       })[0];
            total = b.select(live, total, b.i32(0));
            Value padded =
                align > 1 ? b.mul(b.div(b.add(total, b.i32(align - 1)),
                                        b.i32(align)),
                                  b.i32(align))
                          : total;
            // Inclusive scan of `padded` in the warp, then over the warps.
            Value laneIdx = b.rem(e, b.idx(kWarp));
            Value lane = toI32(b, laneIdx);
            Value end = padded;
            for (int64_t d = 1; d < kWarp; d *= 2) {
              Value up = shuffle(b, end, b.i32(d), gpu::ShuffleMode::UP);
              end = b.add(end, b.select(slt(b, lane, b.i32(d)), b.i32(0), up));
            }
            Value warp = b.div(e, b.idx(kWarp));
            b.ifThen(b.eq(laneIdx, b.idx(kWarp - 1)), [&] {
              memref::StoreOp::create(b, end, a[4], {warp});
            });
            gpu::BarrierOp::create(b);
            for (int64_t w = 0; w + 1 < scanWarps; ++w) {
              Value sum = memref::LoadOp::create(b, a[4], ValueRange{b.idx(w)});
              end = b.add(end, b.select(b.ult(b.idx(w), warp), sum, b.i32(0)));
            }
            b.ifThen(live, [&] {
              memref::StoreOp::create(b, end, a[1], {e});
              memref::StoreOp::create(b, b.sub(end, padded), a[2], {e});
              memref::StoreOp::create(b, total, a[3], {e});
            });
          })))
    return failure();

  // 3. Per slot its row; per row its expert id, and -1 for padding rows and
  //    rows past the last group.
  moe::TileAttr placeBlock = moe::TileAttr::get(mlirCtx, 1, 1, 1, 256);
  return launchPerItem(
      ctx, "place", capacity, placeBlock,
      {ids, rank, chunkCounts, starts, totals, offsets, sorted, slots,
       numSlots},
      [&](KernelBuilder &b, ValueRange a, Value i) {
        auto [e, valid] = expertOf(b, a[0], i, a[8]);
        b.ifThen(valid, [&] {
          Value ei = toIndex(b, e);
          Value row = b.add(
              memref::LoadOp::create(b, a[3], ValueRange{ei}),
              b.add(memref::LoadOp::create(
                        b, a[2], ValueRange{ei, b.div(i, b.idx(kChunk))}),
                    memref::LoadOp::create(b, a[1], ValueRange{i})));
          b.storeI32(i, a[7], {toIndex(b, row)});
        });
        Value expert = toI32(b, firstGreater(b, a[5], experts, i));
        Value past = b.eq(expert, b.i32(experts));
        b.storeI32(toIndex(b, b.select(past, b.i32(-1), expert)), a[6], {i});
        Value at = toIndex(b, b.select(past, b.i32(0), expert));
        Value realEnd = b.add(memref::LoadOp::create(b, a[3], ValueRange{at}),
                              memref::LoadOp::create(b, a[4], ValueRange{at}));
        Value padding = lor(b, past, b.ule(realEnd, toI32(b, i)));
        b.ifThen(padding, [&] { b.storeI32Const(-1, a[7], {i}); });
      });
}

} // namespace

Lowered moec::kernels::lowerRoutingWarp(Operation *op, moe::TileAttr tile,
                                        BufferMap buffer,
                                        LoweringContext &ctx) {
  if (!ctx.host().hasWarpShuffles())
    return std::nullopt;
  return llvm::TypeSwitch<Operation *, Lowered>(op)
      .Case<moe::RouterTopKOp>(
          [&](auto o) { return lowerRouterTopKWarp(o, tile, buffer, ctx); })
      .Case<moe::SortByExpertOp>(
          [&](auto o) { return lowerSortByExpertWarp(o, buffer, ctx); })
      .Default([](Operation *) { return std::nullopt; });
}
