//===- TuningSpace.h - Tiles the autotuner measures -------------*- C++ -*-===//
//
// Part of moec. The candidates of the autotuner come from the lowering that
// reads them: only it knows which tiles its kernels can build.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CONVERSION_TUNINGSPACE_H
#define MOEC_CONVERSION_TUNINGSPACE_H

#include "moec/Dialect/Moe/IR/MoeAttrs.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace mlir {
class Operation;
} // namespace mlir

namespace moec {

/// The tiles the autotuner measures for `op` when compiling for `target`
/// (e.g. "sm_90a"), the kernel's own choice first; empty when no kernel of
/// that target reads tuned tiles for `op`. For the sm90a wgmma grouped
/// matmul: n = 256 (outputs at least 256 wide) and 128, the deepest
/// pipeline that fits and one stage less, bands of 4, 8 and 16 m-tiles.
llvm::SmallVector<moe::TileAttr> tuningCandidates(mlir::Operation *op,
                                                  llvm::StringRef target);

} // namespace moec

#endif // MOEC_CONVERSION_TUNINGSPACE_H
