//===- QuantizeRowwise.cpp - Row-wise FP8 quantize with warp shuffles -----===//
//
// Part of moec. Row-wise FP8 groups with warp shuffles: a thread per 16-byte
// piece of output (kRowwiseUnroll of them, launchUnrolled), so that a warp's
// loads and stores are whole lines; the group's lanes combine their amax
// with xor shuffles. Every lane takes part in the shuffles (a lane past the
// end works on the last piece again) and only the stores are guarded.
// Applies where a group is a power of two of whole chunks, at most a warp.
//
//===----------------------------------------------------------------------===//

#include "WarpKernels.h"

#include "../Vector/VectorCommon.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// Elements per work item of the warp kernel, or 0 where it does not apply.
int64_t rowwiseWarpWidth(moe::QuantizeOp op, moe::TileAttr tile) {
  if (op.getAxis() != moe::QuantAxis::rowwise)
    return 0;
  int64_t group = op.getGroupSize();
  Type inType = elementType(op.getInput());
  std::optional<int64_t> cols = staticDim(op.getInput(), 1);
  int64_t width = chunkWidth(cols, {inType});
  if (!width || !quantizable(inType) || group % width || *cols % group)
    return 0;
  // An item is 16 bytes of FP8 output where the group allows it (16 bf16
  // elements, two 16-byte loads), so that each lane's store is one whole
  // 16-byte access. On the H200 the 8-byte stores of 8-element items
  // reached 82 - 88 % of the copy bandwidth at T = 32768, 16-byte ones
  // 99 - 101 %.
  int64_t outWidth = KernelBuilder::vectorWidth(elementType(op.getData()));
  if (outWidth > width && group % outWidth == 0)
    width = outWidth;
  int64_t lanes = group / width; // per group
  if (lanes > 32 || !llvm::isPowerOf2_64(lanes) || tile.getThreads() % 32)
    return 0;
  return width;
}

} // namespace

bool warp::matchQuantize(moe::QuantizeOp op, moe::TileAttr tile,
                         const TargetInfo &target) {
  if (op.getAxis() == moe::QuantAxis::blocks)
    return matchQuantizeBlocks(op, tile, target);
  return target.hasWarpShuffles() && rowwiseWarpWidth(op, tile) != 0;
}

LogicalResult warp::emitQuantize(moe::QuantizeOp op, moe::TileAttr tile,
                                 BufferMap buffer, LoweringContext &ctx) {
  if (op.getAxis() == moe::QuantAxis::blocks)
    return emitQuantizeBlocks(op, buffer, ctx);
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  std::optional<int64_t> cols = staticDim(in, 1);
  int64_t width = rowwiseWarpWidth(op, tile);
  int64_t lanes = group / width; // per group
  int64_t chunks = *cols / width;
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();
  Value count = h.mul(ctx.sizes(in)[0], h.idx(chunks));
  return launchUnrolled(
      ctx, "rowwise_warp", count, tile, kRowwiseUnroll, {in, data, scales},
      [&](KernelBuilder &b, ValueRange a, Value item) -> ItemRest {
        Value r = b.div(item, b.idx(chunks));
        Value chunk = b.rem(item, b.idx(chunks));
        Value c = b.mul(chunk, b.idx(width));
        Value x = b.loadVec(a[0], {r, c}, width);
        return [=, &b](Value active) {
          Value bits = magnitudeBits(b, x);
          Value amax = b.f32(0);
          for (int64_t i = 0; i < width; ++i)
            amax = b.fmax(amax, magnitudeToF32(b, bits, i, inType));
          for (int64_t offset = lanes / 2; offset > 0; offset /= 2)
            amax = b.fmax(amax, gpu::ShuffleOp::create(b, amax, offset, 32,
                                                       gpu::ShuffleMode::XOR)
                                    .getShuffleResult());
          Value scale = groupScale(b, amax, fp8Max, pow2);
          b.ifThen(active, [&] {
            b.ifThen(b.eq(b.rem(chunk, b.idx(lanes)), b.idx(0)), [&] {
              b.storeF(scale, a[2], {r, b.div(chunk, b.idx(lanes))});
            });
            auto f32x = VectorType::get({width}, b.getF32Type());
            Value y = inType.isF32() ? x : arith::ExtFOp::create(b, f32x, x);
            Value inverse =
                vector::BroadcastOp::create(b, f32x, b.fdiv(b.f32(1), scale));
            b.storeVecF32(arith::MulFOp::create(b, y, inverse), a[1], {r, c});
          });
        };
      });
}
