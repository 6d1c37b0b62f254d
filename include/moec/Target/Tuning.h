//===- Tuning.h - Candidate kernels for the autotuner -----------*- C++ -*-===//
//
// Part of moec. `moec tune` turns a module into a tuning bundle: for every
// distinct tunable op (by moe::tuningKey, after fusion) one function per
// candidate tile (moec::tuningCandidates), each holding only that op with
// the tile set. A manifest (JSON) says which entries belong to which op,
// which tile each one has and what each argument is, so that the GPU-side
// tuner (`python3 -m moec.compiler.tune`, runtime only) can make inputs,
// time the candidates at each row count and write the tuning cache
// (Dialect/Moe/Transforms/TuningCache.h) that `moec compile
// --tuning-cache` reads.
//
// Manifest:
//   {"moec_tuning_manifest": 1, "target": "sm_90a",
//    "ops": [{"key": "grouped_matmul ...", "function": "gather_qwen3",
//             "k": 8, "args": ["lhs", "rhs", "offsets", "gather_slots"],
//             "candidates": [{"entry": "tune0_0", "tile": "#moe.tile<...>",
//                             "default": true}, ...]}, ...]}
// In a candidate function the arguments whose leading size is the op's
// row count carry the symbol M; the tokens of a gathered lhs (or of the
// combine's weights) the symbol T (M = T * k).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TARGET_TUNING_H
#define MOEC_TARGET_TUNING_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/JSON.h"

#include <string>

namespace moec {

struct TuningCandidates {
  mlir::OwningOpRef<mlir::ModuleOp> module; ///< one function per candidate
  llvm::json::Object manifest;
  size_t numOps = 0;
};

/// The candidates of every tunable op of `module` (not modified) for
/// `target`. Fails (with a diagnostic) when fusion fails or nothing in the
/// module is tunable for the target.
mlir::FailureOr<TuningCandidates>
buildTuningCandidates(mlir::ModuleOp module, const std::string &target);

} // namespace moec

#endif // MOEC_TARGET_TUNING_H
