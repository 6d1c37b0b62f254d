//===- ProducerPipeline.cpp - Stage loads of the sm_90a matmul ------------===//
//
// Part of moec. What fills the shared-memory stages: 16-byte cp.async
// chunks in the 128-byte swizzle (which also gather lhs rows, zero-filling
// missing ones), TMA loads from tensor maps (multicast in a cluster), and
// in the warp-specialized kernel the full/empty mbarriers that hand the
// stages between the producer and the MMA warpgroups.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

// full[s] completes when the producer's copies of stage s have landed
// (cp.async arrivals, TMA bytes), empty[s] when the MMA warps are done
// reading it (in both blocks of a cluster). The scan's barrier makes the
// initialization visible to the block.
void ProducerPipeline::initBarriers() {
  KernelBuilder &b = env.b;
  // Arrivals that complete a stage's full barrier: every producer thread's
  // cp.async, unless the lhs comes by TMA too and there are no LoRA A_e
  // rows (the weight gradient's partial slices need them), plus the TMA
  // thread's.
  int64_t fullArrivals =
      (cpAsyncArrivals() ? env.plan.copyThreads() : 0) +
      (env.args.rhsMap ? 1 : 0);
  b.ifThen(b.eq(env.thread, b.idx(0)), [&] {
    for (int64_t s = 0; s < env.plan.stages; ++s) {
      NVVM::MBarrierInitOp::create(b, env.stageBarrier(false, b.idx(s)),
                                   b.i32(fullArrivals), Value());
      NVVM::MBarrierInitOp::create(b, env.stageBarrier(true, b.idx(s)),
                                   b.i32(kMmaWarps * env.plan.cluster),
                                   Value());
    }
    // LoRA's B_e tile: filled by every producer thread's cp.async, freed by
    // the MMA warps.
    if (env.plan.loraUpTiles()) {
      NVVM::MBarrierInitOp::create(b, env.loraBarrier(false),
                                   b.i32(env.plan.copyThreads()), Value());
      NVVM::MBarrierInitOp::create(b, env.loraBarrier(true), b.i32(kMmaWarps),
                                   Value());
    }
    if (cluster.active())
      cluster.fenceBarrierInit();
  });
}

// Per-thread copy coordinates: chunk c of rows rowOf(i) = thread/8 + 32i;
// the swizzled chunk is the same for all of them (32i keeps r % 8).
void ProducerPipeline::placeThreads() {
  KernelBuilder &b = env.b;
  chunk = b.rem(env.thread, b.idx(kChunksPerRow));
  row0 = b.div(env.thread, b.idx(kChunksPerRow));
  swizzled = b.mul(arith::XOrIOp::create(b, chunk, b.rem(row0, b.idx(8))),
                   b.idx(16));
  lhsBase = addressOf(b, env.args.lhs);
  rhsBase = addressOf(b, env.args.rhs);
  rowBytesK = b.idx(env.plan.k * env.plan.elemBytes);
  if (env.plan.lora()) {
    loraABase = addressOf(b, env.args.loraA);
    loraBBase = addressOf(b, env.args.loraB);
  }
}

void ProducerPipeline::placeInvalid() { invalid = env.b.idx(-1); }

Value ProducerPipeline::rowOf(int64_t i) {
  int64_t rowsPerPass = env.plan.copyThreads() / kChunksPerRow;
  return env.b.add(row0, env.b.idx(i * rowsPerPass));
}

Value ProducerPipeline::smemOffset(int64_t i) {
  KernelBuilder &b = env.b;
  return b.add(b.mul(rowOf(i), b.idx(kRowBytes)), swizzled);
}

int64_t ProducerPipeline::lhsRowsPerThread() const {
  return kBlockM / (env.plan.copyThreads() / kChunksPerRow);
}

int64_t ProducerPipeline::rhsRowsPerThread() const {
  return env.plan.blockN / (env.plan.copyThreads() / kChunksPerRow);
}

void ProducerPipeline::lookupRows(TileState &t) {
  KernelBuilder &b = env.b;
  Value expert = b.ult(t.group, b.idx(env.plan.experts));
  for (int64_t i = 0; i < lhsRowsPerThread(); ++i) {
    Value r = rowOf(i);
    Value inRange = b.land(expert, b.ult(r, t.rowCount));
    Value src = b.ifElse(
        inRange, b.getIndexType(),
        [&] {
          auto [slot, valid] =
              b.loadSigned(env.args.gather, {b.add(t.rowStart, r)});
          return b.select(valid, b.div(slot, b.idx(env.plan.slotsPerToken)),
                          invalid);
        },
        [&] { return invalid; });
    t.lhsRows.push_back(toI32(b, src));
  }
}

void ProducerPipeline::clearRows(TileState &t) {
  // The weight gradient carries no rows (stateTypes): it looks them up per
  // slice.
  if (env.args.gather && !env.plan.weightGrad())
    t.lhsRows.assign(lhsRowsPerThread(), env.b.i32(-1));
}

SmallVector<Type> ProducerPipeline::stateTypes() {
  SmallVector<Type> types(env.plan.weightGrad() ? 6 : 4, env.b.getIndexType());
  if (env.args.gather && !env.plan.weightGrad())
    types.append(lhsRowsPerThread(), env.b.getI32Type());
  return types;
}

// Row r of slice kt of the weight gradient's reduction: the expert's row
// in the grouped order; `valid` is false past the expert's rows.
Value ProducerPipeline::groupRow(const TileState &t, Value r, Value kt,
                                 Value &valid) {
  KernelBuilder &b = env.b;
  Value inGroup = b.add(b.mul(kt, b.idx(kBlockK)), r);
  valid = b.ult(inGroup, t.reduceRows);
  return b.add(t.reduceStart, inGroup);
}

// The token row of grouped row `grouped` through the gather slots (the
// weight gradient's); `valid` also turns false for a padding slot.
Value ProducerPipeline::gatheredRow(Value grouped, Value &valid) {
  KernelBuilder &b = env.b;
  Value safe = b.select(valid, grouped, b.idx(0));
  auto [slot, present] = b.loadSigned(env.args.gather, {safe});
  valid = b.land(valid, present);
  return b.div(slot, b.idx(env.plan.slotsPerToken));
}

Value ProducerPipeline::sliceRow(const TileState &t, int64_t i, Value kt,
                                 bool rhs, Value &valid) {
  // rowOf(i) % 64 = row0 + (i * rowsPerPass) % 64: rowsPerPass (16 or 32)
  // divides 64 and row0 < rowsPerPass.
  int64_t rowsPerPass = env.plan.copyThreads() / kChunksPerRow;
  int64_t key = (i * rowsPerPass) % kBlockK + (rhs ? kBlockK : 0);
  if (auto it = sliceRows.find(key); it != sliceRows.end()) {
    valid = it->second.second;
    return it->second.first;
  }
  KernelBuilder &b = env.b;
  Value row = groupRow(t, b.rem(rowOf(i), b.idx(kBlockK)), kt, valid);
  if (env.args.gather && rhs == env.plan.layout.swappedOperands)
    row = gatheredRow(row, valid);
  sliceRows[key] = {row, valid};
  return row;
}

// Source byte offset of this thread's A row i of tile t, slice kt (-1:
// zero-fill). RowsK: the K chunk is added by copyChunk. GroupRowsT: stage
// row i is row i % 64 of the slice, column block i / 64 of the tile's K
// columns; the offset includes this thread's 16-byte chunk.
Value ProducerPipeline::lhsRowBytes(const TileState &t, int64_t i, Value kt) {
  KernelBuilder &b = env.b;
  Value row, valid;
  switch (env.plan.layout.lhs) {
  case LhsLayout::GroupRowsT: {
    Value q = rowOf(i);
    row = sliceRow(t, i, kt, /*rhs=*/false, valid);
    Value col = b.add(
        b.add(t.rowStart, b.mul(b.div(q, b.idx(kBlockK)), b.idx(kColumnBlock))),
        b.mul(chunk, b.idx(8)));
    valid = b.land(valid, b.ult(col, b.idx(env.plan.k)));
    return b.select(valid, b.add(b.mul(row, rowBytesK), b.mul(col, b.idx(2))),
                    invalid);
  }
  case LhsLayout::PaddedRowsT:
    llvm_unreachable("the FP8 weight gradient's operands come by TMA");
  case LhsLayout::RowsK:
    if (env.args.gather) {
      row = arith::IndexCastOp::create(b, b.getIndexType(), t.lhsRows[i]);
      valid = arith::CmpIOp::create(b, arith::CmpIPredicate::ne,
                                    t.lhsRows[i], b.i32(-1));
    } else {
      Value r = rowOf(i);
      row = b.add(t.rowStart, r);
      valid = b.land(b.ult(t.group, b.idx(env.plan.experts)),
                     b.ult(r, t.rowCount));
    }
    break;
  }
  return b.select(valid, b.mul(row, rowBytesK), invalid);
}

// The rhs column of column `c` of the block's tile: colStart + c, or with
// SwiGLU the gate columns of the first half and the matching up columns
// (outWidth on) of the second; `valid` says whether it is an output column.
Value ProducerPipeline::rhsColumn(const TileState &t, Value c, Value &valid) {
  KernelBuilder &b = env.b;
  if (!env.plan.swiglu) {
    Value n = b.add(t.colStart, c);
    valid = b.ult(n, env.outWidth);
    return n;
  }
  int64_t half = env.plan.blockN / 2;
  Value isUp = b.ule(b.idx(half), c);
  Value gate = b.add(t.colStart, b.select(isUp, b.sub(c, b.idx(half)), c));
  valid = b.ult(gate, env.outWidth);
  return b.select(isUp, b.add(gate, env.outWidth), gate);
}

// Source byte offset of this thread's B row i of slice kt (-1: zero-fill).
// ExpertNK: the row is an output column (K runs along it: copyChunk adds
// the chunk's K offset). ExpertKN: stage row i is K row i % 64 of column
// block i / 64, and the offset is that of this thread's 16-byte chunk
// along N. GroupRowsN: the same with the slice's rows of the expert in
// place of K rows.
Value ProducerPipeline::rhsRowBytes(const TileState &t, int64_t i, Value kt) {
  KernelBuilder &b = env.b;
  Value r = rowOf(i);
  Value valid, bytes;
  switch (env.plan.layout.rhs) {
  case RhsLayout::ExpertNK: {
    Value n = rhsColumn(t, r, valid);
    bytes = b.mul(b.add(b.mul(t.group, env.rhsRows), n), rowBytesK);
    break;
  }
  case RhsLayout::ExpertKN: {
    Value block = b.div(r, b.idx(kBlockK));
    Value kRow = b.add(b.mul(kt, b.idx(kBlockK)), b.rem(r, b.idx(kBlockK)));
    Value n = rhsColumn(
        t, b.add(b.mul(block, b.idx(kColumnBlock)), b.mul(chunk, b.idx(8))),
        valid);
    valid = b.land(valid, b.ult(kRow, b.idx(env.plan.k)));
    // Row kRow of expert group's [K, N]: in [E, K, N], or in [K, E, N].
    Value row = env.plan.layout.expertsInColumns
                    ? b.add(b.mul(kRow, b.idx(env.plan.experts)), t.group)
                    : b.add(b.mul(t.group, b.idx(env.plan.k)), kRow);
    bytes = b.mul(b.add(b.mul(row, env.rhsWidth), n), b.idx(2));
    break;
  }
  case RhsLayout::PaddedRowsT:
    llvm_unreachable("the FP8 weight gradient's operands come by TMA");
  case RhsLayout::GroupRowsN: {
    Value block = b.div(r, b.idx(kBlockK));
    Value row = sliceRow(t, i, kt, /*rhs=*/true, valid);
    Value n = b.add(t.colStart, b.add(b.mul(block, b.idx(kColumnBlock)),
                                      b.mul(chunk, b.idx(8))));
    valid = b.land(valid, b.ult(n, env.outWidth));
    bytes = b.mul(b.add(b.mul(row, env.rhsWidth), n), b.idx(2));
    break;
  }
  }
  return b.select(b.land(b.ult(t.group, b.idx(env.plan.experts)), valid), bytes,
                  invalid);
}

void ProducerPipeline::copyChunk(Value dst, Value base, Value rowBytes,
                                 Value chunkBytes, Value kValid) {
  KernelBuilder &b = env.b;
  auto cacheGlobal = NVVM::LoadCacheModifierKindAttr::get(
      b.getContext(), NVVM::LoadCacheModifierKind::CG);
  Value ok =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ne, rowBytes, invalid);
  if (kValid)
    ok = b.land(kValid, ok);
  Value offset = chunkBytes ? b.add(rowBytes, chunkBytes) : rowBytes;
  Value src = b.select(ok, b.add(base, offset), base);
  Value bytes = b.select(ok, b.idx(16), b.idx(0));
  NVVM::CpAsyncOp::create(
      b, pointerAt(b, dst, 3), pointerAt(b, src, 1),
      b.getI32IntegerAttr(16), cacheGlobal,
      arith::IndexCastOp::create(b, b.getI32Type(), bytes));
}

// An operand with a tensor map comes by TMA (loadByTma, or the weight
// gradient's whole slices), not here, unless `ignoreMaps`.
void ProducerPipeline::loadStage(const TileState &t, Value slot, Value kt,
                                 bool ignoreMaps) {
  KernelBuilder &b = env.b;
  sliceRows.clear();
  const int64_t elemBytes = env.plan.elemBytes;
  Value kElem = b.add(b.mul(kt, b.idx(env.plan.sliceK())),
                      b.mul(chunk, b.idx(16 / elemBytes)));
  Value kValid = b.ult(kElem, b.idx(env.plan.k));
  Value kBytes = b.mul(kElem, b.idx(elemBytes));
  bool lhsAlongK = env.plan.layout.lhs == LhsLayout::RowsK;
  if (ignoreMaps || !env.args.lhsMap)
    for (int64_t i = 0; i < lhsRowsPerThread(); ++i)
      copyChunk(b.add(env.stageA(slot), smemOffset(i)), lhsBase,
                lhsRowBytes(t, i, kt), lhsAlongK ? kBytes : Value(),
                lhsAlongK ? kValid : Value());
  if (env.plan.lora()) {
    // The LoRA A_e rows group * r + j, j < R (zeros past r), of this
    // slice's K columns: a K-major tile of R rows after the B tile. A tile
    // later in a LoRA run reuses U and needs none.
    const int64_t R = env.plan.loraRows, r = env.plan.loraRank;
    const int64_t rowsPerPass = env.plan.copyThreads() / kChunksPerRow;
    for (int64_t i = 0; i * rowsPerPass < R; ++i) {
      Value j = rowOf(i);
      Value wanted = b.ult(j, b.idx(R));
      if (t.computesU)
        wanted = b.land(wanted, t.computesU);
      b.ifThen(wanted, [&] {
        Value valid = b.land(b.ult(j, b.idx(r)),
                             b.ult(t.group, b.idx(env.plan.experts)));
        Value row = b.add(b.mul(t.group, b.idx(r)), j);
        copyChunk(b.add(env.stageLora(slot), smemOffset(i)), loraABase,
                  b.select(valid, b.mul(row, rowBytesK), invalid), kBytes,
                  kValid);
      });
    }
  }
  if (env.args.rhsMap && !ignoreMaps)
    return;
  // ExpertNK rows run along K (the chunk's K offset is in kBytes);
  // ExpertKN / GroupRowsN rows are K rows whose chunks run along N
  // (rhsRowBytes gives the chunk's offset and checks K and N).
  bool alongK = env.plan.layout.rhs == RhsLayout::ExpertNK;
  for (int64_t i = 0; i < rhsRowsPerThread(); ++i)
    copyChunk(b.add(env.stageB(slot), smemOffset(i)), rhsBase,
              rhsRowBytes(t, i, kt), alongK ? kBytes : Value(),
              alongK ? kValid : Value());
}

void ProducerPipeline::loadLoraUp(const TileState &t, Value tileB,
                                  int64_t first, int64_t width) {
  KernelBuilder &b = env.b;
  const int64_t r = env.plan.loraRank;
  Value rowBytes = b.idx(env.plan.experts * r * 2); // B is [N, E*r]
  Value rank = b.add(b.idx(first), b.mul(chunk, b.idx(8)));
  Value firstCol = b.add(b.mul(t.group, b.idx(r)), rank);
  Value chunkValid = b.ult(rank, b.idx(r));
  b.ifThen(b.ult(chunk, b.idx(width / 8)), [&] {
    for (int64_t i = 0; i < rhsRowsPerThread(); ++i) {
      Value valid;
      Value n = rhsColumn(t, rowOf(i), valid);
      Value bytes = b.add(b.mul(n, rowBytes), b.mul(firstCol, b.idx(2)));
      copyChunk(b.add(tileB, smemOffset(i)), loraBBase,
                b.select(b.land(valid, chunkValid), bytes, invalid), Value(),
                Value());
    }
  });
}

// Issued after the tile's last slice, so the copies land while the MMA
// warpgroups still work through the slices in flight.
void ProducerPipeline::loadLoraUpTile(const TileState &t, Value round) {
  waitPhase(env.loraBarrier(/*empty=*/true), round, /*previous=*/true);
  loadLoraUp(t, env.loraUpB(), 0, env.plan.loraRows);
  NVVM::CpAsyncMBarrierArriveOp::create(env.b, env.loraBarrier(false),
                                        env.b.getBoolAttr(true));
}

void ProducerPipeline::tmaLoad(Value map, Value stageAddress,
                               ValueRange coords, Value multicast,
                               Value full) {
  KernelBuilder &b = env.b;
  auto clusterSpace = LLVM::LLVMPointerType::get(b.getContext(), 7);
  Value dst = LLVM::AddrSpaceCastOp::create(b, clusterSpace,
                                            pointerAt(b, stageAddress, 3));
  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      b, dst, map, coords, full, ValueRange(), multicast, Value(),
      NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
}

// Box l of the stage by TMA. ExpertNK: B rows [l * rows, (l + 1) * rows),
// output columns from colStart or (SwiGLU) the gate then the up columns,
// K from k0. ExpertKN: column block l (64 columns, the gate or the up
// ones with SwiGLU), K rows from k0.
void ProducerPipeline::loadRhsByTma(const TileState &t, Value slot, Value k0,
                                    Value l, Value multicast, Value full) {
  KernelBuilder &b = env.b;
  const int64_t rows = env.plan.rhsBoxRows();
  SmallVector<Value> coords;
  switch (env.plan.layout.rhs) {
  case RhsLayout::ExpertNK:
  case RhsLayout::PaddedRowsT: { // [N, P]: output columns as rows
    Value row = env.plan.swiglu ? b.add(t.colStart, b.mul(l, env.outWidth))
                                : b.add(t.colStart, b.mul(l, b.idx(rows)));
    coords = {k0, toI32(b, row)};
    break;
  }
  case RhsLayout::ExpertKN: {
    Value valid;
    Value n = rhsColumn(t, b.mul(l, b.idx(kColumnBlock)), valid);
    coords = {toI32(b, n), k0};
    break;
  }
  case RhsLayout::GroupRowsN:
    llvm_unreachable("the weight gradient's maps load in loadWeightGradSlice");
  }
  // The expert: the outermost coordinate, or between N and K for [K, E, N]
  // (the FP8 weight gradient's [N, P] has none: k0 is in its rows).
  if (env.plan.layout.expertsInColumns)
    coords.insert(coords.begin() + 1, toI32(b, t.group));
  else if (env.args.offsets && !env.plan.fp8WeightGrad())
    coords.push_back(toI32(b, t.group));
  tmaLoad(env.args.rhsMap,
          b.add(env.stageB(slot), b.mul(l, b.idx(rows * kRowBytes))), coords,
          multicast, full);
}

// Slice kt of the operands with tensor maps by TMA, completing on `full`
// (the 1024-aligned stages match the maps' 128-byte swizzle). The rhs:
// the block's columns, or their gate rows then their up rows, from a map
// over [E, N, K] (or a dense [N, K]). The lhs: the tile's 128 rows from
// a map over [rows, K] (rows past the group's end only reach output rows
// the epilogue skips). Rows and K past the end arrive as zeros. One
// thread issues it all; expect_tx is that thread's arrival on `full`.
// In a cluster of 2, each block loads one half of the B rows (the gate
// or the up rows with SwiGLU) and multicasts it to both blocks at the
// same offset, completing on both blocks' `full`: a block's barrier
// still expects the whole stage.
void ProducerPipeline::loadByTma(const TileState &t, Value slot, Value kt,
                                 Value full) {
  KernelBuilder &b = env.b;
  const int64_t BN = env.plan.blockN, boxes = env.plan.rhsBoxes();
  int64_t bytes = (BN + (env.args.lhsMap ? kBlockM : 0)) * kRowBytes;
  NVVM::MBarrierArriveExpectTxOp::create(
      b, Type(), full, b.i32(bytes), NVVM::MemScopeKind::CTA, false,
      Value());
  // The FP8 weight gradient's slices: the expert's padded blocks.
  Value k0 = b.mul(kt, b.idx(env.plan.sliceK()));
  if (env.plan.fp8WeightGrad())
    k0 = b.add(t.reduceStart, k0);
  k0 = toI32(b, k0);
  if (env.args.lhsMap)
    tmaLoad(env.args.lhsMap, env.stageA(slot),
            ValueRange{k0, toI32(b, t.rowStart)}, Value(), full);
  if (!cluster.active()) {
    for (int64_t l = 0; l < boxes; ++l)
      loadRhsByTma(t, slot, k0, b.idx(l), Value(), full);
    return;
  }
  // This block's half: boxes [rank * boxes / 2, (rank + 1) * boxes / 2).
  Value both = cluster.multicastMask();
  for (int64_t l = 0; l < boxes / 2; ++l)
    loadRhsByTma(t, slot, k0,
                 b.add(b.mul(cluster.rank, b.idx(boxes / 2)), b.idx(l)), both,
                 full);
}

// The weight gradient's slice kt (rows in order: both operands have tensor
// maps): while all 64 rows are the tile's (in its expert, or its chunk of
// them), both come by TMA, 64 rows by 64 columns a box, in the layout of
// the cp.async copies (stage row i: row i % 64 of column block i / 64;
// columns past K or N arrive as zeros). The last slice of a reduction that
// is not a multiple of 64 must read zeros past the tile's rows, which a map
// over all rows cannot give: cp.async copies it, and the TMA thread's
// arrival is a plain one. Every producer thread then arrives as for
// cp.async (produceTile).
void ProducerPipeline::loadWeightGradSlice(const TileState &t, Value slot,
                                           Value kt) {
  KernelBuilder &b = env.b;
  Value end = b.mul(b.add(kt, b.idx(1)), b.idx(kBlockK));
  Value partial = b.ult(t.reduceRows, end);
  b.ifThen(partial, [&] { loadStage(t, slot, kt, /*ignoreMaps=*/true); });
  Value full = env.stageBarrier(false, slot);
  b.ifThen(b.eq(env.thread, b.idx(0)), [&] {
    b.ifThen(partial, [&] {
      NVVM::MBarrierArriveOp::create(b, Type(), full, Value());
    });
    b.ifThen(b.ule(end, t.reduceRows), [&] {
      // A weight gradient's stage is A's and B's rows (no LoRA rows).
      NVVM::MBarrierArriveExpectTxOp::create(b, Type(), full,
                                             b.i32(env.plan.stageBytes()),
                                             NVVM::MemScopeKind::CTA, false,
                                             Value());
      Value row = toI32(b, b.add(t.reduceStart, b.mul(kt, b.idx(kBlockK))));
      auto boxes = [&](Value map, Value stage, Value firstColumn,
                       int64_t count) {
        for (int64_t l = 0; l < count; ++l) {
          Value column = b.add(firstColumn, b.idx(l * kColumnBlock));
          tmaLoad(map, b.add(stage, b.idx(l * kBlockK * kRowBytes)),
                  ValueRange{toI32(b, column), row}, Value(), full);
        }
      };
      // A: the tile's K columns from rowStart; B: its output columns.
      boxes(env.args.lhsMap, env.stageA(slot), t.rowStart,
            kBlockM / kColumnBlock);
      boxes(env.args.rhsMap, env.stageB(slot), t.colStart,
            env.plan.blockN / kColumnBlock);
    });
  });
}

void ProducerPipeline::commit() { NVVM::CpAsyncCommitGroupOp::create(env.b); }

// Empty past the last slice or for a tile without expert rows, which keeps
// every thread's group count the same.
void ProducerPipeline::loadPrologue(const TileState &t) {
  KernelBuilder &b = env.b;
  for (int64_t s = 0; s < env.plan.ahead(); ++s) {
    if (env.plan.weightGrad())
      b.ifThen(b.ult(b.idx(s), env.slicesOf(t)),
               [&] { loadStage(t, b.idx(s), b.idx(s)); });
    else if (s < env.plan.kSlices())
      loadStage(t, b.idx(s), b.idx(s));
    commit();
  }
}

// Slice n uses stage n % S in its (n / S)-th round, whose parity is the
// phase its barriers complete.
Value ProducerPipeline::slotOf(Value n) {
  return env.b.rem(n, env.b.idx(env.plan.stages));
}

void ProducerPipeline::waitRound(bool empty, Value n, bool previous) {
  waitPhase(env.stageBarrier(empty, slotOf(n)),
            env.b.div(n, env.b.idx(env.plan.stages)), previous);
}

void ProducerPipeline::waitPhase(Value barrier, Value round, bool previous) {
  KernelBuilder &b = env.b;
  Value parity = b.rem(round, b.idx(2));
  if (previous) // the round before: a fresh barrier counts as done
    parity = b.sub(b.idx(1), parity);
  NVVM::MBarrierTryWaitParityOp::create(b, barrier, toI32(b, parity),
                                        b.i32(1000000));
}

Value ProducerPipeline::produceTile(const TileState &t, Value slices) {
  KernelBuilder &b = env.b;
  Value kSlices = env.slicesOf(t);
  auto kLoop = scf::ForOp::create(b, b.idx(0), kSlices, b.idx(1));
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToStart(kLoop.getBody());
  Value kt = kLoop.getInductionVar();
  Value n = b.add(slices, kt);
  waitRound(/*empty=*/true, n, /*previous=*/true);
  if (env.plan.weightGrad() && env.args.rhsMap && !env.plan.fp8WeightGrad()) {
    loadWeightGradSlice(t, slotOf(n), kt);
  } else {
    loadStage(t, slotOf(n), kt);
    if (env.args.rhsMap)
      b.ifThen(b.eq(env.thread, b.idx(0)), [&] {
        loadByTma(t, slotOf(n), kt, env.stageBarrier(false, slotOf(n)));
      });
    if (env.plan.fp8WeightGrad())
      loadSliceScales(t, slotOf(n), kt);
  }
  if (cpAsyncArrivals())
    NVVM::CpAsyncMBarrierArriveOp::create(
        b, env.stageBarrier(false, slotOf(n)), b.getBoolAttr(true));
  b.setInsertionPointAfter(kLoop);
  return b.add(slices, kSlices);
}

// The scales of 128-row block b_e + kt: [B, K] rows (of A) and [B, N]
// columns (of B), f32. The MMA threads read them from the stage once it
// is full, so their latency hides behind the stages in flight.
void ProducerPipeline::loadSliceScales(const TileState &t, Value slot,
                                       Value kt) {
  KernelBuilder &b = env.b;
  auto cacheAll = NVVM::LoadCacheModifierKindAttr::get(
      b.getContext(), NVVM::LoadCacheModifierKind::CA);
  Value block = b.add(b.div(t.reduceStart, b.idx(kFp8ScaleBlock)), kt);
  Value i = env.thread;
  auto copy = [&](Value dst, Value scales, Value index, Value valid) {
    Value src = b.select(valid, b.elementAddress(scales, {block, index}),
                         b.elementAddress(scales, {b.idx(0), b.idx(0)}));
    NVVM::CpAsyncOp::create(
        b, pointerAt(b, dst, 3), pointerAt(b, src, 1),
        b.getI32IntegerAttr(4), cacheAll,
        toI32(b, b.select(valid, b.idx(4), b.idx(0))));
  };
  Value stage = env.scaleStage(slot);
  copy(b.add(stage, b.mul(i, b.idx(4))), env.args.lhsScales,
       b.add(t.rowStart, i), b.ult(i, t.rowCount));
  // Columns i, i + 128, .. of the tile.
  for (int64_t first = 0; first < env.plan.blockN; first += kProducerThreads)
    b.ifThen(b.ult(i, b.idx(env.plan.blockN - first)), [&] {
      Value inTile = b.add(i, b.idx(first));
      Value column = b.add(t.colStart, inTile);
      copy(b.add(stage, b.mul(b.add(inTile, b.idx(kBlockM)), b.idx(4))),
           env.args.rhsScales, column, b.ult(column, env.outWidth));
    });
}

// Their arrivals are tied to the issuing thread: it must not exit first.
void ProducerPipeline::drain() {
  NVVM::CpAsyncCommitGroupOp::create(env.b);
  NVVM::CpAsyncWaitGroupOp::create(env.b, env.b.getI32IntegerAttr(0));
}
