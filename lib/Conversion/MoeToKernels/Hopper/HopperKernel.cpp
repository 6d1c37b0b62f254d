//===- HopperKernel.cpp - The sm_90a kernels composed from their parts ----===//
//
// Part of moec. The block-barrier and the warp-specialized kernels of
// HopperKernel.h as compositions of the schedule, the producer pipeline,
// the MMA loop, the epilogue and the cluster part, plus the state they
// share (arguments, shared-memory layout).
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

Value hopper::toI32(KernelBuilder &b, Value index) {
  return arith::IndexCastOp::create(b, b.getI32Type(), index).getResult();
}

Value hopper::bitAnd(KernelBuilder &b, Value x, int64_t mask) {
  return arith::AndIOp::create(b, x, b.idx(mask));
}

void hopper::fenceAsyncShared(KernelBuilder &b) {
  MLIRContext *ctx = b.getContext();
  NVVM::FenceProxyOp::create(
      b, NVVM::ProxyKindAttr::get(ctx, NVVM::ProxyKind::async_shared),
      NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
}

KernelArgs::KernelArgs(ValueRange a, const HopperArgs &pos)
    : lhs(a[0]), rhs(a[1]), out(a[2]), rows(a.back()) {
  auto at = [&](int position) { return position >= 0 ? a[position] : Value(); };
  offsets = at(pos.offsets);
  gather = at(pos.gather);
  bias = at(pos.bias);
  rowScale = at(pos.rowScale);
  swigluInput = at(pos.swigluInput);
  rhsMap = at(pos.rhsMap);
  lhsMap = at(pos.lhsMap);
  loraA = at(pos.loraA);
  loraB = at(pos.loraB);
  accumulate = at(pos.accumulate);
  lhsScales = at(pos.lhsScales);
  rhsScales = at(pos.rhsScales);
}

void KernelEnv::readShapes() {
  outWidth =
      b.dim(args.out, cast<MemRefType>(args.out.getType()).getRank() - 1);
  if (plan.swigluGrad)
    outWidth = b.div(outWidth, b.idx(2));
  auto rhsType = cast<MemRefType>(args.rhs.getType());
  rhsRows = b.dim(args.rhs, rhsType.getRank() - 2);
  rhsWidth = b.dim(args.rhs, rhsType.getRank() - 1);
}

void KernelEnv::carveSharedMemory() {
  const int64_t G = plan.groups();
  auto workgroup =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  smem = gpu::DynamicSharedMemoryOp::create(
      b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                         MemRefLayoutAttrInterface(), workgroup));
  auto tableType = MemRefType::get({ShapedType::kDynamic}, b.getI32Type(),
                                   MemRefLayoutAttrInterface(), workgroup);
  tables[0] = memref::ViewOp::create(b, tableType, smem, b.idx(0),
                                     ValueRange{b.idx(G)});
  tables[1] = memref::ViewOp::create(b, tableType, smem, b.idx(G * 4),
                                     ValueRange{b.idx(G)});
  groupStarts = memref::ViewOp::create(b, tableType, smem, b.idx(G * 8),
                                       ValueRange{b.idx(G + 1)});
  barrierBase = b.add(addressOf(b, smem), b.idx(plan.tableBytes()));
  stageBase = bitAnd(
      b, b.add(barrierBase, b.idx(plan.barrierBytes() + 1023)), ~1023);
}

Value KernelEnv::slicesOf(const TileState &t) {
  if (!plan.weightGrad())
    return b.idx(plan.kSlices());
  return b.ceilDiv(t.reduceRows, b.idx(plan.sliceK()));
}

SmallVector<Value> KernelEnv::outIndices(const TileState &t, Value row,
                                         Value col) {
  // [E, K, N] per expert ([K, E, N] with experts_in_columns); a dense Aᵀ·B
  // (one group) is [K, N].
  if (plan.weightGrad() && cast<MemRefType>(args.out.getType()).getRank() == 3)
    return plan.layout.expertsInColumns
               ? SmallVector<Value>{row, t.group, col}
               : SmallVector<Value>{t.group, row, col};
  return {row, col};
}

Value KernelEnv::stageA(Value slot) {
  return b.add(stageBase, b.mul(slot, b.idx(plan.stageBytes())));
}

Value KernelEnv::stageB(Value slot) {
  return b.add(stageA(slot), b.idx(kBlockM * kRowBytes));
}

Value KernelEnv::stageLora(Value slot) {
  return b.add(stageB(slot), b.idx(plan.blockN * kRowBytes));
}

Value KernelEnv::stageBarrier(bool empty, Value slot) {
  Value index = empty ? b.add(slot, b.idx(plan.stages)) : slot;
  return pointerAt(b, b.add(barrierBase, b.mul(index, b.idx(8))), 3);
}

Value KernelEnv::loraUpA() {
  return b.add(stageBase, b.idx(plan.stages * plan.stageBytes()));
}

Value KernelEnv::loraUpB() {
  return b.add(loraUpA(), b.idx(kBlockM * kRowBytes));
}

// After the stages' full and empty barriers.
Value KernelEnv::loraBarrier(bool empty) {
  return pointerAt(
      b, b.add(barrierBase, b.idx((2 * plan.stages + (empty ? 1 : 0)) * 8)),
      3);
}

Value KernelEnv::stagingTile() {
  return b.add(stageBase, b.idx(plan.stages * plan.stageBytes() +
                                plan.loraUpBytes()));
}

Value KernelEnv::scaleStage(Value slot) {
  return b.add(b.add(stagingTile(), b.idx(plan.stagingBytes())),
               b.mul(slot, b.idx(plan.scaleStageBytes())));
}

Value KernelEnv::sharedView(Value address, Type elem, int64_t count) {
  auto workgroup =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  return memref::ViewOp::create(
      b,
      MemRefType::get({ShapedType::kDynamic}, elem,
                      MemRefLayoutAttrInterface(), workgroup),
      smem, b.sub(address, addressOf(b, smem)), ValueRange{b.idx(count)});
}

SmallVector<Value> TileState::values() const {
  SmallVector<Value> v = {group, rowStart, rowCount, colStart};
  if (reduceStart)
    v.append({reduceStart, reduceRows});
  llvm::append_range(v, lhsRows);
  return v;
}

TileState TileState::from(ValueRange v, bool reduce) {
  TileState t{v[0], v[1], v[2], v[3], {}, {}, {}};
  size_t next = 4;
  if (reduce) {
    t.reduceStart = v[4];
    t.reduceRows = v[5];
    next = 6;
  }
  t.lhsRows.assign(v.begin() + next, v.end());
  return t;
}

HopperKernel::HopperKernel(KernelBuilder &b, ValueRange args, Value block,
                           Value thread, const HopperPlan &plan,
                           const HopperArgs &pos)
    : env{b, plan, KernelArgs(args, pos), block, thread},
      cluster(env), schedule(env, cluster), producer(env, cluster),
      mma(env, producer, cluster), epilogue(env, mma) {
  assert((plan.cluster == 1 || plan.warpSpecialized) &&
         "clusters are warp-specialized");
}

void HopperKernel::emit() {
  emitPreamble();
  if (env.plan.warpSpecialized)
    emitWarpSpecialized();
  else
    emitBlockBarrier();
}

void HopperKernel::emitPreamble() {
  cluster.place();
  env.readShapes();
  env.carveSharedMemory();
  if (env.plan.warpSpecialized)
    producer.initBarriers();
  // Every block of the cluster has its barriers ready; this also keeps the
  // blocks resident together from here (cluster barriers at the end).
  if (cluster.active())
    cluster.sync();
  schedule.scan();
  producer.placeThreads();
  mma.placeThreads();
  producer.placeInvalid();
  schedule.placeGrid();
  epilogue.placeFragment();
}

TileState HopperKernel::tileState(Value tile, bool withRows) {
  TileState t = schedule.locate(tile);
  // The weight gradient's gathered rows change every slice: looked up
  // there (ProducerPipeline::groupRow).
  if (env.args.gather && withRows && !env.plan.weightGrad())
    producer.lookupRows(t);
  return t;
}

TileState HopperKernel::noTile() {
  TileState t = schedule.none();
  producer.clearRows(t);
  return t;
}

TileState HopperKernel::nextState(Value tile) {
  KernelBuilder &b = env.b;
  Value next = b.add(tile, schedule.gridSize);
  auto branch =
      scf::IfOp::create(b, producer.stateTypes(),
                        b.ult(next, schedule.tilesTotal), /*withElse=*/true);
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToStart(&branch.getThenRegion().front());
  scf::YieldOp::create(b, tileState(next).values());
  b.setInsertionPointToStart(&branch.getElseRegion().front());
  scf::YieldOp::create(b, noTile().values());
  return TileState::from(branch.getResults(), env.plan.weightGrad());
}

// The persistent loop: tiles block, block + gridDim, ... The first tile's
// prologue goes out before the loop; each iteration finds the next tile
// first (its lookups overlap the wgmmas), issues its prologue once this
// tile's wgmmas are done, then stores this tile.
void HopperKernel::emitBlockBarrier() {
  KernelBuilder &b = env.b;
  Value gridSize = schedule.gridSize;
  TileState first = nextState(b.sub(env.block, gridSize));
  producer.loadPrologue(first);
  auto loop = scf::ForOp::create(b, env.block, schedule.tilesTotal, gridSize,
                                 first.values());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  TileState t =
      TileState::from(loop.getRegionIterArgs(), env.plan.weightGrad());
  TileState next = nextState(loop.getInductionVar());
  auto branch = scf::IfOp::create(b, b.eq(t.group, b.idx(env.plan.experts)),
                                  /*withElse=*/true);
  b.setInsertionPointToStart(&branch.getThenRegion().front());
  producer.loadPrologue(next);
  epilogue.zeroFill(t);
  b.setInsertionPointToStart(&branch.getElseRegion().front());
  epilogue.prefetchAccumulate(t);
  Value result = mma.blockBarrierLoop(t);
  // Every warpgroup is done with the stages before they are refilled.
  gpu::BarrierOp::create(b);
  // LoRA: through the last stage, which the next tile's prologue leaves
  // free (its slice `stages - 1` is copied after a barrier its k-loop
  // passes once every warpgroup has waited for these wgmmas).
  if (env.plan.lora())
    result = mma.loraUp(t, result, mma.loraDown);
  producer.loadPrologue(next);
  epilogue.emit(t, result);
  b.setInsertionPointAfter(branch);
  scf::YieldOp::create(b, next.values());
}

void HopperKernel::tileLoop(
    const std::function<std::pair<Value, Value>(Value, Value, Value)> &body) {
  KernelBuilder &b = env.b;
  // Only a kernel with LoRA tiles counts rounds.
  SmallVector<Value> init = {b.idx(0)};
  if (env.plan.loraUpTiles())
    init.push_back(b.idx(0));
  auto loop = scf::ForOp::create(b, cluster.firstUnit, schedule.loopEnd,
                                 schedule.tileStride, init);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  ValueRange carried = loop.getRegionIterArgs();
  auto [slices, rounds] = body(loop.getInductionVar(), carried[0],
                               carried.size() > 1 ? carried[1] : Value());
  SmallVector<Value> next = {slices};
  if (rounds)
    next.push_back(rounds);
  scf::YieldOp::create(b, next);
}

Value HopperKernel::nextRound(Value rounds, Value expert) {
  KernelBuilder &b = env.b;
  if (!rounds)
    return rounds;
  return b.add(rounds, b.select(expert, b.idx(1), b.idx(0)));
}

static void setMaxRegisters(KernelBuilder &b, int64_t count,
                            NVVM::SetMaxRegisterAction action) {
  NVVM::SetMaxRegisterOp::create(
      b, b.getI32IntegerAttr(count),
      NVVM::SetMaxRegisterActionAttr::get(b.getContext(), action));
}

// Both roles walk the same tiles and count the K slices they pass through
// the stages (ProducerPipeline::waitRound).
void HopperKernel::emitWarpSpecialized() {
  KernelBuilder &b = env.b;
  auto roles = scf::IfOp::create(b, b.ult(env.thread, b.idx(kProducerThreads)),
                                 /*withElse=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&roles.getThenRegion().front());
  producerRole();
  b.setInsertionPointToStart(&roles.getElseRegion().front());
  consumerRole();
  // No block leaves while its partner may still multicast into its shared
  // memory or arrive on its barriers.
  if (cluster.active()) {
    b.setInsertionPointAfter(roles);
    cluster.sync();
  }
}

// Producer: for each slice, wait until its stage is free, copy, and let the
// stage's full barrier count the copies' completion.
void HopperKernel::producerRole() {
  KernelBuilder &b = env.b;
  setMaxRegisters(b, env.plan.producerRegisters,
                  NVVM::SetMaxRegisterAction::decrease);
  tileLoop([&](Value tile, Value slices, Value rounds) {
    TileState t = tileState(tile);
    Value expert = b.ult(t.group, b.idx(env.plan.experts));
    Value end = b.ifElse(
        expert, b.getIndexType(),
        [&] {
          Value next = producer.produceTile(t, slices);
          if (env.plan.loraUpTiles())
            producer.loadLoraUpTile(t, rounds);
          return next;
        },
        [&] { return slices; });
    return std::pair(end, nextRound(rounds, expert));
  });
  producer.drain();
}

// MMA warpgroups: wgmmas on each slice once it has landed; a stage is
// released once the wgmmas reading it are done (one group stays in flight),
// then the tile's epilogue from registers while the producer already fills
// the stages with the next tile.
void HopperKernel::consumerRole() {
  KernelBuilder &b = env.b;
  setMaxRegisters(b, env.plan.mmaRegisters,
                  NVVM::SetMaxRegisterAction::increase);
  mma.placeReleasers();
  tileLoop([&](Value tile, Value slices, Value rounds) {
    TileState t = tileState(tile, /*withRows=*/false);
    Value expert = b.ult(t.group, b.idx(env.plan.experts));
    Value end = b.ifElse(
        expert, b.getIndexType(),
        [&] {
          Value count = env.slicesOf(t);
          epilogue.prefetchAccumulate(t);
          Value result =
              env.plan.blockScales ? mma.scaledLoop(t, slices, count)
              : env.plan.loraUpTiles()
                  ? mma.loraSpecializedLoop(t, slices, count)
                  : mma.specializedLoop(slices, count);
          Value end = b.add(slices, count);
          // A weight-gradient tile of an expert without rows used no stage;
          // the scaled loop has released all of its own.
          if (env.plan.weightGrad() && !env.plan.blockScales)
            b.ifThen(b.ult(b.idx(0), count),
                     [&] { mma.release(b.sub(end, b.idx(1))); });
          else if (!env.plan.blockScales)
            mma.release(b.sub(end, b.idx(1)));
          if (env.plan.loraUpTiles())
            result = mma.loraUpSpecialized(result, rounds);
          epilogue.emit(t, result);
          return end;
        },
        [&] {
          epilogue.zeroFill(t);
          return slices;
        });
    return std::pair(end, nextRound(rounds, expert));
  });
  epilogue.drain();
}
