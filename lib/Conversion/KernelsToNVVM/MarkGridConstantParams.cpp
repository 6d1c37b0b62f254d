//===- MarkGridConstantParams.cpp - TMA descriptors as kernel params ------===//
//
// Part of moec. A TMA copy reads its tensor map (CUtensorMap, 128 bytes)
// from global, constant or kernel-parameter memory. moec passes the map by
// value as a kernel parameter, as CUDA's `const __grid_constant__
// CUtensorMap`: the runtime encodes it per launch and no device memory is
// written. The kernel builder cannot put the needed argument attributes on
// a gpu.func (the NVVM verifier only takes `nvvm.grid_constant` on LLVM
// kernels), so it lists the parameters in `moe.grid_constant_args` and this
// pass sets the attributes once the kernel is an llvm.func.
//
//===----------------------------------------------------------------------===//

#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace moec {
#define GEN_PASS_DEF_MARKGRIDCONSTANTPARAMS
#include "moec/Conversion/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace {

constexpr llvm::StringLiteral kListAttr =
    moec::moe::MoeDialect::GridConstantArgsAttrHelper::getNameStr();
/// Bytes of a CUtensorMap, and the alignment the driver requires.
constexpr int64_t kTensorMapBytes = 128;
constexpr int64_t kTensorMapAlign = 64;

struct MarkGridConstantParams
    : moec::impl::MarkGridConstantParamsBase<MarkGridConstantParams> {
  void runOnOperation() override {
    LLVM::LLVMFuncOp func = getOperation();
    auto list = func->getAttrOfType<DenseI64ArrayAttr>(kListAttr);
    if (!list)
      return;
    MLIRContext *ctx = func.getContext();
    Builder b(ctx);
    Type bytes = LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8),
                                          kTensorMapBytes);
    unsigned count = func.getNumArguments();
    for (int64_t index : list.asArrayRef()) {
      if (index < 0 || index >= count) {
        func.emitError() << kListAttr << " lists parameter " << index
                         << " of a kernel with " << count << " parameters";
        return signalPassFailure();
      }
      if (!isa<LLVM::LLVMPointerType>(func.getArgument(index).getType())) {
        func.emitError() << kListAttr << " lists parameter " << index
                         << " of type " << func.getArgument(index).getType()
                         << ", not !llvm.ptr";
        return signalPassFailure();
      }
      func.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                      TypeAttr::get(bytes));
      func.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(),
                      b.getI64IntegerAttr(kTensorMapAlign));
      func.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(),
                      b.getUnitAttr());
    }
    func->removeAttr(kListAttr);
  }
};

} // namespace
