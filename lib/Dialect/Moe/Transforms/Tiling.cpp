//===- Tiling.cpp - Tile configurations of moe kernels --------------------===//
//
// Part of moec. The cost model behind `moe-tile` and the lowering's default.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/Transforms/Tiling.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace moec::moe;

namespace {

/// Width of the output a matmul-like op computes tiles of, or kDynamic.
int64_t matmulOutputWidth(Operation *op) {
  ShapedType outType;
  if (isa<GroupedMatmulOp, GroupedWeightGradOp>(op))
    outType = dyn_cast<ShapedType>(op->getResult(0).getType());
  else if (auto matmul = dyn_cast<linalg::MatmulOp>(op))
    outType = dyn_cast<ShapedType>(matmul.getDpsInits().front().getType());
  // The columns are the last dimension in every form: [M, N], [T, N] and
  // the weight gradient's [E, K, N].
  if (!outType || !outType.hasRank() || outType.getRank() < 2)
    return ShapedType::kDynamic;
  return outType.getDimSize(outType.getRank() - 1);
}

} // namespace

bool moec::moe::hasMatmulTile(Operation *op) {
  return isa<GroupedMatmulOp, GroupedWeightGradOp, linalg::MatmulOp>(op);
}

TileAttr moec::moe::defaultTileFor(Operation *op) {
  MLIRContext *ctx = op->getContext();
  if (hasMatmulTile(op)) {
    // One thread per output of a 16x16 tile. Narrow outputs would leave half
    // of such a tile idle: use 16x8 with as many threads.
    int64_t width = matmulOutputWidth(op);
    if (!ShapedType::isDynamic(width) && width <= 8)
      return TileAttr::get(ctx, /*m=*/16, /*n=*/8, /*k=*/32, /*threads=*/128);
    return TileAttr::get(ctx, /*m=*/16, /*n=*/16, /*k=*/32, /*threads=*/256);
  }
  if (!isa_and_nonnull<MoeDialect>(op->getDialect()))
    return {};
  // Routing reads one token's E logits, sorting one histogram per block:
  // 128 threads cover the usual expert counts.
  if (isa<RouterTopKOp, RouterTopKGradOp, SortByExpertOp>(op))
    return TileAttr::get(ctx, /*m=*/1, /*n=*/1, /*k=*/1, /*threads=*/128);
  // NF4 dequantization: 128 threads were 0.6 - 1.7 % faster than 256 on the
  // H200 in every run (Qwen3 and DeepSeek-V3 weights, two cards; 64: the
  // same as 128, 1024: 16 - 23 % slower).
  if (auto dequantize = dyn_cast<DequantizeOp>(op);
      dequantize && dequantize.getCodebook())
    return TileAttr::get(ctx, /*m=*/1, /*n=*/1, /*k=*/1, /*threads=*/128);
  // Row copies, activations and (de)quantization: a block per row, its
  // threads striding over the hidden columns.
  return TileAttr::get(ctx, /*m=*/1, /*n=*/1, /*k=*/1, /*threads=*/256);
}

TileAttr moec::moe::getTileOrDefault(Operation *op) {
  if (auto tile = op->getAttrOfType<TileAttr>(kTileAttrName))
    return tile;
  return defaultTileFor(op);
}
