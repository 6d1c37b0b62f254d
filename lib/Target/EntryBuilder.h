//===- EntryBuilder.h - Bundle entries from lowered functions ---*- C++ -*-===//
//
// Part of moec (internal to lib/Target).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_TARGET_ENTRYBUILDER_H
#define MOEC_LIB_TARGET_ENTRYBUILDER_H

#include "moec/Runtime/Bundle.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace moec {

/// The runtime's element type of an MLIR element type.
mlir::FailureOr<rt::ElemType> elemTypeOf(mlir::Type type, mlir::Location loc);

/// The entry (without binary and target) of a function lowered by
/// convert-moe-to-kernels.
mlir::FailureOr<rt::Entry> describeEntry(mlir::func::FuncOp func);

} // namespace moec

#endif // MOEC_LIB_TARGET_ENTRYBUILDER_H
