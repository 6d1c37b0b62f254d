//===- MoeAttrs.h - Attributes of the moe dialect ---------------*- C++ -*-===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEATTRS_H
#define MOEC_DIALECT_MOE_IR_MOEATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/LogicalResult.h"

namespace mlir {
class Operation;
} // namespace mlir

#include "moec/Dialect/Moe/IR/MoeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/IR/MoeAttrs.h.inc"

namespace moec::moe {

/// Name of the discardable attribute that carries an op's `#moe.tile`
/// configuration (see TileAttr). The dialect verifies that it is a TileAttr.
constexpr llvm::StringLiteral kTileAttrName = "moe.tile";

/// Name of the discardable attribute that carries an op's per-row-count
/// tiles: an array of TileBucketAttr in strictly increasing max_rows (see
/// TileBucketAttr). The dialect verifies it.
constexpr llvm::StringLiteral kTileBucketsAttrName = "moe.tile_buckets";

/// Name of the discardable attribute that carries the lowering strategy
/// and tile `moe-select-kernel` chose for an op (see KernelAttr).
constexpr llvm::StringLiteral kKernelAttrName = "moe.kernel";

/// Name of the module attribute that carries the kernel target (see
/// TargetAttr).
constexpr llvm::StringLiteral kTargetAttrName = "moe.target";

/// In the host code that convert-moe-to-kernels builds: the box (an
/// i64 array, innermost dimension first) on the `unrealized_conversion_cast`
/// of a buffer to `!llvm.ptr` that stands for a launch's TMA descriptor of
/// that buffer (the bundle's "tensor map" parameter).
constexpr llvm::StringLiteral kTensorMapBoxAttrName = "moe.tensor_map_box";

/// Checks the form of a discardable attribute that convert-moe-to-kernels
/// records for the bundle writer (the dialect's `discardableAttrs`, e.g.
/// `moe.launch` must be a #moe.launch); success for any other attribute.
llvm::LogicalResult verifyLoweredAttribute(mlir::Operation *op,
                                           mlir::NamedAttribute attr);

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_IR_MOEATTRS_H
