//===- Kernels.cpp - Naive kernel bodies of the moe ops -------------------===//
//
// Part of moec. One generator per op, mirroring the float64 reference loop
// by loop (lib/Reference): one thread per output element (or per token, per
// expert), f32 arithmetic, one rounding at the store. Correct first; the
// performance issues replace the hot ones with tiled wgmma/TMA kernels.
//
// Conventions: `ctx.launch` creates a kernel whose arguments are the given
// host operands, in order; a kernel over `n` work items is launched on
// ceil(n / threads) blocks and guards `id < n`. Sizes passed as index
// arguments become the kernel's scalar parameters.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Conversion/LaunchABI.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

//===----------------------------------------------------------------------===//
// Helpers shared with VectorKernels.cpp (declared in LoweringContext.h)
//===----------------------------------------------------------------------===//

LogicalResult moec::kernels::launchPerItem(
    LoweringContext &ctx, StringRef suffix, Value count, moe::TileAttr tile,
    ValueRange operands,
    const std::function<void(KernelBuilder &, ValueRange, Value)> &body) {
  KernelBuilder &h = ctx.host();
  Value grid = h.ceilDiv(count, h.idx(tile.getThreads()));
  // The item count travels as the last kernel argument.
  SmallVector<Value> all(operands);
  all.push_back(count);
  return ctx.launch(
      suffix, grid, tile, all,
      [&, threads = tile.getThreads()](KernelBuilder &b, ValueRange args,
                                       Value block, Value thread) {
        Value id = b.add(b.mul(block, b.idx(threads)), thread);
        Value n = args.back();
        b.ifThen(b.ult(id, n), [&] { body(b, args.drop_back(), id); });
      });
}

Value moec::kernels::groupStart(KernelBuilder &b, Value offsets, Value e) {
  return b.ifElse(
      b.eq(e, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
      [&] { return b.loadIdx(offsets, {b.sub(e, b.idx(1))}); });
}

FailureOr<Value> moec::kernels::emitInverse(LoweringContext &ctx,
                                            moe::TileAttr tile, Value slots,
                                            Value offsets, Value numSlots,
                                            Value positions) {
  if (positions)
    return positions;
  KernelBuilder &h = ctx.host();
  Value inverse = ctx.allocTemp(
      MemRefType::get({ShapedType::kDynamic}, h.getI32Type()), {numSlots});
  if (failed(launchPerItem(ctx, "inverse_fill", numSlots, tile, {inverse},
                           [&](KernelBuilder &b, ValueRange a, Value s) {
                             b.storeI32Const(-1, a[0], {s});
                           })))
    return failure();
  Value rows = ctx.sizes(slots)[0];
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  if (failed(launchPerItem(
      ctx, "inverse", rows, tile, {slots, offsets, inverse, numSlots},
      [&](KernelBuilder &b, ValueRange a, Value r) {
        Value end = b.loadIdx(a[1], {b.idx(experts - 1)});
        auto [slot, valid] = b.loadSigned(a[0], {r});
        Value ok = b.land(b.land(valid, b.ult(r, end)), b.ult(slot, a[3]));
        b.ifThen(ok, [&] { b.storeI32(r, a[2], {slot}); });
      })))
    return failure();
  return inverse;
}

Value moec::kernels::addressOf(KernelBuilder &b, Value memref) {
  return memref::ExtractAlignedPointerAsIndexOp::create(b, memref);
}

Value moec::kernels::tensorMapOperand(KernelBuilder &h, Value buffer,
                                      ArrayRef<int64_t> box) {
  auto cast = UnrealizedConversionCastOp::create(
      h, TypeRange{LLVM::LLVMPointerType::get(h.getContext())},
      ValueRange{buffer});
  cast->setAttr(moe::kTensorMapBoxAttrName, h.getDenseI64ArrayAttr(box));
  return cast.getResult(0);
}

std::optional<std::pair<Value, ArrayRef<int64_t>>>
moec::tensorMapOf(Value operand) {
  auto cast = operand.getDefiningOp<UnrealizedConversionCastOp>();
  if (!cast || cast->getNumOperands() != 1)
    return std::nullopt;
  auto box = cast->getAttrOfType<DenseI64ArrayAttr>(moe::kTensorMapBoxAttrName);
  if (!box)
    return std::nullopt;
  return std::make_pair(cast->getOperand(0), box.asArrayRef());
}

Value moec::kernels::pointerAt(KernelBuilder &b, Value address,
                               unsigned addressSpace) {
  return LLVM::IntToPtrOp::create(
      b, LLVM::LLVMPointerType::get(b.getContext(), addressSpace),
      arith::IndexCastOp::create(b, b.getI64Type(), address).getResult());
}

Value moec::kernels::isPaddingRow(KernelBuilder &b, Value slots,
                                  Value offsets, Value r) {
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  Value end = b.loadIdx(offsets, {b.idx(experts - 1)});
  Value valid = b.loadSigned(slots, {r}).second;
  return b.select(valid, b.ule(end, r),
                  arith::ConstantOp::create(b, b.getBoolAttr(true)));
}

LogicalResult moec::kernels::emitSlotScatter(LoweringContext &ctx,
                                             moe::TileAttr tile, Value values,
                                             Value slots, Value offsets,
                                             Value out, Value positions) {
  KernelBuilder &h = ctx.host();
  SmallVector<Value> outSizes = ctx.sizes(out);
  Value numSlots = h.mul(outSizes[0], outSizes[1]);
  if (positions)
    // Every slot has a row: one gather in slot order, coalesced stores.
    return launchPerItem(
        ctx, "slot_gather", numSlots, tile, {values, positions, out},
        [&](KernelBuilder &b, ValueRange a, Value s) {
          Value k = b.dim(a[2], 1);
          b.storeF(b.loadF(a[0], {b.loadIdx(a[1], {s})}), a[2],
                   {b.div(s, k), b.rem(s, k)});
        });
  if (failed(launchPerItem(ctx, "slot_fill", numSlots, tile, {out},
                           [&](KernelBuilder &b, ValueRange a, Value s) {
                             Value k = b.dim(a[0], 1);
                             b.storeF(b.f32(0), a[0],
                                      {b.div(s, k), b.rem(s, k)});
                           })))
    return failure();
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  return launchPerItem(
      ctx, "slot_scatter", ctx.sizes(slots)[0], tile,
      {values, slots, offsets, out, numSlots},
      [&](KernelBuilder &b, ValueRange a, Value r) {
        Value end = b.loadIdx(a[2], {b.idx(experts - 1)});
        auto [slot, valid] = b.loadSigned(a[1], {r});
        Value ok = b.land(b.land(valid, b.ult(r, end)), b.ult(slot, a[4]));
        b.ifThen(ok, [&] {
          Value k = b.dim(a[3], 1);
          b.storeF(b.loadF(a[0], {r}), a[3], {b.div(slot, k), b.rem(slot, k)});
        });
      });
}

Value moec::kernels::gateUpColumn(KernelBuilder &b, moe::GateUpLayout layout, Value half,
                   Value c, bool up) {
  if (layout == moe::GateUpLayout::interleaved)
    return b.add(b.mul(c, b.idx(2)), b.idx(up ? 1 : 0));
  return up ? b.add(c, half) : c;
}

Value moec::kernels::groupScale(KernelBuilder &b, Value amax, double fp8Max, bool pow2) {
  Value scale = b.fdiv(amax, b.f32(fp8Max));
  if (pow2) {
    // 2^ceil(log2 s): bump the exponent unless s is already a power of two.
    Value bits = arith::BitcastOp::create(b, b.getI32Type(), scale);
    Value mantissa = arith::AndIOp::create(b, bits, b.i32(0x7fffff));
    Value exponentBits = arith::AndIOp::create(b, bits, b.i32(0x7f800000));
    Value exact = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, mantissa,
                                        b.i32(0));
    Value up = arith::AddIOp::create(b, exponentBits, b.i32(0x800000));
    scale = arith::BitcastOp::create(b, b.getF32Type(),
                                     b.select(exact, exponentBits, up));
  }
  Value zero = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, amax,
                                     b.f32(0));
  return b.select(zero, b.f32(1.0), scale);
}

/// Smallest i in [0, n) with table[i] > value, or n: a binary search over a
/// non-decreasing i32 table, unrolled (n is static and small).
Value moec::kernels::firstGreater(KernelBuilder &b, Value table, int64_t n, Value value) {
  Value lo = b.idx(0), hi = b.idx(n);
  for (int64_t span = n; span > 0; span /= 2) {
    Value open = b.ult(lo, hi);
    Value mid = b.div(b.add(lo, hi), b.idx(2));
    Value at = b.loadIdx(table, {b.minIdx(mid, b.idx(n - 1))});
    Value greater = b.land(open, b.ult(value, at));
    Value notGreater = b.land(open, b.ule(at, value));
    hi = b.select(greater, mid, hi);
    lo = b.select(notGreater, b.add(mid, b.idx(1)), lo);
  }
  return lo;
}

double moec::kernels::fp8MaxOf(Type type) {
  return isa<Float8E4M3FNType>(type) ? 448.0 : 57344.0;
}

namespace {

/// The expert of grouped row `row`: the number of group ends <= row.
Value expertOfRow(KernelBuilder &b, Value offsets, Value numExperts,
                  Value row) {
  return b.loop(b.idx(0), numExperts, {b.idx(0)},
                [&](Value e, ValueRange it) -> SmallVector<Value> {
                  Value end = b.loadIdx(offsets, {e});
                  return {b.select(b.ule(end, row), b.add(it[0], b.idx(1)),
                                   it[0])};
                })[0];
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

LogicalResult lowerRouterTopK(moe::RouterTopKOp op, moe::TileAttr tile,
                              BufferMap buffer, LoweringContext &ctx) {
  Value logits = buffer(op.getLogits());
  Value bias = buffer(op.getSelectionBias());
  auto logitsType = cast<MemRefType>(logits.getType());
  int64_t experts = logitsType.getDimSize(1);
  int64_t k = op.getK();
  bool softmax = op.getScoring() == moe::Scoring::softmax;
  bool topkThenSoftmax = op.getOrder() == moe::TopKOrder::topk_then_softmax;
  int64_t groups = op.getNumGroups().value_or(0);
  int64_t topkGroups = op.getTopkGroups().value_or(0);
  bool renormalize = op.getRenormalize();
  double scaling = op.getScalingFactor().convertToDouble();
  // Without a bias the ranking of softmax/sigmoid scores is the ranking of
  // the logits: select on the logits so that f32 rounding of the scores
  // cannot reorder near-ties.
  bool selectOnScores = bias && !topkThenSoftmax;

  SmallVector<Value> operands = {logits, buffer(op.getWeights()),
                                 buffer(op.getIds())};
  if (bias)
    operands.push_back(bias);
  Value tokens = ctx.sizes(logits)[0];
  return launchPerItem(
      ctx, "", tokens, tile, operands,
      [&](KernelBuilder &b, ValueRange args, Value t) {
        Value lg = args[0], weights = args[1], ids = args[2];
        Value biasArg = bias ? args[3] : Value();
        Value E = b.idx(experts);
        auto f32x = MemRefType::get({experts}, b.getF32Type());
        Value score = b.alloca(f32x);
        Value select = b.alloca(f32x);
        Value allowed =
            b.alloca(MemRefType::get({experts}, b.getI32Type()));
        Value negInf = b.f32(-std::numeric_limits<float>::infinity());

        // Scores: softmax (with the row maximum subtracted), sigmoid, or the
        // raw logits (topk_then_softmax normalizes the k selected later).
        Value peak = b.loop(b.idx(0), E, {negInf},
                            [&](Value e, ValueRange it) -> SmallVector<Value> {
                              return {b.fmax(it[0], b.loadF(lg, {t, e}))};
                            })[0];
        Value sum = b.loop(b.idx(0), E, {b.f32(0)},
                           [&](Value e, ValueRange it) -> SmallVector<Value> {
                             Value x = b.loadF(lg, {t, e});
                             Value s = topkThenSoftmax ? x
                                       : softmax ? b.exp(b.fsub(x, peak))
                                                 : b.sigmoid(x);
                             memref::StoreOp::create(b, s, score, {e});
                             return {b.fadd(it[0], s)};
                           })[0];
        b.loop(b.idx(0), E, [&](Value e) {
          Value x = b.loadF(lg, {t, e});
          Value s = memref::LoadOp::create(b, score, {e});
          if (softmax && !topkThenSoftmax) {
            s = b.fdiv(s, sum);
            memref::StoreOp::create(b, s, score, {e});
          }
          Value sel = selectOnScores ? s : x;
          if (bias)
            sel = b.fadd(sel, b.loadF(biasArg, {e}));
          memref::StoreOp::create(b, sel, select, {e});
          memref::StoreOp::create(b, b.i32(groups ? 0 : 1), allowed, {e});
        });

        // Group-limited routing: a group scores the sum of its two best
        // selection scores; the best `topk_groups` groups stay allowed.
        if (groups) {
          int64_t size = experts / groups;
          Value gscore = b.alloca(MemRefType::get({groups}, b.getF32Type()));
          b.loop(b.idx(0), b.idx(groups), [&](Value g) {
            Value base = b.mul(g, b.idx(size));
            auto best = b.loop(
                b.idx(0), b.idx(size), {negInf, negInf},
                [&](Value i, ValueRange it) -> SmallVector<Value> {
                  Value v = memref::LoadOp::create(b, select, {b.add(base, i)});
                  Value isFirst = b.fgt(v, it[0]);
                  Value isSecond = b.fgt(v, it[1]);
                  Value second = b.select(
                      isFirst, it[0], b.select(isSecond, v, it[1]));
                  return {b.select(isFirst, v, it[0]), second};
                });
            Value total =
                size > 1 ? b.fadd(best[0], best[1]) : best[0];
            memref::StoreOp::create(b, total, gscore, {g});
          });
          b.loop(b.idx(0), b.idx(topkGroups), [&](Value) {
            auto best = b.loop(
                b.idx(0), b.idx(groups), {negInf, b.idx(0), b.idx(0)},
                [&](Value g, ValueRange it) -> SmallVector<Value> {
                  Value v = memref::LoadOp::create(b, gscore, {g});
                  Value first = b.eq(it[2], b.idx(0));
                  Value better =
                      arith::OrIOp::create(b, first, b.fgt(v, it[0]));
                  return {b.select(better, v, it[0]),
                          b.select(better, g, it[1]), b.idx(1)};
                });
            // Ties keep the lower group (strict >); a picked group drops to
            // -inf so it is not picked again.
            Value g = best[1];
            memref::StoreOp::create(b, negInf, gscore, {g});
            Value base = b.mul(g, b.idx(size));
            b.loop(b.idx(0), b.idx(size), [&](Value i) {
              memref::StoreOp::create(b, b.i32(1), allowed, {b.add(base, i)});
            });
          });
        }

        // Top-k: k passes, each taking the best allowed expert not taken yet
        // (strict >, so ties keep the lower id as in a stable sort).
        Value sumW = b.loop(b.idx(0), b.idx(k), {b.f32(0)},
                      [&](Value j, ValueRange it) -> SmallVector<Value> {
                        auto best = b.loop(
                            b.idx(0), E, {negInf, b.idx(0), b.idx(0)},
                            [&](Value e, ValueRange st) -> SmallVector<Value> {
                              Value ok = b.eq(
                                  memref::LoadOp::create(b, allowed, {e}),
                                  b.i32(1));
                              Value v = memref::LoadOp::create(b, select, {e});
                              Value first = b.eq(st[2], b.idx(0));
                              Value better = b.land(
                                  ok, arith::OrIOp::create(b, first,
                                                           b.fgt(v, st[0])));
                              return {b.select(better, v, st[0]),
                                      b.select(better, e, st[1]),
                                      b.select(better, b.idx(1), st[2])};
                            });
                        Value e = best[1];
                        memref::StoreOp::create(b, b.i32(0), allowed, {e});
                        b.storeI32(e, ids, {t, j});
                        Value w = memref::LoadOp::create(b, score, {e});
                        memref::StoreOp::create(b, w, weights, {t, j});
                        return {b.fadd(it[0], w)};
                      })[0];

        // Weights: softmax over the k picked logits, renormalization,
        // scaling.
        if (topkThenSoftmax) {
          Value top = b.loop(b.idx(0), b.idx(k), {negInf},
                             [&](Value j, ValueRange it) -> SmallVector<Value> {
                               return {b.fmax(it[0], memref::LoadOp::create(
                                                         b, weights, {t, j}))};
                             })[0];
          sumW = b.loop(b.idx(0), b.idx(k), {b.f32(0)},
                        [&](Value j, ValueRange it) -> SmallVector<Value> {
                          Value v = b.exp(b.fsub(
                              memref::LoadOp::create(b, weights, {t, j}), top));
                          memref::StoreOp::create(b, v, weights, {t, j});
                          return {b.fadd(it[0], v)};
                        })[0];
          b.loop(b.idx(0), b.idx(k), [&](Value j) {
            Value v = memref::LoadOp::create(b, weights, {t, j});
            memref::StoreOp::create(b, b.fdiv(v, sumW), weights, {t, j});
          });
          sumW = b.f32(1.0);
        }
        if (renormalize || scaling != 1.0) {
          Value factor = b.f32(scaling);
          if (renormalize)
            factor = b.fdiv(factor, sumW);
          b.loop(b.idx(0), b.idx(k), [&](Value j) {
            Value v = memref::LoadOp::create(b, weights, {t, j});
            memref::StoreOp::create(b, b.fmul(v, factor), weights, {t, j});
          });
        }
      });
}

LogicalResult lowerSortByExpert(moe::SortByExpertOp op, moe::TileAttr tile,
                                BufferMap buffer, LoweringContext &ctx) {
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
  Value counts = ctx.allocTemp(
      MemRefType::get({experts}, h.getI32Type()), {h.idx(experts)});
  int64_t k = cast<MemRefType>(ids.getType()).getDimSize(1);

  // 1. Per expert (one thread each): how many slots chose it.
  if (failed(launchPerItem(
          ctx, "count", h.idx(experts), tile, {ids, counts, numSlots},
          [&](KernelBuilder &b, ValueRange a, Value e) {
            Value n = b.loop(
                b.idx(0), a[2], {b.idx(0)},
                [&](Value s, ValueRange it) -> SmallVector<Value> {
                  Value id = b.loadIdx(a[0], {b.div(s, b.idx(k)),
                                              b.rem(s, b.idx(k))});
                  return {b.select(b.eq(id, e), b.add(it[0], b.idx(1)),
                                   it[0])};
                })[0];
            b.storeI32(n, a[1], {e});
          })))
    return failure();

  // 2. One thread: the group ends (each group padded to `align`), the
  //    expert id of every row, and -1 past the last group.
  moe::TileAttr single =
      moe::TileAttr::get(op.getContext(), 1, 1, 1, 32);
  if (failed(launchPerItem(
          ctx, "offsets", h.idx(1), single, {counts, offsets, sorted, capacity},
          [&](KernelBuilder &b, ValueRange a, Value) {
            Value end = b.loop(
                b.idx(0), b.idx(experts), {b.idx(0)},
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
            b.loop(end, a[3],
                   [&](Value r) { b.storeI32Const(-1, a[2], {r}); });
          })))
    return failure();

  // 3. Per expert: its slots in increasing order (a stable sort), then -1
  //    for its padding rows; -1 past the last group. With `positions`, each
  //    slot's row as well.
  Value positions = buffer(op.getPositions());
  SmallVector<Value> placeOperands = {ids,       counts,  offsets,
                                      slots,     numSlots, capacity};
  if (positions)
    placeOperands.push_back(positions);
  return launchPerItem(
      ctx, "place", h.idx(experts), tile, placeOperands,
      [&](KernelBuilder &b, ValueRange a, Value e) {
        Value end = b.loadIdx(a[2], {e});
        Value n = b.loadIdx(a[1], {e});
        Value padded = b.mul(b.ceilDiv(n, b.idx(align)), b.idx(align));
        Value start = b.sub(end, padded);
        Value pos = b.loop(
            b.idx(0), a[4], {start},
            [&](Value s, ValueRange it) -> SmallVector<Value> {
              Value id =
                  b.loadIdx(a[0], {b.div(s, b.idx(k)), b.rem(s, b.idx(k))});
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
          b.loop(end, a[5],
                 [&](Value r) { b.storeI32Const(-1, a[3], {r}); });
        });
      });
}

//===----------------------------------------------------------------------===//
// Permutation
//===----------------------------------------------------------------------===//

LogicalResult lowerPermute(moe::PermuteOp op, moe::TileAttr tile,
                           BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value tokens = buffer(op.getTokens()), slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets()), rows = buffer(op.getRows());
  Value probs = buffer(op.getProbs()), scales = buffer(op.getScales());
  Value outProbs = buffer(op.getPermutedProbs());
  Value outScales = buffer(op.getPermutedScales());
  int64_t k = op.getK();
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  SmallVector<Value> rowSizes = ctx.sizes(rows);
  Value hidden = rowSizes[1];
  SmallVector<Value> operands = {tokens, slots, offsets, rows};
  if (probs)
    operands.append({probs, outProbs});
  if (scales)
    operands.append({scales, outScales});
  return launchPerItem(
      ctx, "", h.mul(rowSizes[0], hidden), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value H = b.dim(a[3], 1);
        Value r = b.div(id, H), c = b.rem(id, H);
        Value end = b.loadIdx(a[2], {b.idx(experts - 1)});
        auto [slot, valid] = b.loadSigned(a[1], {r});
        Value ok = b.land(valid, b.ult(r, end));
        Value token = b.div(slot, b.idx(k));
        Value v = b.ifElse(
            ok, b.getF32Type(), [&] { return b.loadF(a[0], {token, c}); },
            [&] { return b.f32(0); });
        b.storeF(v, a[3], {r, c});
        unsigned next = 4;
        if (probs) {
          Value in = a[next], out = a[next + 1];
          next += 2;
          b.ifThen(b.eq(c, b.idx(0)), [&] {
            Value p = b.ifElse(
                ok, b.getF32Type(),
                [&] { return b.loadF(in, {token, b.rem(slot, b.idx(k))}); },
                [&] { return b.f32(0); });
            b.storeF(p, out, {r});
          });
        }
        if (scales) {
          Value in = a[next], out = a[next + 1];
          b.ifThen(b.ult(c, b.dim(out, 1)), [&] {
            Value s = b.ifElse(
                ok, b.getF32Type(), [&] { return b.loadF(in, {token, c}); },
                [&] { return b.f32(0); });
            b.storeF(s, out, {r, c});
          });
        }
      });
}

/// out[t, c] = sum over j < k of weights[t, j] (1 without weights) times
/// rows[inverse[t·k + j], c] (0 for a slot without a row): one thread per
/// output element. The combine of unpermute and of permute_grad.
LogicalResult emitCombineScalar(LoweringContext &ctx, moe::TileAttr tile,
                                Value rows, Value inverse, Value weights,
                                Value out, int64_t k) {
  KernelBuilder &h = ctx.host();
  SmallVector<Value> outSizes = ctx.sizes(out);
  SmallVector<Value> operands = {rows, inverse, out};
  if (weights)
    operands.push_back(weights);
  return launchPerItem(
      ctx, "combine", h.mul(outSizes[0], outSizes[1]), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value H = b.dim(a[2], 1);
        Value t = b.div(id, H), c = b.rem(id, H);
        Value acc = b.loop(
            b.idx(0), b.idx(k), {b.f32(0)},
            [&](Value j, ValueRange it) -> SmallVector<Value> {
              auto [r, valid] =
                  b.loadSigned(a[1], {b.add(b.mul(t, b.idx(k)), j)});
              Value term = b.ifElse(
                  valid, b.getF32Type(),
                  [&] {
                    Value v = b.loadF(a[0], {r, c});
                    return weights ? b.fmul(v, b.loadF(a[3], {t, j})) : v;
                  },
                  [&] { return b.f32(0); });
              return {b.fadd(it[0], term)};
            })[0];
        b.storeF(acc, a[2], {t, c});
      });
}

LogicalResult lowerUnpermute(moe::UnpermuteOp op, moe::TileAttr tile,
                             BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value out = buffer(op.getOut());
  Value numSlots = h.mul(ctx.sizes(out)[0], h.idx(op.getK()));
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, buffer(op.getSlots()), buffer(op.getOffsets()),
                  numSlots, buffer(op.getPositions()));
  if (failed(inverse))
    return failure();
  return emitCombineScalar(ctx, tile, buffer(op.getRows()), *inverse,
                           buffer(op.getWeights()), out, op.getK());
}

LogicalResult lowerPermuteGrad(moe::PermuteGradOp op, moe::TileAttr tile,
                               BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value slots = buffer(op.getSlots()), offsets = buffer(op.getOffsets());
  Value gradTokens = buffer(op.getGradTokens());
  Value numSlots = h.mul(ctx.sizes(gradTokens)[0], h.idx(op.getK()));
  FailureOr<Value> inverse = emitInverse(ctx, tile, slots, offsets, numSlots,
                                         buffer(op.getPositions()));
  if (failed(inverse) ||
      failed(emitCombineScalar(ctx, tile, buffer(op.getGradRows()), *inverse,
                               /*weights=*/Value(), gradTokens, op.getK())))
    return failure();
  if (!op.getGradPermutedProbs())
    return success();
  return emitSlotScatter(ctx, tile, buffer(op.getGradPermutedProbs()), slots,
                         offsets, buffer(op.getGradProbs()),
                         buffer(op.getPositions()));
}

LogicalResult lowerUnpermuteGrad(moe::UnpermuteGradOp op, moe::TileAttr tile,
                                 BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value gradOut = buffer(op.getGradOut()), slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets()), weights = buffer(op.getWeights());
  Value rows = buffer(op.getRows()), gradRows = buffer(op.getGradRows());
  Value gradWeights = buffer(op.getGradWeights());
  int64_t k = op.getK();
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  SmallVector<Value> rowSizes = ctx.sizes(gradRows);
  // Each row takes its token's gradient, times its weight; padding rows and
  // rows past the last group are zero.
  SmallVector<Value> operands = {gradOut, slots, offsets, gradRows};
  if (weights)
    operands.push_back(weights);
  if (failed(launchPerItem(
          ctx, "scatter", h.mul(rowSizes[0], rowSizes[1]), tile, operands,
          [&](KernelBuilder &b, ValueRange a, Value id) {
            Value H = b.dim(a[3], 1);
            Value r = b.div(id, H), c = b.rem(id, H);
            Value end = b.loadIdx(a[2], {b.idx(experts - 1)});
            auto [slot, valid] = b.loadSigned(a[1], {r});
            Value ok = b.land(valid, b.ult(r, end));
            Value v = b.ifElse(
                ok, b.getF32Type(),
                [&] {
                  Value t = b.div(slot, b.idx(k));
                  Value g = b.loadF(a[0], {t, c});
                  return weights ? b.fmul(g, b.loadF(a[4], {t, b.rem(
                                                                slot, b.idx(k))}))
                                 : g;
                },
                [&] { return b.f32(0); });
            b.storeF(v, a[3], {r, c});
          })))
    return failure();
  if (!weights)
    return success();

  // The weight gradient: one thread per slot, the dot product of the
  // token's gradient with the forward row of the slot.
  SmallVector<Value> outSizes = ctx.sizes(gradOut);
  Value numSlots = h.mul(outSizes[0], h.idx(k));
  FailureOr<Value> inverse = emitInverse(ctx, tile, slots, offsets, numSlots,
                                         buffer(op.getPositions()));
  if (failed(inverse))
    return failure();
  return launchPerItem(
      ctx, "weights", numSlots, tile, {gradOut, rows, *inverse, gradWeights},
      [&](KernelBuilder &b, ValueRange a, Value s) {
        Value t = b.div(s, b.idx(k)), j = b.rem(s, b.idx(k));
        auto [r, valid] = b.loadSigned(a[2], {s});
        Value dot = b.ifElse(
            valid, b.getF32Type(),
            [&] {
              return b.loop(b.idx(0), b.dim(a[0], 1), {b.f32(0)},
                            [&](Value c, ValueRange it) -> SmallVector<Value> {
                              return {b.fadd(it[0],
                                             b.fmul(b.loadF(a[0], {t, c}),
                                                    b.loadF(a[1], {r, c})))};
                            })[0];
            },
            [&] { return b.f32(0); });
        b.storeF(dot, a[3], {t, j});
      });
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// Everything a grouped matmul output element needs, as kernel arguments.
struct MatmulArgs {
  Value lhs, rhs, offsets, gather, bias, loraA, loraB, rowScale;
  Value lhsScales, rhsScales; ///< FP8 block scales
  int64_t scaleGroup = 128;
  int64_t k = 1;        ///< slots per token (gather/scatter)
  bool transposeRhs = false;
  bool swiglu = false;
  double loraScaling = 1.0;
  int64_t rank = 0;     ///< LoRA rank
};

/// y[row, col] of a grouped matmul for expert e (f32), with bias, LoRA,
/// SwiGLU and row scale applied; zero for a padding row of a gather.
Value matmulElement(KernelBuilder &b, const MatmulArgs &m, Value e, Value row,
                    Value col, Value width) {
  Value K = b.dim(m.lhs, 1);
  auto dot = [&](Value lhsRow, Value c) {
    Value acc = b.loop(b.idx(0), K, {b.f32(0)},
                       [&](Value kk, ValueRange it) -> SmallVector<Value> {
                         Value x = b.loadF(m.lhs, {lhsRow, kk});
                         Value w = m.transposeRhs ? b.loadF(m.rhs, {e, c, kk})
                                                  : b.loadF(m.rhs, {e, kk, c});
                         if (m.lhsScales) {
                           // FP8: each operand times its block's scale.
                           Value g = b.idx(m.scaleGroup);
                           Value kb = b.div(kk, g), cb = b.div(c, g);
                           x = b.fmul(x, b.loadF(m.lhsScales, {lhsRow, kb}));
                           w = b.fmul(w, m.transposeRhs
                                             ? b.loadF(m.rhsScales, {e, cb, kb})
                                             : b.loadF(m.rhsScales, {e, kb, cb}));
                         }
                         return {b.fadd(it[0], b.fmul(x, w))};
                       })[0];
    if (m.bias)
      acc = b.fadd(acc, b.loadF(m.bias, {e, c}));
    if (m.loraA) {
      // (x · A_eᵀ) · B_eᵀ with A_e = A[e*r:(e+1)*r], B_e = B[:, e*r:(e+1)*r].
      Value base = b.mul(e, b.idx(m.rank));
      Value lora = b.loop(
          b.idx(0), b.idx(m.rank), {b.f32(0)},
          [&](Value r, ValueRange it) -> SmallVector<Value> {
            Value ar = b.add(base, r);
            Value xa = b.loop(b.idx(0), K, {b.f32(0)},
                              [&](Value kk, ValueRange st) -> SmallVector<Value> {
                                return {b.fadd(
                                    st[0],
                                    b.fmul(b.loadF(m.lhs, {lhsRow, kk}),
                                           b.loadF(m.loraA, {ar, kk})))};
                              })[0];
            return {b.fadd(it[0], b.fmul(xa, b.loadF(m.loraB, {c, ar})))};
          })[0];
      acc = b.fadd(acc, b.fmul(lora, b.f32(m.loraScaling)));
    }
    return acc;
  };
  auto compute = [&](Value lhsRow) -> Value {
    Value y;
    if (m.swiglu) {
      Value g = dot(lhsRow, col);
      Value u = dot(lhsRow, b.add(col, width));
      y = b.fmul(b.fmul(g, b.sigmoid(g)), u);
    } else {
      y = dot(lhsRow, col);
    }
    if (m.rowScale)
      y = b.fmul(y, b.loadF(m.rowScale, {row}));
    return y;
  };
  if (!m.gather)
    return compute(row);
  auto [slot, valid] = b.loadSigned(m.gather, {row});
  return b.ifElse(
      valid, b.getF32Type(),
      [&] { return compute(b.div(slot, b.idx(m.k))); },
      [&] { return b.f32(0); });
}

LogicalResult lowerGroupedMatmul(moe::GroupedMatmulOp op, moe::TileAttr tile,
                                 BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value lhs = buffer(op.getLhs()), rhs = buffer(op.getRhs());
  Value offsets = buffer(op.getOffsets()), out = buffer(op.getOut());
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  int64_t slotsPerToken = op.getK().value_or(1);

  if (op.getMode() == moe::MatmulMode::weight_grad) {
    // out[e, i, n] = sum over rows r of group e of lhs_r[i] · rhs[r, n].
    Value gather = buffer(op.getGatherSlots());
    SmallVector<Value> outSizes = ctx.sizes(out);
    Value count = h.mul(h.mul(outSizes[0], outSizes[1]), outSizes[2]);
    SmallVector<Value> operands = {lhs, rhs, offsets, out};
    if (gather)
      operands.push_back(gather);
    return launchPerItem(
        ctx, "weight_grad", count, tile, operands,
        [&](KernelBuilder &b, ValueRange a, Value id) {
          Value K = b.dim(a[3], 1), N = b.dim(a[3], 2);
          Value e = b.div(id, b.mul(K, N));
          Value i = b.rem(b.div(id, N), K), n = b.rem(id, N);
          Value start = groupStart(b, a[2], e);
          Value end = b.loadIdx(a[2], {e});
          Value acc = b.loop(
              start, end, {b.f32(0)},
              [&](Value r, ValueRange it) -> SmallVector<Value> {
                Value x;
                if (gather) {
                  auto [slot, valid] = b.loadSigned(a[4], {r});
                  x = b.ifElse(
                      valid, b.getF32Type(),
                      [&] {
                        return b.loadF(
                            a[0], {b.div(slot, b.idx(slotsPerToken)), i});
                      },
                      [&] { return b.f32(0); });
                } else {
                  x = b.loadF(a[0], {r, i});
                }
                return {b.fadd(it[0], b.fmul(x, b.loadF(a[1], {r, n})))};
              })[0];
          b.storeF(acc, a[3], {e, i, n});
        });
  }

  // Kernel arguments: lhs, rhs, offsets, out, then the optional operands in
  // a fixed order, remembered by position.
  SmallVector<Value> operands = {lhs, rhs, offsets, out};
  auto addOptional = [&](Value v) -> int {
    if (!v)
      return -1;
    operands.push_back(v);
    return operands.size() - 1;
  };
  int gatherAt = addOptional(buffer(op.getGatherSlots()));
  int biasAt = addOptional(buffer(op.getBias()));
  int loraAAt = addOptional(buffer(op.getLoraA()));
  int loraBAt = addOptional(buffer(op.getLoraB()));
  int rowScaleAt = addOptional(buffer(op.getRowScale()));
  int lhsScalesAt = addOptional(buffer(op.getLhsScales()));
  int rhsScalesAt = addOptional(buffer(op.getRhsScales()));
  Value scatter = buffer(op.getScatterSlots());
  int64_t rank = 0;
  if (op.getLoraA())
    rank = cast<ShapedType>(op.getLoraA().getType()).getDimSize(0) / experts;
  bool swiglu = op.getActivation() == moe::Activation::swiglu;
  auto unpack = [&, rank, swiglu](ValueRange a) {
    MatmulArgs m;
    m.lhs = a[0];
    m.rhs = a[1];
    m.offsets = a[2];
    auto at = [&](int i) { return i < 0 ? Value() : a[i]; };
    m.gather = at(gatherAt);
    m.bias = at(biasAt);
    m.loraA = at(loraAAt);
    m.loraB = at(loraBAt);
    m.rowScale = at(rowScaleAt);
    m.lhsScales = at(lhsScalesAt);
    m.rhsScales = at(rhsScalesAt);
    m.scaleGroup = op.getScaleGroup();
    m.k = slotsPerToken;
    m.transposeRhs = op.getTransposeRhs();
    m.swiglu = swiglu;
    m.loraScaling = op.getLoraScaling().convertToDouble();
    m.rank = rank;
    return m;
  };

  SmallVector<Value> outSizes = ctx.sizes(out);
  Value width = outSizes[1];

  if (scatter) {
    // Combined in token order: out[t, c] = sum_j w[t, j] · y[pos(t·k+j), c].
    Value scatterWeights = buffer(op.getScatterWeights());
    Value numSlots = h.mul(outSizes[0], h.idx(slotsPerToken));
    FailureOr<Value> inverse =
        emitInverse(ctx, tile, scatter, offsets, numSlots,
                    buffer(op.getScatterPositions()));
    if (failed(inverse))
      return failure();
    int inverseAt = addOptional(*inverse);
    int weightsAt = addOptional(scatterWeights);
    return launchPerItem(
        ctx, "scatter", h.mul(outSizes[0], width), tile, operands,
        [&](KernelBuilder &b, ValueRange a, Value id) {
          MatmulArgs m = unpack(a);
          Value outArg = a[3];
          Value W = b.dim(outArg, 1);
          Value t = b.div(id, W), c = b.rem(id, W);
          Value acc = b.loop(
              b.idx(0), b.idx(slotsPerToken), {b.f32(0)},
              [&](Value j, ValueRange it) -> SmallVector<Value> {
                auto [row, valid] = b.loadSigned(
                    a[inverseAt], {b.add(b.mul(t, b.idx(slotsPerToken)), j)});
                Value term = b.ifElse(
                    valid, b.getF32Type(),
                    [&] {
                      Value e = expertOfRow(b, m.offsets, b.idx(experts), row);
                      Value y = matmulElement(b, m, e, row, c, W);
                      if (weightsAt >= 0)
                        y = b.fmul(y, b.loadF(a[weightsAt], {t, j}));
                      return y;
                    },
                    [&] { return b.f32(0); });
                return {b.fadd(it[0], term)};
              })[0];
          b.storeF(acc, outArg, {t, c});
        });
  }

  // Grouped output through the ragged tile schedule. Tiles are numbered
  // expert by expert (ceil(rows_e / m) m-tiles each, times the n-tiles),
  // then the rows past the last group (written as zeros). The grid is an
  // upper bound on that count, floor(M / m) + E + 1 m-tiles, so the host
  // never needs the group sizes; blocks past the real count exit at once.
  int64_t tm = tile.getM(), tn = tile.getN(), threads = tile.getThreads();
  Value rowsTotal = outSizes[0];
  Value nTiles = h.ceilDiv(width, h.idx(tn));
  Value mTilesBound = h.add(h.div(rowsTotal, h.idx(tm)), h.idx(experts + 1));
  Value grid = h.mul(mTilesBound, nTiles);
  operands.push_back(rowsTotal);
  return ctx.launch(
      "", grid, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        MatmulArgs m = unpack(a);
        Value outArg = a[3];
        Value M = a.back();
        Value W = b.dim(outArg, 1);
        Value NT = b.ceilDiv(W, b.idx(tn));
        Value mTile = b.div(block, NT), nTile = b.rem(block, NT);
        // Walk the groups (experts, then the tail) to find this m-tile's.
        auto found = b.loop(
            b.idx(0), b.idx(experts + 1),
            {b.idx(0), b.idx(experts + 1), b.idx(0), b.idx(0)},
            [&](Value g, ValueRange it) -> SmallVector<Value> {
              Value start = groupStart(b, m.offsets, g);
              Value end = b.ifElse(
                  b.eq(g, b.idx(experts)), b.getIndexType(),
                  [&] { return M; },
                  [&] { return b.loadIdx(m.offsets, {g}); });
              Value tiles = b.ceilDiv(b.sub(end, start), b.idx(tm));
              Value next = b.add(it[0], tiles);
              Value here = b.land(b.ule(it[0], mTile), b.ult(mTile, next));
              Value rowStart =
                  b.add(start, b.mul(b.sub(mTile, it[0]), b.idx(tm)));
              return {next, b.select(here, g, it[1]),
                      b.select(here, rowStart, it[2]),
                      b.select(here, end, it[3])};
            });
        Value group = found[1], rowStart = found[2], rowEnd = found[3];
        b.ifThen(b.ult(group, b.idx(experts + 1)), [&] {
          int64_t perThread = std::max<int64_t>(1, tm * tn / threads);
          b.loop(b.idx(0), b.idx(perThread), [&](Value q) {
            Value local = b.add(b.mul(q, b.idx(threads)), thread);
            Value row = b.add(rowStart, b.div(local, b.idx(tn)));
            Value col = b.add(b.mul(nTile, b.idx(tn)), b.rem(local, b.idx(tn)));
            Value inTile = b.ult(local, b.idx(tm * tn));
            Value ok = b.land(inTile, b.land(b.ult(row, rowEnd), b.ult(col, W)));
            b.ifThen(ok, [&] {
              Value y = b.ifElse(
                  b.eq(group, b.idx(experts)), b.getF32Type(),
                  [&] { return b.f32(0); },
                  [&] { return matmulElement(b, m, group, row, col, W); });
              b.storeF(y, outArg, {row, col});
            });
          });
        });
      });
}

LogicalResult lowerDenseMatmul(linalg::MatmulOp op, moe::TileAttr tile,
                               BufferMap buffer, LoweringContext &ctx,
                               bool transposeB) {
  KernelBuilder &h = ctx.host();
  Value a = buffer(op.getInputs()[0]), bm = buffer(op.getInputs()[1]);
  Value c = buffer(op.getResult(0));
  SmallVector<Value> cSizes = ctx.sizes(c);
  return launchPerItem(
      ctx, "", h.mul(cSizes[0], cSizes[1]), tile, {a, bm, c},
      [&](KernelBuilder &b, ValueRange args, Value id) {
        Value N = b.dim(args[2], 1), K = b.dim(args[0], 1);
        Value i = b.div(id, N), j = b.rem(id, N);
        Value acc = b.loop(b.idx(0), K, {b.f32(0)},
                           [&](Value kk, ValueRange it) -> SmallVector<Value> {
                             Value x = b.loadF(args[0], {i, kk});
                             Value w = transposeB ? b.loadF(args[1], {j, kk})
                                                  : b.loadF(args[1], {kk, j});
                             return {b.fadd(it[0], b.fmul(x, w))};
                           })[0];
        b.storeF(acc, args[2], {i, j});
      });
}

//===----------------------------------------------------------------------===//
// Activation
//===----------------------------------------------------------------------===//

LogicalResult lowerSwiglu(moe::SwigluOp op, moe::TileAttr tile,
                          BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value in = buffer(op.getInput()), out = buffer(op.getOutput());
  SmallVector<Value> sizes = ctx.sizes(out);
  moe::GateUpLayout layout = op.getLayout();
  return launchPerItem(
      ctx, "", h.mul(sizes[0], sizes[1]), tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value half = b.dim(a[1], 1);
        Value r = b.div(id, half), c = b.rem(id, half);
        Value g = b.loadF(a[0], {r, gateUpColumn(b, layout, half, c, false)});
        Value u = b.loadF(a[0], {r, gateUpColumn(b, layout, half, c, true)});
        b.storeF(b.fmul(b.fmul(g, b.sigmoid(g)), u), a[1], {r, c});
      });
}

LogicalResult lowerSwigluGrad(moe::SwigluGradOp op, moe::TileAttr tile,
                              BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value in = buffer(op.getInput()), dy = buffer(op.getGradOutput());
  Value out = buffer(op.getGradInput());
  SmallVector<Value> sizes = ctx.sizes(dy);
  moe::GateUpLayout layout = op.getLayout();
  return launchPerItem(
      ctx, "", h.mul(sizes[0], sizes[1]), tile, {in, dy, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value half = b.dim(a[1], 1);
        Value r = b.div(id, half), c = b.rem(id, half);
        Value gc = gateUpColumn(b, layout, half, c, false);
        Value uc = gateUpColumn(b, layout, half, c, true);
        Value g = b.loadF(a[0], {r, gc}), u = b.loadF(a[0], {r, uc});
        Value d = b.loadF(a[1], {r, c}), s = b.sigmoid(g);
        Value one = b.f32(1);
        // d/dg silu(g)·u = u·s·(1 + g·(1 − s)); d/du = g·s.
        Value dg = b.fmul(b.fmul(d, b.fmul(u, s)),
                          b.fadd(one, b.fmul(g, b.fsub(one, s))));
        b.storeF(dg, a[2], {r, gc});
        b.storeF(b.fmul(d, b.fmul(g, s)), a[2], {r, uc});
      });
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

/// For colwise groups: the expert group holding scale block `block`, as
/// (found, first row, end row) of the block.
SmallVector<Value> colwiseBlockRows(KernelBuilder &b, Value offsets,
                                    int64_t experts, int64_t group,
                                    Value block) {
  auto found = b.loop(
      b.idx(0), b.idx(experts), {b.idx(0), b.idx(0), b.idx(0), b.idx(0)},
      [&](Value e, ValueRange it) -> SmallVector<Value> {
        Value start = groupStart(b, offsets, e);
        Value end = b.loadIdx(offsets, {e});
        Value blocks = b.ceilDiv(b.sub(end, start), b.idx(group));
        Value next = b.add(it[0], blocks);
        Value here = b.land(b.ule(it[0], block), b.ult(block, next));
        Value first = b.add(start, b.mul(b.sub(block, it[0]), b.idx(group)));
        Value last = b.minIdx(b.add(first, b.idx(group)), end);
        return {next, b.select(here, b.idx(1), it[1]),
                b.select(here, first, it[2]), b.select(here, last, it[3])};
      });
  return {found[1], found[2], found[3]};
}

LogicalResult lowerQuantize(moe::QuantizeOp op, moe::TileAttr tile,
                            BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales()), offsets = buffer(op.getOffsets());
  int64_t g = op.getGroupSize();
  Type fp8 = cast<MemRefType>(data.getType()).getElementType();
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  SmallVector<Value> scaleSizes = ctx.sizes(scales);
  Value groups = h.mul(scaleSizes[0], scaleSizes[1]);

  if (op.getAxis() == moe::QuantAxis::rowwise) {
    // One thread per (row, group): amax, scale, then the group's data.
    return launchPerItem(
        ctx, "rowwise", groups, tile, {in, data, scales},
        [&](KernelBuilder &b, ValueRange a, Value id) {
          Value G = b.dim(a[2], 1), K = b.dim(a[0], 1);
          Value r = b.div(id, G), grp = b.rem(id, G);
          Value c0 = b.mul(grp, b.idx(g));
          Value c1 = b.minIdx(b.add(c0, b.idx(g)), K);
          Value amax = b.loop(c0, c1, {b.f32(0)},
                              [&](Value c, ValueRange it) -> SmallVector<Value> {
                                return {b.fmax(it[0], math::AbsFOp::create(
                                                          b, b.loadF(a[0], {r, c})))};
                              })[0];
          Value scale = groupScale(b, amax, fp8Max, pow2);
          b.storeF(scale, a[2], {r, grp});
          b.loop(c0, c1, [&](Value c) {
            b.storeF(b.fdiv(b.loadF(a[0], {r, c}), scale), a[1], {r, c});
          });
        });
  }

  // Colwise: one thread per (scale block row, column); rows past the last
  // group are zero and unused scale blocks hold 1.
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  SmallVector<Value> dataSizes = ctx.sizes(data);
  if (failed(launchPerItem(
          ctx, "tail", h.mul(dataSizes[0], dataSizes[1]), tile,
          {offsets, data}, [&](KernelBuilder &b, ValueRange a, Value id) {
            Value K = b.dim(a[1], 1);
            Value r = b.div(id, K), c = b.rem(id, K);
            Value end = b.loadIdx(a[0], {b.idx(experts - 1)});
            b.ifThen(b.ule(end, r), [&] { b.storeF(b.f32(0), a[1], {r, c}); });
          })))
    return failure();
  return launchPerItem(
      ctx, "colwise", groups, tile, {in, data, scales, offsets},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value K = b.dim(a[2], 1);
        Value blk = b.div(id, K), c = b.rem(id, K);
        SmallVector<Value> rows = colwiseBlockRows(b, a[3], experts, g, blk);
        Value amax = b.loop(rows[1], rows[2], {b.f32(0)},
                            [&](Value r, ValueRange it) -> SmallVector<Value> {
                              return {b.fmax(it[0], math::AbsFOp::create(
                                                        b, b.loadF(a[0], {r, c})))};
                            })[0];
        Value scale = groupScale(b, amax, fp8Max, pow2);
        b.storeF(scale, a[2], {blk, c});
        b.loop(rows[1], rows[2], [&](Value r) {
          b.storeF(b.fdiv(b.loadF(a[0], {r, c}), scale), a[1], {r, c});
        });
      });
}

LogicalResult lowerDequantize(moe::DequantizeOp op, moe::TileAttr tile,
                              BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value data = buffer(op.getData()), scales = buffer(op.getScales());
  Value out = buffer(op.getOutput());
  int64_t g = op.getGroupSize();
  SmallVector<Value> outSizes = ctx.sizes(out);
  auto dataType = cast<MemRefType>(data.getType());

  if (dataType.getElementType().isUnsignedInteger(8)) {
    // NF4: out[s, r, c] = codebook[nibble] * absmax[e, (r*N + c) / g].
    Value codebook = buffer(op.getCodebook());
    Value experts = buffer(op.getExperts());
    SmallVector<Value> operands = {data, scales, codebook, out};
    if (experts)
      operands.push_back(experts);
    Value count = h.mul(h.mul(outSizes[0], outSizes[1]), outSizes[2]);
    return launchPerItem(
        ctx, "nf4", count, tile, operands,
        [&](KernelBuilder &b, ValueRange a, Value id) {
          Value K = b.dim(a[3], 1), N = b.dim(a[3], 2);
          Value sel = b.div(id, b.mul(K, N));
          Value r = b.rem(b.div(id, N), K), c = b.rem(id, N);
          Value e = experts ? b.loadIdx(a[4], {sel}) : sel;
          Value byte = memref::LoadOp::create(b, a[0], {e, r, b.div(c, b.idx(2))});
          // ui8 is not an arith type; it is i8 once lowered.
          Value raw = UnrealizedConversionCastOp::create(
                          b, TypeRange{b.getI8Type()}, ValueRange{byte})
                          .getResult(0);
          Value wide = arith::ExtUIOp::create(b, b.getI32Type(), raw);
          Value odd = b.eq(b.rem(c, b.idx(2)), b.idx(1));
          Value nibble = b.select(
              odd, arith::AndIOp::create(b, wide, b.i32(15)),
              arith::ShRUIOp::create(b, wide, b.i32(4)));
          Value code = b.loadF(
              a[2], {arith::IndexCastOp::create(b, b.getIndexType(), nibble)});
          Value blockIdx = b.div(b.add(b.mul(r, N), c), b.idx(g));
          b.storeF(b.fmul(code, b.loadF(a[1], {e, blockIdx})), a[3],
                   {sel, r, c});
        });
  }

  // FP8: output = data * scale of the element's group.
  Value offsets = buffer(op.getOffsets());
  bool colwise = op.getAxis() == moe::QuantAxis::colwise;
  int64_t numExperts =
      offsets ? cast<MemRefType>(offsets.getType()).getDimSize(0) : 0;
  SmallVector<Value> operands = {data, scales, out};
  if (colwise)
    operands.push_back(offsets);
  return launchPerItem(
      ctx, "fp8", h.mul(outSizes[0], outSizes[1]), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value K = b.dim(a[2], 1);
        Value r = b.div(id, K), c = b.rem(id, K);
        Value x = b.loadF(a[0], {r, c});
        if (!colwise) {
          b.storeF(b.fmul(x, b.loadF(a[1], {r, b.div(c, b.idx(g))})), a[2],
                   {r, c});
          return;
        }
        // Scale block of row r: blocks of the groups before its group, plus
        // its offset in its group; rows past the last group are zero.
        auto found = b.loop(
            b.idx(0), b.idx(numExperts), {b.idx(0), b.idx(0), b.idx(0)},
            [&](Value e, ValueRange it) -> SmallVector<Value> {
              Value start = groupStart(b, a[3], e);
              Value end = b.loadIdx(a[3], {e});
              Value here = b.land(b.ule(start, r), b.ult(r, end));
              Value blk = b.add(it[0], b.div(b.sub(r, start), b.idx(g)));
              Value blocks = b.ceilDiv(b.sub(end, start), b.idx(g));
              return {b.add(it[0], blocks), b.select(here, b.idx(1), it[1]),
                      b.select(here, blk, it[2])};
            });
        Value y = b.ifElse(
            b.eq(found[1], b.idx(1)), b.getF32Type(),
            [&] { return b.fmul(x, b.loadF(a[1], {found[2], c})); },
            [&] { return b.f32(0); });
        b.storeF(y, a[2], {r, c});
      });
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

FailureOr<bool> moec::kernels::matmulTransposesB(Operation *op) {
  auto matmul = dyn_cast<linalg::MatmulOp>(op);
  if (!matmul)
    return failure();
  SmallVector<AffineMap> maps = matmul.getIndexingMapsArray();
  MLIRContext *ctx = matmul.getContext();
  AffineExpr m, n, k;
  bindDims(ctx, m, n, k);
  auto map = [&](ArrayRef<AffineExpr> results) {
    return AffineMap::get(3, 0, results, ctx);
  };
  if (maps.size() != 3 || maps[0] != map({m, k}) || maps[2] != map({m, n}))
    return failure();
  if (maps[1] == map({k, n}))
    return false;
  if (maps[1] == map({n, k}))
    return true;
  return failure();
}

LogicalResult moec::kernels::resultSizes(
    Operation *op, BufferMap buffer, LoweringContext &ctx,
    SmallVector<SmallVector<Value>> &sizes) {
  KernelBuilder &h = ctx.host();
  auto sizesOf = [&](Value tensor) { return ctx.sizes(buffer(tensor)); };
  // Static dimensions come from the type; `dynamic(i, d)` supplies the rest.
  auto fill = [&](Value result,
                  const std::function<Value(int64_t)> &dynamic) -> bool {
    auto type = cast<ShapedType>(result.getType());
    SmallVector<Value> dims;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d)) {
        dims.push_back(h.idx(type.getDimSize(d)));
        continue;
      }
      Value v = dynamic(d);
      if (!v)
        return false;
      dims.push_back(v);
    }
    sizes.push_back(dims);
    return true;
  };
  auto fail = [&](const Twine &why) {
    return op->emitOpError("cannot size its result for kernels: ") << why;
  };
  auto rowsOf = [&](Value tensor) {
    return [&, tensor](int64_t d) -> Value {
      return d == 0 ? sizesOf(tensor)[0] : Value();
    };
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<moe::RouterTopKOp>([&](auto r) -> LogicalResult {
        for (Value result : r->getResults())
          if (!fill(result, rowsOf(r.getLogits())))
            return fail("dynamic k");
        return success();
      })
      .Case<moe::SortByExpertOp>([&](auto s) -> LogicalResult {
        SmallVector<Value> idSizes = sizesOf(s.getIds());
        Value numSlots = h.mul(idSizes[0], idSizes[1]);
        Value capacity = numSlots;
        int64_t align = s.getAlign().value_or(1);
        if (align > 1)
          capacity = h.add(capacity, h.idx(s.getNumExperts() * (align - 1)));
        for (Value result : s->getResults())
          fill(result, [&](int64_t) {
            return result == s.getPositions() ? numSlots : capacity;
          });
        return success();
      })
      .Case<moe::PermuteOp>([&](auto p) -> LogicalResult {
        Value rows = sizesOf(p.getSlots())[0];
        Value hidden = sizesOf(p.getTokens())[1];
        fill(p.getRows(),
             [&](int64_t d) { return d == 0 ? rows : hidden; });
        if (p.getPermutedProbs())
          fill(p.getPermutedProbs(), [&](int64_t) { return rows; });
        if (p.getPermutedScales()) {
          Value groups = sizesOf(p.getScales())[1];
          fill(p.getPermutedScales(),
               [&](int64_t d) { return d == 0 ? rows : groups; });
        }
        return success();
      })
      .Case<moe::UnpermuteOp>([&](auto u) -> LogicalResult {
        Value hidden = sizesOf(u.getRows())[1];
        Value tokens = u.getWeights() ? sizesOf(u.getWeights())[0] : Value();
        if (!fill(u.getOut(),
                  [&](int64_t d) { return d == 0 ? tokens : hidden; }))
          return fail("a dynamic token count needs `weights` (the number of "
                      "tokens is their first dimension)");
        return success();
      })
      .Case<moe::PermuteGradOp>([&](auto p) -> LogicalResult {
        Value hidden = sizesOf(p.getGradRows())[1];
        Value tokens = ctx.tokenCount();
        auto dims = [&](int64_t d) {
          return d == 0 ? tokens : d == 1 ? hidden : Value();
        };
        if (!fill(p.getGradTokens(), dims) ||
            (p.getGradProbs() && !fill(p.getGradProbs(), dims)))
          return fail("a dynamic token count needs a function argument whose "
                      "leading dimension is the token count T");
        return success();
      })
      .Case<moe::UnpermuteGradOp>([&](auto u) -> LogicalResult {
        SmallVector<Value> out = sizesOf(u.getGradOut());
        Value rows = sizesOf(u.getSlots())[0];
        fill(u.getGradRows(),
             [&](int64_t d) { return d == 0 ? rows : out[1]; });
        if (u.getGradWeights())
          fill(u.getGradWeights(), [&](int64_t) { return out[0]; });
        return success();
      })
      .Case<moe::GroupedMatmulOp>([&](auto g) -> LogicalResult {
        SmallVector<Value> lhs = sizesOf(g.getLhs());
        SmallVector<Value> rhs = sizesOf(g.getRhs());
        if (g.getMode() == moe::MatmulMode::weight_grad) {
          fill(g.getOut(), [&](int64_t d) -> Value {
            return d == 1 ? lhs[1] : d == 2 ? rhs[1] : Value();
          });
          return success();
        }
        Value n = g.getTransposeRhs() ? rhs[1] : rhs[2];
        if (g.getActivation() == moe::Activation::swiglu)
          n = h.div(n, h.idx(2));
        Value rows;
        if (g.getScatterSlots()) {
          if (g.getScatterWeights())
            rows = sizesOf(g.getScatterWeights())[0];
          else if (g.getGatherSlots())
            rows = lhs[0];
        } else {
          rows = g.getGatherSlots() ? sizesOf(g.getGatherSlots())[0] : lhs[0];
        }
        if (!fill(g.getOut(),
                  [&](int64_t d) { return d == 0 ? rows : n; }))
          return fail("a scatter with a dynamic token count needs "
                      "`scatter_weights` or `gather`");
        return success();
      })
      .Case<moe::SwigluOp>([&](auto s) -> LogicalResult {
        SmallVector<Value> in = sizesOf(s.getInput());
        fill(s.getOutput(), [&](int64_t d) {
          return d == 0 ? in[0] : h.div(in[1], h.idx(2));
        });
        return success();
      })
      .Case<moe::SwigluGradOp>([&](auto s) -> LogicalResult {
        SmallVector<Value> in = sizesOf(s.getInput());
        fill(s.getGradInput(), [&](int64_t d) { return in[d]; });
        return success();
      })
      .Case<moe::QuantizeOp>([&](auto q) -> LogicalResult {
        SmallVector<Value> in = sizesOf(q.getInput());
        int64_t g = q.getGroupSize();
        fill(q.getData(), [&](int64_t d) { return in[d]; });
        if (q.getAxis() == moe::QuantAxis::rowwise) {
          fill(q.getScales(), [&](int64_t d) {
            return d == 0 ? in[0] : h.ceilDiv(in[1], h.idx(g));
          });
        } else {
          int64_t experts =
              cast<ShapedType>(q.getOffsets().getType()).getDimSize(0);
          // (M + min(E, M)·(g − 1)) / g blocks bound the groups' blocks.
          Value rows = h.div(
              h.add(in[0], h.mul(h.minIdx(h.idx(experts), in[0]),
                                 h.idx(g - 1))),
              h.idx(g));
          fill(q.getScales(),
               [&](int64_t d) { return d == 0 ? rows : in[1]; });
        }
        return success();
      })
      .Case<moe::DequantizeOp>([&](auto q) -> LogicalResult {
        SmallVector<Value> in = sizesOf(q.getData());
        bool nf4 = cast<ShapedType>(q.getData().getType())
                       .getElementType()
                       .isUnsignedInteger(8);
        fill(q.getOutput(), [&](int64_t d) -> Value {
          if (!nf4)
            return in[d];
          if (d == 0)
            return q.getExperts() ? sizesOf(q.getExperts())[0] : in[0];
          return d == 1 ? in[1] : h.mul(in[2], h.idx(2));
        });
        return success();
      })
      .Case<linalg::MatmulOp>([&](auto m) -> LogicalResult {
        Value a = m.getInputs()[0], bm = m.getInputs()[1];
        // B is [K, N] or, transposed, [N, K] (checked by the caller).
        FailureOr<bool> transposeB = matmulTransposesB(m);
        bool transposed = succeeded(transposeB) && *transposeB;
        fill(m.getResult(0), [&](int64_t d) {
          return d == 0 ? sizesOf(a)[0] : sizesOf(bm)[transposed ? 0 : 1];
        });
        return success();
      })
      .Default([&](Operation *) -> LogicalResult {
        return op->emitOpError("is not lowered to kernels yet");
      });
}

LogicalResult moec::kernels::lowerOp(Operation *op, moe::TileAttr tile,
                                     BufferMap buffer, LoweringContext &ctx) {
  if (std::optional<LogicalResult> lowered =
          lowerRoutingWarp(op, tile, buffer, ctx))
    return *lowered;
  if (std::optional<LogicalResult> lowered =
          lowerMatmulHopper(op, tile, buffer, ctx))
    return *lowered;
  // Only that kernel has a producer warpgroup: the others run the
  // computing threads alone (a tile tuned for sm90a stays valid elsewhere).
  if (tile && tile.getProducers() != 0)
    tile = moe::TileAttr::get(op->getContext(), tile.getM(), tile.getN(),
                              tile.getK(),
                              tile.getThreads() - tile.getProducers(),
                              tile.getStages(), tile.getBandM(),
                              /*producers=*/0);
  if (std::optional<LogicalResult> lowered =
          lowerBackward(op, tile, buffer, ctx))
    return *lowered;
  if (std::optional<LogicalResult> lowered =
          lowerVectorized(op, tile, buffer, ctx))
    return *lowered;
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<moe::RouterTopKOp>(
          [&](auto o) { return lowerRouterTopK(o, tile, buffer, ctx); })
      .Case<moe::SortByExpertOp>(
          [&](auto o) { return lowerSortByExpert(o, tile, buffer, ctx); })
      .Case<moe::PermuteOp>(
          [&](auto o) { return lowerPermute(o, tile, buffer, ctx); })
      .Case<moe::UnpermuteOp>(
          [&](auto o) { return lowerUnpermute(o, tile, buffer, ctx); })
      .Case<moe::PermuteGradOp>(
          [&](auto o) { return lowerPermuteGrad(o, tile, buffer, ctx); })
      .Case<moe::UnpermuteGradOp>(
          [&](auto o) { return lowerUnpermuteGrad(o, tile, buffer, ctx); })
      .Case<moe::GroupedMatmulOp>(
          [&](auto o) { return lowerGroupedMatmul(o, tile, buffer, ctx); })
      .Case<moe::SwigluOp>(
          [&](auto o) { return lowerSwiglu(o, tile, buffer, ctx); })
      .Case<moe::SwigluGradOp>(
          [&](auto o) { return lowerSwigluGrad(o, tile, buffer, ctx); })
      .Case<moe::QuantizeOp>(
          [&](auto o) { return lowerQuantize(o, tile, buffer, ctx); })
      .Case<moe::DequantizeOp>(
          [&](auto o) { return lowerDequantize(o, tile, buffer, ctx); })
      .Case<linalg::MatmulOp>([&](auto o) -> LogicalResult {
        FailureOr<bool> transposed = matmulTransposesB(o);
        if (failed(transposed))
          return o.emitOpError("only plain or B-transposed indexing maps are "
                               "supported");
        return lowerDenseMatmul(o, tile, buffer, ctx, *transposed);
      })
      .Default([&](Operation *) {
        return op->emitOpError("is not lowered to kernels yet");
      });
}
