//===- KernelsToHost.cpp - convert-kernels-to-host ------------------------===//
//
// Part of moec. The host CPU backend runs the very kernels the GPU runs: each
// gpu.func becomes a func.func that loops over its grid and block. Kernels
// of this pipeline never synchronize inside a block, so running the threads
// one after another is a faithful schedule; anything that would need one
// (barriers, shared memory) is rejected.
//
//===----------------------------------------------------------------------===//

#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/IR/IRMapping.h"

namespace moec {
#define GEN_PASS_DEF_CONVERTKERNELSTOHOST
#include "moec/Conversion/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace {

LogicalResult convertKernel(gpu::GPUFuncOp kernel, OpBuilder &builder) {
  Location loc = kernel.getLoc();
  std::optional<ArrayRef<int32_t>> blockSize = kernel.getKnownBlockSize();
  if (!blockSize || (*blockSize)[1] != 1 || (*blockSize)[2] != 1)
    return kernel.emitOpError("needs a 1-D known_block_size to run on the "
                              "host");
  if (!kernel.getWorkgroupAttributions().empty() ||
      !kernel.getPrivateAttributions().empty() ||
      !kernel.getBody().hasOneBlock())
    return kernel.emitOpError("uses attributions or several blocks; only "
                              "single-block kernels without shared memory "
                              "run on the host");
  WalkResult unsupported = kernel.walk([](Operation *op) {
    if (isa<gpu::BarrierOp, gpu::ShuffleOp, gpu::GridDimOp>(op) ||
        (op->getDialect() && op->getDialect()->getNamespace() == "nvvm"))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  if (unsupported.wasInterrupted())
    return kernel.emitOpError("synchronizes or uses target intrinsics; it "
                              "cannot run on the host");

  SmallVector<Type> argTypes = {builder.getIndexType()};
  llvm::append_range(argTypes, kernel.getArgumentTypes());
  auto func = func::FuncOp::create(builder, loc, kernel.getName(),
                                   builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  OpBuilder b = OpBuilder::atBlockEnd(entry);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value threads = arith::ConstantIndexOp::create(b, loc, (*blockSize)[0]);
  auto blocks = scf::ForOp::create(b, loc, zero, entry->getArgument(0), one);
  b.setInsertionPoint(blocks.getBody()->getTerminator());
  auto lanes = scf::ForOp::create(b, loc, zero, threads, one);
  b.setInsertionPoint(lanes.getBody()->getTerminator());

  IRMapping mapping;
  for (auto [from, to] :
       llvm::zip(kernel.getArguments(), entry->getArguments().drop_front()))
    mapping.map(from, to);
  for (Operation &op : kernel.getBody().front()) {
    if (isa<gpu::ReturnOp>(op))
      break;
    if (auto id = dyn_cast<gpu::BlockIdOp>(op)) {
      mapping.map(id.getResult(), id.getDimension() == gpu::Dimension::x
                                      ? blocks.getInductionVar()
                                      : zero);
      continue;
    }
    if (auto id = dyn_cast<gpu::ThreadIdOp>(op)) {
      mapping.map(id.getResult(), id.getDimension() == gpu::Dimension::x
                                      ? lanes.getInductionVar()
                                      : zero);
      continue;
    }
    if (auto dim = dyn_cast<gpu::BlockDimOp>(op)) {
      mapping.map(dim.getResult(),
                  dim.getDimension() == gpu::Dimension::x ? threads : one);
      continue;
    }
    b.clone(op, mapping);
  }
  // Private (per-thread) arrays are plain stack arrays on the host.
  func.walk([](memref::AllocaOp alloca) {
    MemRefType type = alloca.getType();
    if (type.getMemorySpace())
      alloca.getResult().setType(
          MemRefType::get(type.getShape(), type.getElementType()));
  });
  // Ids used inside nested regions were mapped above; anything else from the
  // gpu dialect left in the body has no host meaning.
  WalkResult leftover = func.walk([](Operation *op) {
    return op->getDialect() && op->getDialect()->getNamespace() == "gpu"
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
  if (leftover.wasInterrupted())
    return kernel.emitOpError("uses gpu ops below its top level; not "
                              "supported on the host");
  return success();
}

struct ConvertKernelsToHostPass
    : public moec::impl::ConvertKernelsToHostBase<ConvertKernelsToHostPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<gpu::GPUModuleOp> gpuModules(
        module.getOps<gpu::GPUModuleOp>());
    // The functions that launched the kernels describe the program, which
    // the bundle already holds; the host module keeps only the kernels.
    SmallVector<func::FuncOp> launchers;
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.getOps<gpu::LaunchFuncOp>().empty() ||
          func->hasAttr(moec::moe::MoeDialect::EntryAttrHelper::getNameStr()))
        launchers.push_back(func);
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToEnd(module.getBody());
    for (gpu::GPUModuleOp gpuModule : gpuModules)
      for (auto kernel : gpuModule.getOps<gpu::GPUFuncOp>())
        if (failed(convertKernel(kernel, builder)))
          return signalPassFailure();
    for (func::FuncOp func : launchers)
      func.erase();
    for (gpu::GPUModuleOp gpuModule : gpuModules)
      gpuModule.erase();
    module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
  }
};

} // namespace
