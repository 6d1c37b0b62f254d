//===- Permute.cpp - Scalar permute, unpermute and their gradients --------===//
//
// Part of moec. One thread per output element (or per row),
// f32 arithmetic, one rounding at the store.
//
//===-------------------------------------------------------------------===//

#include "ScalarKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

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

} // namespace

LogicalResult scalar::emitPermute(moe::PermuteOp op, moe::TileAttr tile,
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
            ok, b.getF32Type(),
            [&] {
              return b.loadF(a[0], {token, c});
            },
            [&] { return b.f32(0); });
        b.storeF(v, a[3], {r, c});
        unsigned next = 4;
        if (probs) {
          Value in = a[next], out = a[next + 1];
          next += 2;
          b.ifThen(b.eq(c, b.idx(0)), [&] {
            Value p = b.ifElse(
                ok, b.getF32Type(),
                [&] {
                  return b.loadF(in, {token, b.rem(slot, b.idx(k))});
                },
                [&] { return b.f32(0); });
            b.storeF(p, out, {r});
          });
        }
        if (scales) {
          Value in = a[next], out = a[next + 1];
          b.ifThen(b.ult(c, b.dim(out, 1)), [&] {
            Value s = b.ifElse(
                ok, b.getF32Type(),
                [&] {
                  return b.loadF(in, {token, c});
                },
                [&] { return b.f32(0); });
            b.storeF(s, out, {r, c});
          });
        }
      });
}

LogicalResult scalar::emitUnpermute(moe::UnpermuteOp op, moe::TileAttr tile,
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

LogicalResult scalar::emitPermuteGrad(moe::PermuteGradOp op, moe::TileAttr tile,
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

LogicalResult scalar::emitUnpermuteGrad(moe::UnpermuteGradOp op,
                                        moe::TileAttr tile, BufferMap buffer,
                                        LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value gradOut = buffer(op.getGradOut()), slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets()), weights = buffer(op.getWeights());
  Value rows = buffer(op.getRows()), gradRows = buffer(op.getGradRows());
  Value gradWeights = buffer(op.getGradWeights());
  int64_t k = op.getK();
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  // Each row takes its token's gradient, times its weight; padding rows and
  // rows past the last group are zero. (Not in the weights-only form.)
  SmallVector<Value> operands = {gradOut, slots, offsets, gradRows};
  if (weights)
    operands.push_back(weights);
  if (gradRows &&
      failed(launchPerItem(
          ctx, "scatter", h.mul(ctx.sizes(gradRows)[0], ctx.sizes(gradRows)[1]),
          tile, operands, [&](KernelBuilder &b, ValueRange a, Value id) {
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
                  return weights
                             ? b.fmul(g,
                                      b.loadF(a[4], {t, b.rem(slot, b.idx(k))}))
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
                              return {
                                  b.fadd(it[0], b.fmul(b.loadF(a[0], {t, c}),
                                                       b.loadF(a[1], {r, c})))};
                            })[0];
            },
            [&] { return b.f32(0); });
        b.storeF(dot, a[3], {t, j});
      });
}

LogicalResult scalar::emitPermuteProbs(moe::PermuteProbsOp op,
                                       moe::TileAttr tile, BufferMap buffer,
                                       LoweringContext &ctx) {
  Value out = buffer(op.getOut()), offsets = buffer(op.getOffsets());
  int64_t k = op.getK();
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  float scale = op.getScale().convertToFloat();
  return launchPerItem(
      ctx, "probs", ctx.sizes(out)[0], tile,
      {buffer(op.getProbs()), buffer(op.getSlots()), offsets, out},
      [&](KernelBuilder &b, ValueRange a, Value r) {
        Value end = b.loadIdx(a[2], {b.idx(experts - 1)});
        auto [slot, valid] = b.loadSigned(a[1], {r});
        Value p = b.ifElse(
            b.land(valid, b.ult(r, end)), b.getF32Type(),
            [&] {
              Value w =
                  b.loadF(a[0], {b.div(slot, b.idx(k)), b.rem(slot, b.idx(k))});
              return scale == 1.0f ? w : b.fmul(w, b.f32(scale));
            },
            [&] { return b.f32(0); });
        b.storeF(p, a[3], {r});
      });
}
