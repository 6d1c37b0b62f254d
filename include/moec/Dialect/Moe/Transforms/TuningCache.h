//===- TuningCache.h - Tiles measured by the autotuner ----------*- C++ -*-===//
//
// Part of moec. The autotuner (`moec tune` builds the candidates, `python3
// -m moec.compiler.tune` times them on the GPU) writes the fastest tile of
// each tunable op per row-count bucket to a JSON tuning cache:
//
//   {"moec_tuning_cache": 1,
//    "entries": [{"target": "sm_90a",
//                 "key": "grouped_matmul bf16xbf16->bf16 E=128 K=2048 ...",
//                 "max_rows": 4096,
//                 "tile": "#moe.tile<m = 128, n = 256, k = 64, ...>",
//                 "ms": 0.112, "default_ms": 0.118}, ...]}
//
// `max_rows` is the row count the tile was measured at; `ms` and
// `default_ms` (the cost model's tile, same run) are informational. The
// `moe-select-kernel` pass reads the cache and attaches the measured buckets as
// `moe.tile_buckets`; rows above the largest bucket, which the cache says
// nothing about, keep the cost model's `moe.tile` (on targets whose
// lowering builds no kernel per bucket, `moe.tile` is the largest bucket's
// tile).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_TRANSFORMS_TUNINGCACHE_H
#define MOEC_DIALECT_MOE_TRANSFORMS_TUNINGCACHE_H

#include "moec/Dialect/Moe/IR/MoeAttrs.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

#include <map>
#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
class Operation;
} // namespace mlir

namespace moec::moe {

/// The key under which the autotuner stores the tiles of `op`: its kind,
/// element types, shape and fused parts, e.g.
/// "grouped_matmul bf16xbf16->bf16 E=128 K=2048 N=1536 gather k=8 swiglu".
/// nullopt for ops it does not tune (everything but the forward
/// `moe.grouped_matmul`).
std::optional<std::string> tuningKey(mlir::Operation *op);

/// One measured bucket: the tile for launches of at most `maxRows` rows.
struct TunedTile {
  int64_t maxRows = 0;
  TileAttr tile;
};

class TuningCache {
public:
  /// Reads and checks the cache at `path`; problems (unreadable file, bad
  /// JSON, a missing or ill-typed field, a tile that does not parse, two
  /// tiles for one bucket) are reported through `emitError` naming the file
  /// and the entry.
  static mlir::FailureOr<TuningCache>
  load(llvm::StringRef path, mlir::MLIRContext *context,
       llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

  /// The buckets measured for `key` on `target`, by increasing max_rows;
  /// neighbours with the same tile merged into the larger bucket.
  llvm::SmallVector<TunedTile> lookup(llvm::StringRef target,
                                      llvm::StringRef key) const;

  /// Gives `op` its measured tiles on `target`. With `perBucketKernels`
  /// (the target's lowering builds a kernel per bucket: sm_90a) every
  /// bucket becomes a `moe.tile_bucket` and `moe.tile`, which serves the
  /// rows above the largest bucket, is left to the caller: the cache says
  /// nothing about them. Otherwise `moe.tile` is the largest bucket's tile
  /// and the others are `moe.tile_buckets` (such lowerings read only
  /// `moe.tile`). False when the cache has nothing for the op.
  bool apply(mlir::Operation *op, llvm::StringRef target,
             bool perBucketKernels) const;

  size_t numEntries() const { return count; }

private:
  std::map<std::pair<std::string, std::string>,
           llvm::SmallVector<TunedTile>>
      buckets;
  size_t count = 0;
};

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_TRANSFORMS_TUNINGCACHE_H
