//===- RouterTopK.cpp - router_topk with one warp per token ---------------===//
//
// Part of moec. Routing moves few bytes (the logits and a few words per
// token) so its cost is latency: the number of launches and the length of
// each thread's dependent chain. The scalar kernel loops over all experts
// per token; this one gives each token a warp. Lane l holds experts
// [l*V, (l+1)*V) (V = E/32) in registers as u64 keys (value bits, then id),
// sorted per lane; softmax sums are xor-shuffle reductions, each of the k
// rounds a warp max over the lanes' heads (one redux.sync where the target
// has it; the winner pops its head), and DeepSeek-style group scores are
// merged over the lanes of a group. When the kept groups hold fewer experts
// than the lanes do, those experts are first spread over the warp (4 per
// lane instead of 8 at DeepSeek-V3), so the sort and the rounds work on
// fewer keys. The weights are computed at the end from the k picked logits.
//
// Applies where E is a multiple of 32 up to 512, k <= 32, and groups align
// with lanes, on targets with warp shuffles.
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

/// The static shape of the warp kernel for one router_topk, and what it
/// computes (the op's scoring options).
struct RouterTopKPlan {
  int64_t experts, k, perLane, groups, groupLanes, groupSize, topkGroups;
  /// Experts per lane after the group selection (0: no compaction).
  int64_t compact;
  /// Elements per logit load: the widest power-of-two access that divides
  /// a lane's experts.
  int64_t access;
  /// Whether there is a selection bias, and the scoring options.
  bool bias, softmax, topkThenSoftmax, renormalize;
  /// As in the scalar kernel: without a bias the ranking of the scores is
  /// that of the logits, so select on the logits.
  bool selectOnScores;
  double scaling;
};

std::optional<RouterTopKPlan> planRouterTopK(moe::RouterTopKOp op,
                                             moe::TileAttr tile) {
  auto logitsType = cast<ShapedType>(op.getLogits().getType());
  RouterTopKPlan p;
  p.experts = logitsType.getDimSize(1);
  p.k = op.getK();
  p.groups = op.getNumGroups().value_or(0);
  p.topkGroups = op.getTopkGroups().value_or(0);
  if (ShapedType::isDynamic(p.experts) || p.experts % kWarp ||
      p.experts > kMaxExperts || p.k > kWarp || tile.getThreads() % kWarp)
    return std::nullopt;
  p.perLane = p.experts / kWarp;
  // A group must be whole lanes, a power of two of them.
  p.groupLanes = p.groups ? kWarp / p.groups : 0;
  if (p.groups && (kWarp % p.groups || !llvm::isPowerOf2_64(p.groups)))
    return std::nullopt;
  p.groupSize = p.groups ? p.experts / p.groups : 0;
  // Group-limited routing with fewer kept experts than lanes hold: after
  // the group selection each lane takes `compact` of the kept groups'
  // experts (whole lanes' parts, so that shuffles move them).
  int64_t keptExperts = p.topkGroups * p.groupSize;
  p.compact = 0;
  if (p.groups && kWarp % p.topkGroups == 0 && keptExperts % kWarp == 0 &&
      keptExperts / kWarp < p.perLane && p.perLane % (keptExperts / kWarp) == 0)
    p.compact = keptExperts / kWarp;
  p.access =
      std::min<int64_t>(KernelBuilder::vectorWidth(logitsType.getElementType()),
                        int64_t(1) << llvm::countr_zero(uint64_t(p.perLane)));
  if (p.access < 1)
    return std::nullopt;
  p.bias = bool(op.getSelectionBias());
  p.softmax = op.getScoring() == moe::Scoring::softmax;
  p.topkThenSoftmax = op.getOrder() == moe::TopKOrder::topk_then_softmax;
  p.renormalize = op.getRenormalize();
  p.selectOnScores = p.bias && !p.topkThenSoftmax;
  p.scaling = op.getScalingFactor().convertToDouble();
  return p;
}

/// The warp of one token: the phases of the kernel body, in the order they
/// are emitted, and the values they pass on.
struct TokenWarp {
  KernelBuilder &b;
  const RouterTopKPlan &p;
  /// The token, the lane (as index and i32), the lane's first expert.
  Value t, laneIdx, lane, first;
  /// The lane's logits and bias values; the values it selects on.
  SmallVector<Value> x, biasValues, select;
  /// Softmax statistics over the token's logits (softmax_then_topk only).
  Value peak, sum;

  void loadLogits(Value lg, Value biasArg);
  void computeSelection();
  Value groupAvailable();
  SmallVector<Value> compactKeys(Value available);
  SmallVector<Value> laneKeys(Value available);
  Value pickTopK(ArrayRef<Value> keys);
  void storeWeight(Value lg, Value weights, Value ids, Value myId);
};

/// Loads the lane's logits (and bias values).
void TokenWarp::loadLogits(Value lg, Value biasArg) {
  for (int64_t c = 0; c < p.perLane; c += p.access) {
    llvm::append_range(x,
                       b.loadVecF(lg, {t, b.add(first, b.idx(c))}, p.access));
    if (p.bias)
      llvm::append_range(
          biasValues, b.loadVecF(biasArg, {b.add(first, b.idx(c))}, p.access));
  }
}

/// Softmax statistics (the weights need them), and the scores where
/// selection runs on them (with a bias).
void TokenWarp::computeSelection() {
  if (p.softmax && !p.topkThenSoftmax) {
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
  if (p.selectOnScores)
    for (Value &s : score)
      s = p.softmax ? b.fdiv(b.exp(b.fsub(s, peak)), sum) : b.sigmoid(s);
  for (int64_t i = 0; i < p.perLane; ++i) {
    Value v = p.selectOnScores ? score[i] : x[i];
    select.push_back(p.bias ? b.fadd(v, biasValues[i]) : v);
  }
}

/// Group-limited routing: a group scores the sum of its two best selection
/// values; the lane's experts stay available if its group ranks among the
/// `topk_groups` best (ties: lower group). Returns that as i1 (true without
/// groups).
Value TokenWarp::groupAvailable() {
  Value available = arith::ConstantIntOp::create(b, b.getI1Type(), 1);
  if (!p.groups)
    return available;
  Value negInf = b.f32(-std::numeric_limits<float>::infinity());
  Value best = negInf, second = negInf;
  for (Value v : select) {
    Value isFirst = b.fgt(v, best);
    second = b.select(isFirst, best, b.select(b.fgt(v, second), v, second));
    best = b.select(isFirst, v, best);
  }
  for (int64_t mask = p.groupLanes / 2; mask > 0; mask /= 2) {
    Value otherBest = shuffleXor(b, best, mask);
    Value otherSecond = shuffleXor(b, second, mask);
    Value low = arith::MinimumFOp::create(b, best, otherBest);
    second = b.fmax(low, b.fmax(second, otherSecond));
    best = b.fmax(best, otherBest);
  }
  Value mine = p.groupSize > 1 ? b.fadd(best, second) : best;
  Value group = b.div(lane, b.i32(p.groupLanes));
  Value rank = b.i32(0);
  for (int64_t g = 0; g < p.groups; ++g) {
    Value other = shuffleIdx(b, mine, b.i32(g * p.groupLanes));
    Value before = lor(b, b.fgt(other, mine),
                       b.land(feq(b, other, mine), slt(b, b.i32(g), group)));
    rank = b.add(rank, arith::ExtUIOp::create(b, b.getI32Type(), before));
  }
  return slt(b, rank, b.i32(p.topkGroups));
}

/// Only the kept groups' experts can win: spread them over the warp,
/// `compact` per lane, so that the sort and the rounds work on fewer keys.
/// Lane l takes part l % lanesPerGroup of the (l / lanesPerGroup)-th kept
/// group in group order, so ids still increase with the lane.
SmallVector<Value> TokenWarp::compactKeys(Value available) {
  Value target = b.div(lane, b.i32(kWarp / p.topkGroups));
  Value offset = b.rem(lane, b.i32(kWarp / p.topkGroups));
  Value sourceGroup = b.i32(0), keptBefore = b.i32(0);
  // A shuffle per group (a ballot and shifts measured 1 – 2 %
  // slower at DeepSeek-V3 T=32768).
  for (int64_t g = 0; g < p.groups; ++g) {
    Value kept =
        shuffleIdx(b, arith::ExtUIOp::create(b, b.getI32Type(), available),
                   b.i32(g * p.groupLanes));
    Value isTarget = b.land(b.eq(kept, b.i32(1)), b.eq(keptBefore, target));
    sourceGroup = b.select(isTarget, b.i32(g), sourceGroup);
    keptBefore = b.add(keptBefore, kept);
  }
  int64_t parts = p.perLane / p.compact;
  Value sourceLane = b.add(b.mul(sourceGroup, b.i32(p.groupLanes)),
                           b.div(offset, b.i32(parts)));
  Value part = b.rem(offset, b.i32(parts));
  SmallVector<Value> keys;
  for (int64_t c = 0; c < p.compact; ++c) {
    Value v = b.f32(0);
    for (int64_t q = 0; q < parts; ++q)
      v = b.select(b.eq(part, b.i32(q)),
                   shuffleIdx(b, select[q * p.compact + c], sourceLane), v);
    Value id = b.add(b.mul(sourceLane, b.i32(p.perLane)),
                     b.add(b.mul(part, b.i32(p.compact)), b.i32(c)));
    keys.push_back(rankKey(b, v, id, p.experts));
  }
  return keys;
}

/// The lane's own keys, 0 where its group is out.
SmallVector<Value> TokenWarp::laneKeys(Value available) {
  Value firstId = toI32(b, first);
  Value zero64 = arith::ConstantIntOp::create(b, b.getI64Type(), 0);
  SmallVector<Value> keys;
  for (int64_t i = 0; i < p.perLane; ++i)
    keys.push_back(b.select(
        available, rankKey(b, select[i], b.add(firstId, b.i32(i)), p.experts),
        zero64));
  return keys;
}

/// k rounds: the warp's best head wins and its lane pops it; round j's
/// winner stays in lane j, whose expert id is returned. The reduction runs
/// on the high words (the values); lanes hold increasing ids and each
/// lane's equal values are sorted by id, so among equal heads the lowest
/// lane holds the lowest id.
Value TokenWarp::pickTopK(ArrayRef<Value> keys) {
  SmallVector<Value> high, low;
  for (Value key : keys) {
    high.push_back(
        arith::TruncIOp::create(b, b.getI32Type(), shr64(b, key, 32)));
    low.push_back(arith::TruncIOp::create(b, b.getI32Type(), key));
  }
  Value myId = b.i32(0);
  for (int64_t j = 0; j < p.k; ++j) {
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
                    b.sub(b.i32(p.experts - 1), winnerLow), myId);
  }
  return myId;
}

/// Weights, in the lanes j < k: the picked expert's score from its logit
/// (read again: the line is in L1); for topk_then_softmax the softmax over
/// the k picked logits; renormalization, scaling. Stores weight and id.
void TokenWarp::storeWeight(Value lg, Value weights, Value ids, Value myId) {
  Value picking = b.ult(laneIdx, b.idx(p.k));
  Value logit = b.loadF(lg, {t, toIndex(b, myId)});
  Value myWeight = logit;
  if (p.topkThenSoftmax) {
    Value negInf = b.f32(-std::numeric_limits<float>::infinity());
    Value top = warpReduce(b, b.select(picking, logit, negInf), /*max=*/true);
    myWeight = b.exp(b.fsub(logit, top));
    Value expSum = warpReduce(b, b.select(picking, myWeight, b.f32(0)),
                              /*max=*/false);
    myWeight = b.fdiv(myWeight, expSum);
  } else if (p.softmax) {
    myWeight = b.fdiv(b.exp(b.fsub(logit, peak)), sum);
  } else {
    myWeight = b.sigmoid(logit);
  }
  if (p.renormalize && !p.topkThenSoftmax) {
    Value total = warpReduce(b, b.select(picking, myWeight, b.f32(0)),
                             /*max=*/false);
    myWeight = b.fdiv(myWeight, total);
  }
  if (p.scaling != 1.0)
    myWeight = b.fmul(myWeight, b.f32(p.scaling));
  b.ifThen(b.ult(laneIdx, b.idx(p.k)), [&] {
    memref::StoreOp::create(b, myWeight, weights, {t, laneIdx});
    memref::StoreOp::create(b, myId, ids, {t, laneIdx});
  });
}

} // namespace

bool warp::matchRouterTopK(moe::RouterTopKOp op, moe::TileAttr tile,
                           const TargetInfo &target) {
  return target.hasWarpShuffles() && planRouterTopK(op, tile).has_value();
}

LogicalResult warp::emitRouterTopK(moe::RouterTopKOp op, moe::TileAttr tile,
                                   BufferMap buffer, LoweringContext &ctx) {
  RouterTopKPlan plan = *planRouterTopK(op, tile);
  Value logits = buffer(op.getLogits());
  Value bias = buffer(op.getSelectionBias());
  SmallVector<Value> operands = {logits, buffer(op.getWeights()),
                                 buffer(op.getIds())};
  if (bias)
    operands.push_back(bias);
  KernelBuilder &h = ctx.host();
  Value tokens = ctx.sizes(logits)[0];
  int64_t tokensPerBlock = tile.getThreads() / kWarp;
  return ctx.launch(
      "warp", h.ceilDiv(tokens, h.idx(tokensPerBlock)), tile, operands,
      [&](KernelBuilder &b, ValueRange args, Value block, Value thread) {
        Value lg = args[0];
        TokenWarp w{b, plan};
        w.laneIdx = b.rem(thread, b.idx(kWarp));
        w.t = b.add(b.mul(block, b.idx(tokensPerBlock)),
                    b.div(thread, b.idx(kWarp)));
        // The condition is the same for the whole warp: every lane of a
        // live warp takes part in the shuffles.
        b.ifThen(b.ult(w.t, b.dim(lg, 0)), [&] {
          w.lane = toI32(b, w.laneIdx);
          w.first = b.mul(w.laneIdx, b.idx(plan.perLane));
          w.loadLogits(lg, bias ? args[3] : Value());
          w.computeSelection();
          Value available = w.groupAvailable();
          // Each lane sorts its keys and keeps the best min(k, V): a lane
          // gives at most k winners.
          SmallVector<Value> keys =
              plan.compact ? w.compactKeys(available) : w.laneKeys(available);
          sortDescending(b, keys);
          keys.resize(std::min<int64_t>(plan.k, keys.size()));
          Value myId = w.pickTopK(keys);
          w.storeWeight(lg, args[1], args[2], myId);
        });
      });
}
