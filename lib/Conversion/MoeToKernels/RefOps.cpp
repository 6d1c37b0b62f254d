//===- RefOps.cpp - The float64 reference's record of an op --------------===//
//
// Part of moec. Builds the #moe.ref_op convert-moe-to-kernels records per op:
// operand groups and results by ODS name (the moe ops' names generated from
// MoeOps.td; the upstream ops' in the table below, their one place), and
// every attribute as text, so that lib/Check restates nothing of ODS.
//
//===----------------------------------------------------------------------===//

#include "RefOps.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstdio>

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// The upstream ops the lowering accepts, named for the reference: their
/// operand groups (the values of unsegmentedOperands, in order), results
/// and the attributes the lowering computes (lowerOneOp's extraAttrs).
/// Operand names follow the upstream ODS where it has one per operand.
ArrayRef<OdsOpNames> upstreamOpNames() {
  static const OdsOpNames ops[] = {
      {"linalg.matmul",
       {"A", "B"},
       {"result"},
       {{"transpose_a", OdsAttrKind::Required},
        {"transpose_b", OdsAttrKind::Required}}},
      {"linalg.add", {"lhs", "rhs"}, {"result"}, {}},
      {"linalg.transpose",
       {"input"},
       {"result"},
       {{"permutation", OdsAttrKind::Required}}},
      {"linalg.fill", {}, {"result"}, {{"value", OdsAttrKind::Required}}},
      {"tensor.pad",
       {"source"},
       {"result"},
       {{"low", OdsAttrKind::Required}, {"value", OdsAttrKind::Required}}},
      {"tensor.extract_slice",
       {"source"},
       {"result"},
       {{"offsets", OdsAttrKind::Required},
        {"strides", OdsAttrKind::Required}}},
      {"tensor.expand_shape", {"src"}, {"result"}, {}},
      {"tensor.collapse_shape", {"src"}, {"result"}, {}},
  };
  return ops;
}

/// The operand groups (null for an absent optional one) of the upstream
/// ops, whose groups the operands alone do not tell: a matmul's A and B (its
/// accumulator is the zero fill), a pad's or slice's source (their static
/// bounds are attributes). The moe ops' groups come from their segment
/// sizes or kinds (groupIndices).
std::optional<SmallVector<Value>> unsegmentedOperands(Operation *op) {
  using Operands = std::optional<SmallVector<Value>>;
  return llvm::TypeSwitch<Operation *, Operands>(op)
      .Case<linalg::MatmulOp, linalg::AddOp>([](auto linalgOp) {
        return SmallVector<Value>(linalgOp.getInputs());
      })
      .Case([](linalg::TransposeOp transpose) {
        return SmallVector<Value>{transpose.getInput()};
      })
      .Case([](linalg::FillOp) { return SmallVector<Value>{}; })
      .Case<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
          [](auto reshape) { return SmallVector<Value>{reshape.getSrc()}; })
      .Case<tensor::PadOp, tensor::ExtractSliceOp>(
          [](auto copy) { return SmallVector<Value>{copy.getSource()}; })
      .Default([](Operation *) { return std::nullopt; });
}

/// Textual form of an attribute for the reference op list: integers in
/// decimal, floats with 17 digits, unit/bool as true/false, enums by keyword.
std::string attrText(Attribute attr) {
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue() ? "true" : "false";
  if (auto i = dyn_cast<IntegerAttr>(attr)) {
    if (i.getType().isInteger(1))
      return i.getValue().isZero() ? "false" : "true";
    return std::to_string(i.getValue().getSExtValue());
  }
  if (auto f = dyn_cast<FloatAttr>(attr)) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.17g", f.getValueAsDouble());
    return text;
  }
  if (isa<UnitAttr>(attr))
    return "true";
  // Enum attributes print as #moe.name<keyword>.
  std::string printed;
  llvm::raw_string_ostream os(printed);
  attr.print(os);
  size_t open = printed.find('<'), close = printed.rfind('>');
  if (open != std::string::npos && close != std::string::npos && close > open)
    return printed.substr(open + 1, close - open - 1);
  return printed;
}

/// The buffer index of each of the `kinds.size()` ODS operand or result
/// groups (-1 for an absent optional one), from the op's segment sizes
/// where it has them; else the one group that is not single ('o' or 'v' in
/// `kinds`) takes what the single ones leave, as in ODS.
SmallVector<int32_t> groupIndices(Operation *op, ValueRange values,
                                  StringRef segmentsAttr, StringRef kinds,
                                  function_ref<int32_t(Value)> index) {
  SmallVector<int32_t> indices;
  if (auto segments = op->getAttrOfType<DenseI32ArrayAttr>(segmentsAttr)) {
    unsigned next = 0;
    for (int32_t length : segments.asArrayRef()) {
      indices.push_back(length ? index(values[next]) : -1);
      next += length;
    }
    return indices;
  }
  size_t other = kinds.find_first_not_of('s');
  if (kinds.empty() || other == StringRef::npos ||
      values.size() + 1 < kinds.size()) {
    for (Value value : values)
      indices.push_back(index(value));
    return indices;
  }
  const size_t length = values.size() + 1 - kinds.size();
  for (size_t g = 0; g < kinds.size(); ++g) {
    if (g < other)
      indices.push_back(index(values[g]));
    else if (g == other)
      indices.push_back(length ? index(values[g]) : -1);
    else
      indices.push_back(index(values[g + length - 1]));
  }
  return indices;
}

/// The textual attributes of `op` by `names`: the op's own (moe ops) or
/// `extraAttrs` (upstream ops); an absent unit attribute is "false", an
/// absent optional one left out. Fails on a missing required or
/// default-valued one (ODS sets the defaults when the op is created).
FailureOr<DictionaryAttr>
recordedAttrs(Operation *op, const OdsOpNames &names,
              ArrayRef<std::pair<StringRef, std::string>> extraAttrs) {
  Builder b(op->getContext());
  SmallVector<NamedAttribute> attrs;
  const bool ownAttrs = names.name.starts_with("moe.");
  for (auto [attrName, kind] : names.attrs) {
    std::optional<std::string> text;
    if (!ownAttrs) {
      for (auto [extraName, extraText] : extraAttrs)
        if (extraName == attrName)
          text = extraText;
    } else if (Attribute value = op->getAttr(attrName)) {
      text = attrText(value);
    } else if (kind == OdsAttrKind::Unit) {
      text = "false";
    }
    if (!text && kind == OdsAttrKind::Optional)
      continue;
    if (!text)
      return op->emitOpError("has no attribute '")
             << attrName << "' to record for the float64 reference";
    attrs.push_back(b.getNamedAttr(attrName, b.getStringAttr(*text)));
  }
  return b.getDictionaryAttr(attrs);
}

ArrayAttr stringArray(Builder &b, ArrayRef<llvm::StringLiteral> names) {
  return b.getStrArrayAttr(SmallVector<StringRef>(names.begin(), names.end()));
}

} // namespace

const OdsOpNames *kernels::lookupOdsOpNames(StringRef name) {
  static const OdsOpNames kMoeOps[] = {
#include "moec/Dialect/Moe/IR/MoeOpNames.inc"
  };
  for (ArrayRef<OdsOpNames> table : {ArrayRef(kMoeOps), upstreamOpNames()})
    for (const OdsOpNames &names : table)
      if (names.name == name)
        return &names;
  return nullptr;
}

std::string kernels::integerList(ArrayRef<int64_t> values) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(values, os, ",");
  return text;
}

FailureOr<moe::RefOpAttr>
kernels::buildRefOp(Operation *op, function_ref<int32_t(Value)> bufferIndex,
                    ArrayRef<std::pair<StringRef, std::string>> extraAttrs) {
  StringRef name = op->getName().getStringRef();
  const OdsOpNames *names = lookupOdsOpNames(name);
  if (!names)
    return op->emitOpError("has no operand names for the float64 reference");
  auto index = [&](Value value) { return value ? bufferIndex(value) : -1; };
  SmallVector<int32_t> operands;
  if (std::optional<SmallVector<Value>> groups = unsegmentedOperands(op))
    operands = llvm::map_to_vector(*groups, index);
  else
    operands = groupIndices(op, op->getOperands(), "operandSegmentSizes",
                            names->operandKinds, index);
  SmallVector<int32_t> results = groupIndices(
      op, op->getResults(), "resultSegmentSizes", names->resultKinds, index);
  if (operands.size() != names->operands.size() ||
      results.size() != names->results.size())
    return op->emitOpError("has ")
           << operands.size() << " operand groups and " << results.size()
           << " results, its names " << names->operands.size() << " and "
           << names->results.size();
  FailureOr<DictionaryAttr> attrs = recordedAttrs(op, *names, extraAttrs);
  if (failed(attrs))
    return failure();
  Builder b(op->getContext());
  return moe::RefOpAttr::get(
      op->getContext(), name, *attrs, b.getDenseI32ArrayAttr(operands),
      stringArray(b, names->operands), b.getDenseI32ArrayAttr(results),
      stringArray(b, names->results));
}
