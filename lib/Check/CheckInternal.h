//===- CheckInternal.h - Helpers shared by the checker's sources -*- C++ -*-===//
//
// Part of moec. Reading the textual attributes and the operand lists of
// Entry::refOps, following the compiler's conventions: attributes as text
// (decimal integers, %.17g floats, "true"/"false", enum keywords), every
// one recorded (ODS defaults included, an absent unit attribute "false"),
// except an absent optional attribute; operands and results by ODS name,
// an absent optional one -1. Nothing of ODS is restated here: a missing
// attribute or operand is an error naming it.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CHECK_CHECKINTERNAL_H
#define MOEC_LIB_CHECK_CHECKINTERNAL_H

#include "moec/Reference/MoeReference.h"
#include "moec/Runtime/Bundle.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace moec::check::detail {

/// A combination of op and attributes the checker cannot evaluate. Caught
/// and turned into an Unsupported status.
struct UnsupportedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The attribute's text, or nullptr when absent.
const std::string *findAttr(const rt::RefOp &op, const std::string &name);

/// Typed attribute readers: std::invalid_argument naming the attribute when
/// it is absent ("<op> lacks its attribute '<name>'") or its text does not
/// parse.
int64_t intAttr(const rt::RefOp &op, const std::string &name);
/// An OptionalAttr: nullopt when absent.
std::optional<int64_t> optionalIntAttr(const rt::RefOp &op,
                                       const std::string &name);
double floatAttr(const rt::RefOp &op, const std::string &name);
/// Unit and bool attributes: "true" or "false".
bool boolAttr(const rt::RefOp &op, const std::string &name);
/// An enum attribute's keyword.
const std::string &enumAttr(const rt::RefOp &op, const std::string &name);

/// "[8, 128]".
inline std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Buffer index of operand / result `i`, -1 when absent or past the end.
inline int32_t operandAt(const rt::RefOp &op, size_t i) {
  return i < op.operands.size() ? op.operands[i] : -1;
}
inline int32_t resultAt(const rt::RefOp &op, size_t i) {
  return i < op.results.size() ? op.results[i] : -1;
}

/// The position of the operand group / result named `name` in the record,
/// nullopt when it has none of that name.
std::optional<size_t> operandSlot(const rt::RefOp &op, const std::string &name);
std::optional<size_t> resultSlot(const rt::RefOp &op, const std::string &name);

/// Buffer index of the operand group / result named `name`, -1 when absent.
inline int32_t operandNamed(const rt::RefOp &op, const std::string &name) {
  std::optional<size_t> slot = operandSlot(op, name);
  return slot ? operandAt(op, *slot) : -1;
}
inline int32_t resultNamed(const rt::RefOp &op, const std::string &name) {
  std::optional<size_t> slot = resultSlot(op, name);
  return slot ? resultAt(op, *slot) : -1;
}

/// The ODS name of operand group `i`, "" past the end.
inline const std::string &operandName(const rt::RefOp &op, size_t i) {
  static const std::string none;
  return i < op.operandNames.size() ? op.operandNames[i] : none;
}

//===----------------------------------------------------------------------===//
// Op semantics (OpEval.cpp)
//===----------------------------------------------------------------------===//

/// One op to evaluate: its operands as float64 tensors (integers exactly),
/// nullptr for absent optional operands, and the entry's buffer shapes (for
/// result sizes the operands do not determine, e.g. unpermute's T).
struct OpInputs {
  const rt::Entry *entry = nullptr;
  const rt::RefOp *op = nullptr;
  const std::vector<std::vector<int64_t>> *shapes = nullptr;
  std::vector<const ref::DTensor *> operands;
};

/// One value per slot of op.results; nullopt where the op produces none (an
/// absent optional result).
using OpResults = std::vector<std::optional<ref::DTensor>>;

/// Evaluates `in.op` with lib/Reference: the evaluator of its name reads
/// the operands and attributes by ODS name and names its results, which
/// land in the slots of op.results of those names. Throws
/// std::invalid_argument when the reference rejects the operands or
/// attributes or the record lacks one it needs, UnsupportedError for ops
/// and combinations the checker does not map.
OpResults evaluate(const OpInputs &in);

/// The scoring options of moe.router_topk and moe.router_topk_grad (scoring,
/// order, renormalize, scaling_factor) from their attributes.
ref::RouterOptions routerScoreOptions(const rt::RefOp &op);

/// moe.router_topk's options from its attributes and optional bias.
ref::RouterOptions routerOptions(const rt::RefOp &op, const ref::DTensor *bias);

/// Where the kernel's router ids differ from the reference's only between
/// experts whose selection values are within `tolerance` (relative to the
/// row's largest |value|), adopts the kernel's ids in `refIds` and the
/// weights that go with them in `refWeights`. Returns the rows excused.
int64_t excuseRouterTies(const rt::RefOp &op, const ref::DTensor &logits,
                         const ref::DTensor *bias,
                         const ref::DTensor &kernelIds, double tolerance,
                         ref::DTensor &refWeights, ref::DTensor &refIds);

} // namespace moec::check::detail

#endif // MOEC_LIB_CHECK_CHECKINTERNAL_H
