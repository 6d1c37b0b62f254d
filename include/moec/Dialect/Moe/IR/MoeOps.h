//===- MoeOps.h - Operations of the moe dialect -----------------*- C++ -*-===//
//
// Part of moec. Include this header to use the moe dialect.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEOPS_H
#define MOEC_DIALECT_MOE_IR_MOEOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "moec/Dialect/Moe/IR/MoeAttrs.h"
#include "moec/Dialect/Moe/IR/MoeDialect.h"

#define GET_OP_CLASSES
#include "moec/Dialect/Moe/IR/MoeOps.h.inc"

namespace moec::moe {

/// Why `op`'s reifyResultShapes fails (a dynamic result size its operands do
/// not determine), for a diagnostic; empty when it does not fail.
std::string unreifiableShapeReason(mlir::Operation *op);

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_IR_MOEOPS_H
