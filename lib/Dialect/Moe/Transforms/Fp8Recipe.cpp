//===- Fp8Recipe.cpp - bf16 grouped matmuls to FP8 with block scales ------===//
//
// Part of moec. The `moe-fp8-recipe` pass: DeepSeek-V3's blockwise FP8
// recipe applied to a layer's expert matmuls (forward or backward, as
// moe-autodiff derives it). Every 16- or 32-bit grouped matmul and weight
// gradient it can take gets its operands quantized to e4m3 by moe.quantize
// and the FP8 op with their scales; the result keeps its type. With
// `weights=arguments` the functions take their weights' FP8 copies as
// arguments instead, and `@<f>_fp8_weights` makes them (quantized once per
// weight update by the caller, not on every call). A value moe-autodiff
// saves for the backward, which reads it only through quantizes, is saved
// quantized (saveQuantizedActivations).
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"
#include "moec/Support/MoeShapes.h"

#include "AutodiffAttrs.h"
#include "Transposed.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/MapVector.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOEFP8RECIPEPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec;
using namespace moec::moe;
using namespace moec::moe::autodiff;

namespace {

/// The recipe's block: 1x128 activation groups, 128x128 weight blocks and
/// 128-row blocks of the weight gradient's reduction (one wgmma slice).
constexpr int64_t kBlock = kFp8ScaleBlock;

bool isWideFloat(Value value) {
  Type elem = cast<ShapedType>(value.getType()).getElementType();
  return elem.isBF16() || elem.isF16() || elem.isF32();
}

int64_t blocksOf(int64_t size) {
  return ShapedType::isDynamic(size) ? ShapedType::kDynamic
                                     : ceilDiv(size, kBlock);
}

struct Quantized {
  Value data, scales;
};

/// `x` [L, K] in 1x128 groups: data [L, K], scales [L, ceil(K/128)].
Quantized quantizeRows(OpBuilder &b, Location loc, Value x, Type fp8) {
  auto type = cast<RankedTensorType>(x.getType());
  auto data = RankedTensorType::get(type.getShape(), fp8);
  auto scales = RankedTensorType::get(
      {type.getDimSize(0), blocksOf(type.getDimSize(1))}, b.getF32Type());
  auto op = QuantizeOp::create(b, loc, data, scales, Type(), Type(), x,
                               Value(), kBlock);
  return {op.getData(), op.getScales()};
}

/// Expert weights in 128x128 blocks: [E, N, K] as they are, or (from
/// [E, K, N], `transpose`) the K-major [E, N, K] copy FP8 wgmma reads.
Quantized quantizeWeights(OpBuilder &b, Location loc, Value w, Type fp8,
                          bool transpose) {
  auto type = cast<RankedTensorType>(w.getType());
  SmallVector<int64_t> shape(type.getShape());
  if (transpose)
    std::swap(shape[1], shape[2]);
  auto data = RankedTensorType::get(shape, fp8);
  auto scales = RankedTensorType::get(
      {shape[0], blocksOf(shape[1]), blocksOf(shape[2])}, b.getF32Type());
  auto op = QuantizeOp::create(b, loc, data, scales, Type(), Type(), w,
                               Value(), kBlock, QuantAxis::blocks,
                               /*pow2_scale=*/false, transpose);
  return {op.getData(), op.getScales()};
}

/// Grouped rows [M, C] in 128-row blocks of each expert, written
/// transposed: data [C, 128 * B], scales [B, C] (the FP8 weight
/// gradient's operands).
Quantized quantizeReduction(OpBuilder &b, Location loc, Value rows,
                            Value offsets, Type fp8) {
  auto type = cast<RankedTensorType>(rows.getType());
  int64_t experts = cast<ShapedType>(offsets.getType()).getDimSize(0);
  int64_t m = type.getDimSize(0), c = type.getDimSize(1);
  auto data = RankedTensorType::get(
      {c, transposedQuantColumns(m, experts, kBlock)}, fp8);
  auto scales = RankedTensorType::get(
      {colwiseScaleRows(m, experts, kBlock), c}, b.getF32Type());
  auto op = QuantizeOp::create(b, loc, data, scales, Type(), Type(), rows,
                               offsets, kBlock, QuantAxis::colwise,
                               /*pow2_scale=*/false, /*transpose=*/true);
  return {op.getData(), op.getScales()};
}

/// Why `op` stays as it is, or null where the recipe takes it (an op
/// already in FP8 is not asked).
const char *keptReason(GroupedMatmulOp op) {
  if (!isWideFloat(op.getLhs()) || !isWideFloat(op.getRhs()))
    return "operands are not bf16, f16 or f32";
  if (op.getLoraA() &&
      (op.getActivation() != Activation::none || op.getRowScale() ||
       op.getScatterSlots()))
    return "a fused LoRA adapter under an epilogue (activation, row scale "
           "or scatter), which would apply to the base product alone "
           "once the adapter is split off";
  if (op.getExpertsInColumns())
    return "experts_in_columns weights";
  if (op.getBias())
    return "a bias";
  return nullptr;
}

const char *keptReason(GroupedWeightGradOp op) {
  if (!isWideFloat(op.getLhs()) || !isWideFloat(op.getGradOut()))
    return "operands are not bf16, f16 or f32";
  if (op.getExpertsInColumns())
    return "experts_in_columns (a LoRA adapter's gradient)";
  return nullptr;
}

/// A fused LoRA adapter's term of `op` as its own grouped matmuls in the
/// op's precision (the FP8 kernels fuse no adapter), from `op`'s operands:
/// `s·(x·A_eᵀ)·B_eᵀ`, or with transpose_lora `s·(x·B_e)·A_e`. s is a row
/// scale of the narrow product; rows are gathered as `op` gathers them.
Value loraTerm(OpBuilder &b, Location loc, GroupedMatmulOp op) {
  MLIRContext *ctx = op.getContext();
  auto outType = cast<RankedTensorType>(op.getOut().getType());
  Type elem = outType.getElementType();
  Value offsets = op.getOffsets(), slots = op.getGatherSlots();
  int64_t experts = cast<ShapedType>(offsets.getType()).getDimSize(0);
  int64_t rank = cast<ShapedType>(op.getLoraA().getType()).getDimSize(0) /
                 experts;
  auto none = ActivationAttr::get(ctx, Activation::none);
  FloatAttr one = b.getF32FloatAttr(1.0f);
  IntegerAttr slotsPerToken = slots ? op.getKAttr() : IntegerAttr();
  Value rows = slots ? tensor::DimOp::create(b, loc, slots, 0)
                     : tensor::DimOp::create(b, loc, op.getLhs(), 0);
  Value scaling = arith::ConstantOp::create(b, loc, op.getLoraScalingAttr());
  Value empty = tensor::EmptyOp::create(b, loc, ArrayRef<OpFoldResult>{rows},
                                        b.getF32Type());
  Value scale = linalg::FillOp::create(b, loc, scaling, empty).getResult(0);
  auto narrow = RankedTensorType::get({outType.getDimSize(0), rank}, elem);
  Value down, up;
  if (!op.getTransposeLora()) {
    // u = s·x·A_eᵀ (A [E*r, K] as [E, r, K]), then u·B_eᵀ (Bᵀ as [E, r, N]).
    down = GroupedMatmulOp::create(
        b, loc, narrow, op.getLhs(), splitExpertRows(b, loc, op.getLoraA(),
                                                     experts),
        offsets, slots, Value(), Value(), Value(), scale, Value(), Value(),
        Value(), Value(), Value(), Value(), b.getUnitAttr(), slotsPerToken,
        one, none);
    up = splitExpertRows(b, loc, transposed(b, loc, op.getLoraB(), {1, 0}),
                         experts);
  } else {
    // du = s·x·B_e (B [K, E*r] as [K, E, r]: experts_in_columns), then
    // du·A_e (A [E*r, N] as [E, r, N]).
    auto bType = cast<RankedTensorType>(op.getLoraB().getType());
    Value b3 = tensor::ExpandShapeOp::create(
        b, loc,
        RankedTensorType::get({bType.getDimSize(0), experts, rank}, elem),
        op.getLoraB(), ArrayRef<ReassociationIndices>{{0}, {1, 2}});
    auto du = GroupedMatmulOp::create(
        b, loc, narrow, op.getLhs(), b3, offsets, slots, Value(), Value(),
        Value(), scale, Value(), Value(), Value(), Value(), Value(), Value(),
        UnitAttr(), slotsPerToken, one, none);
    du.setExpertsInColumns(true);
    down = du;
    up = splitExpertRows(b, loc, op.getLoraA(), experts);
  }
  return GroupedMatmulOp::create(b, loc, outType, down, up, offsets, Value(),
                                 Value(), Value(), Value(), Value(), Value(),
                                 Value(), Value(), Value(), Value(), Value(),
                                 UnitAttr(), IntegerAttr(), one, none);
}

/// A LoRA matmul `x·W_e + term` as the base matmul plus the term (loraTerm)
/// added after it: the base is then the recipe's (its W frozen in LoRA
/// fine-tuning, so quantized once with weights=arguments).
void splitLora(GroupedMatmulOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value term = loraTerm(b, loc, op);
  op.getLoraAMutable().clear();
  op.getLoraBMutable().clear();
  op.setLoraScaling(llvm::APFloat(1.0f));
  op.removeTransposeLoraAttr();
  b.setInsertionPointAfter(op);
  // The term's sizes (the output's; op's would be read by dims of op).
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, term);
  auto init = tensor::EmptyOp::create(
      b, loc, sizes, cast<ShapedType>(op.getOut().getType()).getElementType());
  auto sum = linalg::AddOp::create(b, loc, ValueRange{op.getOut(), term},
                                   ValueRange{init});
  op.getOut().replaceAllUsesExcept(sum.getResult(0), sum);
}

/// The lhs `rows` in 1x128 groups. Rows a moe.permute makes (without
/// passengers) are quantized as tokens before it, and the FP8 rows and
/// their scales permuted: the same values (a row's groups are its token's),
/// a quantize over T token rows instead of T*k, and a permute that
/// moe-fuse-permute folds into the matmul's gather.
Quantized quantizeLhs(OpBuilder &b, Location loc, Value rows, Type fp8) {
  auto permute = rows.getDefiningOp<PermuteOp>();
  if (!permute || permute.getProbs() || permute.getScales() ||
      !isWideFloat(permute.getTokens()))
    return quantizeRows(b, loc, rows, fp8);
  Quantized tokens = quantizeRows(b, loc, permute.getTokens(), fp8);
  auto rowsType = cast<RankedTensorType>(rows.getType());
  auto tokenScales = cast<RankedTensorType>(tokens.scales.getType());
  auto moved = PermuteOp::create(
      b, loc, RankedTensorType::get(rowsType.getShape(), fp8), Type(),
      RankedTensorType::get(
          {rowsType.getDimSize(0), tokenScales.getDimSize(1)},
          tokenScales.getElementType()),
      tokens.data, permute.getSlots(), permute.getOffsets(), Value(),
      tokens.scales, permute.getK(), permute.getPositions());
  return {moved.getRows(), moved.getPermutedScales()};
}

/// y = x · W_e: the rows (quantizeLhs) and the weights quantized, read as
/// FP8 with their scales; [E, K, N] weights (an input gradient's) go
/// K-major; a fused LoRA adapter's term split off first (splitLora).
void rewrite(GroupedMatmulOp op, Type fp8) {
  if (op.getLoraA())
    splitLora(op);
  OpBuilder b(op);
  Location loc = op.getLoc();
  Quantized x = quantizeLhs(b, loc, op.getLhs(), fp8);
  Quantized w =
      quantizeWeights(b, loc, op.getRhs(), fp8, !op.getTransposeRhs());
  op.getLhsMutable().assign(x.data);
  op.getRhsMutable().assign(w.data);
  op.getLhsScalesMutable().assign(x.scales);
  op.getRhsScalesMutable().assign(w.scales);
  op.setTransposeRhs(true);
  op.setScaleGroup(kBlock);
}

/// Σ xᵀ · dy per expert: both operands' grouped rows (a gathered lhs
/// permuted first) quantized in 128-row blocks of each expert, transposed.
void rewrite(GroupedWeightGradOp op, Type fp8) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value rows = op.getLhs();
  if (Value slots = op.getGatherSlots()) {
    auto tokens = cast<RankedTensorType>(rows.getType());
    auto rowsType = RankedTensorType::get(
        {cast<ShapedType>(slots.getType()).getDimSize(0),
         tokens.getDimSize(1)},
        tokens.getElementType());
    rows = PermuteOp::create(b, loc, rowsType, Type(), Type(), rows, slots,
                             op.getOffsets(), Value(), Value(),
                             op.getK().value_or(1), Value())
               .getRows();
    op.getGatherSlotsMutable().clear();
    op.removeKAttr();
  }
  Quantized x = quantizeReduction(b, loc, rows, op.getOffsets(), fp8);
  Quantized dy = quantizeReduction(b, loc, op.getGradOut(), op.getOffsets(),
                                   fp8);
  op.getLhsMutable().assign(x.data);
  op.getGradOutMutable().assign(dy.data);
  op.getLhsScalesMutable().assign(x.scales);
  op.getGradScalesMutable().assign(dy.scales);
}

constexpr llvm::StringLiteral kWeightOfAttr = "moe.fp8_weight_of";

/// Whether `plain` and `transposed` are the two layouts of one weight's
/// blocks: one moe.quantize can write both.
bool layoutPair(QuantizeOp plain, QuantizeOp transposed) {
  auto fp8 = [](Value v) {
    return cast<ShapedType>(v.getType()).getElementType();
  };
  return plain.getAxis() == QuantAxis::blocks && !plain.getTranspose() &&
         !plain.writesBothLayouts() &&
         transposed.getAxis() == QuantAxis::blocks &&
         transposed.getTranspose() && !transposed.writesBothLayouts() &&
         plain.getInput() == transposed.getInput() &&
         plain.getGroupSize() == transposed.getGroupSize() &&
         plain.getPow2Scale() == transposed.getPow2Scale() &&
         fp8(plain.getData()) == fp8(transposed.getData());
}

/// In a function making weight copies: one quantize per copy, then one
/// per weight for its two layouts (the plain one's data and scales, then
/// the transposed one's).
void mergeWeightQuantizes(Block &body) {
  OpBuilder b(body.getParentOp()->getContext());
  SmallVector<QuantizeOp> quantizes;
  for (auto op : llvm::make_early_inc_range(body.getOps<QuantizeOp>())) {
    // The same quantize of the same value: one kernel makes both results.
    auto same = llvm::find_if(quantizes, [&](QuantizeOp q) {
      return OperationEquivalence::isEquivalentTo(
          q, op, OperationEquivalence::IgnoreLocations);
    });
    if (same != quantizes.end()) {
      op->replaceAllUsesWith((*same)->getResults());
      op.erase();
    } else {
      quantizes.push_back(op);
    }
  }
  for (size_t i = 0; i < quantizes.size(); ++i) {
    QuantizeOp plain = quantizes[i];
    auto transposed = llvm::find_if(quantizes, [&](QuantizeOp t) {
      return plain && t && layoutPair(plain, t);
    });
    if (transposed == quantizes.end())
      continue;
    b.setInsertionPoint(plain);
    auto both = QuantizeOp::create(
        b, plain.getLoc(), plain.getData().getType(),
        plain.getScales().getType(), transposed->getData().getType(),
        transposed->getScales().getType(), plain.getInput(), Value(),
        plain.getGroupSize(), QuantAxis::blocks, plain.getPow2Scale(),
        /*transpose=*/false);
    plain.getData().replaceAllUsesWith(both.getData());
    plain.getScales().replaceAllUsesWith(both.getScales());
    transposed->getData().replaceAllUsesWith(both.getTransposedData());
    transposed->getScales().replaceAllUsesWith(both.getTransposedScales());
    transposed->erase();
    *transposed = nullptr;
    plain.erase();
    quantizes[i] = nullptr;
  }
}

/// A function argument's name for messages and entry inputs: its moe.name,
/// else "arg<i>".
std::string argName(func::FuncOp f, unsigned index) {
  if (auto name = f.getArgAttrOfType<StringAttr>(index, kNameAttr))
    return name.str();
  return "arg" + std::to_string(index);
}

/// `weights=arguments`: each weight quantize of one of `f`'s arguments (one
/// per argument and layout) becomes two arguments appended to `f`, the data
/// `<w>_fp8` (`<w>_fp8t` for the transposed copy) and its `_scales`, each
/// with `moe.fp8_weight_of` = the weight's argument index. `@<f>_fp8_weights`
/// takes those weights (in argument order) and returns the appended
/// arguments' values, in their order. Functions quantizing no argument are
/// left as they are.
LogicalResult hoistWeightQuantizes(func::FuncOp f) {
  if (f.isDeclaration())
    return success();
  // (argument, 1 if transposed) -> the quantizes of that copy.
  using Copy = std::pair<unsigned, unsigned>;
  llvm::MapVector<Copy, SmallVector<QuantizeOp>> copies;
  f.walk([&](QuantizeOp op) {
    auto arg = dyn_cast<BlockArgument>(op.getInput());
    if (op.getAxis() == QuantAxis::blocks && arg &&
        arg.getOwner() == &f.getBody().front())
      copies[{arg.getArgNumber(), op.getTranspose() ? 1u : 0u}].push_back(op);
  });
  if (copies.empty())
    return success();
  // Argument order, the plain copy before the transposed one.
  SmallVector<Copy> order;
  for (auto &entry : copies)
    order.push_back(entry.first);
  llvm::sort(order);

  MLIRContext *ctx = f.getContext();
  std::string name = (f.getSymName() + "_fp8_weights").str();
  auto module = f->getParentOfType<ModuleOp>();
  if (!module)
    return f.emitError("moe-fp8-recipe: weights=arguments needs the "
                       "function in a module (it adds @")
           << name << ")";
  if (SymbolTable::lookupSymbolIn(module, name))
    return f.emitError("moe-fp8-recipe: weights=arguments adds @")
           << name << ", and the module has one already";

  // The quantizing function: the weights in, their FP8 copies out.
  SmallVector<unsigned> weights;
  for (auto [index, transpose] : order)
    if (weights.empty() || weights.back() != index)
      weights.push_back(index);
  SmallVector<Type> inputs;
  for (unsigned index : weights)
    inputs.push_back(f.getArgument(index).getType());
  OpBuilder b(ctx);
  b.setInsertionPointAfter(f);
  auto quantizer = func::FuncOp::create(b, f.getLoc(), name,
                                        FunctionType::get(ctx, inputs, {}));
  Block *body = quantizer.addEntryBlock();
  b.setInsertionPointToStart(body);
  SmallVector<Value> results;
  for (auto [index, transpose] : order) {
    QuantizeOp first = copies[{index, transpose}].front();
    Value weight = body->getArgument(llvm::find(weights, index) -
                                     weights.begin());
    auto copy = cast<QuantizeOp>(b.clone(*first));
    copy.getInputMutable().assign(weight);
    results.append({copy.getData(), copy.getScales()});
  }
  func::ReturnOp::create(b, f.getLoc(), results);
  quantizer.setType(FunctionType::get(ctx, inputs, ValueRange(results).getTypes()));
  mergeWeightQuantizes(*body);
  for (auto [i, index] : llvm::enumerate(weights))
    quantizer.setArgAttr(i, kNameAttr, StringAttr::get(ctx, argName(f, index)));

  // The function takes the copies as arguments.
  Block &entry = f.getBody().front();
  for (auto [index, transpose] : order) {
    std::string base = argName(f, index) + (transpose ? "_fp8t" : "_fp8");
    QuantizeOp first = copies[{index, transpose}].front();
    unsigned at = f.getNumArguments();
    for (auto [value, suffix] :
         {std::pair<Value, const char *>{first.getData(), ""},
          {first.getScales(), "_scales"}}) {
      NamedAttribute attrs[] = {
          b.getNamedAttr(kNameAttr, StringAttr::get(ctx, base + suffix)),
          b.getNamedAttr(kWeightOfAttr, b.getI64IntegerAttr(index))};
      if (failed(f.insertArgument(f.getNumArguments(), value.getType(),
                                  b.getDictionaryAttr(attrs), f.getLoc())))
        return failure();
    }
    for (QuantizeOp op : copies[{index, transpose}]) {
      op.getData().replaceAllUsesWith(entry.getArgument(at));
      op.getScales().replaceAllUsesWith(entry.getArgument(at + 1));
      op.erase();
    }
  }
  return success();
}

/// `weights=arguments` on a moe-autodiff pair whose functions both take FP8
/// weight copies: `@<f>_fwd_grad_fp8_weights` makes both sets in one call,
/// `@<f>_fwd_fp8_weights`' results then `@<f>_grad_fp8_weights`', for the
/// step that runs the two on the same weights. A weight the forward takes
/// plain and the backward transposed is read once (one moe.quantize
/// writing both layouts): 4 bytes per bf16 element moved instead of 6.
LogicalResult addStepQuantizer(func::FuncOp grad) {
  auto base = grad->getAttrOfType<StringAttr>(kGradOfAttr);
  auto module = grad->getParentOfType<ModuleOp>();
  if (!base || !module)
    return success();
  auto lookup = [&](StringRef suffix) {
    return dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(module, (base.str() + suffix).str()));
  };
  func::FuncOp parts[] = {lookup("_fwd_fp8_weights"),
                          lookup("_grad_fp8_weights")};
  if (!parts[0] || !parts[1] || parts[0].isDeclaration() ||
      parts[1].isDeclaration())
    return success();
  std::string name = (base.str() + "_fwd_grad_fp8_weights");
  if (SymbolTable::lookupSymbolIn(module, name))
    return grad.emitError("moe-fp8-recipe: weights=arguments adds @")
           << name << ", and the module has one already";

  // The weights by name: the forward's, then the backward's others.
  MLIRContext *ctx = grad.getContext();
  SmallVector<StringAttr> names;
  SmallVector<Type> inputs;
  for (func::FuncOp part : parts)
    for (unsigned i = 0; i < part.getNumArguments(); ++i) {
      auto argName = part.getArgAttrOfType<StringAttr>(i, kNameAttr);
      if (!argName)
        return part.emitError("moe-fp8-recipe: argument ")
               << i << " has no moe.name";
      if (!llvm::is_contained(names, argName)) {
        names.push_back(argName);
        inputs.push_back(part.getArgument(i).getType());
      }
    }
  OpBuilder b(ctx);
  b.setInsertionPointAfter(parts[1]);
  auto step = func::FuncOp::create(b, grad.getLoc(), name,
                                   FunctionType::get(ctx, inputs, {}));
  Block *body = step.addEntryBlock();
  for (auto [i, argName] : llvm::enumerate(names))
    step.setArgAttr(i, kNameAttr, argName);
  b.setInsertionPointToStart(body);
  SmallVector<Value> results;
  for (func::FuncOp part : parts) {
    IRMapping map;
    for (unsigned i = 0; i < part.getNumArguments(); ++i)
      map.map(part.getArgument(i),
              body->getArgument(
                  llvm::find(names,
                             part.getArgAttrOfType<StringAttr>(i, kNameAttr)) -
                  names.begin()));
    for (Operation &op : part.getBody().front().without_terminator())
      b.clone(op, map);
    for (Value v : part.getBody().front().getTerminator()->getOperands())
      results.push_back(map.lookup(v));
  }
  func::ReturnOp::create(b, grad.getLoc(), results);
  step.setType(FunctionType::get(ctx, inputs, ValueRange(results).getTypes()));

  mergeWeightQuantizes(*body);
  return success();
}

/// The later of two values' definitions in `block` (an argument counts as
/// the block's start), for an op that reads both.
Operation *laterDefinition(Block &block, Value a, Value b) {
  Operation *defA = a ? a.getDefiningOp() : nullptr;
  Operation *defB = b ? b.getDefiningOp() : nullptr;
  if (!defA || (defB && defA->isBeforeInBlock(defB)))
    return defB;
  return defA;
}

/// A value moe-autodiff saves for `grad` that the backward reads only
/// through moe.quantize (after the recipe: the weight gradients' rows and
/// SwiGLU output, quantized column-wise) is saved quantized instead:
/// `@f_fwd` quantizes it where it is made and returns the FP8 data and
/// scales, which replace it among `grad`'s saved arguments (and in
/// `moe.saved_results`). The bf16 value is then no longer kept between the
/// two calls, unless it is one of `@f`'s results. (Column-wise data pads
/// each expert to 128-row blocks: fewer bytes than bf16 from 128 rows per
/// expert on, about half well past that.) The quantize's other operand
/// (offsets) must be one the forward has.
void saveQuantizedActivations(func::FuncOp grad) {
  auto base = grad->getAttrOfType<StringAttr>(kGradOfAttr);
  auto savedAttr = grad->getAttrOfType<DenseI64ArrayAttr>(kSavedResultsAttr);
  auto module = grad->getParentOfType<ModuleOp>();
  if (!base || !savedAttr || !module || grad.isDeclaration())
    return;
  auto fwd = SymbolTable::lookupSymbolIn(module, (base.str() + "_fwd"));
  auto fwdFunc = dyn_cast_or_null<func::FuncOp>(fwd);
  if (!fwdFunc || fwdFunc.isDeclaration())
    return;
  unsigned firstSaved = fwdFunc.getNumArguments();
  SmallVector<int64_t> saved(savedAttr.asArrayRef());
  if (grad.getNumArguments() < firstSaved + saved.size())
    return;
  Block &fwdBody = fwdFunc.getBody().front();
  Block &entry = grad.getBody().front();
  auto ret = cast<func::ReturnOp>(fwdBody.getTerminator());
  SmallVector<Value> fwdResults(ret.getOperands());
  // The forward's twin of one of grad's arguments (a forward argument or a
  // saved value), or null.
  auto forwardOf = [&](Value v) -> Value {
    auto arg = dyn_cast_or_null<BlockArgument>(v);
    if (!arg || arg.getOwner() != &entry)
      return {};
    unsigned i = arg.getArgNumber();
    if (i < firstSaved)
      return fwdFunc.getArgument(i);
    if (i - firstSaved < saved.size())
      return fwdResults[saved[i - firstSaved]];
    return {};
  };

  MLIRContext *ctx = grad.getContext();
  unsigned numBlockSymbols = 0;
  SmallVector<SmallVector<int64_t>> newSaved;
  for (int64_t index : saved)
    newSaved.push_back({index});
  // From the last saved argument on, so that earlier ones keep their index.
  for (unsigned n = saved.size(); n-- > 0;) {
    BlockArgument arg = entry.getArgument(firstSaved + n);
    SmallVector<QuantizeOp> quantizes;
    bool onlyQuantized = !arg.use_empty();
    for (Operation *user : arg.getUsers()) {
      auto q = dyn_cast<QuantizeOp>(user);
      if (!q || q.getInput() != arg || (q.getOffsets() &&
                                        !forwardOf(q.getOffsets())))
        onlyQuantized = false;
      else if (!llvm::is_contained(quantizes, q))
        quantizes.push_back(q);
    }
    if (!onlyQuantized)
      continue;
    auto sym = grad.getArgAttrOfType<StringAttr>(firstSaved + n, kSymAttr);
    newSaved[n].clear();
    unsigned at = firstSaved + n + 1;
    for (QuantizeOp q : quantizes) {
      Value input = fwdResults[saved[n]];
      Value offsets = forwardOf(q.getOffsets());
      OpBuilder b(ctx);
      if (Operation *after = laterDefinition(fwdBody, input, offsets))
        b.setInsertionPointAfter(after);
      else
        b.setInsertionPointToStart(&fwdBody);
      IRMapping map;
      map.map(arg, input);
      if (offsets)
        map.map(q.getOffsets(), offsets);
      auto copy = cast<QuantizeOp>(b.clone(*q, map));
      for (Value result : {copy.getData(), copy.getScales()}) {
        newSaved[n].push_back(fwdResults.size());
        fwdResults.push_back(result);
      }
      // Leading rows keep the saved value's symbol; column-wise scales'
      // rows (128-row blocks of each expert) get one of their own.
      auto dataType = cast<RankedTensorType>(copy.getData().getType());
      auto scalesType = cast<RankedTensorType>(copy.getScales().getType());
      std::string rows = sym ? sym.str() : "T";
      StringAttr blocks = StringAttr::get(
          ctx, rows + "_blocks" + std::to_string(numBlockSymbols++));
      SmallVector<NamedAttribute> dataAttrs, scalesAttrs;
      if (sym && dataType.isDynamicDim(0) && !q.getTranspose())
        dataAttrs.push_back(b.getNamedAttr(kSymAttr, sym));
      if (scalesType.isDynamicDim(0))
        scalesAttrs.push_back(b.getNamedAttr(
            kSymAttr, q.getAxis() == QuantAxis::colwise
                          ? blocks
                          : StringAttr::get(ctx, rows)));
      (void)grad.insertArgument(at, dataType, b.getDictionaryAttr(dataAttrs),
                                q.getLoc());
      (void)grad.insertArgument(at + 1, scalesType,
                                b.getDictionaryAttr(scalesAttrs), q.getLoc());
      q.getData().replaceAllUsesWith(entry.getArgument(at));
      q.getScales().replaceAllUsesWith(entry.getArgument(at + 1));
      q.erase();
      at += 2;
    }
    (void)grad.eraseArgument(firstSaved + n);
  }

  // The forward returns @f's results, then what grad reads: results that
  // were saved for grad alone and are not read any more go.
  unsigned numResults = fwdResults.size();
  if (auto f = dyn_cast_or_null<func::FuncOp>(
          SymbolTable::lookupSymbolIn(module, base)))
    numResults = f.getNumResults();
  llvm::SmallDenseSet<int64_t> read;
  for (auto &indices : newSaved)
    read.insert(indices.begin(), indices.end());
  SmallVector<Value> kept;
  SmallVector<int64_t> newIndex(fwdResults.size(), -1);
  for (auto [i, value] : llvm::enumerate(fwdResults))
    if (i < numResults || read.contains(i)) {
      newIndex[i] = kept.size();
      kept.push_back(value);
    }
  SmallVector<int64_t> savedResults;
  for (auto &indices : newSaved)
    for (int64_t i : indices)
      savedResults.push_back(newIndex[i]);
  OpBuilder b(ret);
  func::ReturnOp::create(b, ret.getLoc(), kept);
  ret.erase();
  fwdFunc.setType(FunctionType::get(ctx, fwdFunc.getArgumentTypes(),
                                    ValueRange(kept).getTypes()));
  grad->setAttr(kSavedResultsAttr,
                DenseI64ArrayAttr::get(ctx, savedResults));
  for (unsigned i = 0; i < savedResults.size(); ++i)
    grad.setArgAttr(firstSaved + i, kNameAttr,
                    StringAttr::get(ctx, "saved" + std::to_string(i)));
}

struct MoeFp8RecipePass
    : moec::moe::impl::MoeFp8RecipePassBase<MoeFp8RecipePass> {
  using MoeFp8RecipePassBase::MoeFp8RecipePassBase;

  void runOnOperation() override {
    if (recipe != "blockwise") {
      getOperation()->emitError()
          << "moe-fp8-recipe: unknown recipe '" << recipe
          << "' (the one there is: blockwise, DeepSeek-V3's 1x128 / "
             "128x128 block scales)";
      return signalPassFailure();
    }
    if (weights != "inline" && weights != "arguments") {
      getOperation()->emitError()
          << "moe-fp8-recipe: unknown weights '" << weights
          << "' (inline: each function quantizes its weights; arguments: "
             "it takes their FP8 copies, made by @<function>_fp8_weights)";
      return signalPassFailure();
    }
    Type fp8 = Float8E4M3FNType::get(&getContext());
    getOperation()->walk([&](Operation *op) {
      if (auto matmul = dyn_cast<GroupedMatmulOp>(op)) {
        if (matmul.getLhsScales())
          return;
        if (const char *why = keptReason(matmul))
          return report(op, why);
        rewrite(matmul, fp8);
      } else if (auto grad = dyn_cast<GroupedWeightGradOp>(op)) {
        if (grad.getLhsScales())
          return;
        if (const char *why = keptReason(grad))
          return report(op, why);
        rewrite(grad, fp8);
      }
    });
    SmallVector<func::FuncOp> functions;
    getOperation()->walk([&](func::FuncOp f) { functions.push_back(f); });
    for (func::FuncOp f : functions)
      saveQuantizedActivations(f);
    if (weights != "arguments")
      return;
    functions.clear();
    getOperation()->walk([&](func::FuncOp f) { functions.push_back(f); });
    for (func::FuncOp f : functions)
      if (failed(hoistWeightQuantizes(f)))
        return signalPassFailure();
    for (func::FuncOp f : functions)
      if (failed(addStepQuantizer(f)))
        return signalPassFailure();
  }

  /// A matmul the recipe leaves in its own precision says why (a remark:
  /// the layer still compiles and runs).
  void report(Operation *op, const char *why) {
    op->emitRemark() << "moe-fp8-recipe keeps this op in its precision: "
                     << why;
  }
};

} // namespace
