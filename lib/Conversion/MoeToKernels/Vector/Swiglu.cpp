//===- Swiglu.cpp - Vectorized swiglu and swiglu_grad ---------------------===//
//
// Part of moec. A thread per 16-byte chunk of output columns: the gate and
// up values of those columns come in one or two vector loads (halves or
// interleaved layout) and go out in one. Applies where the row length is
// static and a multiple of the chunk of every element type touched.
//
//===----------------------------------------------------------------------===//

#include "VectorKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// The gate and up values of output columns [c, c + width) of row r.
std::pair<SmallVector<Value>, SmallVector<Value>>
loadGateUp(KernelBuilder &b, moe::GateUpLayout layout, Value in, Value r,
           Value c, Value half, int64_t width) {
  if (layout == moe::GateUpLayout::halves)
    return {b.loadVecF(in, {r, c}, width),
            b.loadVecF(in, {r, b.add(c, half)}, width)};
  SmallVector<Value> both = b.loadVecF(in, {r, b.mul(c, b.idx(2))}, 2 * width);
  SmallVector<Value> gate, up;
  for (int64_t i = 0; i < width; ++i) {
    gate.push_back(both[2 * i]);
    up.push_back(both[2 * i + 1]);
  }
  return {gate, up};
}

/// Elements per chunk of swiglu's output, or 0 where the kernel does not
/// apply.
int64_t swigluWidth(moe::SwigluOp op) {
  return chunkWidth(staticDim(op.getOutput(), 1),
                    {elementType(op.getInput()), elementType(op.getOutput())});
}

/// Elements per chunk of swiglu_grad's output gradient, or 0 where the
/// kernel does not apply.
int64_t swigluGradWidth(moe::SwigluGradOp op) {
  return chunkWidth(staticDim(op.getGradOutput(), 1),
                    {elementType(op.getInput()),
                     elementType(op.getGradOutput()),
                     elementType(op.getGradInput())});
}

} // namespace

bool vectorized::matchSwiglu(moe::SwigluOp op, moe::TileAttr,
                             const TargetInfo &) {
  return swigluWidth(op) != 0;
}

LogicalResult vectorized::emitSwiglu(moe::SwigluOp op, moe::TileAttr tile,
                                     BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), out = buffer(op.getOutput());
  std::optional<int64_t> half = staticDim(out, 1);
  int64_t width = swigluWidth(op);
  int64_t chunks = *half / width;
  moe::GateUpLayout layout = op.getLayout();
  KernelBuilder &h = ctx.host();
  return launchPerItem(
      ctx, "vec", h.mul(ctx.sizes(out)[0], h.idx(chunks)), tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto [gate, up] =
            loadGateUp(b, layout, a[0], r, c, b.idx(*half), width);
        SmallVector<Value> y;
        for (int64_t i = 0; i < width; ++i)
          y.push_back(b.swiglu(gate[i], up[i]));
        b.storeVecF(y, a[1], {r, c});
      });
}

bool vectorized::matchSwigluGrad(moe::SwigluGradOp op, moe::TileAttr,
                                 const TargetInfo &) {
  return swigluGradWidth(op) != 0;
}

LogicalResult vectorized::emitSwigluGrad(moe::SwigluGradOp op,
                                         moe::TileAttr tile, BufferMap buffer,
                                         LoweringContext &ctx) {
  Value in = buffer(op.getInput()), dy = buffer(op.getGradOutput());
  Value out = buffer(op.getGradInput());
  std::optional<int64_t> half = staticDim(dy, 1);
  int64_t width = swigluGradWidth(op);
  int64_t chunks = *half / width;
  moe::GateUpLayout layout = op.getLayout();
  KernelBuilder &h = ctx.host();
  return launchPerItem(
      ctx, "vec", h.mul(ctx.sizes(dy)[0], h.idx(chunks)), tile, {in, dy, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        Value halfV = b.idx(*half);
        auto [gate, up] = loadGateUp(b, layout, a[0], r, c, halfV, width);
        SmallVector<Value> d = b.loadVecF(a[1], {r, c}, width);
        SmallVector<Value> dGate, dUp, both;
        for (int64_t i = 0; i < width; ++i) {
          auto [dg, du] = b.swigluGrad(d[i], gate[i], up[i]);
          dGate.push_back(dg);
          dUp.push_back(du);
          both.append({dg, du});
        }
        if (layout == moe::GateUpLayout::halves) {
          b.storeVecF(dGate, a[2], {r, c});
          b.storeVecF(dUp, a[2], {r, b.add(c, halfV)});
        } else {
          b.storeVecF(both, a[2], {r, b.mul(c, b.idx(2))});
        }
      });
}
