//===- KernelBuilder.cpp - Helpers to write naive GPU kernel bodies -------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cmath>

using namespace mlir;

namespace moec::kernels {

Value KernelBuilder::idx(int64_t v) {
  return arith::ConstantIndexOp::create(*this, v);
}
Value KernelBuilder::f32(double v) {
  return arith::ConstantFloatOp::create(*this, getF32Type(),
                                        llvm::APFloat(static_cast<float>(v)));
}
Value KernelBuilder::i32(int64_t v) {
  return arith::ConstantIntOp::create(*this, getI32Type(), v);
}

Value KernelBuilder::add(Value a, Value b) {
  return arith::AddIOp::create(*this, a, b);
}
Value KernelBuilder::sub(Value a, Value b) {
  return arith::SubIOp::create(*this, a, b);
}
Value KernelBuilder::mul(Value a, Value b) {
  return arith::MulIOp::create(*this, a, b);
}
Value KernelBuilder::div(Value a, Value b) {
  return arith::DivUIOp::create(*this, a, b);
}
Value KernelBuilder::rem(Value a, Value b) {
  return arith::RemUIOp::create(*this, a, b);
}
Value KernelBuilder::ceilDiv(Value a, Value b) {
  return arith::CeilDivUIOp::create(*this, a, b);
}
Value KernelBuilder::minIdx(Value a, Value b) {
  return arith::MinUIOp::create(*this, a, b);
}
Value KernelBuilder::ult(Value a, Value b) {
  return arith::CmpIOp::create(*this, arith::CmpIPredicate::ult, a, b);
}
Value KernelBuilder::ule(Value a, Value b) {
  return arith::CmpIOp::create(*this, arith::CmpIPredicate::ule, a, b);
}
Value KernelBuilder::eq(Value a, Value b) {
  return arith::CmpIOp::create(*this, arith::CmpIPredicate::eq, a, b);
}
Value KernelBuilder::land(Value a, Value b) {
  return arith::AndIOp::create(*this, a, b);
}
Value KernelBuilder::select(Value c, Value a, Value b) {
  return arith::SelectOp::create(*this, c, a, b);
}

Value KernelBuilder::fadd(Value a, Value b) {
  return arith::AddFOp::create(*this, a, b);
}
Value KernelBuilder::fsub(Value a, Value b) {
  return arith::SubFOp::create(*this, a, b);
}
Value KernelBuilder::fmul(Value a, Value b) {
  return arith::MulFOp::create(*this, a, b);
}
Value KernelBuilder::fdiv(Value a, Value b) {
  return arith::DivFOp::create(*this, a, b);
}
Value KernelBuilder::fmax(Value a, Value b) {
  return arith::MaximumFOp::create(*this, a, b);
}
Value KernelBuilder::fgt(Value a, Value b) {
  return arith::CmpFOp::create(*this, arith::CmpFPredicate::OGT, a, b);
}
Value KernelBuilder::exp(Value x) {
  // The generic llvm.exp2 intrinsic, not math.exp2: the GPU conversions map
  // math.exp2 to vendor library calls (__nv_exp2f, __ocml_exp2_f32), which
  // need libdevice or the ROCm device libraries at link time. NVPTX and
  // AMDGPU select llvm.exp2.f32 to one instruction; the host calls libm.
  Value scaled = fmul(x, f32(M_LOG2E));
  return LLVM::CallIntrinsicOp::create(*this, getF32Type(),
                                       getStringAttr("llvm.exp2.f32"),
                                       ValueRange{scaled})
      .getResult(0);
}
Value KernelBuilder::sigmoid(Value x) {
  Value one = f32(1.0);
  return fdiv(one, fadd(one, exp(arith::NegFOp::create(*this, x))));
}

Value KernelBuilder::loadF(Value memref, ValueRange indices) {
  Value v = memref::LoadOp::create(*this, memref, indices);
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(*this, getF32Type(), v);
}
void KernelBuilder::storeF(Value value, Value memref, ValueRange indices) {
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  if (elem != value.getType())
    value = arith::TruncFOp::create(*this, elem, value);
  memref::StoreOp::create(*this, value, memref, indices);
}
Value KernelBuilder::loadIdx(Value memref, ValueRange indices) {
  Value v = memref::LoadOp::create(*this, memref, indices);
  return arith::IndexCastOp::create(*this, getIndexType(), v);
}
std::pair<Value, Value> KernelBuilder::loadSigned(Value memref,
                                                  ValueRange indices) {
  Value v = memref::LoadOp::create(*this, memref, indices);
  Value nonNegative =
      arith::CmpIOp::create(*this, arith::CmpIPredicate::sge, v, i32(0));
  return {arith::IndexCastOp::create(*this, getIndexType(), v), nonNegative};
}
void KernelBuilder::storeI32(Value indexValue, Value memref,
                             ValueRange indices) {
  Value v = arith::IndexCastOp::create(*this, getI32Type(), indexValue);
  memref::StoreOp::create(*this, v, memref, indices);
}
void KernelBuilder::storeI32Const(int64_t v, Value memref,
                                  ValueRange indices) {
  memref::StoreOp::create(*this, i32(v), memref, indices);
}
Value KernelBuilder::dim(Value memref, int64_t d) {
  return memref::DimOp::create(*this, memref, d);
}

Value KernelBuilder::alloca(MemRefType type) {
  Operation *func = getInsertionBlock()->getParentOp();
  while (func && !func->hasTrait<OpTrait::IsIsolatedFromAbove>())
    func = func->getParentOp();
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPointToStart(&func->getRegion(0).front());
  // Private memory: AMDGPU needs its stack slots in address space 5.
  auto privateType = MemRefType::get(
      type.getShape(), type.getElementType(), MemRefLayoutAttrInterface(),
      gpu::AddressSpaceAttr::get(getContext(), gpu::AddressSpace::Private));
  return memref::AllocaOp::create(*this, privateType);
}

SmallVector<Value> KernelBuilder::loop(Value lb, Value ub, ValueRange inits,
                                       const LoopBody &body) {
  auto forOp = scf::ForOp::create(*this, lb, ub, idx(1), inits);
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPointToStart(forOp.getBody());
  SmallVector<Value> yielded =
      body(forOp.getInductionVar(), forOp.getRegionIterArgs());
  // scf::ForOp::create adds an empty yield only without iter_args.
  if (!inits.empty())
    scf::YieldOp::create(*this, yielded);
  return SmallVector<Value>(forOp.getResults());
}
void KernelBuilder::loop(Value lb, Value ub,
                         const std::function<void(Value)> &body) {
  auto forOp = scf::ForOp::create(*this, lb, ub, idx(1));
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPoint(forOp.getBody()->getTerminator());
  body(forOp.getInductionVar());
}
void KernelBuilder::ifThen(Value cond, const std::function<void()> &then) {
  auto ifOp = scf::IfOp::create(*this, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPoint(ifOp.thenBlock()->getTerminator());
  then();
}
Value KernelBuilder::ifElse(Value cond, Type type,
                            const std::function<Value()> &then,
                            const std::function<Value()> &otherwise) {
  auto ifOp = scf::IfOp::create(*this, TypeRange{type}, cond,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(*this, then());
  setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(*this, otherwise());
  return ifOp.getResult(0);
}

} // namespace moec::kernels
