//===- Add.cpp - Vectorized linalg.add ------------------------------------===//
//
// Part of moec. A thread per 16-byte chunk of a row: both operands come in
// one vector load each, the f32 sum goes out in one store (the per-element
// scalar kernel's arithmetic, so the same bits). linalg.add sums gradients
// that reach a value along two paths, and moe-fp8-recipe adds a LoRA
// adapter's term to its FP8 base matmul: [M, N] tensors of hundreds of MB
// to GB. Applies to 2-D adds whose row length is static and a multiple of
// the chunk of every element type.
//
//===----------------------------------------------------------------------===//

#include "VectorKernels.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// Elements per chunk of the add's rows, or 0 where the kernel does not
/// apply.
int64_t addWidth(linalg::AddOp op) {
  Value out = op.getResult(0);
  if (op.getInputs().size() != 2 ||
      cast<ShapedType>(out.getType()).getRank() != 2)
    return 0;
  return chunkWidth(staticDim(out, 1), {elementType(op.getInputs()[0]),
                                        elementType(op.getInputs()[1]),
                                        elementType(out)});
}

} // namespace

bool vectorized::matchAdd(linalg::AddOp op, moe::TileAttr,
                          const TargetInfo &) {
  return addWidth(op) != 0;
}

LogicalResult vectorized::emitAdd(linalg::AddOp op, moe::TileAttr tile,
                                  BufferMap buffer, LoweringContext &ctx) {
  Value lhs = buffer(op.getInputs()[0]), rhs = buffer(op.getInputs()[1]);
  Value out = buffer(op.getResult(0));
  int64_t width = addWidth(op);
  int64_t chunks = *staticDim(out, 1) / width;
  KernelBuilder &h = ctx.host();
  return launchPerItem(
      ctx, "vec", h.mul(ctx.sizes(out)[0], h.idx(chunks)), tile,
      {lhs, rhs, out}, [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        SmallVector<Value> x = b.loadVecF(a[0], {r, c}, width);
        SmallVector<Value> y = b.loadVecF(a[1], {r, c}, width);
        SmallVector<Value> sum;
        for (int64_t i = 0; i < width; ++i)
          sum.push_back(b.fadd(x[i], y[i]));
        b.storeVecF(sum, a[2], {r, c});
      });
}
