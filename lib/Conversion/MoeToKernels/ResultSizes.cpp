//===- ResultSizes.cpp - Host sizes of each op's results ------------------===//
//
// Part of moec. The sizes convert-moe-to-kernels allocates results with
// (and records as #moe.size for the bundle): each op's reified result
// shapes (ReifyRankedShapedTypeOpInterface), built on tensors before the
// op, translated to host index values with the sizes of the operand
// buffers, then erased.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

class SizeTranslator {
public:
  /// The reified IR goes right before `op` (where the tensors it reads are
  /// defined); the translator erases whatever ends up there, folding's
  /// constants included.
  SizeTranslator(Operation *op, BufferMap buffer, LoweringContext &ctx)
      : op(op), before(op->getPrevNode()), buffer(buffer), ctx(ctx),
        builder(op) {}
  ~SizeTranslator() {
    Block *block = op->getBlock();
    auto first = before ? std::next(before->getIterator()) : block->begin();
    SmallVector<Operation *> scratch;
    for (Operation &temp : llvm::make_range(first, op->getIterator()))
      scratch.push_back(&temp);
    for (Operation *temp : scratch)
      temp->dropAllReferences();
    for (Operation *temp : llvm::reverse(scratch))
      temp->erase();
  }

  /// Host sizes of each result of `shaped`, or failure (no diagnostic).
  FailureOr<SmallVector<SmallVector<Value>>> resultSizes(Operation *shaped) {
    auto reifiable = dyn_cast<ReifyRankedShapedTypeOpInterface>(shaped);
    ReifiedRankedShapedTypeDims reified;
    if (!reifiable || failed(reifiable.reifyResultShapes(builder, reified)))
      return failure();
    SmallVector<SmallVector<Value>> sizes;
    for (ArrayRef<OpFoldResult> shape : reified) {
      SmallVector<Value> &dims = sizes.emplace_back();
      for (OpFoldResult size : shape) {
        FailureOr<Value> host = toHost(size);
        if (failed(host))
          return failure();
        dims.push_back(*host);
      }
    }
    return sizes;
  }

private:
  FailureOr<Value> toHost(OpFoldResult size) {
    KernelBuilder &h = ctx.host();
    if (std::optional<int64_t> constant = getConstantIntValue(size))
      return h.idx(*constant);
    Value value = cast<Value>(size);
    if (Value known = ctx.hostScalar(value))
      return known;
    Operation *def = value.getDefiningOp();
    if (auto dim = dyn_cast_or_null<tensor::DimOp>(def)) {
      std::optional<int64_t> index = dim.getConstantIndex();
      if (!index)
        return failure();
      return dimOf(dim.getSource(), *index);
    }
    if (!def || def->getNumOperands() != 2)
      return failure();
    FailureOr<Value> lhs = toHost(def->getOperand(0));
    FailureOr<Value> rhs = toHost(def->getOperand(1));
    if (failed(lhs) || failed(rhs))
      return failure();
    using Build = Value (KernelBuilder::*)(Value, Value);
    Build build =
        llvm::TypeSwitch<Operation *, Build>(def)
            .Case([](arith::AddIOp) { return &KernelBuilder::add; })
            .Case([](arith::SubIOp) { return &KernelBuilder::sub; })
            .Case([](arith::MulIOp) { return &KernelBuilder::mul; })
            .Case([](arith::DivUIOp) { return &KernelBuilder::div; })
            .Case([](arith::CeilDivUIOp) { return &KernelBuilder::ceilDiv; })
            .Case([](arith::MinUIOp) { return &KernelBuilder::minIdx; })
            .Default([](Operation *) { return nullptr; });
    if (!build)
      return failure();
    return (h.*build)(*lhs, *rhs);
  }

  /// Size `d` of a tensor: its buffer's, or (a value without a buffer, such
  /// as a matmul's tensor.empty accumulator) its defining op's reified one.
  FailureOr<Value> dimOf(Value tensor, int64_t d) {
    auto type = cast<ShapedType>(tensor.getType());
    if (d < 0 || d >= type.getRank())
      return failure();
    if (Value buf = buffer(tensor))
      return ctx.sizes(buf)[d];
    auto result = dyn_cast<OpResult>(tensor);
    if (!result)
      return failure();
    FailureOr<SmallVector<SmallVector<Value>>> sizes =
        resultSizes(result.getOwner());
    if (failed(sizes))
      return failure();
    return (*sizes)[result.getResultNumber()][d];
  }

  Operation *op;
  Operation *before; ///< the op before `op` when it was reached, or null
  BufferMap buffer;
  LoweringContext &ctx;
  OpBuilder builder;
};

} // namespace

LogicalResult
moec::kernels::resultSizes(Operation *op, BufferMap buffer,
                           LoweringContext &ctx,
                           SmallVector<SmallVector<Value>> &sizes) {
  FailureOr<SmallVector<SmallVector<Value>>> reified =
      SizeTranslator(op, buffer, ctx).resultSizes(op);
  if (succeeded(reified)) {
    sizes = std::move(*reified);
    return success();
  }
  // Static results need no reifying (a tensor.expand_shape's model may not
  // be registered).
  if (llvm::all_of(op->getResultTypes(), [](Type type) {
        auto shaped = dyn_cast<ShapedType>(type);
        return shaped && shaped.hasStaticShape();
      })) {
    KernelBuilder &h = ctx.host();
    sizes.clear();
    for (Type type : op->getResultTypes()) {
      SmallVector<Value> &dims = sizes.emplace_back();
      for (int64_t size : cast<ShapedType>(type).getShape())
        dims.push_back(h.idx(size));
    }
    return success();
  }
  // permute_grad's token count is not in its operands (its slots are
  // padded rows): a dynamic one is the function's token count T.
  if (auto grad = dyn_cast<moe::PermuteGradOp>(op)) {
    Value tokens = ctx.tokenCount();
    if (!tokens)
      return op->emitOpError("cannot size its result for kernels: a dynamic "
                             "token count needs a function argument whose "
                             "leading dimension is the token count T");
    Value hidden = ctx.sizes(buffer(grad.getGradRows()))[1];
    for (Value result : op->getResults()) {
      auto type = cast<ShapedType>(result.getType());
      SmallVector<Value> &dims = sizes.emplace_back();
      for (int64_t d = 0; d < type.getRank(); ++d)
        dims.push_back(!type.isDynamicDim(d)
                           ? ctx.host().idx(type.getDimSize(d))
                       : d == 0 ? tokens
                                : hidden);
    }
    return success();
  }
  std::string reason = moe::unreifiableShapeReason(op);
  return op->emitOpError("cannot size its result for kernels: ")
         << (reason.empty() ? "a size does not follow from the operands' sizes"
                            : reason);
}
