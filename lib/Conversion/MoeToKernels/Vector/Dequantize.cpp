//===- Dequantize.cpp - Vectorized FP8 and NF4 dequantize -----------------===//
//
// Part of moec. FP8: 16 bytes of output per work item (kRowwiseUnroll items
// per thread), the item's scale looked up once. NF4: 16 outputs (8 packed
// bytes) per thread, inside one absmax block, decoded through the 16-entry
// codebook.
//
//===----------------------------------------------------------------------===//

#include "VectorCommon.h"
#include "VectorKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

bool isNF4(moe::DequantizeOp op) {
  return elementType(op.getData()).isUnsignedInteger(8);
}

/// Elements per work item of the FP8 kernel, or 0 where it does not apply.
int64_t fp8Width(moe::DequantizeOp op) {
  Type outElem = elementType(op.getOutput());
  bool colwise = op.getAxis() == moe::QuantAxis::colwise;
  int64_t width = chunkWidth(staticDim(op.getOutput(), 1),
                             {elementType(op.getData()), outElem});
  // Row-wise: 16 bytes of output per item (8 FP8 bytes in), so that every
  // store is one whole 16-byte access: 1.3x the speed of 16 FP8 bytes in and
  // two stores per item on the H200.
  if (!colwise && width && outElem.getIntOrFloatBitWidth() > 8)
    width = KernelBuilder::vectorWidth(outElem);
  if (!width || (!colwise && op.getGroupSize() % width))
    return 0;
  return width;
}

/// NF4 outputs per thread: 8 packed bytes, inside one absmax block.
constexpr int64_t kNF4Width = 16;

bool nf4Applies(moe::DequantizeOp op) {
  std::optional<int64_t> cols = staticDim(op.getOutput(), 2);
  return cols && *cols % kNF4Width == 0 && op.getGroupSize() % kNF4Width == 0 &&
         KernelBuilder::vectorWidth(elementType(op.getOutput()));
}

LogicalResult emitDequantizeFP8(moe::DequantizeOp op, moe::TileAttr tile,
                                BufferMap buffer, LoweringContext &ctx) {
  Value data = buffer(op.getData()), scales = buffer(op.getScales());
  Value out = buffer(op.getOutput()), offsets = buffer(op.getOffsets());
  int64_t group = op.getGroupSize();
  bool colwise = op.getAxis() == moe::QuantAxis::colwise;
  std::optional<int64_t> cols = staticDim(out, 1);
  int64_t width = fp8Width(op);
  int64_t chunks = *cols / width;
  KernelBuilder &h = ctx.host();
  SmallVector<Value> operands = {data, scales, out};
  int64_t experts = 0;
  if (colwise) {
    experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
    Value blockEnds = ctx.allocTemp(MemRefType::get({experts}, h.getI32Type()),
                                    {h.idx(experts)});
    if (failed(emitBlockEnds(ctx, tile, offsets, blockEnds, group)))
      return failure();
    operands.append({offsets, blockEnds});
  }
  Value count = h.mul(ctx.sizes(out)[0], h.idx(chunks));
  if (!colwise)
    // One scale per chunk: the group divides into whole chunks.
    return launchUnrolled(
        ctx, "fp8_vec", count, tile, kRowwiseUnroll, operands,
        [&](KernelBuilder &b, ValueRange a, Value item) -> ItemRest {
          Value r = b.div(item, b.idx(chunks));
          Value c = b.mul(b.rem(item, b.idx(chunks)), b.idx(width));
          Value scale = b.loadF(a[1], {r, b.div(c, b.idx(group))});
          Value x = b.loadVecF32(a[0], {r, c}, width);
          return [=, &b](Value active) {
            b.ifThen(active, [&] {
              auto f32x = VectorType::get({width}, b.getF32Type());
              Value s = vector::BroadcastOp::create(b, f32x, scale);
              b.storeVecF32(arith::MulFOp::create(b, x, s), a[2], {r, c});
            });
          };
        });
  return launchPerItem(
      ctx, "fp8_vec", count, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto f32x = VectorType::get({width}, b.getF32Type());
        // The row's expert (first group end past it), then its block; rows
        // past the last group are zero.
        Value e = firstGreater(b, a[3], experts, r);
        Value y = b.ifElse(
            b.ult(e, b.idx(experts)), f32x,
            [&] {
              Value blocksBefore = b.ifElse(
                  b.eq(e, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
                  [&] { return b.loadIdx(a[4], {b.sub(e, b.idx(1))}); });
              Value blk =
                  b.add(blocksBefore,
                        b.div(b.sub(r, groupStart(b, a[3], e)), b.idx(group)));
              Value scale = b.loadVecF32(a[1], {blk, c}, width);
              return Value(arith::MulFOp::create(
                  b, b.loadVecF32(a[0], {r, c}, width), scale));
            },
            [&] { return b.zeroVec(f32x); });
        b.storeVecF32(y, a[2], {r, c});
      });
}

LogicalResult emitDequantizeNF4(moe::DequantizeOp op, moe::TileAttr tile,
                                BufferMap buffer, LoweringContext &ctx) {
  Value data = buffer(op.getData()), scales = buffer(op.getScales());
  Value out = buffer(op.getOutput()), codebook = buffer(op.getCodebook());
  Value experts = buffer(op.getExperts());
  int64_t group = op.getGroupSize();
  constexpr int64_t width = kNF4Width;
  std::optional<int64_t> cols = staticDim(out, 2);
  int64_t chunks = *cols / width;
  KernelBuilder &h = ctx.host();
  SmallVector<Value> outSizes = ctx.sizes(out);
  SmallVector<Value> operands = {data, scales, codebook, out};
  if (experts)
    operands.push_back(experts);
  Value count = h.mul(h.mul(outSizes[0], outSizes[1]), h.idx(chunks));
  return launchUnrolled(
      ctx, "nf4_vec", count, tile, kRowwiseUnroll, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) -> ItemRest {
        Value K = b.dim(a[3], 1);
        Value chunk = b.rem(id, b.idx(chunks));
        Value rowOf = b.div(id, b.idx(chunks)); // sel * K + r
        Value sel = b.div(rowOf, K), r = b.rem(rowOf, K);
        Value c = b.mul(chunk, b.idx(width));
        Value e = experts ? b.loadIdx(a[4], {sel}) : sel;
        Value packed = b.loadVec(a[0], {e, r, b.div(c, b.idx(2))}, width / 2);
        Value absmax = b.loadF(
            a[1], {e, b.div(b.add(b.mul(r, b.idx(*cols)), c), b.idx(group))});
        return [=, &b](Value active) {
          // ui8 is not an arith type; it is i8 once lowered.
          auto bytesType = VectorType::get({width / 2}, b.getI8Type());
          Value bytes = UnrealizedConversionCastOp::create(
                            b, TypeRange{bytesType}, ValueRange{packed})
                            .getResult(0);
          SmallVector<Value> values;
          for (int64_t i = 0; i < width / 2; ++i) {
            Value byte = arith::ExtUIOp::create(
                b, b.getI32Type(), vector::ExtractOp::create(b, bytes, i));
            // Even columns are the high nibble, odd ones the low.
            Value high = arith::ShRUIOp::create(b, byte, b.i32(4));
            Value low = arith::AndIOp::create(b, byte, b.i32(15));
            for (Value nibble : {high, low}) {
              Value code = b.loadF(a[2], {arith::IndexCastOp::create(
                                             b, b.getIndexType(), nibble)});
              values.push_back(b.fmul(code, absmax));
            }
          }
          b.ifThen(active, [&] { b.storeVecF(values, a[3], {sel, r, c}); });
        };
      });
}

} // namespace

bool vectorized::matchDequantize(moe::DequantizeOp op, moe::TileAttr,
                                 const TargetInfo &) {
  return isNF4(op) ? nf4Applies(op) : fp8Width(op) != 0;
}

LogicalResult vectorized::emitDequantize(moe::DequantizeOp op,
                                         moe::TileAttr tile, BufferMap buffer,
                                         LoweringContext &ctx) {
  if (isNF4(op))
    return emitDequantizeNF4(op, tile, buffer, ctx);
  return emitDequantizeFP8(op, tile, buffer, ctx);
}
