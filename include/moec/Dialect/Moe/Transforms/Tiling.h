//===- Tiling.h - Tile configurations of moe kernels ------------*- C++ -*-===//
//
// Part of moec. The cost model that picks a #moe.tile for an op. The
// `moe-tile` pass attaches its choice to ops (with tile options);
// moe-select-kernel and the lowering ask it directly
// for ops that reach it without a `moe.tile` attribute.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_TRANSFORMS_TILING_H
#define MOEC_DIALECT_MOE_TRANSFORMS_TILING_H

#include "moec/Dialect/Moe/IR/MoeAttrs.h"

namespace mlir {
class Operation;
} // namespace mlir

namespace moec::moe {

/// The cost model's tile for `op`, for naive kernels that compute one output
/// element per thread:
///
/// * `moe.grouped_matmul` (both modes) and `linalg.matmul`:
///   m = 16, n = 16, k = 32, threads = 256; when the output is known to be
///   at most 8 columns wide, n = 8 and threads = 128.
/// * `moe.router_topk`, `moe.sort_by_expert`: m = 1 row per block, 128
///   threads (n = k = 1).
/// * every other moe op (permute, unpermute and their gradients, swiglu,
///   swiglu_grad, quantize, dequantize, and ops added later): m = 1 row per
///   block, 256 threads.
///
/// Returns a null attribute for ops of other dialects. Needs the moe dialect
/// loaded in `op`'s context.
TileAttr defaultTileFor(mlir::Operation *op);

/// The `moe.tile` attribute of `op` if it has one, defaultTileFor(op)
/// otherwise.
TileAttr getTileOrDefault(mlir::Operation *op);

/// True for ops whose tile is a matmul tile (m×n outputs, k along the
/// reduction); the others' tiles are row tiles.
bool hasMatmulTile(mlir::Operation *op);

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_TRANSFORMS_TILING_H
