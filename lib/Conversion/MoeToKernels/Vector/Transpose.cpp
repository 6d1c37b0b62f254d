//===- Transpose.cpp - Tiled transpose of 16-bit matrices on GPUs ---------===//
//
// Part of moec. linalg.transpose swapping the last two dimensions of a
// static 16-bit tensor whose last two sizes are multiples of 8: the LoRA
// adapters of a backward (moe-transpose-lora-adapters) and the layout
// changes of moe-decompose-lora-grad, tens to hundreds of MB at r = 64.
//
// A block of 256 threads takes a 128 x 128 tile. Each thread loads one
// 8 x 8 block (8 row pieces of 16 bytes; a warp's loads are 256-byte row
// pieces), transposes it in registers and writes its 8 output rows to
// workgroup memory; after a barrier the block writes the tile's output rows
// out as 256-byte row pieces. The scalar kernel's one thread per 8 x 8 block
// wrote each output row piece alone (16 of every 32 bytes of a sector):
// on the H200 its transposes of Qwen3.5's r = 64 adapters reached about
// 0.8 TB/s (bench/results/lora-runs-h200.md).
//
// The staged tile is 128 rows of 256 bytes with the 16-byte chunks of row
// R at chunk ^ (R / 8 % 8): the 8 threads of a quarter warp then write (and
// later read) 8 different bank groups.
//
//===----------------------------------------------------------------------===//

#include "VectorCommon.h"
#include "VectorKernels.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

constexpr int64_t kTile = 128;   ///< rows and columns of a block's tile
constexpr int64_t kPiece = 8;    ///< 16 bytes of 16-bit elements
constexpr int64_t kThreads = 256; ///< one 8 x 8 block each: 16 x 16 blocks
constexpr int64_t kPieces = kTile / kPiece;

/// The input's shape where the kernel applies (empty otherwise).
ArrayRef<int64_t> tiledShape(linalg::TransposeOp op) {
  auto type = cast<ShapedType>(op.getInput().getType());
  ArrayRef<int64_t> permutation = op.getPermutation();
  const int64_t rank = permutation.size();
  if (rank < 2 || !type.hasStaticShape() ||
      type.getElementTypeBitWidth() != 16 ||
      permutation[rank - 2] != rank - 1 || permutation[rank - 1] != rank - 2)
    return {};
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (permutation[d] != d)
      return {};
  ArrayRef<int64_t> shape = type.getShape();
  if (shape[rank - 2] % kPiece || shape[rank - 1] % kPiece)
    return {};
  return shape;
}

} // namespace

bool vectorized::matchTranspose(linalg::TransposeOp op, moe::TileAttr,
                                const TargetInfo &target) {
  // Workgroup memory and barriers: the GPU targets.
  return target.hasWarpShuffles() && !tiledShape(op).empty();
}

LogicalResult vectorized::emitTranspose(linalg::TransposeOp op,
                                        moe::TileAttr, BufferMap buffer,
                                        LoweringContext &ctx) {
  Value in = buffer(op.getInput()), out = buffer(op.getResult()[0]);
  ArrayRef<int64_t> shape = tiledShape(op);
  const int64_t rank = shape.size();
  const int64_t rows = shape[rank - 2], cols = shape[rank - 1];
  const int64_t rowTiles = (rows + kTile - 1) / kTile;
  const int64_t colTiles = (cols + kTile - 1) / kTile;
  int64_t batches = 1;
  for (int64_t d = 0; d + 2 < rank; ++d)
    batches *= shape[d];
  Type elem = cast<MemRefType>(in.getType()).getElementType();
  KernelBuilder &h = ctx.host();
  auto tile = moe::TileAttr::get(h.getContext(), 1, 1, 1, kThreads);
  Value grid = h.idx(batches * rowTiles * colTiles);
  const int64_t stagedBytes = kTile * kTile * 2;
  return ctx.launch(
      "tiles", grid, tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value staged =
            workgroupArray(b, workgroupBytes(b), {kTile, kTile}, elem);
        // Block: (batch, row tile, column tile), column tiles fastest.
        Value colTile = b.rem(block, b.idx(colTiles));
        Value rest = b.div(block, b.idx(colTiles));
        Value row0 = b.mul(b.rem(rest, b.idx(rowTiles)), b.idx(kTile));
        Value col0 = b.mul(colTile, b.idx(kTile));
        SmallVector<Value> batch;
        Value batchIndex = b.div(rest, b.idx(rowTiles));
        for (int64_t d = rank - 3; d >= 0; --d) {
          batch.insert(batch.begin(), b.rem(batchIndex, b.idx(shape[d])));
          batchIndex = b.div(batchIndex, b.idx(shape[d]));
        }
        auto at = [&](Value row, Value col) {
          SmallVector<Value> index(batch);
          index.append({row, col});
          return index;
        };
        // Staged row R's chunk c lies at chunk c ^ (R / 8 % 8).
        auto stagedColumn = [&](Value row, Value chunk) {
          Value swizzle = b.rem(b.div(row, b.idx(kPiece)), b.idx(8));
          return b.mul(arith::XOrIOp::create(b, chunk, swizzle),
                       b.idx(kPiece));
        };
        // This thread's 8 x 8 block: block row br, block column bc
        // (fastest, so a warp's loads run along the input rows).
        Value bc = b.rem(thread, b.idx(kPieces));
        Value br = b.div(thread, b.idx(kPieces));
        Value inRow = b.add(row0, b.mul(br, b.idx(kPiece)));
        Value inCol = b.add(col0, b.mul(bc, b.idx(kPiece)));
        // Blocks past the edge (a whole block is in or out: the sizes are
        // multiples of 8) load nothing and stage what is never stored.
        Value inside = b.land(b.ult(inRow, b.idx(rows)),
                              b.ult(inCol, b.idx(cols)));
        auto vecType = VectorType::get({kPiece}, elem);
        b.ifThen(inside, [&] {
          SmallVector<Value> loaded;
          for (int64_t i = 0; i < kPiece; ++i)
            loaded.push_back(
                b.loadVec(a[0], at(b.add(inRow, b.idx(i)), inCol), kPiece));
          for (int64_t j = 0; j < kPiece; ++j) {
            SmallVector<Value> column;
            for (int64_t i = 0; i < kPiece; ++i)
              column.push_back(vector::ExtractOp::create(b, loaded[i], j));
            // Output row col0 + 8 bc + j of the tile, columns 8 br...
            Value row = b.add(b.mul(bc, b.idx(kPiece)), b.idx(j));
            b.storeVec(vector::FromElementsOp::create(b, vecType, column),
                       staged, {row, stagedColumn(row, br)});
          }
        });
        gpu::BarrierOp::create(b);
        // The tile's output rows, 16 chunks each: a warp writes two
        // 256-byte row pieces per step.
        for (int64_t step = 0; step < kTile * kPieces / kThreads; ++step) {
          Value chunkId = b.add(thread, b.idx(step * kThreads));
          Value row = b.div(chunkId, b.idx(kPieces));
          Value chunk = b.rem(chunkId, b.idx(kPieces));
          Value outRow = b.add(col0, row);
          Value outCol = b.add(row0, b.mul(chunk, b.idx(kPiece)));
          b.ifThen(b.land(b.ult(outRow, b.idx(cols)),
                          b.ult(outCol, b.idx(rows))),
                   [&] {
                     b.storeVec(b.loadVec(staged,
                                          {row, stagedColumn(row, chunk)},
                                          kPiece),
                                a[1], at(outRow, outCol));
                   });
        }
      },
      stagedBytes);
}
