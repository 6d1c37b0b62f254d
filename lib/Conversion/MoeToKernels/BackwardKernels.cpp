//===- BackwardKernels.cpp - Fast kernels of permute_grad / unpermute_grad -===//
//
// Part of moec. The backward of permute and unpermute moves the same bytes
// as the forward, the other way round, so the kernels follow those of
// VectorKernels.cpp: 16-byte chunks of rows, one read of each token row.
//
// * permute_grad is unpermute without weights: its token gradients are
//   emitCombine's vectorized combine; the probability gradient is one
//   element per slot (emitSlotScatter).
// * unpermute_grad goes in token order: a token's gradient row is read once
//   and written, scaled by each weight, to its k grouped rows. With weights,
//   the same pass reads the k forward rows and accumulates the k dot
//   products of the weight gradient in f32. On targets with warp shuffles
//   (NVVM, ROCDL) a warp takes one token, its lanes striding over the
//   row's chunks, and the dot products are reduced with xor shuffles; lane 0
//   writes them. Elsewhere (the host) one thread takes a token. Padding rows
//   and rows past the last group are zeroed by a second kernel, one thread
//   per row.
//
// Each generator returns std::nullopt where the row length has no 16-byte
// vector access (dynamic or indivisible); Kernels.cpp then emits the scalar
// kernels.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

using Lowered = std::optional<LogicalResult>;

//===----------------------------------------------------------------------===//
// permute_grad
//===----------------------------------------------------------------------===//

Lowered lowerPermuteGrad(moe::PermuteGradOp op, moe::TileAttr tile,
                         BufferMap buffer, LoweringContext &ctx) {
  Value slots = buffer(op.getSlots()), offsets = buffer(op.getOffsets());
  Value positions = buffer(op.getPositions());
  Lowered combined = emitCombine(
      ctx, tile, buffer(op.getGradRows()), slots, offsets, /*weights=*/Value(),
      buffer(op.getGradTokens()), op.getK(), positions);
  if (!combined || failed(*combined) || !op.getGradPermutedProbs())
    return combined;
  return emitSlotScatter(ctx, tile, buffer(op.getGradPermutedProbs()), slots,
                         offsets, buffer(op.getGradProbs()), positions);
}

//===----------------------------------------------------------------------===//
// unpermute_grad
//===----------------------------------------------------------------------===//

Lowered lowerUnpermuteGrad(moe::UnpermuteGradOp op, moe::TileAttr tile,
                           BufferMap buffer, LoweringContext &ctx) {
  Value gradOut = buffer(op.getGradOut()), slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets()), weights = buffer(op.getWeights());
  Value rows = buffer(op.getRows()), gradRows = buffer(op.getGradRows());
  Value gradWeights = buffer(op.getGradWeights());
  Type outElem = elementType(gradRows);
  std::optional<int64_t> hidden = staticDim(gradOut, 1);
  int64_t width = rows ? chunkWidth(hidden, {elementType(gradOut), outElem,
                                             elementType(rows)})
                       : chunkWidth(hidden, {elementType(gradOut), outElem});
  if (!width)
    return std::nullopt;
  int64_t chunks = *hidden / width;
  int64_t k = op.getK();
  int64_t threads = tile.getThreads();
  KernelBuilder &h = ctx.host();
  int64_t lanes =
      h.hasWarpShuffles() && threads % kWarp == 0 ? kWarp : 1;

  Value tokens = ctx.sizes(gradOut)[0];
  Value numSlots = h.mul(tokens, h.idx(k));
  FailureOr<Value> inverse = emitInverse(ctx, tile, slots, offsets, numSlots,
                                         buffer(op.getPositions()));
  if (failed(inverse))
    return failure();
  SmallVector<Value> operands = {gradOut, *inverse, gradRows, tokens};
  if (weights)
    operands.append({weights, rows, gradWeights});
  if (failed(ctx.launch(
          lanes > 1 ? "token_warp" : "token_vec",
          h.ceilDiv(lanes > 1 ? h.mul(tokens, h.idx(lanes)) : tokens,
                    h.idx(threads)),
          tile,
          operands,
          [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
            Value id = b.add(b.mul(block, b.idx(threads)), thread);
            Value t = b.div(id, b.idx(lanes));
            Value lane = b.rem(id, b.idx(lanes));
            // Uniform across a warp: a warp's lanes share their token.
            b.ifThen(b.ult(t, a[3]), [&] {
              auto f32x = VectorType::get({width}, b.getF32Type());
              // The k rows of the token (row 0 stands in for a missing one:
              // its loads are dropped and its stores skipped) and weights.
              SmallVector<Value> row, valid, scale;
              for (int64_t j = 0; j < k; ++j) {
                auto [r, ok] =
                    b.loadSigned(a[1], {b.add(b.mul(t, b.idx(k)), b.idx(j))});
                row.push_back(b.select(ok, r, b.idx(0)));
                valid.push_back(ok);
                if (weights)
                  scale.push_back(vector::BroadcastOp::create(
                      b, f32x, b.loadF(a[4], {t, b.idx(j)})));
              }
              SmallVector<Value> inits;
              if (weights)
                inits.assign(k, b.f32(0));
              SmallVector<Value> dots = b.loop(
                  lane, b.idx(chunks), inits,
                  [&](Value chunk, ValueRange acc) -> SmallVector<Value> {
                    Value c = b.mul(chunk, b.idx(width));
                    Value g = b.loadVecF32(a[0], {t, c}, width);
                    // The forward rows' chunks, all loaded before any use.
                    SmallVector<Value> x;
                    if (weights)
                      for (int64_t j = 0; j < k; ++j)
                        x.push_back(b.loadVecF32(a[5], {row[j], c}, width));
                    SmallVector<Value> next;
                    for (int64_t j = 0; j < k; ++j) {
                      b.ifThen(valid[j], [&] {
                        Value v =
                            weights ? arith::MulFOp::create(b, g, scale[j])
                                          .getResult()
                                    : g;
                        b.storeVecF32(v, a[2], {row[j], c});
                      });
                      if (!weights)
                        continue;
                      Value prod = arith::MulFOp::create(b, g, x[j]);
                      Value dot = acc[j];
                      for (int64_t i = 0; i < width; ++i)
                        dot = b.fadd(dot, vector::ExtractOp::create(b, prod, i));
                      next.push_back(b.select(valid[j], dot, acc[j]));
                    }
                    return next;
                  },
                  /*step=*/b.idx(lanes));
              if (!weights)
                return;
              for (Value &dot : dots)
                for (int64_t offset = lanes / 2; offset > 0; offset /= 2)
                  dot = b.fadd(dot, gpu::ShuffleOp::create(
                                        b, dot, static_cast<int32_t>(offset),
                                        static_cast<int32_t>(kWarp),
                                        gpu::ShuffleMode::XOR)
                                        .getShuffleResult());
              b.ifThen(b.eq(lane, b.idx(0)), [&] {
                for (int64_t j = 0; j < k; ++j)
                  b.storeF(dots[j], a[6], {t, b.idx(j)});
              });
            });
          })))
    return failure();

  // Padding rows, and rows past the last group, are zero: one thread per
  // row, which leaves at once for a row that holds a slot.
  return launchPerItem(
      ctx, "pad", ctx.sizes(gradRows)[0], tile, {slots, offsets, gradRows},
      [&](KernelBuilder &b, ValueRange a, Value r) {
        b.ifThen(isPaddingRow(b, a[0], a[1], r), [&] {
          Value zeros = b.zeroVec(VectorType::get({width}, outElem));
          b.loop(b.idx(0), b.idx(chunks), [&](Value i) {
            b.storeVec(zeros, a[2], {r, b.mul(i, b.idx(width))});
          });
        });
      });
}

} // namespace

Lowered moec::kernels::lowerBackward(Operation *op, moe::TileAttr tile,
                                     BufferMap buffer, LoweringContext &ctx) {
  return llvm::TypeSwitch<Operation *, Lowered>(op)
      .Case<moe::PermuteGradOp>(
          [&](auto o) { return lowerPermuteGrad(o, tile, buffer, ctx); })
      .Case<moe::UnpermuteGradOp>(
          [&](auto o) { return lowerUnpermuteGrad(o, tile, buffer, ctx); })
      .Default([](Operation *) { return std::nullopt; });
}
