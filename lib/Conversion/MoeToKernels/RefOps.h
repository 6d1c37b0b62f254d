//===- RefOps.h - The float64 reference's record of an op ------*- C++ -*-===//
//
// Part of moec. What convert-moe-to-kernels records of each op it lowers for
// the float64 reference (#moe.ref_op): its operand groups and results by
// ODS name, every attribute as text.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_REFOPS_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_REFOPS_H

#include "moec/Dialect/Moe/IR/MoeAttrs.h"

#include "mlir/IR/Operation.h"

#include <string>
#include <utility>

namespace moec::kernels {

/// How an ODS attribute may be absent from an op.
enum class OdsAttrKind { Required, Default, Optional, Unit };

/// The ODS names of an op's operand groups, results and attributes, in ODS
/// order: generated from MoeOps.td for the moe ops (MoeOpNames.inc), given
/// in RefOps.cpp for the upstream ops the lowering accepts.
struct OdsOpNames {
  llvm::StringLiteral name;
  llvm::SmallVector<llvm::StringLiteral, 16> operands, results;
  llvm::SmallVector<std::pair<llvm::StringLiteral, OdsAttrKind>, 8> attrs;
  /// Each operand and result group's kind: 's' single, 'o' optional, 'v'
  /// variadic ("": all single).
  llvm::StringLiteral operandKinds = "", resultKinds = "";
};

/// The names of op `name` (e.g. "moe.permute"), nullptr for an op the
/// reference does not know.
const OdsOpNames *lookupOdsOpNames(llvm::StringRef name);

/// `values` comma-separated, as the reference records take lists.
std::string integerList(llvm::ArrayRef<int64_t> values);

/// The record of `op`: each operand group's and result's buffer index (by
/// `bufferIndex`, -1 for an absent one) with its ODS name, and the textual
/// value of every ODS attribute (moe ops: from the op, an absent unit
/// attribute "false"; upstream ops: `extraAttrs`, which the lowering
/// computes). Fails with an error on `op` where the op, its groups or an
/// attribute do not fit the names.
mlir::FailureOr<moe::RefOpAttr>
buildRefOp(mlir::Operation *op,
           llvm::function_ref<int32_t(mlir::Value)> bufferIndex,
           llvm::ArrayRef<std::pair<llvm::StringRef, std::string>> extraAttrs);

} // namespace moec::kernels

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_REFOPS_H
