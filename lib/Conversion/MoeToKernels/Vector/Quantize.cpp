//===- Quantize.cpp - Vectorized FP8 quantize -----------------------------===//
//
// Part of moec. Row-wise FP8 groups stay in registers between the amax and
// the scaling, one thread per (row, group). Column-wise groups with warp
// shuffles hold a 128-row scale block in a block of 8 warps (workgroup
// memory, barriers); elsewhere they are read straight down the columns
// twice, the second time from L2. The transposed layout (the FP8 weight
// gradient's operands) leaves the block kernel's workgroup tile in runs of
// 16 rows of a column per thread, whole 128-byte rows per warp store
// (cp.async targets; elsewhere the scalar kernel). (Row-wise
// groups with warp shuffles take the warp kernel of Warp/QuantizeRowwise.cpp
// where it applies.)
//
//===----------------------------------------------------------------------===//

#include "VectorCommon.h"
#include "VectorKernels.h"

#include "../Warp/WarpOps.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// Elements per chunk of the row-wise kernel, or 0 where it does not apply.
int64_t rowwiseWidth(moe::QuantizeOp op) {
  Type inType = elementType(op.getInput());
  int64_t group = op.getGroupSize();
  int64_t width = chunkWidth(staticDim(op.getInput(), 1), {inType});
  if (!width || !quantizable(inType) || group % width ||
      group > kMaxGroupRegisters)
    return 0;
  return width;
}

/// Columns per thread of the column-wise kernels (4 bytes of a row: two
/// bf16 columns, one f32), or 0 where they do not apply.
int64_t colwiseWidth(moe::QuantizeOp op) {
  Type inType = elementType(op.getInput());
  int64_t group = op.getGroupSize();
  int64_t width = inType.isF32() ? 1 : 2;
  std::optional<int64_t> cols = staticDim(op.getInput(), 1);
  if (!quantizable(inType) || !cols || *cols % width ||
      group % std::min<int64_t>(group, 16))
    return 0;
  return width;
}

LogicalResult emitQuantizeRowwise(moe::QuantizeOp op, moe::TileAttr tile,
                                  BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  std::optional<int64_t> cols = staticDim(in, 1);
  int64_t width = rowwiseWidth(op);
  int64_t perGroup = group / width;
  int64_t groupsPerRow = (*cols + group - 1) / group;
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();
  // One thread per (row, group): the group's chunks stay in registers
  // between the amax and the scaling.
  return launchPerItem(
      ctx, "rowwise_vec", h.mul(ctx.sizes(in)[0], h.idx(groupsPerRow)), tile,
      {in, data, scales}, [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(groupsPerRow));
        Value grp = b.rem(id, b.idx(groupsPerRow));
        Value c0 = b.mul(grp, b.idx(group));
        // A short last group re-reads its own last chunk in place of the
        // missing ones: the amax is unchanged and the stores skip them.
        Value lastChunk = b.idx(*cols - width);
        SmallVector<Value> chunks, columns;
        Value amaxBits;
        for (int64_t i = 0; i < perGroup; ++i) {
          columns.push_back(b.add(c0, b.idx(i * width)));
          chunks.push_back(
              b.loadVec(a[0], {r, b.minIdx(columns.back(), lastChunk)}, width));
          Value m = magnitudeBits(b, chunks.back());
          amaxBits = i ? arith::MaxUIOp::create(b, amaxBits, m) : m;
        }
        Value amax = b.f32(0);
        for (int64_t i = 0; i < width; ++i)
          amax = b.fmax(amax, magnitudeToF32(b, amaxBits, i, inType));
        Value scale = groupScale(b, amax, fp8Max, pow2);
        b.storeF(scale, a[2], {r, grp});
        auto f32x = VectorType::get({width}, b.getF32Type());
        Value inverse =
            vector::BroadcastOp::create(b, f32x, b.fdiv(b.f32(1), scale));
        for (int64_t i = 0; i < perGroup; ++i) {
          auto store = [&, i] {
            Value x = chunks[i];
            if (!inType.isF32())
              x = arith::ExtFOp::create(b, f32x, x);
            b.storeVecF32(arith::MulFOp::create(b, x, inverse), a[1],
                          {r, columns[i]});
          };
          if (i * width < *cols % group || *cols % group == 0)
            store(); // present in every group
          else
            b.ifThen(b.ult(columns[i], b.idx(*cols)), store);
        }
      });
}

// A warp per row piece and 8 warps: on the H200 this ran 1.4-2x the speed
// of 256-byte pieces (half-warps) and of 512 or 1024 threads (fewer
// registers per thread, slower all the same).
constexpr int64_t kColwiseThreads = 256, kColwiseWarps = kColwiseThreads / 32;
/// Chunks a thread of the column-wise block kernel copies or keeps.
constexpr int64_t kColwiseMaxSteps = 16;

/// Whether the column-wise block kernel applies (given warp shuffles).
bool colwiseBlocksApply(moe::QuantizeOp op) {
  int64_t group = op.getGroupSize();
  int64_t width = KernelBuilder::vectorWidth(elementType(op.getInput()));
  std::optional<int64_t> cols = staticDim(op.getInput(), 1);
  return width && cols && *cols % width == 0 && group % kColwiseWarps == 0 &&
         group / kColwiseWarps <= kColwiseMaxSteps;
}

/// The sizes of emitColwiseBlocks' kernel: a block of 8 warps per (scale
/// block of `group` rows, `tileCols` columns), `steps` rows per thread.
struct ColwiseBlockShape {
  Type inType;
  int64_t group, width, cols, steps, tileCols, colTiles, experts;
  int64_t elemBytes, partialBytes;
  double fp8Max;
  bool pow2, async;
  /// moe.quantize {transpose}: the data goes out as [K, group * blocks]
  /// rows from the workgroup tile (async only), one column per thread.
  bool transposed;
};

/// Rows per store of the transposed data: 16 FP8 bytes.
constexpr int64_t kTransposedChunk = 16;

/// Where the transposed kernel keeps 16-byte chunk `chunk` of tile row
/// `row`: XOR-swizzled by the row's run of kTransposedChunk rows (mod 8),
/// so that the 8 lanes reading one chunk index down 8 runs hit 8 different
/// 16-byte bank groups.
Value transposedChunk(KernelBuilder &b, Value chunk, Value row) {
  Value run = b.rem(b.div(row, b.idx(kTransposedChunk)), b.idx(8));
  return arith::XOrIOp::create(b, chunk, run);
}

/// The rows one thread of a column-wise block reads: their indices (past
/// the block's last row: that row again), whether each is in the block, and
/// its chunks (in registers, or in workgroup memory at `tileRows` when
/// async).
struct ColwiseChunks {
  SmallVector<Value> x, rows, inBlock, tileRows;
};

/// Reads a thread's chunks of rows [first, first + count) at column c: into
/// registers, or by cp.async into the workgroup tile after the partial
/// amaxes (then waits for them).
ColwiseChunks loadColwiseChunks(KernelBuilder &b, const ColwiseBlockShape &s,
                                Value in, Value smem, Value first,
                                Value count, Value lastRow, Value rowThread,
                                Value c, Value local, Value lane) {
  ColwiseChunks chunks;
  Value inBase = addressOf(b, in);
  Value tileBase = b.add(addressOf(b, smem), b.idx(s.partialBytes));
  auto cacheGlobal = NVVM::LoadCacheModifierKindAttr::get(
      b.getContext(), NVVM::LoadCacheModifierKind::CG);
  for (int64_t i = 0; i < s.steps; ++i) {
    Value offset = b.add(b.idx(i * kColwiseWarps), rowThread);
    chunks.inBlock.push_back(b.ult(offset, count));
    chunks.rows.push_back(b.minIdx(b.add(first, offset), lastRow));
    chunks.tileRows.push_back(offset);
    if (!s.async) {
      chunks.x.push_back(b.loadVec(in, {chunks.rows.back(), c}, s.width));
      continue;
    }
    Value src = b.add(
        inBase, b.mul(b.add(b.mul(chunks.rows.back(), b.idx(s.cols)), c),
                      b.idx(s.elemBytes)));
    // Transposed: the tile's chunk `lane` of row r sits at lane ^ run(r)
    // (transposedChunk).
    Value at = s.transposed ? b.mul(transposedChunk(b, lane, offset),
                                    b.idx(s.width))
                            : local;
    Value dst = b.add(
        tileBase, b.mul(b.add(b.mul(offset, b.idx(s.tileCols)), at),
                        b.idx(s.elemBytes)));
    NVVM::CpAsyncOp::create(b, pointerAt(b, dst, 3), pointerAt(b, src, 1),
                            b.getI32IntegerAttr(16), cacheGlobal, b.i32(16));
  }
  if (s.async) {
    NVVM::CpAsyncCommitGroupOp::create(b);
    NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(0));
  }
  return chunks;
}

/// The block's column scales and their inverses from each thread's amax
/// bits: the 8 warps' amaxes meet in workgroup memory (`partials`).
std::pair<SmallVector<Value>, SmallVector<Value>>
exchangeColwiseScales(KernelBuilder &b, const ColwiseBlockShape &s,
                      Value amaxBits, Value partials, Value rowThread,
                      Value local) {
  SmallVector<Value> amax;
  for (int64_t j = 0; j < s.width; ++j)
    amax.push_back(magnitudeToF32(b, amaxBits, j, s.inType));
  b.storeVecF(amax, partials, {rowThread, local});
  gpu::BarrierOp::create(b);
  SmallVector<Value> scale, inverse;
  for (int64_t w = 0; w < kColwiseWarps; ++w) {
    SmallVector<Value> other = b.loadVecF(partials, {b.idx(w), local}, s.width);
    for (int64_t j = 0; j < s.width; ++j)
      amax[j] = w ? b.fmax(amax[j], other[j]) : other[j];
  }
  for (int64_t j = 0; j < s.width; ++j) {
    scale.push_back(groupScale(b, amax[j], s.fp8Max, s.pow2));
    inverse.push_back(b.fdiv(b.f32(1), scale.back()));
  }
  return {scale, inverse};
}

/// moe.quantize {colwise, transpose}: scale block `blk` of `count` rows
/// (0 for an unused block: scale 1, zeros) and tile column tile
/// `colTile`, its rows copied into `dataTile` (every thread's copies
/// visible). Thread t takes 16-byte chunk 4 * warp + lane / 8 of the tile
/// columns and run lane % 8 of 16 rows (runs past the block's group
/// idle): it holds the run in registers, the column amaxes meet over the 8
/// lanes of its chunk by shuffles, and each of its columns leaves as one
/// 16-byte store, so that a warp writes 4 whole 128-byte rows of the
/// [K, group * blocks] data per store (the column-per-thread version wrote
/// 32 half sectors, at about 2 TB/s on the H200).
void storeTransposedBlock(KernelBuilder &b, ValueRange a,
                          const ColwiseBlockShape &s, Value dataTile,
                          Value blk, Value count, Value thread,
                          Value colTile) {
  constexpr int64_t runsPerChunk = 8;
  const int64_t runs = s.group / kTransposedChunk;
  Value lane = b.rem(thread, b.idx(32));
  Value chunk = b.add(b.mul(b.div(thread, b.idx(32)), b.idx(32 / runsPerChunk)),
                      b.div(lane, b.idx(runsPerChunk)));
  Value run = b.rem(lane, b.idx(runsPerChunk));
  Value active = b.ult(run, b.idx(runs));
  // Idle runs read run 0's rows (in the tile) and count as zero.
  Value firstRow = b.select(active, b.mul(run, b.idx(kTransposedChunk)),
                            b.idx(0));
  Value column = b.add(b.mul(colTile, b.idx(s.tileCols)),
                       b.mul(chunk, b.idx(s.width)));
  auto bitsType = VectorType::get(
      {s.width}, b.getIntegerType(s.inType.getIntOrFloatBitWidth()));
  Value at = b.mul(transposedChunk(b, chunk, firstRow), b.idx(s.width));
  SmallVector<Value> x, valid;
  Value amaxBits = b.zeroVec(bitsType);
  for (int64_t i = 0; i < kTransposedChunk; ++i) {
    Value row = b.add(firstRow, b.idx(i));
    x.push_back(b.loadVec(dataTile, {row, at}, s.width));
    valid.push_back(b.land(active, b.ult(row, count)));
    amaxBits = arith::MaxUIOp::create(
        b, amaxBits,
        b.select(valid.back(), magnitudeBits(b, x.back()),
                 b.zeroVec(bitsType)));
  }
  SmallVector<Value> scale, inverse;
  for (int64_t j = 0; j < s.width; ++j) {
    Value amax = magnitudeToF32(b, amaxBits, j, s.inType);
    for (int64_t mask = 1; mask < runsPerChunk; mask *= 2)
      amax = b.fmax(amax, warp::shuffleXor(b, amax, mask));
    scale.push_back(groupScale(b, amax, s.fp8Max, s.pow2));
    inverse.push_back(b.fdiv(b.f32(1), scale.back()));
  }
  // Columns come in whole chunks (K % width == 0).
  Value columnActive = b.ult(column, b.idx(s.cols));
  b.ifThen(b.land(columnActive, b.eq(run, b.idx(0))),
           [&] { b.storeVecF(scale, a[2], {blk, column}); });
  auto runType = VectorType::get({kTransposedChunk}, b.getF32Type());
  Value dataColumn = b.add(b.mul(blk, b.idx(s.group)), firstRow);
  b.ifThen(b.land(columnActive, active), [&] {
    for (int64_t j = 0; j < s.width; ++j) {
      SmallVector<Value> q;
      for (int64_t i = 0; i < kTransposedChunk; ++i) {
        Value xi = vector::ExtractOp::create(b, x[i], ArrayRef<int64_t>{j});
        if (!s.inType.isF32())
          xi = arith::ExtFOp::create(b, b.getF32Type(), xi);
        q.push_back(b.select(valid[i], b.fmul(xi, inverse[j]), b.f32(0)));
      }
      b.storeVecF32(vector::FromElementsOp::create(b, runType, q), a[1],
                    {b.add(column, b.idx(j)), dataColumn});
    }
  });
}

/// A used scale block (expert e's block blk): amax, scales, scaled data.
void emitColwiseScaleBlock(KernelBuilder &b, ValueRange a,
                           const ColwiseBlockShape &s, Value smem,
                           Value partials, Value dataTile, Value e, Value blk,
                           Value lane, Value rowThread, Value c,
                           Value colActive) {
  auto f32x = VectorType::get({s.width}, b.getF32Type());
  auto [first, last] = scaleBlockRows(b, a[3], a[4], e, blk, s.group);
  // Every block holds at least one row; rows past `last` read row last-1
  // again and count as zero.
  Value count = b.sub(last, first), lastRow = b.sub(last, b.idx(1));
  auto bitsType = VectorType::get(
      {s.width}, b.getIntegerType(s.inType.getIntOrFloatBitWidth()));
  Value amaxBits = b.zeroVec(bitsType);
  Value local = b.mul(lane, b.idx(s.width));
  ColwiseChunks chunks = loadColwiseChunks(b, s, a[0], smem, first, count,
                                           lastRow, rowThread, c, local, lane);
  // A thread reads back only the chunks it copied itself.
  auto chunkAt = [&](int64_t i) {
    return s.async ? b.loadVec(dataTile, {chunks.tileRows[i], local}, s.width)
                   : chunks.x[i];
  };
  for (int64_t i = 0; i < s.steps; ++i)
    amaxBits = arith::MaxUIOp::create(
        b, amaxBits,
        b.select(chunks.inBlock[i], magnitudeBits(b, chunkAt(i)),
                 b.zeroVec(bitsType)));
  auto [scale, inverse] =
      exchangeColwiseScales(b, s, amaxBits, partials, rowThread, local);
  b.ifThen(b.land(colActive, b.eq(rowThread, b.idx(0))),
           [&, scale = scale] { b.storeVecF(scale, a[2], {blk, c}); });
  Value inverseVec = vector::FromElementsOp::create(b, f32x, inverse);
  for (int64_t i = 0; i < s.steps; ++i)
    b.ifThen(b.land(colActive, chunks.inBlock[i]), [&] {
      Value xi = chunkAt(i);
      Value y = s.inType.isF32() ? xi : arith::ExtFOp::create(b, f32x, xi);
      b.storeVecF32(arith::MulFOp::create(b, y, inverseVec), a[1],
                    {chunks.rows[i], c});
    });
}

/// Column-wise FP8 groups on GPUs (workgroup memory and barriers): a block
/// of 8 warps per (scale block, 256 bf16 / 128 f32 columns). Each warp reads
/// a 512-byte piece of a row per step, the 8 warps step down the block's
/// rows together, and the block's input is read once (the per-thread kernel
/// below reads it twice): into workgroup memory by cp.async on NVVM, into
/// registers elsewhere. The warps' column amaxes meet in a workgroup-memory
/// table; the transposed layout's (cp.async targets) over each chunk's
/// lanes (storeTransposedBlock).
LogicalResult emitColwiseBlocks(moe::QuantizeOp op, Value blockEnds,
                                BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales()), offsets = buffer(op.getOffsets());
  constexpr int64_t threads = kColwiseThreads, lanesPerRow = 32;
  constexpr int64_t warps = kColwiseWarps, rowsPerStep = warps;
  ColwiseBlockShape s;
  s.group = op.getGroupSize();
  s.inType = elementType(in);
  s.width = KernelBuilder::vectorWidth(s.inType);
  s.cols = *staticDim(in, 1);
  s.steps = s.group / rowsPerStep;
  s.tileCols = lanesPerRow * s.width;
  s.colTiles = (s.cols + s.tileCols - 1) / s.tileCols;
  s.experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  s.fp8Max = fp8MaxOf(elementType(data));
  s.pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();
  auto tile = moe::TileAttr::get(h.getContext(), 1, 1, 1, threads);
  Value grid = h.mul(ctx.sizes(scales)[0], h.idx(s.colTiles));
  // NVVM: the block's input goes to workgroup memory with cp.async, so that
  // it takes no registers (80 instead of 180 per thread) and three blocks
  // share an SM, one's loads in flight while another scales and stores: on
  // the H200 56-65% -> 89-99% of copy bandwidth at DeepSeek-V3 shapes.
  // Elsewhere each thread keeps its chunks in registers.
  s.async = ctx.target().hasAsyncCopy();
  s.transposed = op.getTranspose();
  s.elemBytes = s.inType.getIntOrFloatBitWidth() / 8;
  s.partialBytes = s.transposed ? 0 : warps * s.tileCols * 4;
  int64_t tileBytes = s.async ? s.group * s.tileCols * s.elemBytes : 0;
  return ctx.launch(
      "colwise_block", grid, tile, {in, data, scales, offsets, blockEnds},
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value smem = workgroupBytes(b);
        Value dataTile;
        if (s.async)
          dataTile = workgroupArray(b, smem, {s.group, s.tileCols}, s.inType,
                                    s.partialBytes);
        Value blk = b.div(block, b.idx(s.colTiles));
        Value lane = b.rem(thread, b.idx(lanesPerRow));
        Value rowThread = b.div(thread, b.idx(lanesPerRow));
        Value col = b.mul(
            b.add(b.mul(b.rem(block, b.idx(s.colTiles)), b.idx(lanesPerRow)),
                  lane),
            b.idx(s.width));
        // Lanes past the last column work on the last chunk, unstored.
        Value colActive = b.ult(col, b.idx(s.cols));
        Value c = b.minIdx(col, b.idx(s.cols - s.width));
        // The expert of block `blk` (uniform over the block, so the
        // barrier below is reached by all threads or none).
        Value e = firstGreater(b, a[4], s.experts, blk);
        Value used = b.ult(e, b.idx(s.experts));
        if (s.transposed) {
          // An unused trailing block counts no rows: scale 1 and zeros (the
          // blocks cover the whole [K, group * blocks] data, so no other
          // kernel zeroes it).
          auto [first, last] = scaleBlockRows(
              b, a[3], a[4], b.minIdx(e, b.idx(s.experts - 1)), blk, s.group);
          Value count = b.select(used, b.sub(last, first), b.idx(0));
          b.ifThen(used, [&, first = first, last = last] {
            loadColwiseChunks(b, s, a[0], smem, first, count,
                              b.sub(last, b.idx(1)), rowThread, c,
                              b.mul(lane, b.idx(s.width)), lane);
          });
          // Every thread's copies, for the other threads' reads.
          gpu::BarrierOp::create(b);
          storeTransposedBlock(b, a, s, dataTile, blk, count, thread,
                               b.rem(block, b.idx(s.colTiles)));
          return;
        }
        Value partials =
            workgroupArray(b, smem, {warps, s.tileCols}, b.getF32Type());
        b.ifThen(used, [&] {
          emitColwiseScaleBlock(b, a, s, smem, partials, dataTile, e, blk,
                                lane, rowThread, c, colActive);
        });
        // Unused trailing blocks hold scale 1.
        b.ifThen(b.land(b.land(b.eq(e, b.idx(s.experts)), colActive),
                        b.eq(rowThread, b.idx(0))),
                 [&] {
                   SmallVector<Value> ones(s.width, b.f32(1));
                   b.storeVecF(ones, a[2], {blk, c});
                 });
      },
      /*dynamicSharedBytes=*/s.partialBytes + tileBytes);
}

LogicalResult emitQuantizeColwise(moe::QuantizeOp op, moe::TileAttr tile,
                                  BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales()), offsets = buffer(op.getOffsets());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  int64_t width = colwiseWidth(op);
  std::optional<int64_t> cols = staticDim(in, 1);
  int64_t pairs = *cols / width;
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();

  Value blockEnds = ctx.allocTemp(MemRefType::get({experts}, h.getI32Type()),
                                  {h.idx(experts)});
  if (failed(emitBlockEnds(ctx, tile, offsets, blockEnds, group)))
    return failure();

  // Rows at or past the last group end quantize to 0: one thread per row,
  // which leaves at once unless its row is one of them. (The transposed
  // layout has no such rows: the block kernel writes all of it.)
  int64_t tailWidth = KernelBuilder::vectorWidth(fp8);
  bool tailVector = *cols % tailWidth == 0;
  if (!op.getTranspose() && failed(launchPerItem(
          ctx, "tail", ctx.sizes(data)[0], tile, {offsets, data},
          [&](KernelBuilder &b, ValueRange a, Value r) {
            Value end = b.loadIdx(a[0], {b.idx(experts - 1)});
            b.ifThen(b.ule(end, r), [&] {
              if (!tailVector)
                return b.loop(b.idx(0), b.idx(*cols), [&](Value c) {
                  b.storeF(b.f32(0), a[1], {r, c});
                });
              Value zeros =
                  b.zeroVec(VectorType::get({tailWidth}, elementType(a[1])));
              b.loop(b.idx(0), b.idx(*cols / tailWidth), [&](Value i) {
                b.storeVec(zeros, a[1], {r, b.mul(i, b.idx(tailWidth))});
              });
            });
          })))
    return failure();

  SmallVector<Value> scaleSizes = ctx.sizes(scales);
  if (op.getTranspose() ||
      (ctx.target().hasWarpShuffles() && colwiseBlocksApply(op)))
    return emitColwiseBlocks(op, blockEnds, buffer, ctx);
  return launchPerItem(
      ctx, "colwise_vec", h.mul(scaleSizes[0], h.idx(pairs)), tile,
      {in, data, scales, offsets, blockEnds},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value blk = b.div(id, b.idx(pairs));
        Value c = b.mul(b.rem(id, b.idx(pairs)), b.idx(width));
        auto f32x = VectorType::get({width}, b.getF32Type());
        // The expert of block `blk`: the first whose block end exceeds it.
        Value e = firstGreater(b, a[4], experts, blk);
        b.ifThen(b.ult(e, b.idx(experts)), [&] {
          auto [first, last] = scaleBlockRows(b, a[3], a[4], e, blk, group);
          // Two passes over the block's rows, amax then scaling, with no
          // branches so that each pass has all its loads in flight; the
          // second pass finds the block in L2, read microseconds before.
          // Rows past `last` (a short last block) are row last-1 again: they
          // count as zero in the amax and store row last-1's own value.
          Value count = b.sub(last, first);
          Value lastRow = b.sub(last, b.idx(1));
          // Rows in steps of `unroll`: enough loads in flight per thread
          // without the register pressure of the whole group.
          int64_t unroll = std::min<int64_t>(group, 16);
          auto rowAt = [&](Value base, int64_t i) {
            return b.minIdx(b.add(base, b.idx(i)), lastRow);
          };
          auto bitsType = VectorType::get(
              {width}, b.getIntegerType(inType.getIntOrFloatBitWidth()));
          Value amaxBits =
              b.loop(b.idx(0), b.idx(group / unroll), {b.zeroVec(bitsType)},
                     [&](Value step, ValueRange it) -> SmallVector<Value> {
                       Value i0 = b.mul(step, b.idx(unroll));
                       Value acc = it[0];
                       for (int64_t i = 0; i < unroll; ++i) {
                         Value base = b.add(first, i0);
                         Value m = magnitudeBits(
                             b, b.loadVec(a[0], {rowAt(base, i), c}, width));
                         m = b.select(b.ult(b.add(i0, b.idx(i)), count), m,
                                      b.zeroVec(bitsType));
                         acc = arith::MaxUIOp::create(b, acc, m);
                       }
                       return {acc};
                     })[0];
          SmallVector<Value> scale, inverse;
          for (int64_t j = 0; j < width; ++j) {
            scale.push_back(groupScale(
                b, magnitudeToF32(b, amaxBits, j, inType), fp8Max, pow2));
            inverse.push_back(b.fdiv(b.f32(1), scale.back()));
          }
          b.storeVecF(scale, a[2], {blk, c});
          Value inverseVec = vector::FromElementsOp::create(b, f32x, inverse);
          b.loop(b.idx(0), b.idx(group / unroll), [&](Value step) {
            Value base = b.add(first, b.mul(step, b.idx(unroll)));
            for (int64_t i = 0; i < unroll; ++i) {
              Value row = rowAt(base, i);
              Value x = b.loadVec(a[0], {row, c}, width);
              if (!inType.isF32())
                x = arith::ExtFOp::create(b, f32x, x);
              b.storeVecF32(arith::MulFOp::create(b, x, inverseVec), a[1],
                            {row, c});
            }
          });
        });
        // Unused trailing blocks hold scale 1.
        b.ifThen(b.eq(e, b.idx(experts)), [&] {
          SmallVector<Value> ones(width, b.f32(1));
          b.storeVecF(ones, a[2], {blk, c});
        });
      });
}

} // namespace

bool vectorized::matchQuantize(moe::QuantizeOp op, moe::TileAttr,
                               const TargetInfo &target) {
  // The expert weights' blocks have the warp kernel (QuantizeBlocks.cpp)
  // and the scalar one; the transposed layout (the FP8 weight gradient's)
  // only the column-wise block kernel, which writes it from its workgroup
  // tile (cp.async targets).
  if (op.getAxis() == moe::QuantAxis::blocks)
    return false;
  if (op.getTranspose())
    return target.hasWarpShuffles() && target.hasAsyncCopy() &&
           colwiseWidth(op) != 0 && colwiseBlocksApply(op) &&
           op.getGroupSize() % kTransposedChunk == 0;
  return op.getAxis() == moe::QuantAxis::colwise ? colwiseWidth(op) != 0
                                                 : rowwiseWidth(op) != 0;
}

LogicalResult vectorized::emitQuantize(moe::QuantizeOp op, moe::TileAttr tile,
                                       BufferMap buffer, LoweringContext &ctx) {
  if (op.getAxis() == moe::QuantAxis::colwise)
    return emitQuantizeColwise(op, tile, buffer, ctx);
  return emitQuantizeRowwise(op, tile, buffer, ctx);
}
