//===- RoutingKernels.cpp - Warp-level routing kernels (NVVM, ROCDL) ------===//
//
// Part of moec. Routing moves few bytes (the logits and a few words per
// token) so its cost is latency: the number of launches and the length of
// each thread's dependent chain. The scalar kernels of Kernels.cpp loop over
// all experts per token and over all slots per expert; these use warps:
//
// * router_topk: one warp per token. Lane l holds experts [l*V, (l+1)*V)
//   (V = E/32) in registers as u64 keys (value bits, then id), sorted per
//   lane; softmax sums are xor-shuffle reductions, each of the k rounds a
//   warp max over the lanes' heads (one redux.sync on NVVM; the winner pops
//   its head), and
//   DeepSeek-style group scores are merged over the lanes of a group. When
//   the kept groups hold fewer experts than the lanes do, those experts are
//   first spread over the warp (4 per lane instead of 8 at DeepSeek-V3), so
//   the sort and the rounds work on fewer keys. The weights are computed at
//   the end from the k picked logits.
// * sort_by_expert: a stable counting sort in three kernels.
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
// Both need warp shuffles and, for the sort, block barriers: the host runs
// the scalar kernels instead (KernelsToHost rejects both). Each generator
// returns std::nullopt where the shapes do not fit (E not a multiple of 32,
// E > 512, k > 32, groups that do not align with lanes).
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

using Lowered = std::optional<LogicalResult>;

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

Value shl64(KernelBuilder &b, Value x, int64_t n) {
  return arith::ShLIOp::create(
      b, x, arith::ConstantIntOp::create(b, b.getI64Type(), n));
}
Value shr64(KernelBuilder &b, Value x, int64_t n) {
  return arith::ShRUIOp::create(
      b, x, arith::ConstantIntOp::create(b, b.getI64Type(), n));
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

/// A selection value and its expert as one u64 that orders as the ranking
/// does: the value's bits made monotonic in the high word, E-1-id in the low
/// word (ties go to the lower id, as in the scalar kernel's ascending scan).
/// 0 is below every key: "no candidate".
Value rankKey(KernelBuilder &b, Value value, Value id, int64_t experts) {
  Value bits = arith::BitcastOp::create(b, b.getI32Type(), value);
  // Negative values: all bits flipped; others: the sign bit set.
  Value sign = arith::ShRSIOp::create(b, bits, b.i32(31));
  Value flip = arith::OrIOp::create(b, sign, b.i32(INT32_MIN));
  Value ordered = arith::XOrIOp::create(b, bits, flip);
  Type i64 = b.getI64Type();
  Value high = shl64(b, arith::ExtUIOp::create(b, i64, ordered), 32);
  Value low = arith::ExtUIOp::create(b, i64, b.sub(b.i32(experts - 1), id));
  return arith::OrIOp::create(b, high, low);
}

/// The largest u32 over the 32 lanes, in every lane: one redux.sync on
/// NVVM (sm_80+), a shuffle reduction elsewhere.
Value warpMaxU32(KernelBuilder &b, Value v) {
  if (b.isNVVM())
    return NVVM::ReduxOp::create(b, b.getI32Type(), v, NVVM::ReduxKind::UMAX,
                                 b.i32(-1));
  for (int64_t mask = kWarp / 2; mask > 0; mask /= 2)
    v = arith::MaxUIOp::create(b, v, shuffleXor(b, v, mask));
  return v;
}

/// The lowest lane of the warp where `pred` holds (32 if none), in every
/// lane: one ballot on NVVM, a min-reduction elsewhere.
Value lowestLaneWith(KernelBuilder &b, Value pred, Value lane) {
  if (b.isNVVM()) {
    Value mask = NVVM::VoteSyncOp::create(
        b, b.getI32Type(), b.i32(-1), pred,
        NVVM::VoteSyncKindAttr::get(b.getContext(), NVVM::VoteSyncKind::ballot));
    // cttz(0) is 32: "none".
    return LLVM::CountTrailingZerosOp::create(b, b.getI32Type(), mask,
                                              b.getBoolAttr(false));
  }
  Value lowest = b.select(pred, lane, b.i32(kWarp));
  for (int64_t mask = kWarp / 2; mask > 0; mask /= 2)
    lowest = arith::MinUIOp::create(b, lowest, shuffleXor(b, lowest, mask));
  return lowest;
}

/// Sorts `keys` in decreasing order: a bitonic network for a power-of-two
/// count, else odd-even transposition.
void sortDescending(KernelBuilder &b, SmallVector<Value> &keys) {
  int64_t n = keys.size();
  auto exchange = [&](int64_t hi, int64_t lo) {
    Value x = keys[hi], y = keys[lo];
    keys[hi] = arith::MaxUIOp::create(b, x, y);
    keys[lo] = arith::MinUIOp::create(b, x, y);
  };
  if (llvm::isPowerOf2_64(n)) {
    for (int64_t size = 2; size <= n; size *= 2)
      for (int64_t stride = size / 2; stride > 0; stride /= 2)
        for (int64_t i = 0; i < n; ++i) {
          int64_t j = i ^ stride;
          if (j <= i)
            continue;
          if (i & size)
            exchange(j, i);
          else
            exchange(i, j);
        }
    return;
  }
  for (int64_t round = 0; round < n; ++round)
    for (int64_t i = round % 2; i + 1 < n; i += 2)
      exchange(i, i + 1);
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
  // Group-limited routing with fewer kept experts than lanes hold: after
  // the group selection each lane takes `compact` of the kept groups'
  // experts (whole lanes' parts, so that shuffles move them).
  int64_t keptExperts = topkGroups * groupSize;
  int64_t compact = 0;
  if (groups && kWarp % topkGroups == 0 && keptExperts % kWarp == 0 &&
      keptExperts / kWarp < perLane && perLane % (keptExperts / kWarp) == 0)
    compact = keptExperts / kWarp;
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

          // Softmax statistics (the weights need them), and the scores
          // where selection runs on them (with a bias).
          Value peak, sum;
          if (softmax && !topkThenSoftmax) {
            peak = x[0];
            for (Value v : x)
              peak = b.fmax(peak, v);
            peak = warpReduce(b, peak, /*max=*/true);
            sum = b.f32(0);
            for (Value v : x)
              sum = b.fadd(sum, b.exp(b.fsub(v, peak)));
            sum = warpReduce(b, sum, /*max=*/false);
          }
          SmallVector<Value> score(x);
          if (selectOnScores)
            for (Value &s : score)
              s = softmax ? b.fdiv(b.exp(b.fsub(s, peak)), sum)
                          : b.sigmoid(s);
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
          // Each lane sorts its keys (0 where its group is out) and keeps
          // the best min(k, V): a lane gives at most k winners.
          SmallVector<Value> keys;
          if (compact) {
            // Only the kept groups' experts can win: spread them over the
            // warp, `compact` per lane, so that the sort and the rounds
            // below work on fewer keys. Lane l takes part l % lanesPerGroup
            // of the (l / lanesPerGroup)-th kept group in group order, so
            // ids still increase with the lane.
            Value target = b.div(lane, b.i32(kWarp / topkGroups));
            Value offset = b.rem(lane, b.i32(kWarp / topkGroups));
            Value sourceGroup = b.i32(0), keptBefore = b.i32(0);
            // A shuffle per group (a ballot and shifts measured 1 – 2 %
            // slower at DeepSeek-V3 T=32768).
            for (int64_t g = 0; g < groups; ++g) {
              Value kept = shuffleIdx(
                  b, arith::ExtUIOp::create(b, b.getI32Type(), available),
                  b.i32(g * groupLanes));
              Value isTarget =
                  b.land(b.eq(kept, b.i32(1)), b.eq(keptBefore, target));
              sourceGroup = b.select(isTarget, b.i32(g), sourceGroup);
              keptBefore = b.add(keptBefore, kept);
            }
            int64_t parts = perLane / compact;
            Value sourceLane = b.add(b.mul(sourceGroup, b.i32(groupLanes)),
                                     b.div(offset, b.i32(parts)));
            Value part = b.rem(offset, b.i32(parts));
            for (int64_t c = 0; c < compact; ++c) {
              Value v = b.f32(0);
              for (int64_t q = 0; q < parts; ++q)
                v = b.select(b.eq(part, b.i32(q)),
                             shuffleIdx(b, select[q * compact + c],
                                        sourceLane),
                             v);
              Value id = b.add(b.mul(sourceLane, b.i32(perLane)),
                               b.add(b.mul(part, b.i32(compact)),
                                     b.i32(c)));
              keys.push_back(rankKey(b, v, id, experts));
            }
          } else {
            Value firstId = toI32(b, first);
            Value zero64 =
                arith::ConstantIntOp::create(b, b.getI64Type(), 0);
            for (int64_t i = 0; i < perLane; ++i)
              keys.push_back(b.select(
                  available,
                  rankKey(b, select[i], b.add(firstId, b.i32(i)), experts),
                  zero64));
          }
          sortDescending(b, keys);
          keys.resize(std::min<int64_t>(k, keys.size()));

          // k rounds: the warp's best head wins and its lane pops it; round
          // j's winner stays in lane j. The reduction runs on the high
          // words (the values); lanes hold increasing ids and each lane's
          // equal values are sorted by id, so among equal heads the lowest
          // lane holds the lowest id.
          SmallVector<Value> high, low;
          for (Value key : keys) {
            high.push_back(arith::TruncIOp::create(b, b.getI32Type(),
                                                   shr64(b, key, 32)));
            low.push_back(arith::TruncIOp::create(b, b.getI32Type(), key));
          }
          Value myId = b.i32(0);
          for (int64_t j = 0; j < k; ++j) {
            Value best = warpMaxU32(b, high[0]);
            Value winner = lowestLaneWith(b, b.eq(high[0], best), lane);
            Value winnerLow = shuffleIdx(b, low[0], winner);
            Value won = b.eq(lane, winner);
            for (size_t i = 0; i + 1 < high.size(); ++i) {
              high[i] = b.select(won, high[i + 1], high[i]);
              low[i] = b.select(won, low[i + 1], low[i]);
            }
            high.back() = b.select(won, b.i32(0), high.back());
            myId = b.select(b.eq(lane, b.i32(j)),
                            b.sub(b.i32(experts - 1), winnerLow), myId);
          }

          // Weights, in the lanes j < k: the picked expert's score from its
          // logit (read again: the line is in L1); for topk_then_softmax the
          // softmax over the k picked logits; renormalization, scaling.
          Value picking = b.ult(laneIdx, b.idx(k));
          Value logit = b.loadF(lg, {t, toIndex(b, myId)});
          Value myWeight = logit;
          if (topkThenSoftmax) {
            Value negInf = b.f32(-std::numeric_limits<float>::infinity());
            Value top = warpReduce(b, b.select(picking, logit, negInf),
                                   /*max=*/true);
            myWeight = b.exp(b.fsub(logit, top));
            Value sum = warpReduce(b, b.select(picking, myWeight, b.f32(0)),
                                   /*max=*/false);
            myWeight = b.fdiv(myWeight, sum);
          } else if (softmax) {
            myWeight = b.fdiv(b.exp(b.fsub(logit, peak)), sum);
          } else {
            myWeight = b.sigmoid(logit);
          }
          if (renormalize && !topkThenSoftmax) {
            Value total = warpReduce(
                b, b.select(picking, myWeight, b.f32(0)), /*max=*/false);
            myWeight = b.fdiv(myWeight, total);
          }
          if (scaling != 1.0)
            myWeight = b.fmul(myWeight, b.f32(scaling));
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
          {ids, scratch, numSlots, warpAt, chunkAt},
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
                Value prefix = load(
                    b, a[1],
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
              Value sum = load(
                  b, buf,
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
                align > 1 ? b.mul(b.div(b.add(total, b.i32(align - 1)),
                                        b.i32(align)),
                                  b.i32(align))
                          : total;
            Value laneIdx = b.rem(thread, b.idx(kWarp));
            Value lane = toI32(b, laneIdx);
            Value groupEnd = padded;
            for (int64_t d = 1; d < kWarp; d *= 2) {
              Value up = shuffle(b, groupEnd, b.i32(d), gpu::ShuffleMode::UP);
              groupEnd = b.add(groupEnd, b.select(slt(b, lane, b.i32(d)),
                                                  b.i32(0), up));
            }
            Value warp = b.div(thread, b.idx(kWarp));
            Value first = b.eq(segment, b.idx(0));
            b.ifThen(b.land(first, b.eq(laneIdx, b.idx(kWarp - 1))), [&] {
              store(b, groupEnd, buf, b.add(warpSums, warp));
            });
            gpu::BarrierOp::create(b);
            for (int64_t w = 0; w + 1 < expertsPadded / kWarp; ++w) {
              Value sum = load(b, buf, b.add(warpSums, b.idx(w)));
              groupEnd = b.add(groupEnd, b.select(b.ult(b.idx(w), warp), sum,
                                                  b.i32(0)));
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
  SmallVector<Value> placeOperands = {ids,       scratch,  offsets,
                                      sorted,    slots,    numSlots,
                                      chunkAt,   startAt,  totalAt};
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
        Value realEnd = b.add(load(b, buf, b.add(a[7], at)),
                              load(b, buf, b.add(a[8], at)));
        Value padding = lor(b, past, b.ule(realEnd, toI32(b, i)));
        b.ifThen(padding, [&] { b.storeI32Const(-1, a[4], {i}); });
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
