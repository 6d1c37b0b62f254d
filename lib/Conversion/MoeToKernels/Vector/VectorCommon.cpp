//===- VectorCommon.cpp - Shared parts of the vectorized kernels ----------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "VectorCommon.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

bool isFloat(Type type) { return isa<FloatType>(type); }

} // namespace

int64_t moec::kernels::chunkWidth(std::optional<int64_t> rowLength,
                                  std::initializer_list<Type> types) {
  int64_t width = 0;
  for (Type t : types) {
    int64_t w = KernelBuilder::vectorWidth(t);
    if (!w || !isFloat(t))
      return 0;
    width = std::max(width, w);
  }
  if (!rowLength || *rowLength % width)
    return 0;
  return width;
}

LogicalResult moec::kernels::launchUnrolled(LoweringContext &ctx,
                                            StringRef suffix, Value count,
                                            moe::TileAttr tile, int64_t unroll,
                                            ValueRange operands,
                                            const ItemLoads &loads) {
  KernelBuilder &h = ctx.host();
  int64_t threads = tile.getThreads();
  SmallVector<Value> all(operands);
  all.push_back(count);
  return ctx.launch(
      suffix, h.ceilDiv(count, h.idx(threads * unroll)), tile, all,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value n = a.back();
        Value base = b.mul(block, b.idx(threads * unroll));
        SmallVector<ItemRest> rests;
        SmallVector<Value> active;
        for (int64_t u = 0; u < unroll; ++u) {
          Value id = b.add(base, b.add(b.idx(u * threads), thread));
          active.push_back(b.ult(id, n));
          rests.push_back(
              loads(b, a.drop_back(), b.minIdx(id, b.sub(n, b.idx(1)))));
        }
        for (int64_t u = 0; u < unroll; ++u)
          rests[u](active[u]);
      });
}

static gpu::AddressSpaceAttr workgroupSpace(KernelBuilder &b) {
  return gpu::AddressSpaceAttr::get(b.getContext(),
                                    gpu::AddressSpace::Workgroup);
}

Value moec::kernels::workgroupBytes(KernelBuilder &b) {
  return gpu::DynamicSharedMemoryOp::create(
      b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                         MemRefLayoutAttrInterface(), workgroupSpace(b)));
}

Value moec::kernels::workgroupArray(KernelBuilder &b, Value bytes,
                                   ArrayRef<int64_t> shape, Type elem,
                                   int64_t byteOffset) {
  return memref::ViewOp::create(
      b,
      MemRefType::get(shape, elem, MemRefLayoutAttrInterface(),
                      workgroupSpace(b)),
      bytes, b.idx(byteOffset), ValueRange{});
}

LogicalResult moec::kernels::emitBlockEnds(LoweringContext &ctx,
                                           moe::TileAttr tile, Value offsets,
                                           Value blockEnds, int64_t group) {
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  KernelBuilder &h = ctx.host();
  auto blocksOf = [&](KernelBuilder &b, Value offsets, Value e) {
    Value rows = b.sub(b.loadIdx(offsets, {e}), groupStart(b, offsets, e));
    return b.ceilDiv(rows, b.idx(group));
  };
  int64_t threads = (experts + kWarp - 1) / kWarp * kWarp;
  if (!ctx.target().hasWarpShuffles() || threads > 1024)
    return launchPerItem(
        ctx, "block_ends", h.idx(experts), tile, {offsets, blockEnds},
        [&](KernelBuilder &b, ValueRange a, Value e) {
          Value total =
              b.loop(b.idx(0), b.add(e, b.idx(1)), {b.idx(0)},
                     [&](Value i, ValueRange it) -> SmallVector<Value> {
                       return {b.add(it[0], blocksOf(b, a[0], i))};
                     })[0];
          b.storeI32(total, a[1], {e});
        });
  int64_t warps = threads / kWarp;
  return ctx.launch(
      "block_ends", h.idx(1),
      moe::TileAttr::get(h.getContext(), 1, 1, 1, threads),
      {offsets, blockEnds},
      [&](KernelBuilder &b, ValueRange a, Value, Value thread) {
        Type i32 = b.getI32Type();
        Value live = b.ult(thread, b.idx(experts));
        Value e = b.minIdx(thread, b.idx(experts - 1));
        Value count = arith::IndexCastOp::create(
            b, i32, b.select(live, blocksOf(b, a[0], e), b.idx(0)));
        Value lane = b.rem(thread, b.idx(kWarp));
        for (int64_t d = 1; d < kWarp; d *= 2) {
          Value up =
              gpu::ShuffleOp::create(b, count, d, kWarp, gpu::ShuffleMode::UP)
                  .getShuffleResult();
          count = arith::AddIOp::create(
              b, count, b.select(b.ult(lane, b.idx(d)), b.i32(0), up));
        }
        Value totals = workgroupArray(b, workgroupBytes(b), {warps}, i32);
        Value warp = b.div(thread, b.idx(kWarp));
        b.ifThen(b.eq(lane, b.idx(kWarp - 1)), [&] {
          memref::StoreOp::create(b, count, totals, ValueRange{warp});
        });
        gpu::BarrierOp::create(b);
        for (int64_t w = 0; w + 1 < warps; ++w) {
          Value total = memref::LoadOp::create(b, totals, ValueRange{b.idx(w)});
          count = arith::AddIOp::create(
              b, count, b.select(b.ult(b.idx(w), warp), total, b.i32(0)));
        }
        b.ifThen(live, [&] {
          memref::StoreOp::create(b, count, a[1], ValueRange{thread});
        });
      },
      /*dynamicSharedBytes=*/warps * 4);
}

std::pair<Value, Value>
moec::kernels::scaleBlockRows(KernelBuilder &b, Value offsets, Value blockEnds,
                              Value e, Value blk, int64_t group) {
  Value blocksBefore = b.ifElse(
      b.eq(e, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
      [&] { return b.loadIdx(blockEnds, {b.sub(e, b.idx(1))}); });
  Value first = b.add(groupStart(b, offsets, e),
                      b.mul(b.sub(blk, blocksBefore), b.idx(group)));
  Value last = b.minIdx(b.add(first, b.idx(group)), b.loadIdx(offsets, {e}));
  return {first, last};
}

Value moec::kernels::magnitudeBits(KernelBuilder &b, Value vec) {
  auto type = cast<VectorType>(vec.getType());
  unsigned bits = type.getElementTypeBitWidth();
  auto intType = VectorType::get(type.getShape(), b.getIntegerType(bits));
  Value mask = arith::ConstantOp::create(
      b, intType,
      DenseElementsAttr::get(intType, APInt::getSignedMaxValue(bits)));
  return arith::AndIOp::create(b, arith::BitcastOp::create(b, intType, vec),
                               mask);
}

Value moec::kernels::magnitudeToF32(KernelBuilder &b, Value amaxBits, int64_t i,
                                    Type elem) {
  Value bits = vector::ExtractOp::create(b, amaxBits, i);
  Value v = arith::BitcastOp::create(b, elem, bits);
  return elem.isF32() ? v : arith::ExtFOp::create(b, b.getF32Type(), v);
}

bool moec::kernels::quantizable(Type type) {
  return type.isBF16() || type.isF16() || type.isF32();
}
