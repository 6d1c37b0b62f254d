//===- LaunchABI.h - Kernel parameters as the bundle builder sees them -*- C++ -*-===//
//
// Part of moec. convert-moe-to-kernels hands each kernel its buffers as
// memrefs and its TMA descriptors as placeholders in the host code; the
// bundle builder (lib/Target/EntryBuilder.cpp) turns both into runtime
// parameters. Both sides read the conventions from here.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CONVERSION_LAUNCHABI_H
#define MOEC_CONVERSION_LAUNCHABI_H

#include "mlir/IR/Value.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <optional>
#include <utility>

namespace moec {

/// The kernel parameters a memref argument of rank `rank` becomes once
/// lowered to LLVM: allocated and aligned pointers, offset, sizes, strides.
constexpr int64_t loweredMemrefParams(int64_t rank) { return 3 + 2 * rank; }

/// The buffer and box (innermost dimension first) of a tensor-map
/// placeholder, the `unrealized_conversion_cast` to `!llvm.ptr` carrying
/// `moe.tensor_map_box`; nullopt for any other value.
std::optional<std::pair<mlir::Value, llvm::ArrayRef<int64_t>>>
tensorMapOf(mlir::Value operand);

} // namespace moec

#endif // MOEC_CONVERSION_LAUNCHABI_H
