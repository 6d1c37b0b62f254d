//===- MoeToKernels.cpp - convert-moe-to-kernels --------------------------===//
//
// Part of moec. Rewrites each function on tensors into a function on
// buffers that launches one gpu kernel (or a few) per op, and records, as
// the dialect's typed attributes (MoeLoweredAttrs.td), everything the bundle
// writer needs: symbols, sizes (#moe.size), buffer indices, launches
// (#moe.launch) and the op list for the float64 reference (#moe.ref_op). Each
// op is lowered by the KernelPattern of its strategy: the op's `#moe.kernel`
// (moe-select-kernel), or the one chosen here the same way; the kernel bodies
// are in the strategies' folders (Scalar/, Vector/, Warp/, Hopper/).
//
//===----------------------------------------------------------------------===//

#include "KernelPattern.h"
#include "RefOps.h"

#include "moec/Conversion/LaunchABI.h"
#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "llvm/ADT/TypeSwitch.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"


namespace moec {
#define GEN_PASS_DEF_CONVERTMOETOKERNELS
#include "moec/Conversion/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

class FuncLowering : public LoweringContext {
public:
  FuncLowering(ModuleOp module, func::FuncOp func,
               const KernelPatternSet &patterns)
      : module(module), oldFunc(func), patterns(patterns),
        hostBuilder(func.getLoc(), func),
        attrs(func->getContext()->getLoadedDialect<moe::MoeDialect>()) {
    hostBuilder.targetInfo = &patterns.getTarget();
  }

  LogicalResult run();

  KernelBuilder &host() override { return hostBuilder; }
  const TargetInfo &target() override { return patterns.getTarget(); }
  SmallVector<Value> sizes(Value buffer) override {
    auto it = sizesOf.find(buffer);
    assert(it != sizesOf.end() && "buffer without recorded sizes");
    return it->second;
  }
  Value allocTemp(MemRefType type, ArrayRef<Value> sizes) override;
  Value tokenCount() override { return tokens; }
  Value hostScalar(Value value) override { return scalars.lookupOrNull(value); }
  LogicalResult launch(StringRef suffix, Value gridBlocks, moe::TileAttr tile,
                       ValueRange operands, const KernelBody &body,
                       int64_t dynamicSharedBytes = 0,
                       int64_t clusterBlocks = 1) override;

private:
  /// The size a host index value computes, over the entry's symbols, or
  /// failure.
  FailureOr<moe::SizeAttr> expr(Value v);
  ArrayAttr exprArray(ArrayRef<Value> sizes, Location loc, bool &ok);
  Value newBuffer(Value tensor, ArrayRef<Value> sizes);
  Value newView(Value source, Operation *reshape, bool inverse);
  SmallVector<Value> staticSizes(ArrayRef<int64_t> shape);
  bool lowerReshapeAsView(Operation *reshape);
  void planOutputViews();
  /// The new function, its kernel module and entry block.
  LogicalResult createLoweredFunc();
  /// Input `i`'s buffer, sizes and symbols.
  void bindInput(unsigned i);
  /// Each returned tensor's output argument.
  LogicalResult bindOutputs(func::ReturnOp returnOp);
  /// Deallocations, the return and the lowered function's attributes; the
  /// old function erased.
  void finishLoweredFunc(func::ReturnOp returnOp);
  /// Ops that lower to host IR or nothing (constants, tensor.dim,
  /// tensor.empty, accumulator fills); nullopt for the others.
  std::optional<LogicalResult> lowerHostOp(Operation *op);
  /// Whether an upstream op is of the forms that lower, with the
  /// reference's attributes of it (RefOps.cpp names them).
  LogicalResult
  checkUpstreamOp(Operation *op,
                  SmallVectorImpl<std::pair<StringRef, std::string>> &extra);
  LogicalResult lowerOneOp(Operation *op);
  LogicalResult
  recordRefOp(Operation *op,
              ArrayRef<std::pair<StringRef, std::string>> extraAttrs);

  ModuleOp module;
  func::FuncOp oldFunc, newFunc;
  const KernelPatternSet &patterns;
  gpu::GPUModuleOp gpuModule;
  KernelBuilder hostBuilder;
  moe::MoeDialect *attrs; ///< the lowered function's attribute helpers
  Operation *currentOp = nullptr;
  unsigned kernelCount = 0;

  IRMapping scalars;                    ///< index/int constants and dims
  DenseMap<Value, Value> bufferOf;      ///< tensor -> memref
  DenseMap<Value, SmallVector<Value>> sizesOf; ///< memref -> host sizes
  DenseMap<Value, int32_t> bufferIndex; ///< memref -> buffer index
  int32_t numBuffers = 0;
  DenseMap<Value, Value> outputFor;     ///< returned tensor -> output arg
  /// Tensor -> the static reshape that returns it: its kernel writes the
  /// output argument through a view (planOutputViews).
  DenseMap<Value, Operation *> reshapedToOutput;
  DenseSet<Value> zeroFilled;           ///< linalg.fill 0 of tensor.empty
  /// Symbol of each (input, dim) with a dynamic size.
  DenseMap<std::pair<unsigned, unsigned>, unsigned> symbolOf;
  SmallVector<Attribute> symbolAttrs;
  llvm::StringMap<unsigned> symbolByName;
  DenseMap<Value, std::pair<unsigned, unsigned>> inputDim;
  Value tokens; ///< the symbol T's host value, if an argument has it
  SmallVector<Value> temps;
  SmallVector<Attribute> refOps;
};

Value FuncLowering::allocTemp(MemRefType type, ArrayRef<Value> sizes) {
  SmallVector<Value> dynamic;
  for (auto [i, size] : llvm::enumerate(sizes))
    if (type.isDynamicDim(i))
      dynamic.push_back(size);
  auto alloc = memref::AllocOp::create(hostBuilder, type, dynamic);
  bool ok = true;
  attrs->getDimsAttrHelper().setAttr(alloc,
                                     exprArray(sizes, alloc.getLoc(), ok));
  attrs->getBufferAttrHelper().setAttr(
      alloc, hostBuilder.getI32IntegerAttr(numBuffers));
  bufferIndex[alloc] = numBuffers++;
  sizesOf[alloc] = SmallVector<Value>(sizes);
  temps.push_back(alloc);
  return alloc;
}

FailureOr<moe::SizeAttr> FuncLowering::expr(Value v) {
  MLIRContext *context = v.getContext();
  APInt constant;
  if (matchPattern(v, m_ConstantInt(&constant))) {
    if (constant.isNegative())
      return failure();
    return moe::SizeAttr::constant(context, constant.getSExtValue());
  }
  auto dimIt = inputDim.find(v);
  if (dimIt != inputDim.end())
    return moe::SizeAttr::symbol(context, symbolOf.lookup(dimIt->second));
  Operation *def = v.getDefiningOp();
  if (!def || def->getNumOperands() != 2)
    return failure();
  using moe::SizeKind;
  std::optional<SizeKind> kind =
      llvm::TypeSwitch<Operation *, std::optional<SizeKind>>(def)
          .Case<arith::AddIOp>([](auto) { return SizeKind::add; })
          .Case<arith::SubIOp>([](auto) { return SizeKind::sub; })
          .Case<arith::MulIOp>([](auto) { return SizeKind::mul; })
          .Case<arith::DivUIOp>([](auto) { return SizeKind::floordiv; })
          .Case<arith::CeilDivUIOp>([](auto) { return SizeKind::ceildiv; })
          .Case<arith::MinUIOp>([](auto) { return SizeKind::min; })
          .Case<arith::MaxUIOp>([](auto) { return SizeKind::max; })
          .Default([](Operation *) { return std::nullopt; });
  if (!kind)
    return failure();
  FailureOr<moe::SizeAttr> lhs = expr(def->getOperand(0));
  FailureOr<moe::SizeAttr> rhs = expr(def->getOperand(1));
  if (failed(lhs) || failed(rhs))
    return failure();
  return moe::SizeAttr::binary(*kind, *lhs, *rhs);
}

ArrayAttr FuncLowering::exprArray(ArrayRef<Value> sizes, Location loc,
                                  bool &ok) {
  SmallVector<Attribute> exprs;
  for (Value size : sizes) {
    FailureOr<moe::SizeAttr> built = expr(size);
    if (failed(built)) {
      emitError(loc) << "a size is not an expression of the input sizes";
      ok = false;
      built = moe::SizeAttr::constant(loc.getContext(), 0);
    }
    exprs.push_back(*built);
  }
  return hostBuilder.getArrayAttr(exprs);
}

/// A static reshape's result (or, `inverse`, its source) as a view of
/// `source`: the host's memref.expand_shape / collapse_shape, a buffer of
/// the bundle that reads and writes `source`'s bytes under its own shape.
Value FuncLowering::newView(Value source, Operation *reshape, bool inverse) {
  Value tensor = inverse ? reshape->getOperand(0) : reshape->getResult(0);
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  SmallVector<ReassociationIndices> groups =
      isa<tensor::ExpandShapeOp>(reshape)
          ? cast<tensor::ExpandShapeOp>(reshape).getReassociationIndices()
          : cast<tensor::CollapseShapeOp>(reshape).getReassociationIndices();
  // The reshape itself expands, or its inverse does (a collapse undone).
  bool expand = isa<tensor::ExpandShapeOp>(reshape) != inverse;
  Value view =
      expand ? Value(memref::ExpandShapeOp::create(hostBuilder, memrefType,
                                                   source, groups))
             : Value(memref::CollapseShapeOp::create(hostBuilder, memrefType,
                                                     source, groups));
  SmallVector<Value> sizes = staticSizes(type.getShape());
  Operation *op = view.getDefiningOp();
  bool ok = true;
  attrs->getDimsAttrHelper().setAttr(op,
                                     exprArray(sizes, op->getLoc(), ok));
  attrs->getBufferAttrHelper().setAttr(
      op, hostBuilder.getI32IntegerAttr(numBuffers));
  bufferIndex[view] = numBuffers++;
  sizesOf[view] = sizes;
  return view;
}

SmallVector<Value> FuncLowering::staticSizes(ArrayRef<int64_t> shape) {
  return llvm::map_to_vector(shape,
                             [&](int64_t size) { return hostBuilder.idx(size); });
}

/// Static reshapes that return a value a kernel computes (not a function
/// argument, not returned itself, nor another reshape's result): that
/// kernel writes the output argument through a view, and the reshape
/// copies nothing (moe.lora_grad's decomposition joins its gradients so).
void FuncLowering::planOutputViews() {
  for (Operation &op : oldFunc.getBody().front().without_terminator()) {
    if (!isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op))
      continue;
    Value source = op.getOperand(0), result = op.getResult(0);
    Operation *producer = source.getDefiningOp();
    if (!outputFor.count(result) || outputFor.count(source) || !producer ||
        isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(producer) ||
        reshapedToOutput.count(source) ||
        !cast<ShapedType>(result.getType()).hasStaticShape() ||
        !cast<ShapedType>(source.getType()).hasStaticShape())
      continue;
    reshapedToOutput[source] = &op;
  }
}

/// A static reshape as a view (no kernel): of its source's buffer, or, for
/// one planOutputViews chose, the output its source was written into.
/// False where it must copy (a returned reshape of an argument, ...).
bool FuncLowering::lowerReshapeAsView(Operation *reshape) {
  Value source = reshape->getOperand(0), result = reshape->getResult(0);
  Value sourceBuffer = bufferOf.lookup(source);
  if (!sourceBuffer || !cast<ShapedType>(source.getType()).hasStaticShape())
    return false;
  if (Value output = outputFor.lookup(result)) {
    if (reshapedToOutput.lookup(source) != reshape)
      return false;
    bufferOf[result] = output;
    return true;
  }
  bufferOf[result] = newView(sourceBuffer, reshape, /*inverse=*/false);
  return true;
}

Value FuncLowering::newBuffer(Value tensor, ArrayRef<Value> sizes) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  if (Operation *reshape = reshapedToOutput.lookup(tensor)) {
    // Written through a view of the output its reshape returns.
    Value output = outputFor.lookup(reshape->getResult(0));
    auto outType = cast<RankedTensorType>(reshape->getResult(0).getType());
    SmallVector<Value> outSizes = staticSizes(outType.getShape());
    bool ok = true;
    newFunc.setArgAttr(cast<BlockArgument>(output).getArgNumber(),
                       attrs->getDimsAttrHelper().getName(),
                       exprArray(outSizes, tensor.getLoc(), ok));
    sizesOf[output] = outSizes;
    Value view = newView(output, reshape, /*inverse=*/true);
    bufferOf[tensor] = view;
    return view;
  }
  Value output = outputFor.lookup(tensor);
  if (!output) {
    Value temp = allocTemp(memrefType, sizes);
    bufferOf[tensor] = temp;
    return temp;
  }
  bool ok = true;
  unsigned argNo = cast<BlockArgument>(output).getArgNumber();
  newFunc.setArgAttr(argNo, attrs->getDimsAttrHelper().getName(),
                     exprArray(sizes, tensor.getLoc(), ok));
  sizesOf[output] = SmallVector<Value>(sizes);
  bufferOf[tensor] = output;
  return output;
}

LogicalResult FuncLowering::launch(StringRef suffix, Value gridBlocks,
                                   moe::TileAttr tile, ValueRange operands,
                                   const KernelBody &body,
                                   int64_t dynamicSharedBytes,
                                   int64_t clusterBlocks) {
  Location loc = currentOp->getLoc();
  std::string opName =
      currentOp->getName().stripDialect().str();
  std::string name = (oldFunc.getName() + "_k" + Twine(kernelCount++) + "_" +
                      opName + (suffix.empty() ? "" : "_") + suffix)
                         .str();

  SmallVector<Type> argTypes;
  SmallVector<moe::SizeAttr> scalarExprs;
  // Tensor maps' positions among the lowered kernel's parameters.
  SmallVector<int64_t> gridConstants;
  int64_t loweredParams = 0;
  for (Value operand : operands) {
    argTypes.push_back(operand.getType());
    if (auto memref = dyn_cast<MemRefType>(operand.getType())) {
      loweredParams += loweredMemrefParams(memref.getRank());
      continue;
    }
    if (tensorMapOf(operand)) {
      gridConstants.push_back(loweredParams++);
      continue;
    }
    ++loweredParams;
    FailureOr<moe::SizeAttr> scalar = expr(operand);
    if (failed(scalar))
      return emitError(loc) << "kernel scalar is not an expression of the "
                               "input sizes";
    scalarExprs.push_back(*scalar);
  }
  FailureOr<moe::SizeAttr> grid = expr(gridBlocks);
  if (failed(grid))
    return emitError(loc) << "grid is not an expression of the input sizes";

  int64_t threads = tile.getThreads();
  // gpu.module has no terminator: kernels go at the end of its body.
  OpBuilder moduleBuilder = OpBuilder::atBlockEnd(gpuModule.getBody());
  auto kernel = gpu::GPUFuncOp::create(
      moduleBuilder, loc, name, moduleBuilder.getFunctionType(argTypes, {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  moduleBuilder.getUnitAttr());
  kernel.setKnownBlockSizeAttr(moduleBuilder.getDenseI32ArrayAttr(
      {static_cast<int32_t>(threads), 1, 1}));
  // For moe-mark-grid-constant-params once the kernel is an llvm.func.
  if (!gridConstants.empty())
    attrs->getGridConstantArgsAttrHelper().setAttr(
        kernel, moduleBuilder.getDenseI64ArrayAttr(gridConstants));
  {
    Block *kernelEntry = &kernel.getBody().front();
    KernelBuilder b(loc, kernelEntry, kernelEntry->end());
    b.targetInfo = &patterns.getTarget();
    Value block = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value thread = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    body(b, kernel.getArguments(), block, thread);
    gpu::ReturnOp::create(b);
  }

  Value one = hostBuilder.idx(1);
  // Blocks in clusters along x (the grid is a multiple of the cluster).
  std::optional<gpu::KernelDim3> cluster;
  if (clusterBlocks > 1)
    cluster = gpu::KernelDim3{hostBuilder.idx(clusterBlocks), one, one};
  auto launchOp = gpu::LaunchFuncOp::create(
      hostBuilder, kernel, gpu::KernelDim3{gridBlocks, one, one},
      gpu::KernelDim3{hostBuilder.idx(threads), one, one},
      dynamicSharedBytes ? hostBuilder.i32(dynamicSharedBytes) : Value(),
      operands, /*asyncTokenType=*/Type(), /*asyncDependencies=*/{}, cluster);
  attrs->getLaunchAttrHelper().setAttr(
      launchOp,
      moe::LaunchAttr::get(hostBuilder.getContext(), *grid, scalarExprs));
  launchOp->setAttr(moe::kTileAttrName, tile);
  return success();
}

LogicalResult FuncLowering::recordRefOp(
    Operation *op, ArrayRef<std::pair<StringRef, std::string>> extraAttrs) {
  FailureOr<moe::RefOpAttr> refOp =
      buildRefOp(op, [&](Value tensor) -> int32_t {
        Value buffer = bufferOf.lookup(tensor);
        return buffer ? bufferIndex.lookup(buffer) : -1;
      }, extraAttrs);
  if (failed(refOp))
    return failure();
  refOps.push_back(*refOp);
  return success();
}

std::optional<LogicalResult> FuncLowering::lowerHostOp(Operation *op) {
  if (isa<arith::ConstantOp>(op)) {
    if (isa<TensorType>(op->getResult(0).getType()))
      return op->emitOpError("tensor constants are not supported in a "
                             "function lowered to kernels");
    hostBuilder.clone(*op, scalars);
    return success();
  }
  if (auto dimOp = dyn_cast<tensor::DimOp>(op)) {
    std::optional<int64_t> index = dimOp.getConstantIndex();
    Value buffer = bufferOf.lookup(dimOp.getSource());
    if (!index || !buffer)
      return op->emitOpError("needs a constant index into a lowered tensor");
    // tensor.dim's verifier allows any index (an out-of-range one is UB at
    // run time), but here it indexes the buffer's size list.
    const SmallVector<Value> &sizes = sizesOf[buffer];
    if (*index < 0 || *index >= static_cast<int64_t>(sizes.size()))
      return op->emitOpError("index ")
             << *index << " is out of range for a tensor of rank "
             << sizes.size();
    scalars.map(dimOp.getResult(), sizes[*index]);
    return success();
  }
  if (isa<tensor::EmptyOp>(op))
    return success();
  if (kernels::isAccumulatorFill(op)) {
    zeroFilled.insert(op->getResult(0));
    return success();
  }
  return std::nullopt;
}

LogicalResult FuncLowering::checkUpstreamOp(
    Operation *op, SmallVectorImpl<std::pair<StringRef, std::string>> &extra) {
  if (auto matmul = dyn_cast<linalg::MatmulOp>(op)) {
    if (!zeroFilled.contains(matmul.getOutputs()[0]))
      return op->emitOpError("needs a zero-filled tensor.empty accumulator");
    FailureOr<kernels::MatmulLayout> layout = kernels::matmulLayout(matmul);
    if (failed(layout))
      return op->emitOpError("only indexing maps that read A as [M, K] or "
                             "[K, M] and B as [K, N] or [N, K] are supported");
    extra.push_back({"transpose_a", layout->transposeA ? "true" : "false"});
    extra.push_back({"transpose_b", layout->transposeB ? "true" : "false"});
  } else if (auto add = dyn_cast<linalg::AddOp>(op)) {
    if (!add.getOutputs()[0].getDefiningOp<tensor::EmptyOp>())
      return op->emitOpError("needs a tensor.empty init (the sum overwrites "
                             "it)");
  } else if (auto fill = dyn_cast<linalg::FillOp>(op)) {
    // A constant tensor (a matmul's zero accumulator is lowerHostOp's).
    FloatAttr value;
    if (!fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() ||
        !matchPattern(fill.getInputs()[0], m_Constant(&value)))
      return op->emitOpError("only a fill of tensor.empty with a constant "
                             "float is supported");
    extra.push_back(
        {"value", llvm::formatv("{0:e16}", value.getValueAsDouble()).str()});
  } else if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op)) {
    if (!cast<ShapedType>(op->getResult(0).getType()).hasStaticShape())
      return op->emitOpError("of a dynamic shape is not supported (only "
                             "static reshapes lower)");
  } else if (auto transpose = dyn_cast<linalg::TransposeOp>(op)) {
    if (transpose.getPermutation().empty())
      return op->emitOpError("of a rank-0 tensor is not supported (nothing "
                             "to transpose)");
    if (!transpose.getInit().getDefiningOp<tensor::EmptyOp>())
      return op->emitOpError("needs a tensor.empty init (the transpose "
                             "overwrites it)");
    extra.push_back({"permutation", integerList(transpose.getPermutation())});
  } else if (auto pad = dyn_cast<tensor::PadOp>(op)) {
    FloatAttr value;
    if (!pad.getResultType().hasStaticShape() ||
        ShapedType::isDynamicShape(pad.getStaticLow()) ||
        ShapedType::isDynamicShape(pad.getStaticHigh()))
      return op->emitOpError("with a dynamic shape or padding is not "
                             "supported (only static pads lower)");
    if (!isa<FloatType>(pad.getResultType().getElementType()) ||
        !pad.getConstantPaddingValue() ||
        !matchPattern(pad.getConstantPaddingValue(), m_Constant(&value)))
      return op->emitOpError("only a float tensor padded with a constant "
                             "is supported");
    extra.push_back({"low", integerList(pad.getStaticLow())});
    extra.push_back(
        {"value", llvm::formatv("{0:e16}", value.getValueAsDouble()).str()});
  } else if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    if (!slice.getResultType().hasStaticShape() ||
        ShapedType::isDynamicShape(slice.getStaticOffsets()) ||
        ShapedType::isDynamicShape(slice.getStaticStrides()))
      return op->emitOpError("with dynamic offsets, sizes or strides is not "
                             "supported (only static slices lower)");
    if (slice.getResultType().getRank() != slice.getSourceType().getRank())
      return op->emitOpError("that drops dimensions is not supported");
    if (!isa<FloatType>(slice.getResultType().getElementType()))
      return op->emitOpError("of a non-float tensor is not supported");
    extra.push_back({"offsets", integerList(slice.getStaticOffsets())});
    extra.push_back({"strides", integerList(slice.getStaticStrides())});
  } else if (op->getDialect()->getNamespace() != "moe") {
    return op->emitOpError("is not supported in a function lowered to "
                           "kernels (supported: moe ops, linalg.matmul with a "
                           "zero-filled accumulator, linalg.add, "
                           "linalg.transpose, linalg.fill, static "
                           "tensor.expand_shape, tensor.collapse_shape, "
                           "tensor.pad and tensor.extract_slice, "
                           "tensor.dim, constants)");
  }
  return success();
}

LogicalResult FuncLowering::lowerOneOp(Operation *op) {
  currentOp = op;
  hostBuilder.setLoc(op->getLoc());
  if (std::optional<LogicalResult> done = lowerHostOp(op))
    return *done;
  SmallVector<std::pair<StringRef, std::string>> extraAttrs;
  if (failed(checkUpstreamOp(op, extraAttrs)))
    return failure();
  // A static reshape: a view of the same bytes where it can be one; a copy
  // kernel into a buffer of the new shape otherwise.
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op) &&
      lowerReshapeAsView(op))
    return recordRefOp(op, extraAttrs);

  auto buffer = [&](Value tensor) -> Value {
    return tensor ? bufferOf.lookup(tensor) : Value();
  };
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  SmallVector<Value> inputs = linalgOp
                                  ? SmallVector<Value>(linalgOp.getDpsInputs())
                                  : SmallVector<Value>(op->getOperands());
  for (Value operand : inputs)
    if (isa<TensorType>(operand.getType()) && !buffer(operand))
      return op->emitOpError("operand is not produced by a lowered op or a "
                             "function argument");

  FailureOr<std::pair<const KernelPattern *, moe::TileAttr>> kernel =
      patterns.kernelFor(op);
  if (failed(kernel))
    return failure();
  SmallVector<SmallVector<Value>> resultSizeValues;
  if (failed(resultSizes(op, buffer, *this, resultSizeValues)))
    return failure();
  for (auto [result, sizes] : llvm::zip(op->getResults(), resultSizeValues))
    newBuffer(result, sizes);
  auto [pattern, tile] = *kernel;
  if (failed(pattern->lower(op, tile, buffer, *this)))
    return failure();
  return recordRefOp(op, extraAttrs);
}

LogicalResult FuncLowering::createLoweredFunc() {
  FunctionType type = oldFunc.getFunctionType();
  for (Type t : llvm::concat<const Type>(type.getInputs(), type.getResults()))
    if (!isa<RankedTensorType>(t))
      return oldFunc.emitOpError("arguments and results must be ranked "
                                 "tensors to be lowered to kernels, got ")
             << t;
  SmallVector<Type> argTypes;
  for (Type t : llvm::concat<const Type>(type.getInputs(), type.getResults())) {
    auto tensor = cast<RankedTensorType>(t);
    argTypes.push_back(
        MemRefType::get(tensor.getShape(), tensor.getElementType()));
  }

  OpBuilder moduleBuilder(module.getBodyRegion());
  moduleBuilder.setInsertionPointAfter(oldFunc);
  std::string name = oldFunc.getName().str();
  gpuModule = gpu::GPUModuleOp::create(moduleBuilder, oldFunc.getLoc(),
                                       name + "_kernels");
  newFunc = func::FuncOp::create(moduleBuilder, oldFunc.getLoc(),
                                 name + ".lowered",
                                 moduleBuilder.getFunctionType(argTypes, {}));
  Block *entry = newFunc.addEntryBlock();
  hostBuilder.setInsertionPointToStart(entry);
  return success();
}

void FuncLowering::bindInput(unsigned i) {
  Block *entry = &newFunc.getBody().front();
  Value arg = entry->getArgument(i);
  auto memrefType = cast<MemRefType>(arg.getType());
  // A user's name for the argument (the Python frontend sets it) becomes
  // the buffer's name in the bundle, so launch errors can quote it.
  StringAttr nameAttr = attrs->getNameAttrHelper().getName();
  if (auto argName = oldFunc.getArgAttrOfType<StringAttr>(i, nameAttr))
    newFunc.setArgAttr(i, nameAttr, argName);
  bufferOf[oldFunc.getArgument(i)] = arg;
  bufferIndex[arg] = numBuffers++;
  SmallVector<Value> sizes;
  // The symbol of each dimension (-1: static), for the bundle's buffer
  // shapes: an argument's leading dimension need not share the symbol of
  // the first one that was named.
  SmallVector<int64_t> dimSymbols;
  for (unsigned d = 0; d < memrefType.getRank(); ++d) {
    if (!memrefType.isDynamicDim(d)) {
      sizes.push_back(hostBuilder.idx(memrefType.getDimSize(d)));
      dimSymbols.push_back(-1);
      continue;
    }
    Value dim = hostBuilder.dim(arg, d);
    // Leading dynamic dims share one symbol per name: "T" unless the
    // argument names another with `moe.sym` (e.g. the T·k rows of a
    // permuted input next to T tokens). Other dims get their own.
    std::string symbolName = ("arg" + Twine(i) + "_d" + Twine(d)).str();
    if (d == 0) {
      auto named = oldFunc.getArgAttrOfType<StringAttr>(
          i, attrs->getSymAttrHelper().getName());
      symbolName = named ? named.str() : "T";
    }
    auto [it, isNew] = symbolByName.try_emplace(symbolName, symbolAttrs.size());
    unsigned symbol = it->second;
    if (isNew)
      symbolAttrs.push_back(moe::DimSymbolAttr::get(hostBuilder.getContext(),
                                                    symbolName, i, d));
    symbolOf[{i, d}] = symbol;
    dimSymbols.push_back(symbol);
    inputDim[dim] = {i, d};
    if (isNew && symbolName == "T")
      tokens = dim;
    sizes.push_back(dim);
  }
  newFunc.setArgAttr(i, attrs->getDimSymbolsAttrHelper().getName(),
                     hostBuilder.getDenseI64ArrayAttr(dimSymbols));
  sizesOf[arg] = sizes;
}

LogicalResult FuncLowering::bindOutputs(func::ReturnOp returnOp) {
  Block *entry = &newFunc.getBody().front();
  unsigned numInputs = oldFunc.getFunctionType().getNumInputs();
  // Outputs: each returned tensor is written into its output argument.
  for (auto [r, value] : llvm::enumerate(returnOp.getOperands())) {
    Value arg = entry->getArgument(numInputs + r);
    bufferIndex[arg] = numBuffers++;
    if (isa<BlockArgument>(value) || outputFor.count(value))
      return returnOp.emitOpError("result ")
             << r << " must be computed by the function and returned once";
    outputFor[value] = arg;
    newFunc.setArgAttr(numInputs + r, attrs->getOutputAttrHelper().getName(),
                       hostBuilder.getUnitAttr());
  }
  return success();
}

void FuncLowering::finishLoweredFunc(func::ReturnOp returnOp) {
  std::string name = oldFunc.getName().str();
  hostBuilder.setLoc(returnOp.getLoc());
  for (Value temp : temps)
    memref::DeallocOp::create(hostBuilder, temp);
  func::ReturnOp::create(hostBuilder);

  attrs->getSymbolsAttrHelper().setAttr(newFunc,
                                        hostBuilder.getArrayAttr(symbolAttrs));
  attrs->getRefOpsAttrHelper().setAttr(newFunc,
                                       hostBuilder.getArrayAttr(refOps));
  attrs->getNumBuffersAttrHelper().setAttr(
      newFunc, hostBuilder.getI32IntegerAttr(numBuffers));
  attrs->getEntryAttrHelper().setAttr(newFunc, hostBuilder.getStringAttr(name));
  // The function's own attributes (moe-autodiff's moe.grad_of, moe.wrt and
  // moe.saved_results) stay, so a bundle's source tells a runtime without
  // the compiler which forward results a backward takes.
  for (NamedAttribute attr : oldFunc->getDiscardableAttrs())
    if (!newFunc->hasAttr(attr.getName()))
      newFunc->setAttr(attr.getName(), attr.getValue());
  oldFunc.erase();
  newFunc.setName(name);
}

LogicalResult FuncLowering::run() {
  if (failed(createLoweredFunc()))
    return failure();
  // Inputs: buffers, sizes and symbols. Every dynamic leading dimension is
  // the token count T (one symbol; the runtime checks that they agree);
  // other dynamic dimensions get a symbol each.
  for (unsigned i = 0, e = oldFunc.getFunctionType().getNumInputs(); i < e;
       ++i)
    bindInput(i);
  auto returnOp = cast<func::ReturnOp>(oldFunc.getBody().front().back());
  if (failed(bindOutputs(returnOp)))
    return failure();
  if (!oldFunc.getBody().hasOneBlock())
    return oldFunc.emitOpError("must have a single block to be lowered");
  planOutputViews();
  for (Operation &op : oldFunc.getBody().front().without_terminator())
    if (failed(lowerOneOp(&op)))
      return failure();
  finishLoweredFunc(returnOp);
  return success();
}

struct ConvertMoeToKernelsPass
    : public moec::impl::ConvertMoeToKernelsBase<ConvertMoeToKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<moe::TargetAttr> targetAttr =
        resolveKernelTarget(module, target);
    if (failed(targetAttr))
      return signalPassFailure();
    std::unique_ptr<TargetInfo> targetInfo = TargetInfo::create(*targetAttr);
    KernelPatternSet patterns(*targetInfo);
    populateMoeToKernelsPatterns(patterns, *targetInfo);
    SmallVector<func::FuncOp> funcs;
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal())
        funcs.push_back(func);
    for (func::FuncOp func : funcs) {
      FuncLowering lowering(module, func, patterns);
      if (failed(lowering.run()))
        return signalPassFailure();
    }
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(module.getContext()));
  }
};

} // namespace
