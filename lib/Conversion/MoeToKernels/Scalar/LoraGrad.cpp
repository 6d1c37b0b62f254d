//===- LoraGrad.cpp - Scalar gradients of the LoRA adapters ---------------===//
//
// Part of moec. moe.lora_grad in three launches, so that no output element
// recomputes a dot product per row: first each grouped row's u = x · A_eᵀ
// and du = s · dy · B_e ([M, r] f32 scratch, one thread per (row, rank
// index)), then dA[e*r+j, :] = Σ du[:, j] · x and dB[:, e*r+j] =
// s · Σ dy · u[:, j] over the expert's rows, one thread per output.
//
//===----------------------------------------------------------------------===//

#include "ScalarKernels.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

LogicalResult scalar::emitLoraGrad(moe::LoraGradOp op, moe::TileAttr tile,
                                   BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value lhs = buffer(op.getLhs()), dy = buffer(op.getGradOut());
  Value offsets = buffer(op.getOffsets());
  Value loraA = buffer(op.getLoraA()), loraB = buffer(op.getLoraB());
  Value gradA = buffer(op.getGradA()), gradB = buffer(op.getGradB());
  Value gather = buffer(op.getGatherSlots());
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  int64_t rank = cast<MemRefType>(loraA.getType()).getDimSize(0) / experts;
  int64_t k = op.getK().value_or(1);
  double scaling = op.getLoraScaling().convertToDouble();

  // Element `kk` of grouped row `row`'s lhs (zero for a padding slot).
  auto lhsAt = [&](KernelBuilder &b, Value x, Value slots, Value row,
                   Value kk) -> Value {
    if (!slots)
      return b.loadF(x, {row, kk});
    auto [slot, valid] = b.loadSigned(slots, {row});
    return b.ifElse(
        valid, b.getF32Type(),
        [&] { return b.loadF(x, {b.div(slot, b.idx(k)), kk}); },
        [&] { return b.f32(0); });
  };

  Value rows = ctx.sizes(dy)[0];
  auto scratchType =
      MemRefType::get({ShapedType::kDynamic, rank}, h.getF32Type());
  Value up = ctx.allocTemp(scratchType, {rows, h.idx(rank)});
  Value down = ctx.allocTemp(scratchType, {rows, h.idx(rank)});
  SmallVector<Value> operands = {lhs, dy, offsets, loraA, loraB, up, down};
  if (gather)
    operands.push_back(gather);
  if (failed(launchPerItem(
          ctx, "rows", h.mul(rows, h.idx(rank)), tile, operands,
          [&](KernelBuilder &b, ValueRange a, Value id) {
            Value slots = gather ? a[7] : Value();
            Value row = b.div(id, b.idx(rank)), j = b.rem(id, b.idx(rank));
            Value e = expertOfRow(b, a[2], b.idx(experts), row);
            Value inGroup = b.ult(e, b.idx(experts));
            Value ar = b.add(b.mul(e, b.idx(rank)), j);
            auto sum = [&](Value count, auto term) {
              return b.ifElse(
                  inGroup, b.getF32Type(),
                  [&] {
                    return b.loop(b.idx(0), count, {b.f32(0)},
                                  [&](Value i,
                                      ValueRange it) -> SmallVector<Value> {
                                    return {b.fadd(it[0], term(i))};
                                  })[0];
                  },
                  [&] { return b.f32(0); });
            };
            Value u = sum(b.dim(a[0], 1), [&](Value kk) {
              return b.fmul(lhsAt(b, a[0], slots, row, kk),
                            b.loadF(a[3], {ar, kk}));
            });
            Value du = sum(b.dim(a[1], 1), [&](Value n) {
              return b.fmul(b.loadF(a[1], {row, n}), b.loadF(a[4], {n, ar}));
            });
            b.storeF(u, a[5], {row, j});
            b.storeF(b.fmul(du, b.f32(scaling)), a[6], {row, j});
          })))
    return failure();

  // Σ over the rows of expert e of term(row).
  auto overGroup = [&](KernelBuilder &b, Value offs, Value e, auto term) {
    return b.loop(groupStart(b, offs, e), b.loadIdx(offs, {e}), {b.f32(0)},
                  [&](Value i, ValueRange it) -> SmallVector<Value> {
                    return {b.fadd(it[0], term(i))};
                  })[0];
  };
  SmallVector<Value> sizesA = ctx.sizes(gradA), sizesB = ctx.sizes(gradB);
  SmallVector<Value> aOperands = {lhs, offsets, down, gradA};
  if (gather)
    aOperands.push_back(gather);
  if (failed(launchPerItem(
          ctx, "a", h.mul(sizesA[0], sizesA[1]), tile, aOperands,
          [&](KernelBuilder &b, ValueRange a, Value id) {
            Value slots = gather ? a[4] : Value();
            Value K = b.dim(a[3], 1);
            Value ar = b.div(id, K), kk = b.rem(id, K);
            Value e = b.div(ar, b.idx(rank)), j = b.rem(ar, b.idx(rank));
            Value acc = overGroup(b, a[1], e, [&](Value i) {
              return b.fmul(b.loadF(a[2], {i, j}), lhsAt(b, a[0], slots, i, kk));
            });
            b.storeF(acc, a[3], {ar, kk});
          })))
    return failure();
  return launchPerItem(
      ctx, "b", h.mul(sizesB[0], sizesB[1]), tile, {dy, offsets, up, gradB},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value ER = b.dim(a[3], 1);
        Value n = b.div(id, ER), ar = b.rem(id, ER);
        Value e = b.div(ar, b.idx(rank)), j = b.rem(ar, b.idx(rank));
        Value acc = overGroup(b, a[1], e, [&](Value i) {
          return b.fmul(b.loadF(a[0], {i, n}), b.loadF(a[2], {i, j}));
        });
        b.storeF(b.fmul(acc, b.f32(scaling)), a[3], {n, ar});
      });
}
