//===- WarpOps.cpp - Warp-level building blocks ---------------------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "WarpOps.h"

#include "../LoweringContext.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace moec::kernels::warp {

Value shuffle(KernelBuilder &b, Value value, Value laneOrOffset,
              gpu::ShuffleMode mode) {
  return gpu::ShuffleOp::create(b, value, laneOrOffset, b.i32(kWarp),
                                gpu::ShuffleModeAttr::get(b.getContext(), mode))
      .getShuffleResult();
}
Value shuffleXor(KernelBuilder &b, Value value, int64_t mask) {
  return shuffle(b, value, b.i32(mask), gpu::ShuffleMode::XOR);
}
Value shuffleIdx(KernelBuilder &b, Value value, Value lane) {
  return shuffle(b, value, lane, gpu::ShuffleMode::IDX);
}

Value toI32(KernelBuilder &b, Value index) {
  return arith::IndexCastOp::create(b, b.getI32Type(), index);
}
Value toIndex(KernelBuilder &b, Value i32) {
  return arith::IndexCastOp::create(b, b.getIndexType(), i32);
}
Value lor(KernelBuilder &b, Value x, Value y) {
  return arith::OrIOp::create(b, x, y);
}
Value slt(KernelBuilder &b, Value x, Value y) {
  return arith::CmpIOp::create(b, arith::CmpIPredicate::slt, x, y);
}
Value feq(KernelBuilder &b, Value x, Value y) {
  return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, x, y);
}
Value shl(KernelBuilder &b, Value x, Value y) {
  return arith::ShLIOp::create(b, x, y);
}
Value shr(KernelBuilder &b, Value x, Value y) {
  return arith::ShRUIOp::create(b, x, y);
}
Value band(KernelBuilder &b, Value x, int64_t mask) {
  return arith::AndIOp::create(b, x, b.i32(mask));
}

Value shl64(KernelBuilder &b, Value x, int64_t n) {
  return arith::ShLIOp::create(
      b, x, arith::ConstantIntOp::create(b, b.getI64Type(), n));
}
Value shr64(KernelBuilder &b, Value x, int64_t n) {
  return arith::ShRUIOp::create(
      b, x, arith::ConstantIntOp::create(b, b.getI64Type(), n));
}

Value warpReduce(KernelBuilder &b, Value v, bool max) {
  for (int64_t mask = kWarp / 2; mask > 0; mask /= 2) {
    Value other = shuffleXor(b, v, mask);
    v = max ? b.fmax(v, other) : b.fadd(v, other);
  }
  return v;
}

Value warpMaxU32(KernelBuilder &b, Value v) {
  if (b.target().hasWarpReduxAndBallot())
    return NVVM::ReduxOp::create(b, b.getI32Type(), v, NVVM::ReduxKind::UMAX,
                                 b.i32(-1));
  for (int64_t mask = kWarp / 2; mask > 0; mask /= 2)
    v = arith::MaxUIOp::create(b, v, shuffleXor(b, v, mask));
  return v;
}

Value lowestLaneWith(KernelBuilder &b, Value pred, Value lane) {
  if (b.target().hasWarpReduxAndBallot()) {
    Value mask = NVVM::VoteSyncOp::create(
        b, b.getI32Type(), b.i32(-1), pred,
        NVVM::VoteSyncKindAttr::get(b.getContext(),
                                    NVVM::VoteSyncKind::ballot));
    // cttz(0) is 32: "none".
    return LLVM::CountTrailingZerosOp::create(b, b.getI32Type(), mask,
                                              b.getBoolAttr(false));
  }
  Value lowest = b.select(pred, lane, b.i32(kWarp));
  for (int64_t mask = kWarp / 2; mask > 0; mask /= 2)
    lowest = arith::MinUIOp::create(b, lowest, shuffleXor(b, lowest, mask));
  return lowest;
}
} // namespace moec::kernels::warp
