//===- Permute.cpp - Vectorized permute, unpermute and their gradients ----===//
//
// Part of moec. These ops move bytes and do little arithmetic, so their
// speed is the share of the memory bandwidth they reach. That takes wide
// accesses: each thread owns a 16-byte chunk of one row (of the narrowest
// element it touches) instead of one element, so that a warp reads and
// writes whole cache lines, and the per-row work (slot lookup, expert
// search) is paid once per chunk.
//
// * permute goes in token order: each token's chunk is read once and
//   written to its k grouped rows.
// * unpermute (and permute_grad's token gradient, which is unpermute
//   without weights) is emitCombine: per token the weighted sum of its k
//   rows.
// * unpermute_grad goes in token order: a token's gradient row is read once
//   and written, scaled by each weight, to its k grouped rows. With weights,
//   the same pass reads the k forward rows and accumulates the k dot
//   products of the weight gradient in f32. With warp shuffles a warp takes
//   one token, its lanes striding over the row's chunks, and the dot
//   products are reduced with xor shuffles; lane 0 writes them. Elsewhere
//   (the host) one thread takes a token. Padding rows and rows past the
//   last group are zeroed by a second kernel, one thread per row.
//
// They apply where the row length is static and a multiple of the 16-byte
// chunk of every element type touched.
//
//===----------------------------------------------------------------------===//

#include "VectorKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// Elements per 16-byte chunk of permute's rows, or 0 where the vector
/// kernel does not apply: element types that differ, a dynamic or
/// indivisible row length, more scale groups than chunks.
int64_t permuteWidth(moe::PermuteOp op) {
  Type elem = elementType(op.getRows());
  if (elementType(op.getTokens()) != elem)
    return 0;
  // A copy: any element type with a vector width moves as raw bits.
  int64_t width = KernelBuilder::vectorWidth(elem);
  std::optional<int64_t> hidden = staticDim(op.getRows(), 1);
  if (!width || !hidden || *hidden % width)
    return 0;
  if (op.getScales()) {
    std::optional<int64_t> numScales = staticDim(op.getPermutedScales(), 1);
    if (!numScales || *numScales > *hidden / width)
      return 0;
  }
  return width;
}

/// Elements per chunk of unpermute_grad's rows, or 0 where the vector
/// kernel does not apply.
int64_t unpermuteGradWidth(moe::UnpermuteGradOp op) {
  std::optional<int64_t> hidden = staticDim(op.getGradOut(), 1);
  // The element types accessed (an absent operand repeats grad_out's).
  Type gradOut = elementType(op.getGradOut());
  Type gradRows = op.getGradRows() ? elementType(op.getGradRows()) : gradOut;
  Type rows = op.getRows() ? elementType(op.getRows()) : gradOut;
  return chunkWidth(hidden, {gradOut, gradRows, rows});
}

} // namespace

//===----------------------------------------------------------------------===//
// permute
//===----------------------------------------------------------------------===//

bool vectorized::matchPermute(moe::PermuteOp op, moe::TileAttr,
                              const TargetInfo &) {
  return permuteWidth(op) != 0;
}

namespace {

/// What permute's two kernels share: row chunks of `width` elements,
/// `chunks` per row, k slots per token, and which optional rows it carries.
struct PermuteShape {
  Type elem;
  int64_t width, chunks, k, rowBytes, prefetchTokens;
  bool probs, scales;
};

/// One thread of permute's scatter: chunk `id % chunks` of token
/// `id / chunks` to its k rows (operands: tokens, the inverse map, rows,
/// then probs and scales in and out where given).
void emitPermuteScatterItem(KernelBuilder &b, ValueRange a, Value id,
                            const PermuteShape &s) {
  const int64_t k = s.k;
  Value t = b.div(id, b.idx(s.chunks));
  Value chunk = b.rem(id, b.idx(s.chunks));
  Value c = b.mul(chunk, b.idx(s.width));
  // The token `prefetchTokens` ahead goes to L2 now, so that its later load
  // hits L2 instead of queuing for DRAM behind this kernel's stream of row
  // writes: +2 - 3 points of the copy bandwidth on the H200. One bulk
  // prefetch of the whole row by the token's first thread: 0.1 - 0.7
  // points over one prefetch per 128-byte line.
  Value ahead = b.add(t, b.idx(s.prefetchTokens));
  b.ifThen(b.land(b.eq(chunk, b.idx(0)), b.ult(ahead, b.dim(a[0], 0))),
           [&] { b.prefetchL2(a[0], {ahead, b.idx(0)}, s.rowBytes); });
  // Every load before the first store: the stores may alias the map as far
  // as the compiler knows, so a load after a store waits for it.
  Value v = b.loadVec(a[0], {t, c}, s.width);
  SmallVector<std::pair<Value, Value>> rowOf;
  for (int64_t j = 0; j < k; ++j)
    rowOf.push_back(
        b.loadSigned(a[1], {b.add(b.mul(t, b.idx(k)), b.idx(j))}));
  // Streaming stores: 1.1 - 1.4 points of the copy bandwidth over plain
  // ones on the H200 (the other kernels gained nothing or lost up to 4
  // points with them).
  for (auto [r, valid] : rowOf)
    b.ifThen(valid, [&, r = r] { b.storeVecStreaming(v, a[2], {r, c}); });
  // The token's first thread carries its probabilities, the first
  // `numScales` threads its FP8 scales.
  unsigned next = 3;
  if (s.probs) {
    Value in = a[next], out = a[next + 1];
    next += 2;
    b.ifThen(b.eq(chunk, b.idx(0)), [&] {
      SmallVector<Value> p;
      for (int64_t j = 0; j < k; ++j)
        p.push_back(b.loadF(in, {t, b.idx(j)}));
      for (int64_t j = 0; j < k; ++j)
        b.ifThen(rowOf[j].second,
                 [&] { b.storeF(p[j], out, {rowOf[j].first}); });
    });
  }
  if (s.scales) {
    Value in = a[next], out = a[next + 1];
    b.ifThen(b.ult(chunk, b.dim(out, 1)), [&] {
      Value scale = b.loadF(in, {t, chunk});
      for (auto [r, valid] : rowOf)
        b.ifThen(valid, [&, r = r] { b.storeF(scale, out, {r, chunk}); });
    });
  }
}

/// Padding rows, and rows past the last group, are zero: one thread per
/// row, which leaves at once for a row that holds a token. With
/// `positions` every slot has a row, so there are padding rows only when
/// there are more rows than slots: else the grid is 0 and nothing runs.
LogicalResult emitPermutePadding(LoweringContext &ctx, moe::TileAttr tile,
                                 const PermuteShape &s, Value slots,
                                 Value offsets, Value rows, Value outProbs,
                                 Value outScales, Value numSlots,
                                 bool positions) {
  KernelBuilder &h = ctx.host();
  Value numRows = ctx.sizes(rows)[0];
  Value padItems =
      positions
          ? h.mul(numRows,
                  h.minIdx(h.idx(1), h.div(numRows, h.add(numSlots, h.idx(1)))))
          : numRows;
  SmallVector<Value> padOperands = {slots, offsets, rows};
  if (s.probs)
    padOperands.push_back(outProbs);
  if (s.scales)
    padOperands.push_back(outScales);
  return launchPerItem(
      ctx, "pad", padItems, tile, padOperands,
      [&](KernelBuilder &b, ValueRange a, Value r) {
        b.ifThen(isPaddingRow(b, a[0], a[1], r), [&] {
          Value zeros = b.zeroVec(VectorType::get({s.width}, s.elem));
          b.loop(b.idx(0), b.idx(s.chunks), [&](Value i) {
            b.storeVec(zeros, a[2], {r, b.mul(i, b.idx(s.width))});
          });
          unsigned next = 3;
          if (s.probs)
            b.storeF(b.f32(0), a[next++], {r});
          if (s.scales)
            b.loop(b.idx(0), b.dim(a[next], 1), [&](Value i) {
              b.storeF(b.f32(0), a[next], {r, i});
            });
        });
      });
}

} // namespace

LogicalResult vectorized::emitPermute(moe::PermuteOp op, moe::TileAttr tile,
                                      BufferMap buffer, LoweringContext &ctx) {
  Value tokens = buffer(op.getTokens()), rows = buffer(op.getRows());
  Value probs = buffer(op.getProbs()), scales = buffer(op.getScales());
  PermuteShape s;
  s.elem = elementType(rows);
  s.width = permuteWidth(op);
  const int64_t hidden = *staticDim(rows, 1);
  s.chunks = hidden / s.width;
  s.k = op.getK();
  s.probs = bool(probs);
  s.scales = bool(scales);
  Value outProbs = buffer(op.getPermutedProbs());
  Value outScales = buffer(op.getPermutedScales());

  KernelBuilder &h = ctx.host();
  Value slots = buffer(op.getSlots()), offsets = buffer(op.getOffsets());
  // Token order: each token's chunk is read once and written to its k rows.
  // (Row order would read every token k times, and the rows written in
  // between evict it from L2.) The rows come from the inverse map:
  // sort_by_expert's `positions` when given, else built here.
  SmallVector<Value> tokenSizes = ctx.sizes(tokens);
  Value numSlots = h.mul(tokenSizes[0], h.idx(s.k));
  Value positions = buffer(op.getPositions());
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, slots, offsets, numSlots, positions);
  if (failed(inverse))
    return failure();
  SmallVector<Value> operands = {tokens, *inverse, rows};
  if (probs)
    operands.append({probs, outProbs});
  if (scales)
    operands.append({scales, outScales});
  // How far ahead the token rows are prefetched: 6 MiB of tokens. On the
  // H200 (bench/results/memory-bound-h200.md) 2 - 6 MiB gained, 14 - 16 MiB
  // lost (the prefetched rows left L2 before their turn).
  constexpr int64_t kPrefetchBytes = 6 << 20;
  s.rowBytes = hidden * s.elem.getIntOrFloatBitWidth() / 8;
  s.prefetchTokens = std::max<int64_t>(1, kPrefetchBytes / s.rowBytes);
  if (failed(launchPerItem(
          ctx, "scatter_vec", h.mul(tokenSizes[0], h.idx(s.chunks)), tile,
          operands, [&](KernelBuilder &b, ValueRange a, Value id) {
            emitPermuteScatterItem(b, a, id, s);
          })))
    return failure();
  return emitPermutePadding(ctx, tile, s, slots, offsets, rows, outProbs,
                            outScales, numSlots, bool(positions));
}

//===----------------------------------------------------------------------===//
// unpermute (the combine)
//===----------------------------------------------------------------------===//

bool vectorized::matchUnpermute(moe::UnpermuteOp op, moe::TileAttr,
                                const TargetInfo &) {
  return combineWidth(op.getRows(), op.getOut()) != 0;
}

LogicalResult vectorized::emitUnpermute(moe::UnpermuteOp op, moe::TileAttr tile,
                                        BufferMap buffer,
                                        LoweringContext &ctx) {
  return *emitCombine(ctx, tile, buffer(op.getRows()), buffer(op.getSlots()),
                      buffer(op.getOffsets()), buffer(op.getWeights()),
                      buffer(op.getOut()), op.getK(),
                      buffer(op.getPositions()));
}

int64_t moec::kernels::combineWidth(Value rows, Value out) {
  return chunkWidth(staticDim(out, 1), {elementType(rows), elementType(out)});
}

std::optional<LogicalResult>
moec::kernels::emitCombine(LoweringContext &ctx, moe::TileAttr tile, Value rows,
                           Value slots, Value offsets, Value weights, Value out,
                           int64_t k, Value positions) {
  std::optional<int64_t> hidden = staticDim(out, 1);
  int64_t width = combineWidth(rows, out);
  if (!width)
    return std::nullopt;
  int64_t chunks = *hidden / width;

  KernelBuilder &h = ctx.host();
  SmallVector<Value> outSizes = ctx.sizes(out);
  Value numSlots = h.mul(outSizes[0], h.idx(k));
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, slots, offsets, numSlots, positions);
  if (failed(inverse))
    return failure();
  SmallVector<Value> operands = {rows, *inverse, out};
  if (weights)
    operands.push_back(weights);
  return launchPerItem(
      ctx, "combine_vec", h.mul(outSizes[0], h.idx(chunks)), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value t = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto f32x = VectorType::get({width}, b.getF32Type());
        // The k rows of the token, weighted, summed in f32. The loads are
        // unconditional (a missing row reads row 0 and is dropped by the
        // select), so that all k are in flight at once.
        Value acc = b.zeroVec(f32x);
        for (int64_t j = 0; j < k; ++j) {
          auto [r, valid] =
              b.loadSigned(a[1], {b.add(b.mul(t, b.idx(k)), b.idx(j))});
          Value v =
              b.loadVecF32(a[0], {b.select(valid, r, b.idx(0)), c}, width);
          if (weights)
            v = arith::MulFOp::create(
                b, v,
                vector::BroadcastOp::create(b, f32x,
                                            b.loadF(a[3], {t, b.idx(j)})));
          acc = arith::AddFOp::create(b, acc,
                                      b.select(valid, v, b.zeroVec(f32x)));
        }
        b.storeVecF32(acc, a[2], {t, c});
      });
}

//===----------------------------------------------------------------------===//
// permute_grad
//===----------------------------------------------------------------------===//

bool vectorized::matchPermuteGrad(moe::PermuteGradOp op, moe::TileAttr,
                                  const TargetInfo &) {
  return combineWidth(op.getGradRows(), op.getGradTokens()) != 0;
}

LogicalResult vectorized::emitPermuteGrad(moe::PermuteGradOp op,
                                          moe::TileAttr tile, BufferMap buffer,
                                          LoweringContext &ctx) {
  Value slots = buffer(op.getSlots()), offsets = buffer(op.getOffsets());
  Value positions = buffer(op.getPositions());
  LogicalResult combined = *emitCombine(
      ctx, tile, buffer(op.getGradRows()), slots, offsets, /*weights=*/Value(),
      buffer(op.getGradTokens()), op.getK(), positions);
  if (failed(combined) || !op.getGradPermutedProbs())
    return combined;
  return emitSlotScatter(ctx, tile, buffer(op.getGradPermutedProbs()), slots,
                         offsets, buffer(op.getGradProbs()), positions);
}

//===----------------------------------------------------------------------===//
// unpermute_grad
//===----------------------------------------------------------------------===//

bool vectorized::matchUnpermuteGrad(moe::UnpermuteGradOp op, moe::TileAttr,
                                    const TargetInfo &) {
  return unpermuteGradWidth(op) != 0;
}

namespace {

/// What unpermute_grad's token kernel needs to know: row chunks of `width`
/// elements, `chunks` per row, k slots per token, `lanes` threads per
/// token, and which of the row gradients and the weights' it computes.
struct UnpermuteGradShape {
  int64_t width, chunks, k, lanes;
  bool weights, gradRows;
};

/// One chunk of a token's gradient g: g (times each row's weight) to its
/// k rows, and with weights each dot product with the forward row's chunk
/// added to `acc`.
SmallVector<Value> emitUnpermuteGradChunk(KernelBuilder &b, ValueRange a,
                                          const UnpermuteGradShape &s,
                                          Value t, Value chunk, ValueRange acc,
                                          ArrayRef<Value> row,
                                          ArrayRef<Value> valid,
                                          ArrayRef<Value> scale) {
  Value c = b.mul(chunk, b.idx(s.width));
  Value g = b.loadVecF32(a[0], {t, c}, s.width);
  // The forward rows' chunks, all loaded before any use.
  SmallVector<Value> x;
  if (s.weights)
    for (int64_t j = 0; j < s.k; ++j)
      x.push_back(b.loadVecF32(a[5], {row[j], c}, s.width));
  SmallVector<Value> next;
  for (int64_t j = 0; j < s.k; ++j) {
    if (s.gradRows)
      b.ifThen(valid[j], [&] {
        Value v = s.weights ? arith::MulFOp::create(b, g, scale[j]).getResult()
                            : g;
        b.storeVecF32(v, a[2], {row[j], c});
      });
    if (!s.weights)
      continue;
    Value prod = arith::MulFOp::create(b, g, x[j]);
    Value dot = acc[j];
    for (int64_t i = 0; i < s.width; ++i)
      dot = b.fadd(dot, vector::ExtractOp::create(b, prod, i));
    next.push_back(b.select(valid[j], dot, acc[j]));
  }
  return next;
}

/// Token t's share of lane `lane` (of `lanes`): its chunks, then with
/// weights the dot products summed over the lanes and stored by lane 0.
void emitUnpermuteGradToken(KernelBuilder &b, ValueRange a,
                            const UnpermuteGradShape &s, Value t, Value lane) {
  auto f32x = VectorType::get({s.width}, b.getF32Type());
  // The k rows of the token (row 0 stands in for a missing one: its loads
  // are dropped and its stores skipped) and weights.
  SmallVector<Value> row, valid, scale;
  for (int64_t j = 0; j < s.k; ++j) {
    auto [r, ok] = b.loadSigned(a[1], {b.add(b.mul(t, b.idx(s.k)), b.idx(j))});
    row.push_back(b.select(ok, r, b.idx(0)));
    valid.push_back(ok);
    if (s.weights)
      scale.push_back(vector::BroadcastOp::create(
          b, f32x, b.loadF(a[4], {t, b.idx(j)})));
  }
  SmallVector<Value> inits;
  if (s.weights)
    inits.assign(s.k, b.f32(0));
  SmallVector<Value> dots = b.loop(
      lane, b.idx(s.chunks), inits,
      [&](Value chunk, ValueRange acc) -> SmallVector<Value> {
        return emitUnpermuteGradChunk(b, a, s, t, chunk, acc, row, valid,
                                      scale);
      },
      /*step=*/b.idx(s.lanes));
  if (!s.weights)
    return;
  for (Value &dot : dots)
    for (int64_t offset = s.lanes / 2; offset > 0; offset /= 2)
      dot = b.fadd(dot, gpu::ShuffleOp::create(b, dot,
                                               static_cast<int32_t>(offset),
                                               static_cast<int32_t>(kWarp),
                                               gpu::ShuffleMode::XOR)
                            .getShuffleResult());
  b.ifThen(b.eq(lane, b.idx(0)), [&] {
    for (int64_t j = 0; j < s.k; ++j)
      b.storeF(dots[j], a[6], {t, b.idx(j)});
  });
}

} // namespace

LogicalResult vectorized::emitUnpermuteGrad(moe::UnpermuteGradOp op,
                                            moe::TileAttr tile,
                                            BufferMap buffer,
                                            LoweringContext &ctx) {
  Value gradOut = buffer(op.getGradOut()), slots = buffer(op.getSlots());
  Value offsets = buffer(op.getOffsets()), weights = buffer(op.getWeights());
  Value rows = buffer(op.getRows()), gradRows = buffer(op.getGradRows());
  Value gradWeights = buffer(op.getGradWeights());
  int64_t threads = tile.getThreads();
  KernelBuilder &h = ctx.host();
  UnpermuteGradShape s;
  s.width = unpermuteGradWidth(op);
  s.chunks = *staticDim(gradOut, 1) / s.width;
  s.k = op.getK();
  s.lanes = ctx.target().hasWarpShuffles() && threads % kWarp == 0 ? kWarp : 1;
  s.weights = bool(weights);
  s.gradRows = bool(gradRows);

  Value tokens = ctx.sizes(gradOut)[0];
  Value numSlots = h.mul(tokens, h.idx(s.k));
  FailureOr<Value> inverse = emitInverse(ctx, tile, slots, offsets, numSlots,
                                         buffer(op.getPositions()));
  if (failed(inverse))
    return failure();
  // a[2] is the row gradients; the weights-only form passes a stand-in
  // (gradOut) that nothing stores to.
  SmallVector<Value> operands = {gradOut, *inverse,
                                 gradRows ? gradRows : gradOut, tokens};
  if (weights)
    operands.append({weights, rows, gradWeights});
  const int64_t lanes = s.lanes;
  if (failed(ctx.launch(
          lanes > 1 ? "token_warp" : "token_vec",
          h.ceilDiv(lanes > 1 ? h.mul(tokens, h.idx(lanes)) : tokens,
                    h.idx(threads)),
          tile, operands,
          [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
            Value id = b.add(b.mul(block, b.idx(threads)), thread);
            Value t = b.div(id, b.idx(lanes));
            Value lane = b.rem(id, b.idx(lanes));
            // Uniform across a warp: a warp's lanes share their token.
            b.ifThen(b.ult(t, a[3]),
                     [&] { emitUnpermuteGradToken(b, a, s, t, lane); });
          })))
    return failure();

  if (!gradRows)
    return success();
  // Padding rows, and rows past the last group, are zero: one thread per
  // row, which leaves at once for a row that holds a slot.
  Type outElem = elementType(gradRows);
  return launchPerItem(
      ctx, "pad", ctx.sizes(gradRows)[0], tile, {slots, offsets, gradRows},
      [&](KernelBuilder &b, ValueRange a, Value r) {
        b.ifThen(isPaddingRow(b, a[0], a[1], r), [&] {
          Value zeros = b.zeroVec(VectorType::get({s.width}, outElem));
          b.loop(b.idx(0), b.idx(s.chunks), [&](Value i) {
            b.storeVec(zeros, a[2], {r, b.mul(i, b.idx(s.width))});
          });
        });
      });
}
