//===- EntryBuilder.cpp - Bundle entries from lowered functions -----------===//
//
// Part of moec. Reads what convert-moe-to-kernels recorded on a lowered
// function (the moe dialect's typed attributes: symbols, #moe.size buffer
// sizes, buffer indices, #moe.launch grids and scalars, the #moe.ref_op
// list) and writes it as an rt::Entry, sizes in the runtime's reverse Polish
// form. Memref kernel arguments
// are expanded the way the LLVM lowering passes them (allocated pointer,
// aligned pointer, offset, sizes, strides), so the runtime can pass
// parameters without knowing anything about memrefs.
//
//===----------------------------------------------------------------------===//

#include "EntryBuilder.h"

#include "moec/Conversion/LaunchABI.h"
#include "moec/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace moec {

FailureOr<rt::ElemType> elemTypeOf(Type type, Location loc) {
  if (type.isF32())
    return rt::ElemType::F32;
  if (type.isF16())
    return rt::ElemType::F16;
  if (type.isBF16())
    return rt::ElemType::BF16;
  if (isa<Float8E4M3FNType>(type))
    return rt::ElemType::F8E4M3FN;
  if (isa<Float8E5M2Type>(type))
    return rt::ElemType::F8E5M2;
  if (type.isSignlessInteger(32))
    return rt::ElemType::I32;
  if (type.isSignlessInteger(64))
    return rt::ElemType::I64;
  if (type.isUnsignedInteger(8))
    return rt::ElemType::U8;
  return emitError(loc) << "element type " << type
                        << " cannot cross the runtime boundary";
}

/// The runtime's form of sizes (the dialect verifies that `moe.dims` holds
/// #moe.size).
static std::vector<std::string> reversePolish(ArrayRef<moe::SizeAttr> sizes) {
  std::vector<std::string> out;
  for (moe::SizeAttr size : sizes)
    out.push_back(size.toReversePolish());
  return out;
}

static std::vector<std::string> reversePolish(ArrayAttr sizes) {
  if (!sizes)
    return {};
  return reversePolish(llvm::to_vector(sizes.getAsRange<moe::SizeAttr>()));
}

FailureOr<rt::Entry> describeEntry(func::FuncOp func) {
  rt::Entry entry;
  auto *attrs = func->getContext()->getLoadedDialect<moe::MoeDialect>();
  StringAttr entryName =
      attrs ? attrs->getEntryAttrHelper().getAttr(func) : StringAttr();
  if (!entryName)
    return func.emitOpError("was not produced by convert-moe-to-kernels");
  IntegerAttr numBuffers = attrs->getNumBuffersAttrHelper().getAttr(func);
  ArrayAttr symbols = attrs->getSymbolsAttrHelper().getAttr(func);
  ArrayAttr refOps = attrs->getRefOpsAttrHelper().getAttr(func);
  if (!numBuffers || !symbols || !refOps)
    return func.emitOpError("lacks the moe.num_buffers, moe.symbols or "
                            "moe.ref_ops that convert-moe-to-kernels records");
  entry.name = entryName.getValue().str();
  entry.buffers.resize(numBuffers.getInt());

  // Symbols, then the input buffers whose dynamic sizes they are.
  for (auto symbol : symbols.getAsRange<moe::DimSymbolAttr>())
    entry.symbols.push_back({symbol.getName().str(),
                             static_cast<uint32_t>(symbol.getArg()),
                             static_cast<uint32_t>(symbol.getDim())});

  unsigned numArgs = func.getNumArguments();
  unsigned numOutputs = 0;
  for (unsigned i = 0; i < numArgs; ++i) {
    auto type = cast<MemRefType>(func.getArgument(i).getType());
    FailureOr<rt::ElemType> elem =
        elemTypeOf(type.getElementType(), func.getLoc());
    if (failed(elem))
      return failure();
    rt::BufferDesc &desc = entry.buffers[i];
    desc.elem = *elem;
    if (func.getArgAttr(i, attrs->getOutputAttrHelper().getName())) {
      desc.role = rt::BufferRole::Output;
      desc.name = "result" + std::to_string(numOutputs++);
      desc.dims = reversePolish(func.getArgAttrOfType<ArrayAttr>(
          i, attrs->getDimsAttrHelper().getName()));
      continue;
    }
    desc.role = rt::BufferRole::Input;
    auto argName = func.getArgAttrOfType<StringAttr>(
        i, attrs->getNameAttrHelper().getName());
    desc.name = argName ? argName.getValue().str() : "arg" + std::to_string(i);
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d)) {
        desc.dims.push_back(std::to_string(type.getDimSize(d)));
        continue;
      }
      // The lowering names the symbol of every dynamic dimension.
      auto symbols = func.getArgAttrOfType<DenseI64ArrayAttr>(
          i, attrs->getDimSymbolsAttrHelper().getName());
      if (!symbols || symbols.size() != type.getRank() || symbols[d] < 0 ||
          symbols[d] >= static_cast<int64_t>(entry.symbols.size()))
        return func.emitOpError("argument ")
               << i << " has no symbol for its dynamic dimension " << d;
      desc.dims.push_back("s" + std::to_string(symbols[d]));
    }
  }
  // Scratch buffers and launches, in program order.
  DenseMap<Value, uint32_t> bufferOf;
  for (unsigned i = 0; i < numArgs; ++i)
    bufferOf[func.getArgument(i)] = i;
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      IntegerAttr index = attrs->getBufferAttrHelper().getAttr(alloc);
      if (!index || index.getInt() >= static_cast<int64_t>(entry.buffers.size()))
        return alloc.emitOpError("has no valid moe.buffer index");
      FailureOr<rt::ElemType> elem =
          elemTypeOf(alloc.getType().getElementType(), alloc.getLoc());
      if (failed(elem))
        return WalkResult::interrupt();
      rt::BufferDesc &desc = entry.buffers[index.getInt()];
      desc.role = rt::BufferRole::Temp;
      desc.elem = *elem;
      desc.name = "tmp" + std::to_string(index.getInt());
      desc.dims = reversePolish(attrs->getDimsAttrHelper().getAttr(alloc));
      bufferOf[alloc] = index.getInt();
      return WalkResult::advance();
    }
    // A reshape that moves nothing: a view of the bytes of its source (of
    // the buffer that source views, for a view of a view).
    if (isa<memref::ExpandShapeOp, memref::CollapseShapeOp>(op)) {
      IntegerAttr index = attrs->getBufferAttrHelper().getAttr(op);
      auto source = bufferOf.find(op->getOperand(0));
      if (!index ||
          index.getInt() >= static_cast<int64_t>(entry.buffers.size()) ||
          source == bufferOf.end())
        return op->emitOpError("is not a view of a known buffer with a "
                               "valid moe.buffer index");
      auto type = cast<MemRefType>(op->getResult(0).getType());
      FailureOr<rt::ElemType> elem =
          elemTypeOf(type.getElementType(), op->getLoc());
      if (failed(elem))
        return WalkResult::interrupt();
      const rt::BufferDesc &viewed = entry.buffers[source->second];
      rt::BufferDesc &desc = entry.buffers[index.getInt()];
      desc.role = rt::BufferRole::View;
      desc.elem = *elem;
      desc.name = "view" + std::to_string(index.getInt());
      desc.dims = reversePolish(attrs->getDimsAttrHelper().getAttr(op));
      desc.source = viewed.role == rt::BufferRole::View ? viewed.source
                                                        : source->second;
      bufferOf[op->getResult(0)] = index.getInt();
      return WalkResult::advance();
    }
    auto launch = dyn_cast<gpu::LaunchFuncOp>(op);
    if (!launch)
      return WalkResult::advance();
    moe::LaunchAttr sizes = attrs->getLaunchAttrHelper().getAttr(launch);
    if (!sizes)
      return launch.emitOpError("has no moe.launch (its grid and scalars)");
    rt::LaunchStep step;
    step.kernel = launch.getKernelName().getValue().str();
    step.grid = sizes.getGrid().toReversePolish();
    APInt threads;
    if (!matchPattern(launch.getBlockSizeX(), m_ConstantInt(&threads)))
      return launch.emitOpError("block size must be a constant");
    step.blockSize = threads.getZExtValue();
    if (Value shared = launch.getDynamicSharedMemorySize()) {
      APInt bytes;
      if (!matchPattern(shared, m_ConstantInt(&bytes)))
        return launch.emitOpError("dynamic shared memory must be a constant");
      step.dynamicSharedBytes = bytes.getZExtValue();
    }
    if (launch.hasClusterSize()) {
      APInt blocks;
      if (!matchPattern(launch.getClusterSizeX(), m_ConstantInt(&blocks)) ||
          !matchPattern(launch.getClusterSizeY(), m_One()) ||
          !matchPattern(launch.getClusterSizeZ(), m_One()))
        return launch.emitOpError("cluster size must be a constant along x");
      step.clusterBlocks = blocks.getZExtValue();
    }
    if (Attribute tile = launch->getAttr(moe::kTileAttrName)) {
      llvm::raw_string_ostream os(step.tile);
      tile.print(os);
    }
    // The kernel's integer operands take moe.launch's scalars in order.
    std::vector<std::string> scalars = reversePolish(sizes.getScalars());
    size_t nextScalar = 0;
    for (Value operand : launch.getKernelOperands()) {
      auto memrefType = dyn_cast<MemRefType>(operand.getType());
      if (auto map = tensorMapOf(operand)) {
        auto source = bufferOf.find(map->first);
        if (source == bufferOf.end())
          return launch.emitOpError("tensor map of an unknown buffer");
        rt::ParamDesc p;
        p.kind = rt::ParamDesc::Kind::TensorMap;
        p.buffer = source->second;
        for (int64_t extent : map->second)
          p.box.push_back(static_cast<uint32_t>(extent));
        step.params.push_back(p);
        continue;
      }
      if (!memrefType) {
        if (nextScalar == scalars.size())
          return launch.emitOpError("moe.launch lists ")
                 << scalars.size() << " scalars; the kernel has more";
        rt::ParamDesc p;
        p.kind = rt::ParamDesc::Kind::Scalar;
        p.expr = scalars[nextScalar++];
        step.params.push_back(p);
        continue;
      }
      auto it = bufferOf.find(operand);
      if (it == bufferOf.end())
        return launch.emitOpError("launch operand is not a known buffer");
      const rt::BufferDesc &desc = entry.buffers[it->second];
      auto pointer = [&] {
        rt::ParamDesc p;
        p.kind = rt::ParamDesc::Kind::Buffer;
        p.buffer = it->second;
        step.params.push_back(p);
      };
      auto scalar = [&](std::string expr) {
        rt::ParamDesc p;
        p.kind = rt::ParamDesc::Kind::Scalar;
        p.expr = std::move(expr);
        step.params.push_back(p);
      };
      // The LLVM lowering's memref ABI (loweredMemrefParams): allocated and
      // aligned pointers, offset, sizes, strides (row-major).
      size_t before = step.params.size();
      pointer();
      pointer();
      scalar("0");
      for (const std::string &dim : desc.dims)
        scalar(dim);
      for (size_t d = 0; d < desc.dims.size(); ++d) {
        std::string stride = "1";
        for (size_t e = d + 1; e < desc.dims.size(); ++e)
          stride = stride == "1" ? desc.dims[e]
                                 : stride + " " + desc.dims[e] + " *";
        scalar(stride);
      }
      assert(int64_t(step.params.size() - before) ==
                 loweredMemrefParams(int64_t(desc.dims.size())) &&
             "the memref ABI the launches count with");
      (void)before;
    }
    if (nextScalar != scalars.size())
      return launch.emitOpError("moe.launch lists ")
             << scalars.size() << " scalars; the kernel has " << nextScalar;
    entry.steps.push_back(std::move(step));
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();

  for (auto op : refOps.getAsRange<moe::RefOpAttr>()) {
    rt::RefOp refOp;
    refOp.name = op.getName().str();
    for (NamedAttribute attr : op.getAttrs()) {
      auto text = dyn_cast<StringAttr>(attr.getValue());
      if (!text)
        return func.emitOpError("reference op '")
               << refOp.name << "' has a non-string attribute '"
               << attr.getName().getValue() << "'";
      refOp.attrs.push_back({attr.getName().str(), text.str()});
    }
    llvm::append_range(refOp.operands, op.getOperands().asArrayRef());
    llvm::append_range(refOp.results, op.getResults().asArrayRef());
    for (StringAttr n : op.getOperandNames().getAsRange<StringAttr>())
      refOp.operandNames.push_back(n.str());
    for (StringAttr n : op.getResultNames().getAsRange<StringAttr>())
      refOp.resultNames.push_back(n.str());
    entry.refOps.push_back(std::move(refOp));
  }

  llvm::raw_string_ostream os(entry.source);
  func.print(os);
  return entry;
}

} // namespace moec
