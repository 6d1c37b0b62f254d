//===- Autodiff.cpp - Derive the backward of a function of moe ops --------===//
//
// Part of moec. The `moe-autodiff` pass: reverse-mode differentiation of a
// func.func of moe ops into `@f_fwd` (the forward plus what the backward
// keeps) and `@f_grad` (the vector-Jacobian product). The backward is built
// in two steps: first as if it recomputed the whole forward (a clone of the
// forward's ops, then the gradient ops in reverse order), then the `save`
// policy turns the forward values the gradient ops read into arguments fed
// by `@f_fwd`, and what is no longer used is erased.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "AutodiffAttrs.h"
#include "AutodiffRowSymbols.h"
#include "FusionPatterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEAUTODIFFPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;
using moec::moe::autodiff::RowSymbols;
using namespace moec::moe::autodiff;

namespace {

enum class SavePolicy { All, Matmuls, Inputs };

bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// Ops that cost nothing to recompute and are never saved.
bool isFree(Operation *op) {
  return isa<arith::ConstantOp, tensor::DimOp, tensor::EmptyOp, linalg::FillOp>(
             op) ||
         (isa<arith::ArithDialect>(op->getDialect()) &&
          llvm::all_of(op->getResultTypes(),
                       [](Type t) { return t.isIntOrIndex(); }));
}

/// Builds `@f_grad` from the forward function `fwd`.
class GradientBuilder {
public:
  /// `requireAll`: an argument of `wrt` without a gradient is an error;
  /// otherwise it is dropped (the default choice of every float argument).
  GradientBuilder(func::FuncOp fwd, ArrayRef<unsigned> wrt, bool requireAll)
      : fwd(fwd), wrt(wrt.begin(), wrt.end()), requireAll(requireAll),
        builder(fwd.getContext()) {}

  /// Emits the gradient function (before the save policy); null on error
  /// (diagnosed).
  func::FuncOp build(StringRef name);

  /// The forward value each cloned value of the gradient function stands
  /// for (inverse of `primal`).
  DenseMap<Value, Value> forwardOf;
  /// The gradient ops (not clones of forward ops).
  DenseSet<Operation *> gradientOps;
  /// The arguments whose gradients the function returns, in order.
  SmallVector<unsigned> returnedArgs;
  unsigned numForwardArgs = 0;

private:
  LogicalResult differentiate(Operation *op);
  LogicalResult rule(UnpermuteOp op);
  LogicalResult rule(PermuteOp op);
  LogicalResult rule(GroupedMatmulOp op);
  LogicalResult rule(SwigluOp op);
  LogicalResult rule(RouterTopKOp op);
  LogicalResult rule(linalg::MatmulOp op);

  /// The value standing for forward value `v` in the gradient function.
  Value P(Value v) { return primal.lookup(v); }
  /// The gradient accumulated for forward value `v` (null when none).
  Value gradOf(Value v) { return grads.lookup(v); }
  /// Whether forward value `v` needs a gradient (depends on a wrt argument).
  bool active(Value v) { return v && varied.contains(v); }
  /// Adds `g` to the gradient of forward value `v`.
  void accumulate(Value v, Value g);
  /// tensor.empty of `like`'s shape (dynamic sizes read from `sizesOf`),
  /// with element type `element`.
  Value emptyLike(RankedTensorType type, Value sizesOf);
  /// The `positions` of the sort that made `slots` (after the forward got
  /// them), or null.
  Value positionsOf(Value slots);
  template <typename OpTy, typename... Args>
  OpTy create(Location loc, Args &&...args) {
    auto op = OpTy::create(builder, loc, std::forward<Args>(args)...);
    gradientOps.insert(op);
    return op;
  }

  func::FuncOp fwd;
  llvm::SetVector<unsigned> wrt;
  bool requireAll;
  OpBuilder builder;
  IRMapping primal;
  DenseMap<Value, Value> grads;
  DenseSet<Value> varied;
};

Value GradientBuilder::emptyLike(RankedTensorType type, Value sizesOf) {
  Location loc = sizesOf.getLoc();
  SmallVector<Value> dynamic;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      dynamic.push_back(create<tensor::DimOp>(loc, sizesOf, d));
  return create<tensor::EmptyOp>(loc, type, dynamic);
}

void GradientBuilder::accumulate(Value v, Value g) {
  Value &slot = grads[v];
  if (!slot) {
    slot = g;
    return;
  }
  // Only the router's logits take a gradient of another type, and only
  // when they have one use (rule(RouterTopKOp)).
  assert(slot.getType() == g.getType() && "gradients of one value differ");
  auto type = cast<RankedTensorType>(slot.getType());
  Value init = emptyLike(type, slot);
  slot =
      create<linalg::AddOp>(g.getLoc(), ValueRange{slot, g}, ValueRange{init})
          .getResult(0);
}

Value GradientBuilder::positionsOf(Value slots) {
  if (auto sort = slots.getDefiningOp<SortByExpertOp>())
    if (sort.getSlots() == slots && sort.getPositions())
      return P(sort.getPositions());
  return Value();
}

LogicalResult GradientBuilder::rule(UnpermuteOp op) {
  Value dOut = gradOf(op.getOut());
  Value weights = op.getWeights();
  Type rowsType = op.getRows().getType();
  IntegerAttr k = op.getKAttr();
  Value positions =
      op.getPositions() ? P(op.getPositions()) : positionsOf(op.getSlots());
  Location loc = op.getLoc();
  if (!weights) {
    auto grad = create<UnpermuteGradOp>(loc, rowsType, Type(), dOut,
                                        P(op.getSlots()), P(op.getOffsets()),
                                        Value(), Value(), k, positions);
    accumulate(op.getRows(), grad.getGradRows());
    return success();
  }
  auto grad = create<UnpermuteGradOp>(
      loc, rowsType, weights.getType(), dOut, P(op.getSlots()),
      P(op.getOffsets()), P(weights), P(op.getRows()), k, positions);
  if (active(op.getRows()))
    accumulate(op.getRows(), grad.getGradRows());
  if (active(weights))
    accumulate(weights, grad.getGradWeights());
  return success();
}

LogicalResult GradientBuilder::rule(PermuteOp op) {
  if (active(op.getScales()))
    return op.emitOpError("moe-autodiff: FP8 scales are not differentiable");
  Value dRows = gradOf(op.getRows());
  Value dProbs =
      op.getPermutedProbs() ? gradOf(op.getPermutedProbs()) : Value();
  if (!dRows)
    return op.emitOpError("moe-autodiff: the gradient of the permuted "
                          "probabilities alone (no gradient of the rows) is "
                          "not derived");
  Value positions =
      op.getPositions() ? P(op.getPositions()) : positionsOf(op.getSlots());
  Type probsType = dProbs ? op.getProbs().getType() : Type();
  auto grad = create<PermuteGradOp>(
      op.getLoc(), op.getTokens().getType(), probsType, dRows, P(op.getSlots()),
      P(op.getOffsets()), dProbs, op.getKAttr(), positions);
  if (active(op.getTokens()))
    accumulate(op.getTokens(), grad.getGradTokens());
  if (dProbs && active(op.getProbs()))
    accumulate(op.getProbs(), grad.getGradProbs());
  return success();
}

LogicalResult GradientBuilder::rule(GroupedMatmulOp op) {
  StringRef unsupported;
  if (op.getBias())
    unsupported = "bias";
  else if (op.getTransposeLora())
    unsupported = "transpose_lora";
  else if (op.getRowScale())
    unsupported = "row_scale";
  else if (op.getScatterSlots())
    unsupported = "scatter";
  else if (op.getLhsScales())
    unsupported = "FP8 scales";
  else if (op.getActivation() != Activation::none)
    unsupported = "a fused activation";
  else if (op.getExpertsInColumns())
    unsupported = "experts_in_columns";
  if (!unsupported.empty())
    return op.emitOpError("moe-autodiff: no gradient rule for a grouped "
                          "matmul with ")
           << unsupported
           << " (differentiate the unfused form: the fusion passes run "
              "after moe-autodiff)";

  // dX and dW multiply the output's gradient with the weights and the rows,
  // which must then share their element type.
  if (elementOf(op.getOut()) != elementOf(op.getRhs()))
    return op.emitOpError("moe-autodiff: the gradient rule needs the result "
                          "in the operands' element type (")
           << elementOf(op.getRhs()) << "), got " << elementOf(op.getOut());
  Location loc = op.getLoc();
  Value dY = gradOf(op.getOut());
  Value lhs = op.getLhs(), rhs = op.getRhs(), offsets = P(op.getOffsets());
  Value slots = op.getGatherSlots();
  bool transposed = op.getTransposeRhs();
  auto rhsType = cast<RankedTensorType>(rhs.getType());
  int64_t kDim = rhsType.getDimSize(transposed ? 2 : 1);
  MLIRContext *ctx = op.getContext();
  auto none = ActivationAttr::get(ctx, Activation::none);
  FloatAttr one = builder.getF32FloatAttr(1.0f);

  // The rows of the lhs as the matmul read them: [M, K].
  auto rowsType =
      slots ? RankedTensorType::get(
                  {cast<RankedTensorType>(slots.getType()).getDimSize(0), kDim},
                  elementOf(lhs))
            : cast<RankedTensorType>(lhs.getType());
  // A LoRA adapter term s · (x · A_eᵀ) · B_eᵀ.
  Value loraA = op.getLoraA(), loraB = op.getLoraB();
  FloatAttr scaling = op.getLoraScalingAttr();
  if (active(lhs)) {
    // dX = dY · W_e (or dY · W_eᵀ): the same weights read the other way;
    // with an adapter, plus s · (dY · B_e) · A_e (transpose_lora).
    UnitAttr flip = transposed ? UnitAttr() : builder.getUnitAttr();
    UnitAttr flipLora = loraA ? builder.getUnitAttr() : UnitAttr();
    Value dRows = create<GroupedMatmulOp>(
        loc, rowsType, dY, P(rhs), offsets, Value(), Value(),
        loraA ? P(loraA) : Value(), loraB ? P(loraB) : Value(), Value(),
        Value(), Value(), Value(), Value(), Value(), Value(), flip,
        IntegerAttr(), loraA ? scaling : one, none, IntegerAttr(), flipLora);
    if (slots)
      dRows = create<PermuteGradOp>(loc, lhs.getType(), Type(), dRows, P(slots),
                                    offsets, Value(), op.getKAttr(),
                                    positionsOf(slots))
                  .getGradTokens();
    accumulate(lhs, dRows);
  }
  if (active(rhs)) {
    // [E, K, N] = Σ x_iᵀ · dy_i, the lhs gathered by slot where the
    // forward's was. [E, N, K] = Σ dy_iᵀ · x_i: for gathered rows the
    // weight gradient's transpose_rhs form (still gathering its lhs, no
    // permuted copy of x), else dy times the rows.
    bool swap = transposed && !slots;
    Value dW = create<GroupedWeightGradOp>(
        loc, rhsType, swap ? dY : P(lhs), swap ? P(lhs) : dY, offsets,
        slots ? P(slots) : Value(), /*accumulate=*/Value(),
        /*lhs_scales=*/Value(), /*grad_scales=*/Value(),
        transposed && slots ? builder.getUnitAttr() : UnitAttr(),
        /*experts_in_columns=*/UnitAttr(), op.getKAttr());
    accumulate(rhs, dW);
  }
  if (active(loraA) || active(loraB)) {
    // dA and dB from the rows as the forward read them (gathered by slot).
    auto grads = create<LoraGradOp>(
        loc, loraA.getType(), loraB.getType(), P(lhs), dY, offsets, P(loraA),
        P(loraB), slots ? P(slots) : Value(), slots ? op.getKAttr() : nullptr,
        scaling);
    if (active(loraA))
      accumulate(loraA, grads.getGradA());
    if (active(loraB))
      accumulate(loraB, grads.getGradB());
  }
  return success();
}

LogicalResult GradientBuilder::rule(SwigluOp op) {
  auto grad = create<SwigluGradOp>(op.getLoc(), op.getInput().getType(),
                                   P(op.getInput()), gradOf(op.getOutput()),
                                   op.getLayoutAttr());
  accumulate(op.getInput(), grad.getGradInput());
  return success();
}

LogicalResult GradientBuilder::rule(RouterTopKOp op) {
  Value dWeights = gradOf(op.getWeights());
  Value logits = op.getLogits();
  // Logits that a linalg.matmul of bf16 (f16) operands accumulated in f32,
  // and that nothing else reads, get their gradient in that type: the
  // router's two backward matmuls then take like operands (the fast
  // kernels), as under torch.autocast.
  Type gradType = logits.getType();
  if (auto matmul = logits.getDefiningOp<linalg::MatmulOp>();
      matmul && logits.hasOneUse()) {
    Type a = elementOf(matmul.getInputs()[0]);
    if (isa<BFloat16Type, Float16Type>(a) &&
        a == elementOf(matmul.getInputs()[1]) && elementOf(logits).isF32())
      gradType = cast<RankedTensorType>(logits.getType()).clone(a);
  }
  auto grad = create<RouterTopKGradOp>(
      op.getLoc(), gradType, P(logits), P(op.getIds()), dWeights,
      op.getScoringAttr(), op.getOrderAttr(), op.getRenormalizeAttr(),
      op.getScalingFactorAttr());
  accumulate(logits, grad.getGradLogits());
  return success();
}

LogicalResult GradientBuilder::rule(linalg::MatmulOp op) {
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  MLIRContext *ctx = op.getContext();
  AffineExpr m, n, k;
  bindDims(ctx, m, n, k);
  auto map = [&](ArrayRef<AffineExpr> results) {
    return AffineMap::get(3, 0, results, ctx);
  };
  auto zeroFill = op.getOutputs()[0].getDefiningOp<linalg::FillOp>();
  bool transposeB = maps[1] == map({n, k});
  if (maps[0] != map({m, k}) || maps[2] != map({m, n}) ||
      (!transposeB && maps[1] != map({k, n})) || !zeroFill)
    return op.emitOpError("moe-autodiff: only a matmul with a zero-filled "
                          "accumulator, A read as [M, K] and B as [K, N] or "
                          "[N, K] is differentiated");
  Location loc = op.getLoc();
  Value a = op.getInputs()[0], b = op.getInputs()[1];
  Value dC = gradOf(op.getResult(0));
  // Each gradient is a matmul into a fresh zero-filled accumulator.
  auto matmul = [&](Value x, Value y, RankedTensorType type, Value sizesOf,
                    ArrayRef<AffineMap> indexing) {
    Value init = emptyLike(type, sizesOf);
    Value zero = create<arith::ConstantOp>(
        loc, builder.getFloatAttr(type.getElementType(), 0.0));
    Value acc = create<linalg::FillOp>(loc, zero, init).getResult(0);
    NamedAttribute maps(builder.getStringAttr("indexing_maps"),
                        builder.getAffineMapArrayAttr(indexing));
    return create<linalg::MatmulOp>(loc, TypeRange{type}, ValueRange{x, y},
                                    ValueRange{acc}, ArrayRef{maps})
        .getResult(0);
  };
  if (active(a)) {
    // dA [M, K] = dC · Bᵀ, or dC · B when B is [N, K]: (m, n') · (n', k).
    auto type = cast<RankedTensorType>(a.getType());
    accumulate(a, matmul(dC, P(b), type, P(a),
                         {map({m, k}), transposeB ? map({k, n}) : map({n, k}),
                          map({m, n})}));
  }
  if (active(b)) {
    // dB = Aᵀ · dC ([K, N]) or dCᵀ · A ([N, K]): the reduction runs over
    // the rows of both (the first operand read transposed, as (k, m)).
    auto type = cast<RankedTensorType>(b.getType());
    Value first = transposeB ? dC : P(a), second = transposeB ? P(a) : dC;
    accumulate(b, matmul(first, second, type, P(b),
                         {map({k, m}), map({k, n}), map({m, n})}));
  }
  return success();
}

LogicalResult GradientBuilder::differentiate(Operation *op) {
  // Results seeded by the output gradients of ops that no differentiable
  // argument reaches have nothing to pass on.
  bool anyGrad = llvm::any_of(op->getResults(),
                              [&](Value r) { return gradOf(r) != Value(); });
  if (!anyGrad ||
      llvm::none_of(op->getOperands(), [&](Value v) { return active(v); }))
    return success();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<UnpermuteOp, PermuteOp, GroupedMatmulOp, SwigluOp, RouterTopKOp,
            linalg::MatmulOp>([&](auto typed) { return rule(typed); })
      .Default([](Operation *op) {
        return op->emitOpError("moe-autodiff: no gradient rule for this op, "
                               "and a differentiable value reaches it");
      });
}

func::FuncOp GradientBuilder::build(StringRef name) {
  Block &body = fwd.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  // Activity: values that depend on a differentiable argument.
  for (unsigned i : wrt)
    varied.insert(fwd.getArgument(i));
  for (Operation &op : body.without_terminator())
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          varied.insert(r);

  // Signature before the save policy: forward args, grads of the float
  // results; results: the grads of the wrt args.
  SmallVector<Type> inputs(fwd.getArgumentTypes());
  numForwardArgs = inputs.size();
  SmallVector<unsigned> gradResults;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (isFloatTensor(v)) {
      inputs.push_back(v.getType());
      gradResults.push_back(i);
    }
  SmallVector<Type> results;
  for (unsigned i : wrt)
    results.push_back(fwd.getArgument(i).getType());

  builder.setInsertionPointAfter(fwd);
  auto grad = func::FuncOp::create(builder, fwd.getLoc(), name,
                                   builder.getFunctionType(inputs, results));
  Block *entry = grad.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  for (unsigned i = 0; i < numForwardArgs; ++i) {
    primal.map(fwd.getArgument(i), entry->getArgument(i));
    forwardOf[entry->getArgument(i)] = fwd.getArgument(i);
  }
  // The forward, recomputed (the save policy replaces clones by saved
  // arguments later).
  for (Operation &op : body.without_terminator()) {
    Operation *clone = builder.clone(op, primal);
    for (auto [from, to] : llvm::zip(op.getResults(), clone->getResults()))
      forwardOf[to] = from;
  }
  for (auto [n, i] : llvm::enumerate(gradResults))
    accumulate(ret.getOperand(i), entry->getArgument(numForwardArgs + n));

  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (failed(differentiate(&op)))
      return grad.erase(), func::FuncOp();

  SmallVector<Value> returned;
  for (unsigned i : wrt) {
    Value g = gradOf(fwd.getArgument(i));
    if (!g && !requireAll)
      continue;
    if (!g) {
      fwd.emitOpError("moe-autodiff: argument ")
          << i
          << " reaches no floating-point result through a "
             "differentiable op, so it has no gradient";
      grad.erase();
      return func::FuncOp();
    }
    returned.push_back(g);
    returnedArgs.push_back(i);
  }
  if (returned.empty()) {
    fwd.emitOpError("moe-autodiff: no floating-point argument reaches a "
                    "floating-point result through a differentiable op");
    grad.erase();
    return func::FuncOp();
  }
  func::ReturnOp::create(builder, ret.getLoc(), returned);
  grad.setType(
      builder.getFunctionType(inputs, ValueRange(returned).getTypes()));
  return grad;
}

struct MoeAutodiffPass : moec::moe::impl::MoeAutodiffPassBase<MoeAutodiffPass> {
  using MoeAutodiffPassBase::MoeAutodiffPassBase;

  void runOnOperation() override;

private:
  FailureOr<func::FuncOp> target();
  /// The arguments to differentiate; `explicitly` tells whether the option
  /// or moe.wrt attributes chose them.
  FailureOr<SmallVector<unsigned>> differentiable(func::FuncOp func,
                                                  bool &explicitly);
  /// Option `accumulate`: appends an f32 gradient-so-far argument to `grad`
  /// per index and fuses it into that gradient's weight-gradient matmul.
  /// Returns the indices, in ascending order (that of the arguments).
  /// Errors are reported on `original` (the user's function).
  FailureOr<SmallVector<unsigned>>
  accumulateInto(func::FuncOp original, func::FuncOp grad,
                 ArrayRef<unsigned> returnedArgs);
};

FailureOr<SmallVector<unsigned>>
MoeAutodiffPass::accumulateInto(func::FuncOp original, func::FuncOp grad,
                                ArrayRef<unsigned> returnedArgs) {
  SmallVector<unsigned> indices;
  Block &entry = grad.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  SmallVector<int64_t> wanted(accumulate.begin(), accumulate.end());
  llvm::sort(wanted);
  for (int64_t i : wanted) {
    if (llvm::is_contained(indices, unsigned(i)))
      continue;
    const auto *it = llvm::find(returnedArgs, unsigned(i));
    if (i < 0 || it == returnedArgs.end())
      return original.emitOpError("moe-autodiff: option 'accumulate' names "
                                  "argument ")
             << i << ", whose gradient the backward does not return";
    Value g = ret.getOperand(it - returnedArgs.begin());
    auto matmul = g.getDefiningOp<GroupedWeightGradOp>();
    if (!matmul || !g.hasOneUse())
      return original.emitOpError("moe-autodiff: option 'accumulate' names "
                                  "argument ")
             << i
             << ", whose gradient is not one moe.grouped_weight_grad "
                "(the expert weights' are; the others are not fused yet)";
    // The sum is f32 whatever the weights' type: a bf16 main gradient
    // would round away the small per-micro-batch updates.
    auto type = cast<RankedTensorType>(g.getType())
                    .clone(Float32Type::get(&getContext()));
    BlockArgument main = entry.addArgument(type, g.getLoc());
    matmul.getAccumulateMutable().assign(main);
    g.setType(type);
    indices.push_back(i);
  }
  return indices;
}

FailureOr<func::FuncOp> MoeAutodiffPass::target() {
  ModuleOp module = getOperation();
  if (!funcName.empty()) {
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func)
      return module.emitError("moe-autodiff: no function named '")
             << funcName << "'";
    return func;
  }
  auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
  if (funcs.size() != 1)
    return module.emitError("moe-autodiff: the module holds ")
           << funcs.size()
           << " functions; name the one to differentiate (option 'func')";
  return funcs.front();
}

FailureOr<SmallVector<unsigned>>
MoeAutodiffPass::differentiable(func::FuncOp func, bool &explicitly) {
  SmallVector<unsigned> indices;
  explicitly = true;
  unsigned numArgs = func.getNumArguments();
  if (!wrt.empty()) {
    for (int64_t i : wrt) {
      if (i < 0 || i >= numArgs)
        return func.emitOpError("moe-autodiff: option 'wrt' names argument ")
               << i << ", but the function has " << numArgs;
      if (!isFloatTensor(func.getArgument(i)))
        return func.emitOpError("moe-autodiff: argument ")
               << i
               << " is not a floating-point tensor, so it has no "
                  "gradient";
      if (!llvm::is_contained(indices, unsigned(i)))
        indices.push_back(i);
    }
    return indices;
  }
  for (unsigned i = 0; i < numArgs; ++i)
    if (func.getArgAttr(i, kWrtAttr)) {
      if (!isFloatTensor(func.getArgument(i)))
        return func.emitOpError("moe-autodiff: argument ")
               << i
               << " is marked moe.wrt but is not a floating-point "
                  "tensor";
      indices.push_back(i);
    }
  // Default: every float argument; those that reach no result through a
  // differentiable op (a router's selection bias, say) are left out later.
  if (!indices.empty())
    return indices;
  explicitly = false;
  for (unsigned i = 0; i < numArgs; ++i)
    if (isFloatTensor(func.getArgument(i)))
      indices.push_back(i);
  if (indices.empty())
    return func.emitOpError("moe-autodiff: no floating-point argument to "
                            "differentiate");
  return indices;
}

void MoeAutodiffPass::runOnOperation() {
  std::optional<SavePolicy> policy =
      llvm::StringSwitch<std::optional<SavePolicy>>(save)
          .Case("all", SavePolicy::All)
          .Case("matmuls", SavePolicy::Matmuls)
          .Case("inputs", SavePolicy::Inputs)
          .Default(std::nullopt);
  if (!policy) {
    getOperation().emitError("moe-autodiff: option 'save' must be all, "
                             "matmuls or inputs, got '")
        << save << "'";
    return signalPassFailure();
  }
  FailureOr<func::FuncOp> original = target();
  if (failed(original))
    return signalPassFailure();
  func::FuncOp f = *original;
  if (!f.getBody().hasOneBlock())
    return f.emitOpError("moe-autodiff: needs a function with one block"),
           signalPassFailure();
  bool explicitly = false;
  FailureOr<SmallVector<unsigned>> wrtArgs = differentiable(f, explicitly);
  if (failed(wrtArgs))
    return signalPassFailure();

  ModuleOp module = getOperation();
  SymbolTable symbols(module);
  std::string base = f.getName().str();
  for (StringRef suffix : {"_fwd", "_grad"})
    if (symbols.lookup(base + suffix.str()))
      return module.emitError("moe-autodiff: the module already has a "
                              "function named '")
                 << base << suffix << "'",
             signalPassFailure();

  // @f_fwd: @f with every sort giving its positions (the gradient ops take
  // them instead of rebuilding the inverse of the slots).
  OpBuilder builder(f);
  builder.setInsertionPointAfter(f);
  auto fwd = cast<func::FuncOp>(builder.clone(*f));
  fwd.setName(base + "_fwd");
  SmallVector<SortByExpertOp> sorts;
  fwd.walk([&](SortByExpertOp sort) { sorts.push_back(sort); });
  for (SortByExpertOp sort : sorts)
    withPositions(sort);
  // With save=matmuls or inputs, permuted rows that grouped matmuls read
  // are read by slot instead (moe-fuse-permute's rewrite, before
  // differentiating): neither function makes an R x K copy of the tokens,
  // and the weight gradients gather them too. save=all keeps the rows:
  // on the H200 the gathered gate_up weight gradient ran 0.93-1.05x as
  // fast as the permute plus the in-order one, and the whole full
  // fine-tuning step at T = 8192 0.97-1.00x
  // (bench/results/gathered-weight-grad-h200.md).
  if (*policy != SavePolicy::All) {
    RewritePatternSet fusions(&getContext());
    populatePermuteIntoMatmulPatterns(fusions);
    if (failed(applyFusionPatterns(fwd, std::move(fusions))))
      return fwd.erase(), signalPassFailure();
  }

  GradientBuilder gb(fwd, *wrtArgs, explicitly);
  func::FuncOp grad = gb.build(base + "_grad");
  if (!grad)
    return fwd.erase(), signalPassFailure();

  // The save policy: each forward value the gradient ops read is either an
  // argument of the backward (fed by @f_fwd) or recomputed there from what
  // is saved, recursively.
  auto saves = [&](Operation *op) {
    if (isFree(op))
      return false;
    switch (*policy) {
    case SavePolicy::All:
      return true;
    case SavePolicy::Matmuls:
      return isa<GroupedMatmulOp, GroupedWeightGradOp, linalg::MatmulOp,
                 RouterTopKOp, SortByExpertOp>(op);
    case SavePolicy::Inputs:
      return false;
    }
    llvm_unreachable("covered switch");
  };
  llvm::SetVector<Value> saved;
  SmallVector<Value> worklist;
  DenseSet<Value> seen;
  for (Operation *op : gb.gradientOps)
    for (Value v : op->getOperands())
      if (gb.forwardOf.count(v))
        worklist.push_back(v);
  // Deterministic order: saved values in forward program order.
  DenseSet<Value> toSave;
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    if (!seen.insert(v).second || isa<BlockArgument>(v))
      continue;
    Operation *def = v.getDefiningOp();
    if (saves(def)) {
      toSave.insert(v);
      continue;
    }
    for (Value operand : def->getOperands())
      if (gb.forwardOf.count(operand))
        worklist.push_back(operand);
  }
  Block &fwdBody = fwd.getBody().front();
  for (Operation &op : fwdBody.without_terminator())
    for (Value r : op.getResults())
      for (Value clone : toSave)
        if (gb.forwardOf.lookup(clone) == r)
          saved.insert(clone);

  // Saved values become arguments after the forward's; the gradients of the
  // results follow them.
  Block &entry = grad.getBody().front();
  RowSymbols rowSymbols(fwd);
  MLIRContext *ctx = &getContext();
  unsigned firstSaved = gb.numForwardArgs;
  auto ret = cast<func::ReturnOp>(fwdBody.getTerminator());
  SmallVector<Value> fwdResults(ret.getOperands());
  SmallVector<int64_t> savedResults;
  for (auto [n, clone] : llvm::enumerate(saved)) {
    BlockArgument arg =
        entry.insertArgument(firstSaved + n, clone.getType(), clone.getLoc());
    Value(clone).replaceAllUsesWith(arg);
    Value forward = gb.forwardOf.lookup(clone);
    auto it = llvm::find(fwdResults, forward);
    savedResults.push_back(it - fwdResults.begin());
    if (it == fwdResults.end())
      fwdResults.push_back(forward);
  }
  // Erase the recomputation nobody reads any more.
  // (Users come after their operands: one pass from the end suffices.)
  SmallVector<Operation *> ops;
  for (Operation &op : entry.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (op->use_empty() && isMemoryEffectFree(op))
      op->erase();

  FailureOr<SmallVector<unsigned>> accumulated =
      accumulateInto(f, grad, gb.returnedArgs);
  if (failed(accumulated))
    return grad.erase(), fwd.erase(), signalPassFailure();
  auto gradReturn = cast<func::ReturnOp>(entry.getTerminator());
  SmallVector<Type> gradInputs(entry.getArgumentTypes());
  grad.setType(
      FunctionType::get(ctx, gradInputs, gradReturn.getOperandTypes()));
  // Argument attributes: the forward's own, then names and row symbols.
  for (unsigned i = 0; i < gb.numForwardArgs; ++i)
    if (DictionaryAttr attrs = fwd.getArgAttrDict(i))
      grad.setArgAttrs(i, attrs);
  auto setRowSymbol = [&](unsigned index, Value forward) {
    auto type = cast<RankedTensorType>(forward.getType());
    if (type.getRank() > 0 && type.isDynamicDim(0))
      grad.setArgAttr(index, kSymAttr,
                      StringAttr::get(ctx, rowSymbols.of(forward)));
  };
  for (auto [n, clone] : llvm::enumerate(saved)) {
    unsigned index = firstSaved + n;
    grad.setArgAttr(index, kNameAttr,
                    StringAttr::get(ctx, "saved" + std::to_string(n)));
    setRowSymbol(index, gb.forwardOf.lookup(clone));
  }
  unsigned firstGrad = firstSaved + saved.size();
  unsigned n = 0;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (!isFloatTensor(v))
      continue;
    unsigned index = firstGrad + n++;
    grad.setArgAttr(index, kNameAttr,
                    StringAttr::get(ctx, "grad_result" + std::to_string(i)));
    setRowSymbol(index, v);
  }
  unsigned firstMain = firstGrad + n;
  for (auto [m, i] : llvm::enumerate(*accumulated)) {
    auto argName = fwd.getArgAttrOfType<StringAttr>(i, kNameAttr);
    std::string name = argName ? argName.str() + "_main_grad"
                               : "main_grad" + std::to_string(i);
    grad.setArgAttr(firstMain + m, kNameAttr, StringAttr::get(ctx, name));
    setRowSymbol(firstMain + m, fwd.getArgument(i));
  }
  grad->setAttr(kGradOfAttr, StringAttr::get(ctx, base));
  if (!accumulated->empty())
    grad->setAttr(
        kAccumulatedAttr,
        DenseI64ArrayAttr::get(ctx, SmallVector<int64_t>(accumulated->begin(),
                                                         accumulated->end())));
  SmallVector<int64_t> wrtAttr(gb.returnedArgs.begin(), gb.returnedArgs.end());
  grad->setAttr(kWrtAttr, DenseI64ArrayAttr::get(ctx, wrtAttr));
  grad->setAttr(kSavedResultsAttr, DenseI64ArrayAttr::get(ctx, savedResults));

  // @f_fwd returns its results, then the saved values it does not return
  // already.
  OpBuilder retBuilder(ret);
  func::ReturnOp::create(retBuilder, ret.getLoc(), fwdResults);
  ret.erase();
  SmallVector<Type> fwdTypes;
  for (Value v : fwdResults)
    fwdTypes.push_back(v.getType());
  fwd.setType(FunctionType::get(ctx, fwd.getArgumentTypes(), fwdTypes));
}

} // namespace
