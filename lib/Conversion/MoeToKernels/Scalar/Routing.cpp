//===- Routing.cpp - Scalar router_topk(_grad) and sort_by_expert ---------===//
//
// Part of moec. The naive kernels of the routing ops, mirroring the
// float64 reference loop by loop: one thread per token (router_topk and its
// gradient) or per
// expert (sort_by_expert). They run everywhere; targets with warp shuffles
// use Warp/ where it applies.
//
//===-------------------------------------------------------------------===//

#include "ScalarKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// router_topk's attributes, as its kernel reads them.
struct RouterTopKOptions {
  int64_t experts, k, groups, topkGroups;
  bool softmax, topkThenSoftmax, renormalize, hasBias, selectOnScores;
  double scaling;
};

/// One token's thread of the scalar router_topk: its buffers, its scratch
/// rows (scores, selection values, allowed experts) and constants.
struct RouterTopKThread {
  KernelBuilder &b;
  const RouterTopKOptions &o;
  Value t, lg, weights, ids, bias;
  Value E, score, select, allowed, negInf;
};

/// Scores: softmax (with the row maximum subtracted), sigmoid, or the raw
/// logits (topk_then_softmax normalizes the k selected later); and the
/// selection values, every expert allowed unless routing is group-limited.
void emitRouterScores(RouterTopKThread &th) {
  KernelBuilder &b = th.b;
  const RouterTopKOptions &o = th.o;
  Value peak = b.loop(b.idx(0), th.E, {th.negInf},
                      [&](Value e, ValueRange it) -> SmallVector<Value> {
                        return {b.fmax(it[0], b.loadF(th.lg, {th.t, e}))};
                      })[0];
  Value sum = b.loop(b.idx(0), th.E, {b.f32(0)},
                     [&](Value e, ValueRange it) -> SmallVector<Value> {
                       Value x = b.loadF(th.lg, {th.t, e});
                       Value s = o.topkThenSoftmax ? x
                                 : o.softmax ? b.exp(b.fsub(x, peak))
                                             : b.sigmoid(x);
                       memref::StoreOp::create(b, s, th.score, {e});
                       return {b.fadd(it[0], s)};
                     })[0];
  b.loop(b.idx(0), th.E, [&](Value e) {
    Value x = b.loadF(th.lg, {th.t, e});
    Value s = memref::LoadOp::create(b, th.score, {e});
    if (o.softmax && !o.topkThenSoftmax) {
      s = b.fdiv(s, sum);
      memref::StoreOp::create(b, s, th.score, {e});
    }
    Value sel = o.selectOnScores ? s : x;
    if (o.hasBias)
      sel = b.fadd(sel, b.loadF(th.bias, {e}));
    memref::StoreOp::create(b, sel, th.select, {e});
    memref::StoreOp::create(b, b.i32(o.groups ? 0 : 1), th.allowed, {e});
  });
}

/// Group-limited routing: a group scores the sum of its two best selection
/// scores; the best `topk_groups` groups stay allowed.
void emitRouterGroupLimit(RouterTopKThread &th) {
  KernelBuilder &b = th.b;
  const int64_t groups = th.o.groups, size = th.o.experts / groups;
  Value negInf = th.negInf;
  Value gscore = b.alloca(MemRefType::get({groups}, b.getF32Type()));
  b.loop(b.idx(0), b.idx(groups), [&](Value g) {
    Value base = b.mul(g, b.idx(size));
    auto best = b.loop(
        b.idx(0), b.idx(size), {negInf, negInf},
        [&](Value i, ValueRange it) -> SmallVector<Value> {
          Value v = memref::LoadOp::create(b, th.select, {b.add(base, i)});
          Value isFirst = b.fgt(v, it[0]);
          Value isSecond = b.fgt(v, it[1]);
          Value second = b.select(isFirst, it[0], b.select(isSecond, v, it[1]));
          return {b.select(isFirst, v, it[0]), second};
        });
    Value total = size > 1 ? b.fadd(best[0], best[1]) : best[0];
    memref::StoreOp::create(b, total, gscore, {g});
  });
  b.loop(b.idx(0), b.idx(th.o.topkGroups), [&](Value) {
    auto best = b.loop(b.idx(0), b.idx(groups), {negInf, b.idx(0), b.idx(0)},
                       [&](Value g, ValueRange it) -> SmallVector<Value> {
                         Value v = memref::LoadOp::create(b, gscore, {g});
                         Value first = b.eq(it[2], b.idx(0));
                         Value better =
                             arith::OrIOp::create(b, first, b.fgt(v, it[0]));
                         return {b.select(better, v, it[0]),
                                 b.select(better, g, it[1]), b.idx(1)};
                       });
    // Ties keep the lower group (strict >); a picked group drops to -inf so
    // it is not picked again.
    Value g = best[1];
    memref::StoreOp::create(b, negInf, gscore, {g});
    Value base = b.mul(g, b.idx(size));
    b.loop(b.idx(0), b.idx(size), [&](Value i) {
      memref::StoreOp::create(b, b.i32(1), th.allowed, {b.add(base, i)});
    });
  });
}

/// Top-k: k passes, each taking the best allowed expert not taken yet
/// (strict >, so ties keep the lower id as in a stable sort). Writes ids and
/// scores; returns the sum of the k scores.
Value emitRouterSelect(RouterTopKThread &th) {
  KernelBuilder &b = th.b;
  return b.loop(
      b.idx(0), b.idx(th.o.k), {b.f32(0)},
      [&](Value j, ValueRange it) -> SmallVector<Value> {
        auto best = b.loop(
            b.idx(0), th.E, {th.negInf, b.idx(0), b.idx(0)},
            [&](Value e, ValueRange st) -> SmallVector<Value> {
              Value ok =
                  b.eq(memref::LoadOp::create(b, th.allowed, {e}), b.i32(1));
              Value v = memref::LoadOp::create(b, th.select, {e});
              Value first = b.eq(st[2], b.idx(0));
              Value better = b.land(
                  ok, arith::OrIOp::create(b, first, b.fgt(v, st[0])));
              return {b.select(better, v, st[0]), b.select(better, e, st[1]),
                      b.select(better, b.idx(1), st[2])};
            });
        Value e = best[1];
        memref::StoreOp::create(b, b.i32(0), th.allowed, {e});
        b.storeI32(e, th.ids, {th.t, j});
        Value w = memref::LoadOp::create(b, th.score, {e});
        memref::StoreOp::create(b, w, th.weights, {th.t, j});
        return {b.fadd(it[0], w)};
      })[0];
}

/// Weights: softmax over the k picked logits, renormalization, scaling.
void emitRouterWeights(RouterTopKThread &th, Value sumW) {
  KernelBuilder &b = th.b;
  const RouterTopKOptions &o = th.o;
  Value t = th.t, weights = th.weights;
  if (o.topkThenSoftmax) {
    Value top = b.loop(b.idx(0), b.idx(o.k), {th.negInf},
                       [&](Value j, ValueRange it) -> SmallVector<Value> {
                         return {b.fmax(it[0], memref::LoadOp::create(
                                                   b, weights, {t, j}))};
                       })[0];
    sumW = b.loop(b.idx(0), b.idx(o.k), {b.f32(0)},
                  [&](Value j, ValueRange it) -> SmallVector<Value> {
                    Value v = b.exp(b.fsub(
                        memref::LoadOp::create(b, weights, {t, j}), top));
                    memref::StoreOp::create(b, v, weights, {t, j});
                    return {b.fadd(it[0], v)};
                  })[0];
    b.loop(b.idx(0), b.idx(o.k), [&](Value j) {
      Value v = memref::LoadOp::create(b, weights, {t, j});
      memref::StoreOp::create(b, b.fdiv(v, sumW), weights, {t, j});
    });
    sumW = b.f32(1.0);
  }
  if (o.renormalize || o.scaling != 1.0) {
    Value factor = b.f32(o.scaling);
    if (o.renormalize)
      factor = b.fdiv(factor, sumW);
    b.loop(b.idx(0), b.idx(o.k), [&](Value j) {
      Value v = memref::LoadOp::create(b, weights, {t, j});
      memref::StoreOp::create(b, b.fmul(v, factor), weights, {t, j});
    });
  }
}

} // namespace

LogicalResult scalar::emitRouterTopK(moe::RouterTopKOp op, moe::TileAttr tile,
                                     BufferMap buffer, LoweringContext &ctx) {
  Value logits = buffer(op.getLogits());
  Value bias = buffer(op.getSelectionBias());
  RouterTopKOptions o;
  o.experts = cast<MemRefType>(logits.getType()).getDimSize(1);
  o.k = op.getK();
  o.softmax = op.getScoring() == moe::Scoring::softmax;
  o.topkThenSoftmax = op.getOrder() == moe::TopKOrder::topk_then_softmax;
  o.groups = op.getNumGroups().value_or(0);
  o.topkGroups = op.getTopkGroups().value_or(0);
  o.renormalize = op.getRenormalize();
  o.scaling = op.getScalingFactor().convertToDouble();
  o.hasBias = bool(bias);
  // Without a bias the ranking of softmax/sigmoid scores is the ranking of
  // the logits: select on the logits so that f32 rounding of the scores
  // cannot reorder near-ties.
  o.selectOnScores = bias && !o.topkThenSoftmax;

  SmallVector<Value> operands = {logits, buffer(op.getWeights()),
                                 buffer(op.getIds())};
  if (bias)
    operands.push_back(bias);
  Value tokens = ctx.sizes(logits)[0];
  return launchPerItem(
      ctx, "", tokens, tile, operands,
      [&](KernelBuilder &b, ValueRange args, Value t) {
        RouterTopKThread th{b, o, t, args[0], args[1], args[2],
                            bias ? args[3] : Value()};
        th.E = b.idx(o.experts);
        auto f32x = MemRefType::get({o.experts}, b.getF32Type());
        th.score = b.alloca(f32x);
        th.select = b.alloca(f32x);
        th.allowed = b.alloca(MemRefType::get({o.experts}, b.getI32Type()));
        th.negInf = b.f32(-std::numeric_limits<float>::infinity());
        emitRouterScores(th);
        if (o.groups)
          emitRouterGroupLimit(th);
        emitRouterWeights(th, emitRouterSelect(th));
      });
}

namespace {

/// router_topk_grad's attributes, as its kernel reads them.
struct RouterGradOptions {
  int64_t experts, k;
  bool softmax, topkThenSoftmax, renormalize;
  double scaling;
};

/// One token's thread of the scalar router_topk_grad: its buffers, the
/// forward's selected values p and their gradients dp (k each), and the
/// softmax's peak, sum, top index and the others' sum (restSum).
struct RouterGradThread {
  KernelBuilder &b;
  const RouterGradOptions &o;
  Value t, lg, ids, dw, out;
  Value E, K, zero, negInf, p, dp;
  Value peak, sum, top, restSum;

  Value idOf(Value j) { return b.loadIdx(ids, {t, j}); }
  Value logitOf(Value j) { return b.loadF(lg, {t, idOf(j)}); }
  Value at(Value buf, Value j) {
    return memref::LoadOp::create(b, buf, {j}).getResult();
  }
  /// Σ_i p_i (v_j − v_i) over the k selected, for buffer v.
  Value spread(Value v, Value j) {
    Value vj = at(v, j);
    return b.loop(b.idx(0), K, {zero},
                  [&](Value i, ValueRange it) -> SmallVector<Value> {
                    Value d = b.fsub(vj, at(v, i));
                    return {b.fadd(it[0], b.fmul(at(p, i), d))};
                  })[0];
  }
  Value scoreOf(Value x) {
    return o.softmax ? b.fdiv(b.exp(b.fsub(x, peak)), sum) : b.sigmoid(x);
  }
};

/// The forward's selected values p_j (before renormalization and scaling):
/// the softmax over the k picked logits, or the scores. `top` is the first
/// largest logit's index and `restSum` the sum of the others'
/// exp(x − peak), so that 1 − s_top = restSum / sum exactly where it is
/// tiny. Stores p and dp = the given gradient; returns Z = Σ p_j.
Value emitSelectedScores(RouterGradThread &th) {
  KernelBuilder &b = th.b;
  Value zero = th.zero, K = th.K;
  th.peak = th.negInf;
  th.sum = b.f32(1);
  th.top = b.idx(0);
  th.restSum = zero;
  if (th.o.softmax) {
    Value n = th.o.topkThenSoftmax ? K : th.E;
    auto x = [&](Value i) {
      return th.o.topkThenSoftmax ? th.logitOf(i) : b.loadF(th.lg, {th.t, i});
    };
    auto best = b.loop(b.idx(0), n, {th.negInf, b.idx(0)},
                       [&](Value i, ValueRange it) -> SmallVector<Value> {
                         Value v = x(i), better = b.fgt(v, it[0]);
                         return {b.select(better, v, it[0]),
                                 b.select(better, i, it[1])};
                       });
    th.peak = best[0];
    th.top = best[1];
    th.restSum =
        b.loop(b.idx(0), n, {zero},
               [&](Value i, ValueRange it) -> SmallVector<Value> {
                 Value v = b.exp(b.fsub(x(i), th.peak));
                 return {b.fadd(it[0], b.select(b.eq(i, th.top), zero, v))};
               })[0];
    th.sum = b.fadd(th.restSum, b.f32(1));
  }
  return b.loop(b.idx(0), K, {zero},
                [&](Value j, ValueRange it) -> SmallVector<Value> {
                  Value v = th.scoreOf(th.logitOf(j));
                  memref::StoreOp::create(b, v, th.p, {j});
                  memref::StoreOp::create(b, b.loadF(th.dw, {th.t, j}), th.dp,
                                          {j});
                  return {b.fadd(it[0], v)};
                })[0];
}

/// Through renormalization and scaling: w_j = c p_j / Z, so
/// dp_j = c (g_j − Σ_i g_i p_i / Z) / Z = c Σ_i p_i (g_j − g_i) / Z².
void emitRenormalizeGrad(RouterGradThread &th, Value z) {
  KernelBuilder &b = th.b;
  Value K = th.K, dp = th.dp;
  Value c = b.f32(th.o.scaling);
  if (th.o.renormalize) {
    Value factor = b.fdiv(c, b.fmul(z, z));
    Value g = b.alloca(MemRefType::get({th.o.k}, b.getF32Type()));
    b.loop(b.idx(0), K, [&](Value j) {
      memref::StoreOp::create(b, th.at(dp, j), g, {j});
    });
    b.loop(b.idx(0), K, [&](Value j) {
      memref::StoreOp::create(b, b.fmul(factor, th.spread(g, j)), dp, {j});
    });
  } else if (th.o.scaling != 1.0) {
    b.loop(b.idx(0), K, [&](Value j) {
      memref::StoreOp::create(b, b.fmul(c, th.at(dp, j)), dp, {j});
    });
  }
}

/// The gradient of expert e's logit x through the scores: `selected` and
/// `mm` (its place among the selected, 0 when not), `mix` = Σ_j dp_j p_j.
Value emitExpertGrad(RouterGradThread &th, Value e, Value selected, Value mm,
                     Value x, Value mix) {
  KernelBuilder &b = th.b;
  Value zero = th.zero, p = th.p, dp = th.dp;
  if (th.o.topkThenSoftmax) // p_m Σ_i p_i (dp_m − dp_i); unselected: none.
    return b.fmul(th.at(p, mm), th.spread(dp, mm));
  if (!th.o.softmax) // dp_m s (1 − s) with 1 − s = sigmoid(−x).
    return b.fmul(b.fmul(th.at(dp, mm), b.sigmoid(x)),
                  b.sigmoid(b.fsub(zero, x)));
  // Softmax over all experts: s_e (dp[e] − Σ_j dp_j p_j). For a selected e,
  // dp_m − Σ_j dp_j p_j = dp_m (1 − p_m) − Σ_{j≠m} dp_j p_j; 1 − p_m is the
  // other experts' share (at most one expert, the top, can have
  // p_m > 1/2).
  Value s = th.scoreOf(x);
  Value others = b.select(b.eq(e, th.top), b.fdiv(th.restSum, th.sum),
                          b.fsub(b.f32(1), s));
  // Σ_{j≠m} dp_j p_j summed directly (mix − dp_m p_m would cancel when p_m
  // is near 1).
  Value rest =
      b.loop(b.idx(0), th.K, {zero},
             [&](Value j, ValueRange it) -> SmallVector<Value> {
               Value term = b.fmul(th.at(dp, j), th.at(p, j));
               return {b.fadd(it[0], b.select(b.eq(j, mm), zero, term))};
             })[0];
  Value own = b.fsub(b.fmul(th.at(dp, mm), others), rest);
  return b.select(selected, b.fmul(s, own), b.fsub(zero, b.fmul(s, mix)));
}

/// Back through the scores, one expert at a time: `m` is its place among
/// the selected (k when not selected).
void emitLogitGrads(RouterGradThread &th) {
  KernelBuilder &b = th.b;
  Value K = th.K, zero = th.zero;
  Value mix = b.loop(b.idx(0), K, {zero},
                     [&](Value j, ValueRange it) -> SmallVector<Value> {
                       return {b.fadd(it[0],
                                      b.fmul(th.at(th.dp, j), th.at(th.p, j)))};
                     })[0];
  b.loop(b.idx(0), th.E, [&](Value e) {
    Value m = b.loop(b.idx(0), K, {K},
                     [&](Value j, ValueRange it) -> SmallVector<Value> {
                       return {b.select(b.eq(th.idOf(j), e), j, it[0])};
                     })[0];
    Value selected = b.ult(m, K);
    Value mm = b.select(selected, m, b.idx(0));
    Value x = b.loadF(th.lg, {th.t, e});
    Value grad = emitExpertGrad(th, e, selected, mm, x, mix);
    if (th.o.topkThenSoftmax || !th.o.softmax)
      grad = b.select(selected, grad, zero);
    b.storeF(grad, th.out, {th.t, e});
  });
}

} // namespace

LogicalResult scalar::emitRouterTopKGrad(moe::RouterTopKGradOp op,
                                         moe::TileAttr tile, BufferMap buffer,
                                         LoweringContext &ctx) {
  Value logits = buffer(op.getLogits());
  RouterGradOptions o;
  o.experts = cast<MemRefType>(logits.getType()).getDimSize(1);
  o.k = cast<MemRefType>(buffer(op.getIds()).getType()).getDimSize(1);
  o.softmax = op.getScoring() == moe::Scoring::softmax;
  o.topkThenSoftmax = op.getOrder() == moe::TopKOrder::topk_then_softmax;
  o.renormalize = op.getRenormalize();
  o.scaling = op.getScalingFactor().convertToDouble();
  SmallVector<Value> operands = {logits, buffer(op.getIds()),
                                 buffer(op.getGradWeights()),
                                 buffer(op.getGradLogits())};
  // The textbook forms (softmax: s·(g − Σ g·s)) cancel catastrophically in
  // f32 when one expert takes nearly all the weight (1 − s rounds to 0), so
  // every difference below is formed where it is exact: as a sum of the
  // other terms (Σ_i p_i (g_j − g_i)), or sigmoid(−x) for 1 − sigmoid(x).
  return launchPerItem(
      ctx, "", ctx.sizes(logits)[0], tile, operands,
      [&](KernelBuilder &b, ValueRange args, Value t) {
        RouterGradThread th{b, o, t, args[0], args[1], args[2], args[3]};
        th.E = b.idx(o.experts);
        th.K = b.idx(o.k);
        th.zero = b.f32(0);
        th.negInf = b.f32(-std::numeric_limits<float>::infinity());
        auto f32k = MemRefType::get({o.k}, b.getF32Type());
        th.p = b.alloca(f32k);
        th.dp = b.alloca(f32k);
        Value z = emitSelectedScores(th);
        emitRenormalizeGrad(th, z);
        emitLogitGrads(th);
      });
}

LogicalResult scalar::emitSortByExpert(moe::SortByExpertOp op,
                                       moe::TileAttr tile, BufferMap buffer,
                                       LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value ids = buffer(op.getIds());
  Value sorted = buffer(op.getSortedExpertIds());
  Value slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets());
  int64_t experts = op.getNumExperts();
  int64_t align = op.getAlign().value_or(1);
  SmallVector<Value> idSizes = ctx.sizes(ids);
  Value numSlots = h.mul(idSizes[0], idSizes[1]);
  Value capacity = ctx.sizes(slots)[0];
  Value counts = ctx.allocTemp(MemRefType::get({experts}, h.getI32Type()),
                               {h.idx(experts)});
  int64_t k = cast<MemRefType>(ids.getType()).getDimSize(1);

  // 1. Per expert (one thread each): how many slots chose it.
  if (failed(launchPerItem(
          ctx, "count", h.idx(experts), tile, {ids, counts, numSlots},
          [&](KernelBuilder &b, ValueRange a, Value e) {
            Value n = b.loop(
                b.idx(0), a[2], {b.idx(0)},
                [&](Value s, ValueRange it) -> SmallVector<Value> {
                  Value id =
                      b.loadIdx(a[0], {b.div(s, b.idx(k)), b.rem(s, b.idx(k))});
                  return {b.select(b.eq(id, e), b.add(it[0], b.idx(1)), it[0])};
                })[0];
            b.storeI32(n, a[1], {e});
          })))
    return failure();

  // 2. One thread: the group ends (each group padded to `align`), the
  //    expert id of every row, and -1 past the last group.
  moe::TileAttr single = moe::TileAttr::get(op.getContext(), 1, 1, 1, 32);
  if (failed(launchPerItem(
          ctx, "offsets", h.idx(1), single, {counts, offsets, sorted, capacity},
          [&](KernelBuilder &b, ValueRange a, Value) {
            Value end =
                b.loop(b.idx(0), b.idx(experts), {b.idx(0)},
                       [&](Value e, ValueRange it) -> SmallVector<Value> {
                         Value n = b.loadIdx(a[0], {e});
                         Value padded =
                             b.mul(b.ceilDiv(n, b.idx(align)), b.idx(align));
                         Value next = b.add(it[0], padded);
                         b.loop(it[0], next,
                                [&](Value r) { b.storeI32(e, a[2], {r}); });
                         b.storeI32(next, a[1], {e});
                         return {next};
                       })[0];
            b.loop(end, a[3], [&](Value r) { b.storeI32Const(-1, a[2], {r}); });
          })))
    return failure();

  // 3. Per expert: its slots in increasing order (a stable sort), then -1
  //    for its padding rows; -1 past the last group. With `positions`, each
  //    slot's row as well.
  Value positions = buffer(op.getPositions());
  SmallVector<Value> placeOperands = {ids,   counts,   offsets,
                                      slots, numSlots, capacity};
  if (positions)
    placeOperands.push_back(positions);
  return launchPerItem(
      ctx, "place", h.idx(experts), tile, placeOperands,
      [&](KernelBuilder &b, ValueRange a, Value e) {
        Value end = b.loadIdx(a[2], {e});
        Value n = b.loadIdx(a[1], {e});
        Value padded = b.mul(b.ceilDiv(n, b.idx(align)), b.idx(align));
        Value start = b.sub(end, padded);
        Value pos =
            b.loop(b.idx(0), a[4], {start},
                   [&](Value s, ValueRange it) -> SmallVector<Value> {
                     Value id = b.loadIdx(
                         a[0], {b.div(s, b.idx(k)), b.rem(s, b.idx(k))});
                     Value match = b.eq(id, e);
                     b.ifThen(match, [&] {
                       b.storeI32(s, a[3], {it[0]});
                       if (positions)
                         b.storeI32(it[0], a[6], {s});
                     });
                     return {b.select(match, b.add(it[0], b.idx(1)), it[0])};
                   })[0];
        b.loop(pos, end, [&](Value r) { b.storeI32Const(-1, a[3], {r}); });
        b.ifThen(b.eq(e, b.idx(experts - 1)), [&] {
          b.loop(end, a[5], [&](Value r) { b.storeI32Const(-1, a[3], {r}); });
        });
      });
}
