//===- MoeLoweredAttrs.cpp - The lowering's interface to the bundle writer ===//
//
// Part of moec. #moe.size (its infix syntax, its verifier, its reverse
// Polish form for the runtime) and the verifier of the discardable
// attributes convert-moe-to-kernels records for the bundle writer.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace moec::moe;

//===----------------------------------------------------------------------===//
// SizeAttr
//===----------------------------------------------------------------------===//

namespace {

bool isLeaf(SizeKind kind) {
  return kind == SizeKind::constant || kind == SizeKind::symbol;
}

/// Infix spelling of a binary node; min and max are written as calls.
StringRef infixSpelling(SizeKind kind) {
  switch (kind) {
  case SizeKind::add:
    return "+";
  case SizeKind::sub:
    return "-";
  case SizeKind::mul:
    return "*";
  case SizeKind::floordiv:
    return "floordiv";
  case SizeKind::ceildiv:
    return "ceildiv";
  default:
    return "";
  }
}

/// Binding strength: sums below products below atoms (leaves, min, max).
int precedence(SizeKind kind) {
  switch (kind) {
  case SizeKind::add:
  case SizeKind::sub:
    return 1;
  case SizeKind::mul:
  case SizeKind::floordiv:
  case SizeKind::ceildiv:
    return 2;
  default:
    return 3;
  }
}

void printSize(SizeAttr size, raw_ostream &os) {
  SizeKind kind = size.getKind();
  if (kind == SizeKind::constant) {
    os << size.getValue();
    return;
  }
  if (kind == SizeKind::symbol) {
    os << 's' << size.getValue();
    return;
  }
  SizeAttr lhs = size.getOperands()[0], rhs = size.getOperands()[1];
  if (kind == SizeKind::min || kind == SizeKind::max) {
    os << stringifySizeKind(kind) << '(';
    printSize(lhs, os);
    os << ", ";
    printSize(rhs, os);
    os << ')';
    return;
  }
  // Left-associative: the right operand needs parentheses at equal
  // precedence too, so that the tree reads back unchanged.
  auto child = [&](SizeAttr operand, bool parenthesize) {
    if (parenthesize)
      os << '(';
    printSize(operand, os);
    if (parenthesize)
      os << ')';
  };
  child(lhs, precedence(lhs.getKind()) < precedence(kind));
  os << ' ' << infixSpelling(kind) << ' ';
  child(rhs, precedence(rhs.getKind()) <= precedence(kind));
}

/// Recursive descent over the infix syntax (see SizeAttr's description).
class SizeParser {
public:
  explicit SizeParser(AsmParser &parser) : parser(parser) {}

  FailureOr<SizeAttr> parseSum() {
    FailureOr<SizeAttr> lhs = parseProduct();
    while (succeeded(lhs)) {
      SizeKind kind;
      if (succeeded(parser.parseOptionalPlus()))
        kind = SizeKind::add;
      else if (succeeded(parser.parseOptionalMinus()))
        kind = SizeKind::sub;
      else
        break;
      FailureOr<SizeAttr> rhs = parseProduct();
      if (failed(rhs))
        return failure();
      lhs = SizeAttr::binary(kind, *lhs, *rhs);
    }
    return lhs;
  }

private:
  FailureOr<SizeAttr> parseProduct() {
    FailureOr<SizeAttr> lhs = parseAtom();
    while (succeeded(lhs)) {
      SizeKind kind;
      if (succeeded(parser.parseOptionalStar()))
        kind = SizeKind::mul;
      else if (succeeded(parser.parseOptionalKeyword("floordiv")))
        kind = SizeKind::floordiv;
      else if (succeeded(parser.parseOptionalKeyword("ceildiv")))
        kind = SizeKind::ceildiv;
      else
        break;
      FailureOr<SizeAttr> rhs = parseAtom();
      if (failed(rhs))
        return failure();
      lhs = SizeAttr::binary(kind, *lhs, *rhs);
    }
    return lhs;
  }

  FailureOr<SizeAttr> parseAtom() {
    MLIRContext *context = parser.getContext();
    int64_t constant;
    OptionalParseResult integer = parser.parseOptionalInteger(constant);
    if (integer.has_value()) {
      if (failed(*integer))
        return failure();
      if (constant < 0)
        return parser.emitError(parser.getCurrentLocation(),
                                "a size's constants are non-negative, got ")
               << constant;
      return SizeAttr::constant(context, constant);
    }
    if (succeeded(parser.parseOptionalLParen())) {
      FailureOr<SizeAttr> inner = parseSum();
      if (failed(inner) || parser.parseRParen())
        return failure();
      return inner;
    }
    SMLoc loc = parser.getCurrentLocation();
    StringRef keyword;
    if (failed(parser.parseOptionalKeyword(&keyword)))
      return parser.emitError(loc, "expected a size: an integer, a symbol "
                                   "s<i>, min(..), max(..) or (..)");
    if (keyword == "min" || keyword == "max") {
      FailureOr<SizeAttr> lhs, rhs;
      if (parser.parseLParen() || failed(lhs = parseSum()) ||
          parser.parseComma() || failed(rhs = parseSum()) ||
          parser.parseRParen())
        return failure();
      return SizeAttr::binary(keyword == "min" ? SizeKind::min : SizeKind::max,
                              *lhs, *rhs);
    }
    int64_t index;
    if (keyword.size() < 2 || keyword[0] != 's' ||
        keyword.drop_front().getAsInteger(10, index))
      return parser.emitError(loc, "expected a symbol s<i>, got '")
             << keyword << "'";
    return SizeAttr::symbol(context, index);
  }

  AsmParser &parser;
};

} // namespace

SizeAttr SizeAttr::constant(MLIRContext *context, int64_t value) {
  return get(context, SizeKind::constant, value, {});
}

SizeAttr SizeAttr::symbol(MLIRContext *context, int64_t index) {
  return get(context, SizeKind::symbol, index, {});
}

SizeAttr SizeAttr::binary(SizeKind kind, SizeAttr lhs, SizeAttr rhs) {
  assert(!isLeaf(kind) && "a binary node");
  return get(lhs.getContext(), kind, 0, {lhs, rhs});
}

LogicalResult SizeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               SizeKind kind, int64_t value,
                               ArrayRef<SizeAttr> operands) {
  if (isLeaf(kind)) {
    if (!operands.empty())
      return emitError() << "a size's " << stringifySizeKind(kind)
                         << " has no operands";
    if (value < 0)
      return emitError() << "a size's " << stringifySizeKind(kind)
                         << " must be non-negative, got " << value;
    return success();
  }
  if (operands.size() != 2 || value != 0)
    return emitError() << "a size's " << stringifySizeKind(kind)
                       << " has two operands and no value";
  return success();
}

LogicalResult RefOpAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef name, DictionaryAttr,
                                DenseI32ArrayAttr operands,
                                ArrayAttr operandNames,
                                DenseI32ArrayAttr results,
                                ArrayAttr resultNames) {
  // One non-empty, unique name per operand group and per result.
  auto check = [&](ArrayAttr names, size_t count,
                   StringRef what) -> LogicalResult {
    if (names.size() != count)
      return emitError() << "reference op '" << name << "' has "
                         << names.size() << " " << what << " names for "
                         << count << " " << what << "s";
    llvm::SmallDenseSet<StringRef> seen;
    for (Attribute n : names) {
      auto text = dyn_cast<StringAttr>(n);
      if (!text || text.empty() || !seen.insert(text.getValue()).second)
        return emitError() << "reference op '" << name << "': " << what
                           << " name " << n
                           << " is not a non-empty string unique in its list";
    }
    return success();
  };
  if (failed(check(operandNames, operands.size(), "operand")))
    return failure();
  return check(resultNames, results.size(), "result");
}

Attribute SizeAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<SizeAttr> size = SizeParser(parser).parseSum();
  if (failed(size) || parser.parseGreater())
    return {};
  return *size;
}

void SizeAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printSize(*this, printer.getStream());
  printer << '>';
}

std::string SizeAttr::toReversePolish() const {
  switch (getKind()) {
  case SizeKind::constant:
    return std::to_string(getValue());
  case SizeKind::symbol:
    return "s" + std::to_string(getValue());
  default:
    break;
  }
  // The runtime's spelling (Runtime/Expr.h).
  StringRef op;
  switch (getKind()) {
  case SizeKind::floordiv:
    op = "/";
    break;
  case SizeKind::ceildiv:
    op = "cdiv";
    break;
  case SizeKind::min:
  case SizeKind::max:
    op = stringifySizeKind(getKind());
    break;
  default:
    op = infixSpelling(getKind());
  }
  return getOperands()[0].toReversePolish() + " " +
         getOperands()[1].toReversePolish() + " " + op.str();
}

int64_t SizeAttr::maxSymbol() const {
  if (getKind() == SizeKind::symbol)
    return getValue();
  int64_t highest = -1;
  for (SizeAttr operand : getOperands())
    highest = std::max(highest, operand.maxSymbol());
  return highest;
}

//===----------------------------------------------------------------------===//
// Discardable attributes of lowered functions
//===----------------------------------------------------------------------===//

namespace {

/// Whether `attr` is an array whose elements are all `T`.
template <typename T> bool isArrayOf(Attribute attr) {
  auto array = dyn_cast<ArrayAttr>(attr);
  return array && llvm::all_of(array, llvm::IsaPred<T>);
}

/// The expected form of each discardable attribute of a lowered function,
/// by name; an empty string for attributes not recorded by the lowering.
StringRef loweredAttrForm(MoeDialect *dialect, StringAttr name,
                          Attribute value) {
  auto is = [&](auto helper) { return name == helper.getName(); };
  if (is(dialect->getEntryAttrHelper()) || is(dialect->getNameAttrHelper()) ||
      is(dialect->getSymAttrHelper()))
    return isa<StringAttr>(value) ? "" : "a string";
  if (is(dialect->getNumBuffersAttrHelper()) ||
      is(dialect->getBufferAttrHelper()))
    return isa<IntegerAttr>(value) && cast<IntegerAttr>(value).getInt() >= 0
               ? ""
               : "a non-negative integer";
  if (is(dialect->getSymbolsAttrHelper()))
    return isArrayOf<DimSymbolAttr>(value) ? "" : "an array of #moe.dim_symbol";
  if (is(dialect->getRefOpsAttrHelper()))
    return isArrayOf<RefOpAttr>(value) ? "" : "an array of #moe.ref_op";
  if (is(dialect->getDimsAttrHelper()))
    return isArrayOf<SizeAttr>(value) ? "" : "an array of #moe.size";
  if (is(dialect->getDimSymbolsAttrHelper()) ||
      is(dialect->getGridConstantArgsAttrHelper()))
    return isa<DenseI64ArrayAttr>(value) ? "" : "an i64 array";
  if (is(dialect->getOutputAttrHelper()))
    return isa<UnitAttr>(value) ? "" : "a unit attribute";
  if (is(dialect->getLaunchAttrHelper()))
    return isa<LaunchAttr>(value) ? "" : "a #moe.launch";
  return "";
}

} // namespace

LogicalResult moec::moe::verifyLoweredAttribute(Operation *op,
                                                NamedAttribute attr) {
  auto *dialect = op->getContext()->getLoadedDialect<MoeDialect>();
  StringRef form = loweredAttrForm(dialect, attr.getName(), attr.getValue());
  if (form.empty())
    return success();
  return op->emitError() << "attribute '" << attr.getName().getValue()
                         << "' must be " << form << ", got " << attr.getValue();
}
