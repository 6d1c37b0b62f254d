//===- KernelHelpers.cpp - Pieces shared by the kernel generators ---------===//
//
// Part of moec. The helpers LoweringContext.h declares for every strategy:
// per-item launches, group bounds, the slot inverse, TMA descriptor
// operands, FP8 scales and the searches the kernels share.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Conversion/LaunchABI.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

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

Value moec::kernels::blocksBefore(KernelBuilder &b, Value offsets, Value e,
                                  int64_t group) {
  return b.loop(b.idx(0), e, {b.idx(0)},
                [&](Value before, ValueRange it) -> SmallVector<Value> {
                  Value rows = b.sub(b.loadIdx(offsets, {before}),
                                     groupStart(b, offsets, before));
                  return {b.add(it[0], b.ceilDiv(rows, b.idx(group)))};
                })[0];
}

Value moec::kernels::expertOfRow(KernelBuilder &b, Value offsets,
                                 Value numExperts, Value row) {
  return b.loop(b.idx(0), numExperts, {b.idx(0)},
                [&](Value e, ValueRange it) -> SmallVector<Value> {
                  Value end = b.loadIdx(offsets, {e});
                  return {
                      b.select(b.ule(end, row), b.add(it[0], b.idx(1)), it[0])};
                })[0];
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

Value moec::kernels::isPaddingRow(KernelBuilder &b, Value slots, Value offsets,
                                  Value r) {
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
    return launchPerItem(ctx, "slot_gather", numSlots, tile,
                         {values, positions, out},
                         [&](KernelBuilder &b, ValueRange a, Value s) {
                           Value k = b.dim(a[2], 1);
                           b.storeF(b.loadF(a[0], {b.loadIdx(a[1], {s})}), a[2],
                                    {b.div(s, k), b.rem(s, k)});
                         });
  if (failed(
          launchPerItem(ctx, "slot_fill", numSlots, tile, {out},
                        [&](KernelBuilder &b, ValueRange a, Value s) {
                          Value k = b.dim(a[0], 1);
                          b.storeF(b.f32(0), a[0], {b.div(s, k), b.rem(s, k)});
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

Value moec::kernels::gateUpColumn(KernelBuilder &b, moe::GateUpLayout layout,
                                  Value half, Value c, bool up) {
  if (layout == moe::GateUpLayout::interleaved)
    return b.add(b.mul(c, b.idx(2)), b.idx(up ? 1 : 0));
  return up ? b.add(c, half) : c;
}

Value moec::kernels::groupScale(KernelBuilder &b, Value amax, double fp8Max,
                                bool pow2) {
  Value scale = b.fdiv(amax, b.f32(fp8Max));
  if (pow2) {
    // 2^ceil(log2 s): bump the exponent unless s is already a power of two.
    Value bits = arith::BitcastOp::create(b, b.getI32Type(), scale);
    Value mantissa = arith::AndIOp::create(b, bits, b.i32(0x7fffff));
    Value exponentBits = arith::AndIOp::create(b, bits, b.i32(0x7f800000));
    Value exact =
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq, mantissa, b.i32(0));
    Value up = arith::AddIOp::create(b, exponentBits, b.i32(0x800000));
    scale = arith::BitcastOp::create(b, b.getF32Type(),
                                     b.select(exact, exponentBits, up));
  }
  Value zero =
      arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, amax, b.f32(0));
  return b.select(zero, b.f32(1.0), scale);
}

/// Smallest i in [0, n) with table[i] > value, or n: a binary search over a
/// non-decreasing i32 table, unrolled (n is static and small).
Value moec::kernels::firstGreater(KernelBuilder &b, Value table, int64_t n,
                                  Value value) {
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

FailureOr<MatmulLayout> moec::kernels::matmulLayout(Operation *op) {
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
  if (maps.size() != 3 || maps[2] != map({m, n}))
    return failure();
  MatmulLayout layout;
  if (maps[0] == map({k, m}))
    layout.transposeA = true;
  else if (maps[0] != map({m, k}))
    return failure();
  if (maps[1] == map({n, k}))
    layout.transposeB = true;
  else if (maps[1] != map({k, n}))
    return failure();
  return layout;
}

FailureOr<bool> moec::kernels::matmulTransposesB(Operation *op) {
  FailureOr<MatmulLayout> layout = matmulLayout(op);
  if (failed(layout) || layout->transposeA)
    return failure();
  return layout->transposeB;
}
