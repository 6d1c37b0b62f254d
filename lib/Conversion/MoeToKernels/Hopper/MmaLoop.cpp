//===- MmaLoop.cpp - wgmma over the K slices of the sm_90a matmul ---------===//
//
// Part of moec. The two MMA warpgroups issue m64nBNk16 wgmmas from the
// swizzled stages into f32 accumulators, one commit group per 64-wide K
// slice with one group in flight; behind block barriers (the copies issued
// by the same threads) or behind the stages' full mbarriers, releasing
// each stage on its empty mbarrier once read.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

/// The wgmma shared-memory descriptor of a 128-byte-swizzled tile at shared
/// address `address`: start address >> 4 in bits 0-13, the leading byte
/// offset in bits 16-29 and the stride byte offset in bits 32-45 (both >> 4),
/// the 128-byte swizzle mode in bits 62-63. K-major (the A tile, an ExpertNK
/// B tile): the leading offset is unused by this swizzle (16) and the stride
/// is 1024, one 8-row swizzle atom to the next along M or N. N-major (an
/// ExpertKN B tile, read transposed): the leading offset is the step from
/// one 64-column block to the next along N, the stride the step from 8 K
/// rows to the next 8.
static Value descriptor(KernelBuilder &b, Value address, bool nMajor = false) {
  Value start =
      arith::ShRUIOp::create(b, bitAnd(b, address, 0x3FFFF), b.idx(4));
  int64_t leading = nMajor ? kColumnBlockBytes : 16;
  int64_t fixed = (int64_t(leading >> 4) << 16) | (int64_t(1024 >> 4) << 32) |
                  (int64_t(1) << 62);
  return arith::IndexCastOp::create(
      b, b.getI64Type(), arith::OrIOp::create(b, start, b.idx(fixed)));
}

/// How wgmma reads the B tile of `layout` from shared memory.
static NVVM::MMALayout bLayout(RhsLayout layout) {
  switch (layout) {
  case RhsLayout::ExpertNK:
  case RhsLayout::PaddedRowsT:
    return NVVM::MMALayout::col; // K-major
  case RhsLayout::ExpertKN:
  case RhsLayout::GroupRowsN:
    return NVVM::MMALayout::row; // N-major: transposed
  }
  llvm_unreachable("unknown rhs layout");
}

/// How wgmma reads the A tile of `layout`: K-major ("row"), or M-major and
/// transposed ("col") for the weight gradient's X_eᵀ.
static NVVM::MMALayout aLayout(LhsLayout layout) {
  switch (layout) {
  case LhsLayout::RowsK:
  case LhsLayout::PaddedRowsT:
    return NVVM::MMALayout::row;
  case LhsLayout::GroupRowsT:
    return NVVM::MMALayout::col;
  }
  llvm_unreachable("unknown lhs layout");
}

/// Bytes from one 16-wide K step of the B tile to the next: 32 bytes along
/// a K-major row, or 16 rows of an N-major column block.
static int64_t bStepBytes(RhsLayout layout) {
  switch (layout) {
  case RhsLayout::ExpertNK:
  case RhsLayout::PaddedRowsT:
    return 32;
  case RhsLayout::ExpertKN:
  case RhsLayout::GroupRowsN:
    return 16 * kRowBytes;
  }
  llvm_unreachable("unknown rhs layout");
}

// The MMA threads count from 0 (after the producer warpgroup).
void MmaLoop::placeThreads() {
  KernelBuilder &b = env.b;
  mathThread = env.plan.warpSpecialized
                   ? b.sub(env.thread, b.idx(kProducerThreads))
                   : env.thread;
  warpgroup = b.div(mathThread, b.idx(128));
  lane = b.rem(env.thread, b.idx(32));
  warp = b.rem(b.div(env.thread, b.idx(32)), b.idx(4));
  accType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(env.plan.blockN / 2, b.getF32Type()));
  partialType = LLVM::LLVMStructType::getLiteral(
      b.getContext(),
      SmallVector<Type>(env.plan.partialN() / 2, b.getF32Type()));
  // U = x · A_eᵀ: m64nR accumulators, R / 2 a thread.
  if (env.plan.lora())
    loraAccType = LLVM::LLVMStructType::getLiteral(
        b.getContext(),
        SmallVector<Type>(env.plan.loraRows / 2, b.getF32Type()));
  zeroF = b.f32(0);
}

Value MmaLoop::zeroAccumulators(Type type, int64_t count) {
  KernelBuilder &b = env.b;
  Value acc = LLVM::UndefOp::create(b, type);
  for (int64_t i = 0; i < count; ++i)
    acc = LLVM::InsertValueOp::create(b, acc, zeroF, ArrayRef<int64_t>{i});
  return acc;
}

/// The loop over a tile's `count` K slices, carrying the accumulators
/// (then LoRA's U accumulators).
scf::ForOp MmaLoop::accumulatorLoop(Value count, bool withU) {
  KernelBuilder &b = env.b;
  SmallVector<Value> init = {zeroAccumulators(accType, env.plan.blockN / 2)};
  if (withU)
    init.push_back(zeroAccumulators(loraAccType, env.plan.loraRows / 2));
  return scf::ForOp::create(b, b.idx(0), count, b.idx(1), init);
}

// The 4 wgmmas (one commit group) of the K slice in stage `slot`, added to
// the accumulators `current`.
// `fresh`: the first wgmma overwrites `current` (scale-d = 0), as FP8's
// partial accumulators start each slice at zero.
// `half` (FP8 partials, HopperPlan::partialN): only B's rows from
// half * partialN on, into partialType.
Value MmaLoop::sliceMma(Value current, Value slot, Value *down, bool fresh,
                        int64_t half) {
  KernelBuilder &b = env.b;
  MLIRContext *ctx = b.getContext();
  const bool halves = half >= 0;
  const int64_t n = halves ? env.plan.partialN() : env.plan.blockN;
  Type resultType = halves ? partialType : accType;
  auto shape = NVVM::MMAShapeAttr::get(ctx, 64, n, env.plan.mmaK());
  auto elem = NVVM::WGMMATypesAttr::get(ctx, env.plan.elemType);
  auto elemB = NVVM::WGMMATypesAttr::get(ctx, env.plan.rhsElemType);
  auto f32Type = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
  auto one = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
  auto accumulate = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one);
  auto overwrite = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::zero);
  auto layoutA = NVVM::MMALayoutAttr::get(ctx, aLayout(env.plan.layout.lhs));
  auto layoutB = NVVM::MMALayoutAttr::get(ctx, bLayout(env.plan.layout.rhs));

  // A warpgroup's 64 A rows: 64 K-major rows, or (M-major) one 64-column
  // block, both 64 x 128 bytes on.
  Value aTile =
      b.add(env.stageA(slot), b.mul(warpgroup, b.idx(64 * kRowBytes)));
  // K-major B (every FP8 layout): row r of the tile is kRowBytes at r.
  Value bTile = env.stageB(slot);
  if (halves)
    bTile = b.add(bTile, b.idx(half * n * kRowBytes));
  bool mMajorA = env.plan.layout.lhs == LhsLayout::GroupRowsT;
  int64_t aStep = mMajorA ? 16 * kRowBytes : 32;
  NVVM::WgmmaFenceAlignedOp::create(b);
  // One wgmma per 32 bytes of K: 16 elements, or 32 of FP8.
  for (int64_t kk = 0; kk < kRowBytes / 32; ++kk) {
    Value descA = descriptor(b, b.add(aTile, b.idx(kk * aStep)), mMajorA);
    RhsLayout rhs = env.plan.layout.rhs;
    Value descB = descriptor(b, b.add(bTile, b.idx(kk * bStepBytes(rhs))),
                             env.plan.nMajorB());
    current = NVVM::WgmmaMmaAsyncOp::create(
        b, resultType, current, descA, descB, shape, elem, elemB, f32Type,
        fresh && kk == 0 ? overwrite : accumulate, one, one, layoutA, layoutB,
        NVVM::MMAIntOverflowAttr());
    if (down) {
      // LoRA: the same A rows times the stage's A_e rows (K-major, as an
      // [E, N, K] B tile), m64nRk16.
      auto loraShape =
          NVVM::MMAShapeAttr::get(ctx, 64, env.plan.loraRows, 16);
      Value descLora =
          descriptor(b, b.add(env.stageLora(slot), b.idx(kk * 32)));
      *down = NVVM::WgmmaMmaAsyncOp::create(
          b, loraAccType, *down, descA, descLora, loraShape, elem, elem,
          f32Type, accumulate, one, one, layoutA,
          NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col),
          NVVM::MMAIntOverflowAttr());
    }
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  return current;
}


Value MmaLoop::blockBarrierLoop(const TileState &t) {
  KernelBuilder &b = env.b;
  const int64_t ahead = env.plan.ahead(), S = env.plan.stages;
  Value count = env.slicesOf(t);
  auto kLoop = accumulatorLoop(count, env.plan.lora());
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToStart(kLoop.getBody());
  Value kt = kLoop.getInductionVar();
  Value current = kLoop.getRegionIterArgs()[0];
  Value down = env.plan.lora() ? kLoop.getRegionIterArgs()[1] : Value();
  // Slice kt has landed (for this thread's copies), is visible to the
  // async proxy wgmma reads through, and to the whole block.
  NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(ahead - 1));
  fenceAsyncShared(b);
  gpu::BarrierOp::create(b);
  // The slot refilled now was read by the wgmmas of slice kt - 2, which
  // every warpgroup waited for before the barrier.
  Value next = b.add(kt, b.idx(ahead));
  b.ifThen(b.ult(next, count),
           [&] { producer.loadStage(t, b.rem(next, b.idx(S)), next); });
  producer.commit();

  current = sliceMma(current, b.rem(kt, b.idx(S)), down ? &down : nullptr);
  NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(1));
  SmallVector<Value> carried = {current};
  if (down)
    carried.push_back(down);
  scf::YieldOp::create(b, carried);
  b.setInsertionPointAfter(kLoop);
  NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
  loraDown = env.plan.lora() ? kLoop.getResult(1) : Value();
  return kLoop.getResult(0);
}

// Thread fragment: row warpgroup*64 + warp*16 + lane/4 + 8h, columns
// 8j + 2(lane % 4) + q of U, in the 128-byte swizzle of the A tile.
void MmaLoop::storeScaledU(Value down, Value tileA, int64_t first,
                           int64_t width) {
  KernelBuilder &b = env.b;
  Type elemType = cast<MemRefType>(env.args.lhs.getType()).getElementType();
  Value view = env.sharedView(tileA, elemType, kBlockM * kBlockK);
  Value row0 = fragmentRow();
  Value pairCol = b.mul(b.rem(lane, b.idx(4)), b.idx(2));
  Value scaling = b.f32(env.plan.loraScaling);
  for (int64_t h = 0; h < 2; ++h) {
    Value row = b.add(row0, b.idx(8 * h));
    Value rowSwizzle = b.rem(row, b.idx(8));
    for (int64_t j = first / 8; j < (first + width) / 8; ++j) {
      SmallVector<Value> pair;
      for (int64_t q = 0; q < 2; ++q)
        pair.push_back(b.fmul(LLVM::ExtractValueOp::create(
                                  b, down, ArrayRef<int64_t>{4 * j + 2 * h + q})
                                  .getResult(),
                              scaling));
      Value chunk = arith::XOrIOp::create(b, b.idx(j - first / 8), rowSwizzle);
      b.storeVecF(pair, view,
                  {b.add(b.add(b.mul(row, b.idx(kBlockK)),
                               b.mul(chunk, b.idx(8))),
                         pairCol)});
    }
  }
}

Value MmaLoop::upMmas(Value current, Value tileA, Value tileB, int64_t width) {
  KernelBuilder &b = env.b;
  MLIRContext *ctx = b.getContext();
  auto shape = NVVM::MMAShapeAttr::get(ctx, 64, env.plan.blockN, 16);
  auto elem = NVVM::WGMMATypesAttr::get(ctx, env.plan.elemType);
  auto f32Type = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
  auto one = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
  auto accumulate = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one);
  auto kMajor = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row);
  auto bKMajor = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col);
  Value aTile = b.add(tileA, b.mul(warpgroup, b.idx(64 * kRowBytes)));
  NVVM::WgmmaFenceAlignedOp::create(b);
  for (int64_t kk = 0; kk < width / 16; ++kk)
    current = NVVM::WgmmaMmaAsyncOp::create(
        b, accType, current, descriptor(b, b.add(aTile, b.idx(kk * 32))),
        descriptor(b, b.add(tileB, b.idx(kk * 32))), shape, elem, elem,
        f32Type, accumulate, one, one, kMajor, bKMajor,
        NVVM::MMAIntOverflowAttr());
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
  return current;
}

// s · U goes to the last stage's A tile and B_e to its B tile, then R/16
// more wgmmas add U · B_eᵀ to the tile's accumulators. A stage row holds
// 64 columns, so ranks past 64 go through the stage in passes of 64.
Value MmaLoop::loraUp(const TileState &t, Value current, Value down) {
  KernelBuilder &b = env.b;
  const int64_t R = env.plan.loraRows;
  Value slot = b.idx(env.plan.stages - 1);
  for (int64_t first = 0; first < R; first += kBlockK) {
    // Rank columns [first, first + width) of U and of B_e in this pass.
    const int64_t width = std::min(R - first, kBlockK);
    storeScaledU(down, env.stageA(slot), first, width);
    producer.loadLoraUp(t, env.stageB(slot), first, width);
    producer.commit();
    NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(0));
    fenceAsyncShared(b);
    gpu::BarrierOp::create(b);
    current = upMmas(current, env.stageA(slot), env.stageB(slot), width);
    // The next pass, or the staged epilogue, writes the last stages next.
    gpu::BarrierOp::create(b);
  }
  return current;
}

// Each warpgroup's wgmmas read only its own 64 rows of s · U (written by
// loraSpecializedLoop for this tile or the first of its run), so a barrier
// of its 128 threads (named barrier 1 + warpgroup; 0 is the block's) makes
// them visible; the previous tile's reads of those rows were waited for by
// the same warpgroup. B_e comes from the producer (loadLoraUpTile).
Value MmaLoop::loraUpSpecialized(Value current, Value round) {
  KernelBuilder &b = env.b;
  const int64_t R = env.plan.loraRows;
  fenceAsyncShared(b);
  NVVM::BarrierOp::create(b, Type(), toI32(b, b.add(warpgroup, b.idx(1))),
                          b.i32(128), NVVM::BarrierReductionAttr(), Value());
  producer.waitPhase(env.loraBarrier(/*empty=*/false), round,
                     /*previous=*/false);
  fenceAsyncShared(b);
  current = upMmas(current, env.loraUpA(), env.loraUpB(), R);
  b.ifThen(leader, [&] {
    NVVM::MBarrierArriveOp::create(b, Type(), env.loraBarrier(true), Value());
  });
  return current;
}

// Two k-loops, chosen per tile, rather than a branch around each U wgmma:
// the U accumulators then live only in the loop that builds them.
Value MmaLoop::loraSpecializedLoop(const TileState &t, Value slices,
                                   Value count) {
  KernelBuilder &b = env.b;
  auto computeU = [&] {
    Value result = specializedLoop(slices, count, /*withU=*/true);
    storeScaledU(loraDown, env.loraUpA(), 0, env.plan.loraRows);
    return result;
  };
  if (!t.computesU)
    return computeU();
  return b.ifElse(t.computesU, accType, computeU,
                  [&] { return specializedLoop(slices, count); });
}

Value MmaLoop::specializedLoop(Value slices, Value count, bool withU) {
  KernelBuilder &b = env.b;
  auto kLoop = accumulatorLoop(count, withU);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(kLoop.getBody());
    Value kt = kLoop.getInductionVar();
    Value n = b.add(slices, kt);
    producer.waitRound(/*empty=*/false, n, /*previous=*/false);
    // The copies were generic-proxy writes; wgmma reads through the async
    // proxy.
    fenceAsyncShared(b);
    Value down = withU ? kLoop.getRegionIterArgs()[1] : Value();
    Value acc = sliceMma(kLoop.getRegionIterArgs()[0], producer.slotOf(n),
                         down ? &down : nullptr);
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(1));
    b.ifThen(b.ult(b.idx(0), kt), [&] { release(b.sub(n, b.idx(1))); });
    SmallVector<Value> carried = {acc};
    if (down)
      carried.push_back(down);
    scf::YieldOp::create(b, carried);
  }
  NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
  loraDown = withU ? kLoop.getResult(1) : Value();
  return kLoop.getResult(0);
}

Value MmaLoop::fragmentRow() {
  KernelBuilder &b = env.b;
  return b.add(b.add(b.mul(warpgroup, b.idx(64)), b.mul(warp, b.idx(16))),
               b.div(lane, b.idx(4)));
}

MmaLoop::ScaleSources MmaLoop::scaleSources(const TileState &t) {
  KernelBuilder &b = env.b;
  ScaleSources from;
  Value row0 = fragmentRow();
  if (env.plan.fp8WeightGrad()) {
    // Where (f32 elements) the stage's scales hold the thread's two rows
    // of A and its column pairs' first columns of B, after the 128 rows'
    // (rows and columns past the tile were zero-filled, as TMA zero-filled
    // their operand rows).
    for (int64_t h = 0; h < 2; ++h)
      from.rows.push_back(b.add(row0, b.idx(8 * h)));
    Value pair = b.mul(b.rem(lane, b.idx(4)), b.idx(2));
    for (int64_t j = 0; j < env.plan.blockN / 8; ++j)
      from.columns.push_back(b.add(pair, b.idx(kBlockM + 8 * j)));
    return from;
  }
  for (int64_t h = 0; h < 2; ++h) {
    Value inTile = b.add(row0, b.idx(8 * h));
    Value valid = b.ult(inTile, t.rowCount);
    Value row = b.add(t.rowStart, inTile);
    if (env.args.gather) {
      // The token of the row's slot (the lhs scales are the tokens').
      auto [slot, present] =
          b.loadSigned(env.args.gather, {b.select(valid, row, b.idx(0))});
      valid = b.land(valid, present);
      row = b.div(slot, b.idx(env.plan.slotsPerToken));
    }
    from.rows.push_back(b.select(valid, row, b.idx(0)));
    from.rowValid.push_back(valid);
  }
  const int64_t segments = env.plan.scaleSegments();
  for (int64_t s = 0; s < segments; ++s) {
    Value valid;
    Value n = producer.rhsColumn(
        t, b.idx(s * (env.plan.blockN / segments)), valid);
    from.blocks.push_back(
        b.select(valid, b.div(n, b.idx(kFp8BlockK)), b.idx(0)));
  }
  return from;
}

Value MmaLoop::scaleStageView(Value slot) {
  return env.sharedView(env.scaleStage(slot), env.b.getF32Type(),
                        env.plan.scaleStageBytes() / 4);
}

SmallVector<Value> MmaLoop::sliceScales(const TileState &t,
                                        const ScaleSources &from, Value kt) {
  KernelBuilder &b = env.b;
  if (env.plan.fp8WeightGrad()) {
    // Stage kt's scales (`kt` is its slot here): the two rows', then each
    // column pair's (8 bytes). At n = 256 the rows' only: promote reads
    // each column pair as it needs it (64 registers of them would not fit
    // beside the accumulators and partials).
    Value stage = scaleStageView(kt);
    SmallVector<Value> scales;
    for (Value row : from.rows)
      scales.push_back(b.loadF(stage, {row}));
    if (env.plan.blockN == env.plan.partialN())
      for (Value c : from.columns)
        llvm::append_range(scales, b.loadVecF(stage, {c}, 2));
    return scales;
  }
  SmallVector<Value> weights;
  for (Value block : from.blocks)
    weights.push_back(b.loadF(env.args.rhsScales, {t.group, block, kt}));
  SmallVector<Value> scales;
  for (int64_t h = 0; h < 2; ++h) {
    Value rowScale =
        b.select(from.rowValid[h], b.loadF(env.args.lhsScales, {from.rows[h], kt}),
                 zeroF);
    for (Value w : weights)
      scales.push_back(b.fmul(rowScale, w));
  }
  return scales;
}

// Accumulator 4j + 2h + q is fragment row h, tile column 8j + 2(lane % 4)
// + q: its segment is that column's. Partial i of the half at tile column
// `first` is accumulator i + first / 2.
Value MmaLoop::promote(Value acc, Value partial, ArrayRef<Value> scales,
                       int64_t first, const ScaleSources *from, Value stage) {
  KernelBuilder &b = env.b;
  if (env.plan.fp8WeightGrad()) {
    // sliceScales' rows, then column 2j + q's (from `scales`, or read from
    // the slice's `stage` here): the partial sum times both.
    for (int64_t j = 0; j < env.plan.partialN() / 8; ++j) {
      int64_t column = first / 8 + j;
      SmallVector<Value> pair =
          scales.size() > 2
              ? SmallVector<Value>(scales.slice(2 + 2 * column, 2))
              : b.loadVecF(stage, {from->columns[column]}, 2);
      for (int64_t q = 0; q < 2; ++q)
        for (int64_t h = 0; h < 2; ++h) {
          int64_t i = 4 * j + 2 * h + q, at = i + first / 2;
          Value p =
              LLVM::ExtractValueOp::create(b, partial, ArrayRef<int64_t>{i});
          Value a =
              LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{at});
          acc = LLVM::InsertValueOp::create(
              b, acc, LLVM::FMAOp::create(b, b.fmul(p, pair[q]), scales[h], a),
              ArrayRef<int64_t>{at});
        }
    }
    return acc;
  }
  const int64_t segments = env.plan.scaleSegments();
  const int64_t segmentWidth = env.plan.blockN / segments;
  for (int64_t j = 0; j < env.plan.partialN() / 8; ++j)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t q = 0; q < 2; ++q) {
        int64_t i = 4 * j + 2 * h + q, at = i + first / 2;
        Value p = LLVM::ExtractValueOp::create(b, partial, ArrayRef<int64_t>{i});
        Value a = LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{at});
        Value scale = scales[h * segments + (first + 8 * j) / segmentWidth];
        acc = LLVM::InsertValueOp::create(
            b, acc, LLVM::FMAOp::create(b, p, scale, a), ArrayRef<int64_t>{at});
      }
  return acc;
}

/// Ties `values` (an accumulator struct) to this point: an empty asm that
/// reads and rewrites every register, so that no read of a wgmma's result
/// moves above the wgmma wait before it (CUTLASS's fence_operand).
static Value fenceOperands(KernelBuilder &b, Value values) {
  auto type = cast<LLVM::LLVMStructType>(values.getType());
  int64_t n = type.getBody().size();
  SmallVector<Value> parts;
  std::string constraints;
  for (int64_t i = 0; i < n; ++i) {
    parts.push_back(
        LLVM::ExtractValueOp::create(b, values, ArrayRef<int64_t>{i}));
    constraints += (i ? ",=f" : "=f");
  }
  for (int64_t i = 0; i < n; ++i)
    constraints += "," + std::to_string(i);
  return LLVM::InlineAsmOp::create(
             b, type, parts, "", constraints, /*has_side_effects=*/true,
             /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr(), ArrayAttr())
      .getResult(0);
}

// The forward's and input gradient's scales are loaded (global, mostly
// L2) before the slice's stage is waited for. (Loading them two slices
// ahead, carried through the loop, ran 0.98-1.04x on the H200: ncu's
// long-scoreboard stalls stayed as they were, so those are the waits for
// the stages, not for the scales.) The weight gradient's 34 scales per
// thread come with the stage, read once it is full: loaded from global
// memory by every MMA thread in the slice that used them, a third of the
// MMA warps' stall cycles waited for them, and taking them from the stage
// ran 1.05-1.20x at the long reductions. The stage is released before the
// promotion, so the producer refills it meanwhile; with the weight
// gradient's scales in it, once the promotion has read them.
Value MmaLoop::scaledLoop(const TileState &t, Value slices, Value count) {
  KernelBuilder &b = env.b;
  const bool scalesInStage = env.plan.fp8WeightGrad();
  ScaleSources from = scaleSources(t);
  Value scratch = LLVM::UndefOp::create(b, partialType);
  auto kLoop = accumulatorLoop(count, /*withU=*/false);
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToStart(kLoop.getBody());
  Value kt = kLoop.getInductionVar();
  Value n = b.add(slices, kt);
  SmallVector<Value> scales;
  if (!scalesInStage)
    scales = sliceScales(t, from, kt);
  producer.waitRound(/*empty=*/false, n, /*previous=*/false);
  fenceAsyncShared(b);
  Value stage;
  if (scalesInStage) {
    scales = sliceScales(t, from, producer.slotOf(n));
    stage = scaleStageView(producer.slotOf(n));
  }
  // One partial set, 128 columns at a time: a half's promotion has read
  // the partials before the next half's wgmmas overwrite them.
  Value acc = kLoop.getRegionIterArgs()[0];
  const int64_t halves = env.plan.blockN / env.plan.partialN();
  for (int64_t half = 0; half < halves; ++half) {
    Value partial = sliceMma(scratch, producer.slotOf(n), /*down=*/nullptr,
                             /*fresh=*/true, halves > 1 ? half : -1);
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getI64IntegerAttr(0));
    partial = fenceOperands(b, partial);
    if (!scalesInStage && half == halves - 1)
      release(n);
    acc = promote(acc, partial, scales, half * env.plan.partialN(), &from,
                  stage);
    scratch = partial;
  }
  if (scalesInStage) {
    // Every lane's reads of the stage's scales before lane 0 frees it.
    NVVM::SyncWarpOp::create(b, b.i32(-1));
    release(n);
  }
  scf::YieldOp::create(b, acc);
  b.setInsertionPointAfter(kLoop);
  return kLoop.getResult(0);
}

// One arrival per MMA warp, by its lane 0: the warp's wgmma wait (aligned)
// has retired the reads of all its lanes. In a cluster the stage is also
// freed in the other block, whose multicasts write here.
void MmaLoop::placeReleasers() {
  KernelBuilder &b = env.b;
  leader = b.eq(lane, b.idx(0));
  partner = cluster.active() ? cluster.partnerRank() : Value();
}

void MmaLoop::release(Value n) {
  KernelBuilder &b = env.b;
  b.ifThen(leader, [&] {
    Value local = env.stageBarrier(true, producer.slotOf(n));
    NVVM::MBarrierArriveOp::create(b, Type(), local, Value());
    if (cluster.active())
      cluster.arriveRemote(local, partner);
  });
}
