//===- QuantizeBlocks.cpp - FP8 expert weights in g x g blocks ------------===//
//
// Part of moec. moe.quantize {axis = blocks}: a block of 8 warps per g x g
// block of [E, N, K] weights. Each thread keeps its chunks of the block in
// registers (one read of the weights); the amax meets over the warp
// (shuffles) and the 8 warps (workgroup memory). The data goes out as it
// came, or (transpose) through a g x g FP8 tile in workgroup memory: each
// thread reads consecutive rows, so that it holds a run of each column and
// writes it to the tile as one vector (XOR-swizzled, so that the threads
// of a warp hit different banks), and the [E, K, N] rows leave in runs.
// With both layouts (transposed_data) the thread also writes its rows as
// they came: both copies from the one read.
//
//===----------------------------------------------------------------------===//

#include "WarpKernels.h"
#include "WarpOps.h"

#include "../Vector/VectorCommon.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

constexpr int64_t kThreads = 256, kWarps = kThreads / 32;
/// The block kernel's sizes, or nullopt where it does not apply: static
/// N and K, K a multiple of the vector width, g x g blocks that 256
/// threads cover in whole rows of chunks (at most 16 chunks each), and
/// for the transposed layout N a multiple of the run each thread holds
/// (`steps` rows: whole runs in and out of the tile).
struct BlocksShape {
  Type inType;
  int64_t group, width, rows, cols, lanesPerRow, rowsPerStep, steps;
  double fp8Max;
  /// transposed: the [E, K, N] layout is written (through the tile); plain:
  /// the [E, N, K] one too (both layouts).
  bool pow2, transposed, plainToo;
};

std::optional<BlocksShape> blocksShape(moe::QuantizeOp op) {
  if (op.getAxis() != moe::QuantAxis::blocks)
    return std::nullopt;
  BlocksShape s;
  s.inType = elementType(op.getInput());
  s.group = op.getGroupSize();
  s.width = KernelBuilder::vectorWidth(s.inType);
  std::optional<int64_t> rows = staticDim(op.getInput(), 1);
  std::optional<int64_t> cols = staticDim(op.getInput(), 2);
  if (!quantizable(s.inType) || !s.width || !rows || !cols ||
      *cols % s.width || s.group % s.width)
    return std::nullopt;
  s.rows = *rows;
  s.cols = *cols;
  s.lanesPerRow = s.group / s.width;
  if (s.lanesPerRow > kThreads || kThreads % s.lanesPerRow)
    return std::nullopt;
  s.rowsPerStep = kThreads / s.lanesPerRow;
  if (s.group % s.rowsPerStep || s.group / s.rowsPerStep > 16)
    return std::nullopt;
  s.steps = s.group / s.rowsPerStep;
  s.plainToo = op.writesBothLayouts();
  s.transposed = op.getTranspose() || s.plainToo;
  if (s.transposed && s.rows % s.steps)
    return std::nullopt;
  s.fp8Max = fp8MaxOf(elementType(op.getData()));
  s.pow2 = op.getPow2Scale();
  return s;
}

} // namespace

bool warp::matchQuantizeBlocks(moe::QuantizeOp op, moe::TileAttr,
                               const TargetInfo &target) {
  return target.hasWarpShuffles() && blocksShape(op).has_value();
}

LogicalResult warp::emitQuantizeBlocks(moe::QuantizeOp op, BufferMap buffer,
                                       LoweringContext &ctx) {
  const BlocksShape s = *blocksShape(op);
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales());
  SmallVector<Value> operands{in, data, scales};
  if (s.plainToo)
    operands.append({buffer(op.getTransposedData()),
                     buffer(op.getTransposedScales())});
  const int64_t g = s.group;
  const int64_t blockRows = (s.rows + g - 1) / g;
  const int64_t blockCols = (s.cols + g - 1) / g;
  KernelBuilder &h = ctx.host();
  auto tile = moe::TileAttr::get(h.getContext(), 1, 1, 1, kThreads);
  Value grid = h.mul(ctx.sizes(in)[0], h.idx(blockRows * blockCols));
  const int64_t partialBytes = kWarps * 4;
  const int64_t tileBytes = s.transposed ? g * g : 0;
  Type fp8 = elementType(data);
  return ctx.launch(
      "blocks_warp", grid, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value smem = workgroupBytes(b);
        Value partials = workgroupArray(b, smem, {kWarps}, b.getF32Type());
        Value e = b.div(block, b.idx(blockRows * blockCols));
        Value br = b.rem(b.div(block, b.idx(blockCols)), b.idx(blockRows));
        Value bc = b.rem(block, b.idx(blockCols));
        Value lane = b.rem(thread, b.idx(32));
        Value warpId = b.div(thread, b.idx(32));
        Value rowThread = b.div(thread, b.idx(s.lanesPerRow));
        Value local = b.mul(b.rem(thread, b.idx(s.lanesPerRow)),
                            b.idx(s.width));
        // Lanes past K work on the last chunk and count as zero; rows past
        // N read the last row again.
        Value col = b.add(b.mul(bc, b.idx(g)), local);
        Value colActive = b.ult(col, b.idx(s.cols));
        Value c = b.minIdx(col, b.idx(s.cols - s.width));
        auto bitsType = VectorType::get(
            {s.width}, b.getIntegerType(s.inType.getIntOrFloatBitWidth()));
        Value amaxBits = b.zeroVec(bitsType);
        SmallVector<Value> x, rows, valid;
        // Thread t reads rows t, t + rowsPerStep, ... of the block, or
        // (transposed) the run rowThread * steps + i: a warp's loads cover
        // whole rows either way.
        auto rowInBlock = [&](int64_t i) {
          return s.transposed
                     ? b.add(b.mul(rowThread, b.idx(s.steps)), b.idx(i))
                     : b.add(b.idx(i * s.rowsPerStep), rowThread);
        };
        for (int64_t i = 0; i < s.steps; ++i) {
          Value inBlock = rowInBlock(i);
          Value r = b.add(b.mul(br, b.idx(g)), inBlock);
          valid.push_back(b.land(colActive, b.ult(r, b.idx(s.rows))));
          rows.push_back(b.minIdx(r, b.idx(s.rows - 1)));
          x.push_back(b.loadVec(a[0], {e, rows.back(), c}, s.width));
          amaxBits = arith::MaxUIOp::create(
              b, amaxBits,
              b.select(valid.back(), magnitudeBits(b, x.back()),
                       b.zeroVec(bitsType)));
        }
        Value amax = b.f32(0);
        for (int64_t j = 0; j < s.width; ++j)
          amax = b.fmax(amax, magnitudeToF32(b, amaxBits, j, s.inType));
        amax = warp::warpReduce(b, amax, /*max=*/true);
        b.ifThen(b.eq(lane, b.idx(0)),
                 [&] { b.storeF(amax, partials, {warpId}); });
        gpu::BarrierOp::create(b);
        for (int64_t w = 0; w < kWarps; ++w)
          amax = b.fmax(amax, b.loadF(partials, {b.idx(w)}));
        Value scale = groupScale(b, amax, s.fp8Max, s.pow2);
        // The [E, K, N] copy's data and scales: a[1], a[2] (transpose) or
        // a[3], a[4] (both layouts, a[1], a[2] the plain ones).
        Value plainData = a[1], plainScales = a[2];
        Value tData = s.plainToo ? a[3] : a[1];
        Value tScales = s.plainToo ? a[4] : a[2];
        b.ifThen(b.eq(thread, b.idx(0)), [&] {
          if (!s.transposed || s.plainToo)
            b.storeF(scale, plainScales, {e, br, bc});
          if (s.transposed)
            b.storeF(scale, tScales, {e, bc, br});
        });
        auto f32x = VectorType::get({s.width}, b.getF32Type());
        Value inverse =
            vector::BroadcastOp::create(b, f32x, b.fdiv(b.f32(1), scale));
        SmallVector<Value> y;
        for (int64_t i = 0; i < s.steps; ++i) {
          Value wide = s.inType.isF32()
                           ? x[i]
                           : arith::ExtFOp::create(b, f32x, x[i]);
          y.push_back(arith::MulFOp::create(b, wide, inverse));
        }
        if (!s.transposed || s.plainToo)
          for (int64_t i = 0; i < s.steps; ++i)
            b.ifThen(valid[i], [&] {
              b.storeVecF32(y[i], plainData, {e, rows[i], c});
            });
        if (!s.transposed)
          return;
        // Transposed: tile row local + j (column c + j of the block) takes
        // this thread's run of column j, rows rowThread * steps + [0,
        // steps), as one vector. The tile row's runs sit XOR-swizzled by
        // the row's lane (local / width): the 16 lanes of a half-warp,
        // whose tile rows share banks, write different banks.
        Value fp8Tile = workgroupArray(b, smem, {g, g}, fp8, partialBytes);
        const int64_t runs = s.rowsPerStep;  // runs per tile row
        const bool pow2 = llvm::isPowerOf2_64(runs);
        auto swizzled = [&](Value run, Value tileRow) {
          if (!pow2)
            return run;
          Value lanePart = b.rem(b.div(tileRow, b.idx(s.width)), b.idx(runs));
          return Value(arith::XOrIOp::create(b, run, lanePart));
        };
        for (int64_t j = 0; j < s.width; ++j) {
          SmallVector<Value> column;
          for (int64_t i = 0; i < s.steps; ++i)
            column.push_back(
                vector::ExtractOp::create(b, y[i], ArrayRef<int64_t>{j}));
          Value tileRow = b.add(local, b.idx(j));
          b.storeVecF(column, fp8Tile,
                      {tileRow, b.mul(swizzled(rowThread, tileRow),
                                      b.idx(s.steps))});
        }
        gpu::BarrierOp::create(b);
        // Each tile row (a row of the [E, K, N] data) leaves run by run:
        // thread t takes run t % runs of tile rows t / runs + passes.
        const int64_t tileRowsPerPass = kThreads / runs;
        Value run = b.rem(thread, b.idx(runs));
        Value n = b.add(b.mul(br, b.idx(g)), b.mul(run, b.idx(s.steps)));
        for (int64_t pass = 0; pass * tileRowsPerPass < g; ++pass) {
          Value tileRow = b.add(b.idx(pass * tileRowsPerPass),
                                b.div(thread, b.idx(runs)));
          Value k = b.add(b.mul(bc, b.idx(g)), tileRow);
          b.ifThen(b.land(b.ult(tileRow, b.idx(g)),
                          b.land(b.ult(k, b.idx(s.cols)),
                                 b.ult(n, b.idx(s.rows)))),
                   [&] {
                     Value at = b.mul(swizzled(run, tileRow), b.idx(s.steps));
                     b.storeVec(b.loadVec(fp8Tile, {tileRow, at}, s.steps),
                                tData, {e, k, n});
                   });
        }
      },
      /*dynamicSharedBytes=*/partialBytes + tileBytes);
}
