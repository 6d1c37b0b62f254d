//===- CheckInternal.h - Helpers shared by the checker's sources -*- C++ -*-===//
//
// Part of moec. Reading the textual attributes and the operand lists of
// Entry::refOps, following the compiler's conventions: attributes as text
// (decimal integers, %.17g floats, "true"/"false", enum keywords), absent
// attributes take their ODS default, absent optional operands are -1.
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

/// Typed attribute readers: the default when absent, std::invalid_argument
/// naming the attribute when the text does not parse.
int64_t intAttr(const rt::RefOp &op, const std::string &name,
                int64_t defaultValue);
/// A required integer attribute.
int64_t requiredIntAttr(const rt::RefOp &op, const std::string &name);
double floatAttr(const rt::RefOp &op, const std::string &name,
                 double defaultValue);
/// Unit attributes: present without text, "true" or "1" is true.
bool boolAttr(const rt::RefOp &op, const std::string &name);
std::string enumAttr(const rt::RefOp &op, const std::string &name,
                     const std::string &defaultValue);

/// moe.sort_by_expert's expert count: `num_experts` (the ODS name) or
/// `experts` (its assembly keyword).
int64_t sortExperts(const rt::RefOp &op);

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

/// Evaluates `in.op` with lib/Reference. Throws std::invalid_argument when
/// the reference rejects the operands or attributes, UnsupportedError for
/// ops and combinations the checker does not map.
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
