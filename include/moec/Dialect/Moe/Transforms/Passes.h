//===- Passes.h - Tensor-level transforms of the moe dialect ----*- C++ -*-===//
//
// Part of moec. The fusion passes (moe-fuse-permute, moe-fuse-epilogue,
// moe-fuse-combine) and the tiling pass (moe-tile), declared in Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_TRANSFORMS_PASSES_H
#define MOEC_DIALECT_MOE_TRANSFORMS_PASSES_H

#include "moec/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/Pass/Pass.h"

#include <memory>

namespace moec::moe {

#define GEN_PASS_DECL
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"

/// Registers every pass above with the global registry (moec-opt, the
/// pipeline parser): registerMoeTransformsPasses().
#define GEN_PASS_REGISTRATION
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_TRANSFORMS_PASSES_H
