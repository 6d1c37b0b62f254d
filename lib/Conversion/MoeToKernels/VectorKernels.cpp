//===- VectorKernels.cpp - Vectorized kernels of the bandwidth-bound ops --===//
//
// Part of moec. permute, unpermute, swiglu(_grad), quantize and dequantize
// move bytes and do little arithmetic, so their speed is the share of the
// memory bandwidth they reach. That takes wide accesses: each thread here
// owns a chunk of one row (16 bytes of the narrowest element it touches)
// instead of one element, so that a warp reads and writes whole cache lines
// with 16-byte vector loads and stores, and the per-row work (slot lookup,
// expert search, scale) is paid once per chunk. Row-wise FP8 groups stay in
// registers between the amax and the scaling. Column-wise groups on GPUs
// hold a 128-row scale block in a block of 8 warps (workgroup memory,
// barriers); elsewhere they are read straight down the columns twice, the
// second time from L2.
//
// Apart from that column-wise block kernel and its one-block scan (GPU
// targets only), no shared memory and no intra-block synchronization: these
// kernels run on every backend, the host included, so the host tests check
// them too. Each generator returns std::nullopt where the shapes do not
// allow the vector accesses (a dynamic or indivisible row length);
// Kernels.cpp then emits the scalar kernel.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

using Lowered = std::optional<LogicalResult>;

bool isFloat(Type type) { return isa<FloatType>(type); }

} // namespace

int64_t moec::kernels::chunkWidth(std::optional<int64_t> rowLength,
                                  std::initializer_list<Type> types) {
  int64_t width = 0;
  for (Type t : types) {
    int64_t w = KernelBuilder::vectorWidth(t);
    if (!w || !isFloat(t))
      return 0;
    width = std::max(width, w);
  }
  if (!rowLength || *rowLength % width)
    return 0;
  return width;
}

namespace {

/// Work items per thread of the row-wise quantize, FP8 dequantize and NF4
/// kernels (launchUnrolled). On the H200 1, 2 and 4 came within 2 % of each
/// other; 2 was never the slowest.
constexpr int64_t kRowwiseUnroll = 2;

/// The rest of a work item's kernel body once its loads are issued;
/// `active` says whether the item is a real one (see launchUnrolled).
using ItemRest = std::function<void(Value active)>;
/// Emits the loads of one work item (its index clamped into range) and
/// returns the rest of its work.
using ItemLoads =
    std::function<ItemRest(KernelBuilder &, ValueRange args, Value item)>;

/// Launches `unroll` work items per thread, a block's width apart (so that
/// every step of a warp stays coalesced), and issues the loads of all of
/// them before the rest of any: the compiler may not move loads above
/// stores to buffers that may alias, and one 16-byte load per thread keeps
/// too few bytes in flight to reach the copy bandwidth. Items past `count`
/// load the last item again; their rest runs with `active` false, so that
/// warp shuffles in it see every lane.
LogicalResult launchUnrolled(LoweringContext &ctx, StringRef suffix,
                             Value count, moe::TileAttr tile, int64_t unroll,
                             ValueRange operands, const ItemLoads &loads) {
  KernelBuilder &h = ctx.host();
  int64_t threads = tile.getThreads();
  SmallVector<Value> all(operands);
  all.push_back(count);
  return ctx.launch(
      suffix, h.ceilDiv(count, h.idx(threads * unroll)), tile, all,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value n = a.back();
        Value base = b.mul(block, b.idx(threads * unroll));
        SmallVector<ItemRest> rests;
        SmallVector<Value> active;
        for (int64_t u = 0; u < unroll; ++u) {
          Value id = b.add(base, b.add(b.idx(u * threads), thread));
          active.push_back(b.ult(id, n));
          rests.push_back(
              loads(b, a.drop_back(), b.minIdx(id, b.sub(n, b.idx(1)))));
        }
        for (int64_t u = 0; u < unroll; ++u)
          rests[u](active[u]);
      });
}

//===----------------------------------------------------------------------===//
// permute / unpermute
//===----------------------------------------------------------------------===//

Lowered lowerPermute(moe::PermuteOp op, moe::TileAttr tile, BufferMap buffer,
                     LoweringContext &ctx) {
  Value tokens = buffer(op.getTokens()), rows = buffer(op.getRows());
  Value probs = buffer(op.getProbs()), scales = buffer(op.getScales());
  Type elem = elementType(rows);
  if (elementType(tokens) != elem)
    return std::nullopt;
  // A copy: any element type with a vector width moves as raw bits.
  int64_t width = KernelBuilder::vectorWidth(elem);
  std::optional<int64_t> hidden = staticDim(rows, 1);
  if (!width || !hidden || *hidden % width)
    return std::nullopt;
  int64_t chunks = *hidden / width;
  Value outProbs = buffer(op.getPermutedProbs());
  Value outScales = buffer(op.getPermutedScales());
  if (scales) {
    std::optional<int64_t> numScales = staticDim(outScales, 1);
    if (!numScales || *numScales > chunks)
      return std::nullopt;
  }

  KernelBuilder &h = ctx.host();
  Value slots = buffer(op.getSlots()), offsets = buffer(op.getOffsets());
  int64_t k = op.getK();
  // Token order: each token's chunk is read once and written to its k rows.
  // (Row order would read every token k times, and the rows written in
  // between evict it from L2.) The rows come from the inverse map:
  // sort_by_expert's `positions` when given, else built here.
  SmallVector<Value> tokenSizes = ctx.sizes(tokens);
  Value numSlots = h.mul(tokenSizes[0], h.idx(k));
  Value positions = buffer(op.getPositions());
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, slots, offsets, numSlots, positions);
  if (failed(inverse))
    return failure();
  SmallVector<Value> operands = {tokens, *inverse, rows};
  if (probs)
    operands.append({probs, outProbs});
  if (scales)
    operands.append({scales, outScales});
  // How far ahead the token rows are prefetched: 6 MiB of tokens. On the
  // H200 (bench/results/memory-bound-h200.md) 2 - 6 MiB gained, 14 - 16 MiB
  // lost (the prefetched rows left L2 before their turn).
  constexpr int64_t kPrefetchBytes = 6 << 20;
  int64_t rowBytes = *hidden * elem.getIntOrFloatBitWidth() / 8;
  int64_t prefetchTokens = std::max<int64_t>(1, kPrefetchBytes / rowBytes);
  if (failed(launchPerItem(
          ctx, "scatter_vec", h.mul(tokenSizes[0], h.idx(chunks)), tile,
          operands, [&](KernelBuilder &b, ValueRange a, Value id) {
            Value t = b.div(id, b.idx(chunks));
            Value chunk = b.rem(id, b.idx(chunks));
            Value c = b.mul(chunk, b.idx(width));
            // The token `prefetchTokens` ahead goes to L2 now, so that its
            // later load hits L2 instead of queuing for DRAM behind this
            // kernel's stream of row writes: +2 - 3 points of the copy
            // bandwidth on the H200. One bulk prefetch of the whole row by
            // the token's first thread: 0.1 - 0.7 points over one prefetch
            // per 128-byte line.
            Value ahead = b.add(t, b.idx(prefetchTokens));
            b.ifThen(b.land(b.eq(chunk, b.idx(0)),
                            b.ult(ahead, b.dim(a[0], 0))),
                     [&] { b.prefetchL2(a[0], {ahead, b.idx(0)}, rowBytes); });
            // Every load before the first store: the stores may alias the
            // map as far as the compiler knows, so a load after a store
            // waits for it.
            Value v = b.loadVec(a[0], {t, c}, width);
            SmallVector<std::pair<Value, Value>> rowOf;
            for (int64_t j = 0; j < k; ++j)
              rowOf.push_back(
                  b.loadSigned(a[1], {b.add(b.mul(t, b.idx(k)), b.idx(j))}));
            // Streaming stores: 1.1 - 1.4 points of the copy bandwidth over
            // plain ones on the H200 (the other kernels gained nothing or
            // lost up to 4 points with them).
            for (auto [r, valid] : rowOf)
              b.ifThen(valid, [&] { b.storeVecStreaming(v, a[2], {r, c}); });
            // The token's first thread carries its probabilities, the
            // first `numScales` threads its FP8 scales.
            unsigned next = 3;
            if (probs) {
              Value in = a[next], out = a[next + 1];
              next += 2;
              b.ifThen(b.eq(chunk, b.idx(0)), [&] {
                SmallVector<Value> p;
                for (int64_t j = 0; j < k; ++j)
                  p.push_back(b.loadF(in, {t, b.idx(j)}));
                for (int64_t j = 0; j < k; ++j)
                  b.ifThen(rowOf[j].second,
                           [&] { b.storeF(p[j], out, {rowOf[j].first}); });
              });
            }
            if (scales) {
              Value in = a[next], out = a[next + 1];
              b.ifThen(b.ult(chunk, b.dim(out, 1)), [&] {
                Value scale = b.loadF(in, {t, chunk});
                for (auto [r, valid] : rowOf)
                  b.ifThen(valid, [&] { b.storeF(scale, out, {r, chunk}); });
              });
            }
          })))
    return failure();

  // Padding rows, and rows past the last group, are zero: one thread per
  // row, which leaves at once for a row that holds a token. With
  // `positions` every slot has a row, so there are padding rows only when
  // there are more rows than slots: else the grid is 0 and nothing runs.
  Value numRows = ctx.sizes(rows)[0];
  Value padItems =
      positions ? h.mul(numRows, h.minIdx(h.idx(1),
                                          h.div(numRows,
                                                h.add(numSlots, h.idx(1)))))
                : numRows;
  SmallVector<Value> padOperands = {slots, offsets, rows};
  if (probs)
    padOperands.push_back(outProbs);
  if (scales)
    padOperands.push_back(outScales);
  return launchPerItem(
      ctx, "pad", padItems, tile, padOperands,
      [&](KernelBuilder &b, ValueRange a, Value r) {
        b.ifThen(isPaddingRow(b, a[0], a[1], r), [&] {
          Value zeros = b.zeroVec(VectorType::get({width}, elem));
          b.loop(b.idx(0), b.idx(chunks), [&](Value i) {
            b.storeVec(zeros, a[2], {r, b.mul(i, b.idx(width))});
          });
          unsigned next = 3;
          if (probs)
            b.storeF(b.f32(0), a[next++], {r});
          if (scales)
            b.loop(b.idx(0), b.dim(a[next], 1), [&](Value i) {
              b.storeF(b.f32(0), a[next], {r, i});
            });
        });
      });
}

Lowered lowerUnpermute(moe::UnpermuteOp op, moe::TileAttr tile,
                       BufferMap buffer, LoweringContext &ctx) {
  return emitCombine(ctx, tile, buffer(op.getRows()), buffer(op.getSlots()),
                     buffer(op.getOffsets()), buffer(op.getWeights()),
                     buffer(op.getOut()), op.getK(),
                     buffer(op.getPositions()));
}

} // namespace

std::optional<LogicalResult>
moec::kernels::emitCombine(LoweringContext &ctx, moe::TileAttr tile,
                           Value rows, Value slots, Value offsets,
                           Value weights, Value out, int64_t k,
                           Value positions) {
  std::optional<int64_t> hidden = staticDim(out, 1);
  int64_t width =
      chunkWidth(hidden, {elementType(rows), elementType(out)});
  if (!width)
    return std::nullopt;
  int64_t chunks = *hidden / width;

  KernelBuilder &h = ctx.host();
  SmallVector<Value> outSizes = ctx.sizes(out);
  Value numSlots = h.mul(outSizes[0], h.idx(k));
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, slots, offsets, numSlots, positions);
  if (failed(inverse))
    return failure();
  SmallVector<Value> operands = {rows, *inverse, out};
  if (weights)
    operands.push_back(weights);
  return launchPerItem(
      ctx, "combine_vec", h.mul(outSizes[0], h.idx(chunks)), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value t = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto f32x = VectorType::get({width}, b.getF32Type());
        // The k rows of the token, weighted, summed in f32. The loads are
        // unconditional (a missing row reads row 0 and is dropped by the
        // select), so that all k are in flight at once.
        Value acc = b.zeroVec(f32x);
        for (int64_t j = 0; j < k; ++j) {
          auto [r, valid] = b.loadSigned(a[1], {b.add(b.mul(t, b.idx(k)),
                                                      b.idx(j))});
          Value v = b.loadVecF32(a[0], {b.select(valid, r, b.idx(0)), c},
                                 width);
          if (weights)
            v = arith::MulFOp::create(
                b, v,
                vector::BroadcastOp::create(b, f32x,
                                            b.loadF(a[3], {t, b.idx(j)})));
          acc = arith::AddFOp::create(
              b, acc, b.select(valid, v, b.zeroVec(f32x)));
        }
        b.storeVecF32(acc, a[2], {t, c});
      });
}

namespace {

//===----------------------------------------------------------------------===//
// swiglu / swiglu_grad
//===----------------------------------------------------------------------===//

/// The gate and up values of output columns [c, c + width) of row r.
std::pair<SmallVector<Value>, SmallVector<Value>>
loadGateUp(KernelBuilder &b, moe::GateUpLayout layout, Value in, Value r,
           Value c, Value half, int64_t width) {
  if (layout == moe::GateUpLayout::halves)
    return {b.loadVecF(in, {r, c}, width),
            b.loadVecF(in, {r, b.add(c, half)}, width)};
  SmallVector<Value> both =
      b.loadVecF(in, {r, b.mul(c, b.idx(2))}, 2 * width);
  SmallVector<Value> gate, up;
  for (int64_t i = 0; i < width; ++i) {
    gate.push_back(both[2 * i]);
    up.push_back(both[2 * i + 1]);
  }
  return {gate, up};
}

Lowered lowerSwiglu(moe::SwigluOp op, moe::TileAttr tile, BufferMap buffer,
                    LoweringContext &ctx) {
  Value in = buffer(op.getInput()), out = buffer(op.getOutput());
  std::optional<int64_t> half = staticDim(out, 1);
  int64_t width = chunkWidth(half, {elementType(in), elementType(out)});
  if (!width)
    return std::nullopt;
  int64_t chunks = *half / width;
  moe::GateUpLayout layout = op.getLayout();
  KernelBuilder &h = ctx.host();
  return launchPerItem(
      ctx, "vec", h.mul(ctx.sizes(out)[0], h.idx(chunks)), tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto [gate, up] =
            loadGateUp(b, layout, a[0], r, c, b.idx(*half), width);
        SmallVector<Value> y;
        for (int64_t i = 0; i < width; ++i)
          y.push_back(b.fmul(b.fmul(gate[i], b.sigmoid(gate[i])), up[i]));
        b.storeVecF(y, a[1], {r, c});
      });
}

Lowered lowerSwigluGrad(moe::SwigluGradOp op, moe::TileAttr tile,
                        BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), dy = buffer(op.getGradOutput());
  Value out = buffer(op.getGradInput());
  std::optional<int64_t> half = staticDim(dy, 1);
  int64_t width = chunkWidth(
      half, {elementType(in), elementType(dy), elementType(out)});
  if (!width)
    return std::nullopt;
  int64_t chunks = *half / width;
  moe::GateUpLayout layout = op.getLayout();
  KernelBuilder &h = ctx.host();
  return launchPerItem(
      ctx, "vec", h.mul(ctx.sizes(dy)[0], h.idx(chunks)), tile, {in, dy, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        Value halfV = b.idx(*half);
        auto [gate, up] = loadGateUp(b, layout, a[0], r, c, halfV, width);
        SmallVector<Value> d = b.loadVecF(a[1], {r, c}, width);
        SmallVector<Value> dGate, dUp, both;
        Value one = b.f32(1);
        for (int64_t i = 0; i < width; ++i) {
          // d/dg silu(g)·u = u·s·(1 + g·(1 − s)); d/du = g·s.
          Value g = gate[i], u = up[i], s = b.sigmoid(g);
          dGate.push_back(b.fmul(b.fmul(d[i], b.fmul(u, s)),
                                 b.fadd(one, b.fmul(g, b.fsub(one, s)))));
          dUp.push_back(b.fmul(d[i], b.fmul(g, s)));
          both.append({dGate.back(), dUp.back()});
        }
        if (layout == moe::GateUpLayout::halves) {
          b.storeVecF(dGate, a[2], {r, c});
          b.storeVecF(dUp, a[2], {r, b.add(c, halfV)});
        } else {
          b.storeVecF(both, a[2], {r, b.mul(c, b.idx(2))});
        }
      });
}

//===----------------------------------------------------------------------===//
// quantize / dequantize (FP8)
//===----------------------------------------------------------------------===//

/// Most input elements one thread keeps in registers for a row-wise group.
constexpr int64_t kMaxGroupRegisters = 128;

/// `blockEnds[e]` = number of column-wise scale blocks of experts <= e
/// (each expert group split into blocks of `group` rows). On GPUs one block
/// with a thread per expert scans the block counts (warp shuffles, then the
/// warps' totals through workgroup memory); elsewhere, or past 1024 experts,
/// each thread sums the counts before its own.
LogicalResult emitBlockEnds(LoweringContext &ctx, moe::TileAttr tile,
                            Value offsets, Value blockEnds, int64_t group) {
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  KernelBuilder &h = ctx.host();
  auto blocksOf = [&](KernelBuilder &b, Value offsets, Value e) {
    Value rows = b.sub(b.loadIdx(offsets, {e}), groupStart(b, offsets, e));
    return b.ceilDiv(rows, b.idx(group));
  };
  int64_t threads = (experts + kWarp - 1) / kWarp * kWarp;
  if (!h.hasWarpShuffles() || threads > 1024)
    return launchPerItem(
        ctx, "block_ends", h.idx(experts), tile, {offsets, blockEnds},
        [&](KernelBuilder &b, ValueRange a, Value e) {
          Value total = b.loop(
              b.idx(0), b.add(e, b.idx(1)), {b.idx(0)},
              [&](Value i, ValueRange it) -> SmallVector<Value> {
                return {b.add(it[0], blocksOf(b, a[0], i))};
              })[0];
          b.storeI32(total, a[1], {e});
        });
  int64_t warps = threads / kWarp;
  return ctx.launch(
      "block_ends", h.idx(1),
      moe::TileAttr::get(h.getContext(), 1, 1, 1, threads),
      {offsets, blockEnds},
      [&](KernelBuilder &b, ValueRange a, Value, Value thread) {
        Type i32 = b.getI32Type();
        Value live = b.ult(thread, b.idx(experts));
        Value e = b.minIdx(thread, b.idx(experts - 1));
        Value count = arith::IndexCastOp::create(
            b, i32, b.select(live, blocksOf(b, a[0], e), b.idx(0)));
        Value lane = b.rem(thread, b.idx(kWarp));
        for (int64_t d = 1; d < kWarp; d *= 2) {
          Value up = gpu::ShuffleOp::create(b, count, d, kWarp,
                                            gpu::ShuffleMode::UP)
                         .getShuffleResult();
          count = arith::AddIOp::create(
              b, count, b.select(b.ult(lane, b.idx(d)), b.i32(0), up));
        }
        auto workgroup = gpu::AddressSpaceAttr::get(
            b.getContext(), gpu::AddressSpace::Workgroup);
        Value totals = memref::ViewOp::create(
            b,
            MemRefType::get({warps}, i32, MemRefLayoutAttrInterface(),
                            workgroup),
            gpu::DynamicSharedMemoryOp::create(
                b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                                   MemRefLayoutAttrInterface(), workgroup)),
            b.idx(0), ValueRange{});
        Value warp = b.div(thread, b.idx(kWarp));
        b.ifThen(b.eq(lane, b.idx(kWarp - 1)), [&] {
          memref::StoreOp::create(b, count, totals, ValueRange{warp});
        });
        gpu::BarrierOp::create(b);
        for (int64_t w = 0; w + 1 < warps; ++w) {
          Value total = memref::LoadOp::create(b, totals, ValueRange{b.idx(w)});
          count = arith::AddIOp::create(
              b, count, b.select(b.ult(b.idx(w), warp), total, b.i32(0)));
        }
        b.ifThen(live, [&] {
          memref::StoreOp::create(b, count, a[1], ValueRange{thread});
        });
      },
      /*dynamicSharedBytes=*/warps * 4);
}

/// Rows [first, last) of column-wise scale block `blk`, which belongs to
/// expert e < E (emitBlockEnds' table `blockEnds`).
std::pair<Value, Value> scaleBlockRows(KernelBuilder &b, Value offsets,
                                       Value blockEnds, Value e, Value blk,
                                       int64_t group) {
  Value blocksBefore = b.ifElse(
      b.eq(e, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
      [&] { return b.loadIdx(blockEnds, {b.sub(e, b.idx(1))}); });
  Value first = b.add(groupStart(b, offsets, e),
                      b.mul(b.sub(blk, blocksBefore), b.idx(group)));
  Value last = b.minIdx(b.add(first, b.idx(group)), b.loadIdx(offsets, {e}));
  return {first, last};
}

/// |x| of a vector of bf16/f16/f32 as unsigned integers of the same width:
/// the bits with the sign cleared, which order as the magnitudes do. The
/// amax of a group is taken on these, so that a thread keeps its group in
/// registers as loaded (bf16: half the registers of f32 copies).
Value magnitudeBits(KernelBuilder &b, Value vec) {
  auto type = cast<VectorType>(vec.getType());
  unsigned bits = type.getElementTypeBitWidth();
  auto intType = VectorType::get(type.getShape(), b.getIntegerType(bits));
  Value mask = arith::ConstantOp::create(
      b, intType,
      DenseElementsAttr::get(intType,
                             APInt::getSignedMaxValue(bits)));
  return arith::AndIOp::create(
      b, arith::BitcastOp::create(b, intType, vec), mask);
}

/// Element i of an amax vector from magnitudeBits, as f32.
Value magnitudeToF32(KernelBuilder &b, Value amaxBits, int64_t i,
                     Type elem) {
  Value bits = vector::ExtractOp::create(b, amaxBits, i);
  Value v = arith::BitcastOp::create(b, elem, bits);
  return elem.isF32() ? v : arith::ExtFOp::create(b, b.getF32Type(), v);
}

/// Whether quantize reads `type` through magnitudeBits.
bool quantizable(Type type) {
  return type.isBF16() || type.isF16() || type.isF32();
}

/// Row-wise FP8 groups with warp shuffles (NVVM, ROCDL): a thread per
/// 16-byte piece of output (kRowwiseUnroll of them, launchUnrolled), so that
/// a warp's loads and stores are whole lines; the group's lanes combine
/// their amax with xor shuffles. Every lane takes part in the shuffles (a
/// lane past the end works on the last piece again) and only the stores are
/// guarded.
Lowered lowerQuantizeRowwiseWarp(moe::QuantizeOp op, moe::TileAttr tile,
                                 BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  std::optional<int64_t> cols = staticDim(in, 1);
  int64_t width = chunkWidth(cols, {inType});
  if (!width || !quantizable(inType) || group % width || *cols % group)
    return std::nullopt;
  // An item is 16 bytes of FP8 output where the group allows it (16 bf16
  // elements, two 16-byte loads), so that each lane's store is one whole
  // 16-byte access. On the H200 the 8-byte stores of 8-element items
  // reached 82 - 88 % of the copy bandwidth at T = 32768, 16-byte ones
  // 99 - 101 %.
  int64_t outWidth = KernelBuilder::vectorWidth(elementType(data));
  if (outWidth > width && group % outWidth == 0)
    width = outWidth;
  int64_t lanes = group / width; // per group
  if (lanes > 32 || !llvm::isPowerOf2_64(lanes) || tile.getThreads() % 32)
    return std::nullopt;
  int64_t chunks = *cols / width;
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();
  Value count = h.mul(ctx.sizes(in)[0], h.idx(chunks));
  return launchUnrolled(
      ctx, "rowwise_warp", count, tile, kRowwiseUnroll, {in, data, scales},
      [&](KernelBuilder &b, ValueRange a, Value item) -> ItemRest {
        Value r = b.div(item, b.idx(chunks));
        Value chunk = b.rem(item, b.idx(chunks));
        Value c = b.mul(chunk, b.idx(width));
        Value x = b.loadVec(a[0], {r, c}, width);
        return [=, &b](Value active) {
          Value bits = magnitudeBits(b, x);
          Value amax = b.f32(0);
          for (int64_t i = 0; i < width; ++i)
            amax = b.fmax(amax, magnitudeToF32(b, bits, i, inType));
          for (int64_t offset = lanes / 2; offset > 0; offset /= 2)
            amax = b.fmax(amax, gpu::ShuffleOp::create(b, amax, offset, 32,
                                                       gpu::ShuffleMode::XOR)
                                    .getShuffleResult());
          Value scale = groupScale(b, amax, fp8Max, pow2);
          b.ifThen(active, [&] {
            b.ifThen(b.eq(b.rem(chunk, b.idx(lanes)), b.idx(0)), [&] {
              b.storeF(scale, a[2], {r, b.div(chunk, b.idx(lanes))});
            });
            auto f32x = VectorType::get({width}, b.getF32Type());
            Value y = inType.isF32() ? x : arith::ExtFOp::create(b, f32x, x);
            Value inverse = vector::BroadcastOp::create(
                b, f32x, b.fdiv(b.f32(1), scale));
            b.storeVecF32(arith::MulFOp::create(b, y, inverse), a[1], {r, c});
          });
        };
      });
}

Lowered lowerQuantizeRowwise(moe::QuantizeOp op, moe::TileAttr tile,
                             BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  std::optional<int64_t> cols = staticDim(in, 1);
  int64_t width = chunkWidth(cols, {inType});
  if (!width || !quantizable(inType) || group % width ||
      group > kMaxGroupRegisters)
    return std::nullopt;
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
          chunks.push_back(b.loadVec(
              a[0], {r, b.minIdx(columns.back(), lastChunk)}, width));
          Value m = magnitudeBits(b, chunks.back());
          amaxBits = i ? arith::MaxUIOp::create(b, amaxBits, m) : m;
        }
        Value amax = b.f32(0);
        for (int64_t i = 0; i < width; ++i)
          amax = b.fmax(amax, magnitudeToF32(b, amaxBits, i, inType));
        Value scale = groupScale(b, amax, fp8Max, pow2);
        b.storeF(scale, a[2], {r, grp});
        auto f32x = VectorType::get({width}, b.getF32Type());
        Value inverse = vector::BroadcastOp::create(
            b, f32x, b.fdiv(b.f32(1), scale));
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

/// Column-wise FP8 groups on GPUs (workgroup memory and barriers): a block
/// of 8 warps per (scale block, 256 bf16 / 128 f32 columns). Each warp reads
/// a 512-byte piece of a row per step, the 8 warps step down the block's
/// rows together, and the block's input is read once (the per-thread kernel
/// below reads it twice): into workgroup memory by cp.async on NVVM, into
/// registers elsewhere. The warps' column amaxes meet in a workgroup-memory
/// table.
Lowered lowerColwiseBlocks(moe::QuantizeOp op, Value blockEnds,
                           BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales()), offsets = buffer(op.getOffsets());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  // A warp per row piece and 8 warps: on the H200 this ran 1.4-2x the speed
  // of 256-byte pieces (half-warps) and of 512 or 1024 threads (fewer
  // registers per thread, slower all the same).
  constexpr int64_t threads = 256, lanesPerRow = 32, warps = threads / 32;
  constexpr int64_t rowsPerStep = warps;
  constexpr int64_t maxSteps = 16; // chunks a thread copies or keeps
  int64_t width = KernelBuilder::vectorWidth(inType);
  std::optional<int64_t> cols = staticDim(in, 1);
  if (!width || !cols || *cols % width || group % rowsPerStep ||
      group / rowsPerStep > maxSteps)
    return std::nullopt;
  int64_t steps = group / rowsPerStep;
  int64_t tileCols = lanesPerRow * width;
  int64_t colTiles = (*cols + tileCols - 1) / tileCols;
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();
  auto tile = moe::TileAttr::get(h.getContext(), 1, 1, 1, threads);
  Value grid = h.mul(ctx.sizes(scales)[0], h.idx(colTiles));
  // NVVM: the block's input goes to workgroup memory with cp.async, so that
  // it takes no registers (80 instead of 180 per thread) and three blocks
  // share an SM, one's loads in flight while another scales and stores: on
  // the H200 56-65% -> 89-99% of copy bandwidth at DeepSeek-V3 shapes.
  // Elsewhere each thread keeps its chunks in registers.
  bool async = h.isNVVM();
  int64_t elemBytes = inType.getIntOrFloatBitWidth() / 8;
  int64_t partialBytes = warps * tileCols * 4;
  int64_t tileBytes = async ? group * tileCols * elemBytes : 0;
  return ctx.launch(
      "colwise_block", grid, tile, {in, data, scales, offsets, blockEnds},
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        auto f32x = VectorType::get({width}, b.getF32Type());
        auto workgroup = gpu::AddressSpaceAttr::get(
            b.getContext(), gpu::AddressSpace::Workgroup);
        Value smem = gpu::DynamicSharedMemoryOp::create(
            b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                               MemRefLayoutAttrInterface(), workgroup));
        Value partials = memref::ViewOp::create(
            b,
            MemRefType::get({warps, tileCols}, b.getF32Type(),
                            MemRefLayoutAttrInterface(), workgroup),
            smem, b.idx(0), ValueRange{});
        Value dataTile;
        if (async)
          dataTile = memref::ViewOp::create(
              b,
              MemRefType::get({group, tileCols}, inType,
                              MemRefLayoutAttrInterface(), workgroup),
              smem, b.idx(partialBytes), ValueRange{});
        Value blk = b.div(block, b.idx(colTiles));
        Value lane = b.rem(thread, b.idx(lanesPerRow));
        Value rowThread = b.div(thread, b.idx(lanesPerRow));
        Value col = b.mul(b.add(b.mul(b.rem(block, b.idx(colTiles)),
                                      b.idx(lanesPerRow)),
                                lane),
                          b.idx(width));
        // Lanes past the last column work on the last chunk, unstored.
        Value colActive = b.ult(col, b.idx(*cols));
        Value c = b.minIdx(col, b.idx(*cols - width));
        // The expert of block `blk` (uniform over the block, so the
        // barrier below is reached by all threads or none).
        Value e = firstGreater(b, a[4], experts, blk);
        Value used = b.ult(e, b.idx(experts));
        b.ifThen(used, [&] {
          auto [first, last] =
              scaleBlockRows(b, a[3], a[4], e, blk, group);
          // Every block holds at least one row; rows past `last` read row
          // last-1 again and count as zero.
          Value count = b.sub(last, first), lastRow = b.sub(last, b.idx(1));
          auto bitsType = VectorType::get(
              {width}, b.getIntegerType(inType.getIntOrFloatBitWidth()));
          SmallVector<Value> x, rows, inBlock, tileRows;
          Value amaxBits = b.zeroVec(bitsType);
          Value local = b.mul(lane, b.idx(width));
          Value inBase = addressOf(b, a[0]);
          Value tileBase = b.add(addressOf(b, smem), b.idx(partialBytes));
          auto cacheGlobal = NVVM::LoadCacheModifierKindAttr::get(
              b.getContext(), NVVM::LoadCacheModifierKind::CG);
          for (int64_t i = 0; i < steps; ++i) {
            Value offset = b.add(b.idx(i * rowsPerStep), rowThread);
            inBlock.push_back(b.ult(offset, count));
            rows.push_back(b.minIdx(b.add(first, offset), lastRow));
            tileRows.push_back(offset);
            if (!async) {
              x.push_back(b.loadVec(a[0], {rows.back(), c}, width));
              continue;
            }
            Value src = b.add(
                inBase, b.mul(b.add(b.mul(rows.back(), b.idx(*cols)), c),
                              b.idx(elemBytes)));
            Value dst = b.add(
                tileBase, b.mul(b.add(b.mul(offset, b.idx(tileCols)), local),
                                b.idx(elemBytes)));
            NVVM::CpAsyncOp::create(b, pointerAt(b, dst, 3),
                                    pointerAt(b, src, 1),
                                    b.getI32IntegerAttr(16), cacheGlobal,
                                    b.i32(16));
          }
          if (async) {
            NVVM::CpAsyncCommitGroupOp::create(b);
            NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(0));
          }
          // A thread reads back only the chunks it copied itself.
          auto chunkAt = [&](int64_t i) {
            return async ? b.loadVec(dataTile, {tileRows[i], local}, width)
                         : x[i];
          };
          for (int64_t i = 0; i < steps; ++i)
            amaxBits = arith::MaxUIOp::create(
                b, amaxBits,
                b.select(inBlock[i], magnitudeBits(b, chunkAt(i)),
                         b.zeroVec(bitsType)));
          // The 8 warps' amaxes meet in workgroup memory.
          SmallVector<Value> amax;
          for (int64_t j = 0; j < width; ++j)
            amax.push_back(magnitudeToF32(b, amaxBits, j, inType));
          b.storeVecF(amax, partials, {rowThread, local});
          gpu::BarrierOp::create(b);
          SmallVector<Value> scale, inverse;
          for (int64_t w = 0; w < warps; ++w) {
            SmallVector<Value> other =
                b.loadVecF(partials, {b.idx(w), local}, width);
            for (int64_t j = 0; j < width; ++j)
              amax[j] = w ? b.fmax(amax[j], other[j]) : other[j];
          }
          for (int64_t j = 0; j < width; ++j) {
            scale.push_back(groupScale(b, amax[j], fp8Max, pow2));
            inverse.push_back(b.fdiv(b.f32(1), scale.back()));
          }
          b.ifThen(b.land(colActive, b.eq(rowThread, b.idx(0))),
                   [&] { b.storeVecF(scale, a[2], {blk, c}); });
          Value inverseVec = vector::FromElementsOp::create(b, f32x, inverse);
          for (int64_t i = 0; i < steps; ++i)
            b.ifThen(b.land(colActive, inBlock[i]), [&] {
              Value xi = chunkAt(i);
              Value y = inType.isF32() ? xi
                                       : arith::ExtFOp::create(b, f32x, xi);
              b.storeVecF32(arith::MulFOp::create(b, y, inverseVec), a[1],
                            {rows[i], c});
            });
        });
        // Unused trailing blocks hold scale 1.
        b.ifThen(b.land(b.land(b.eq(e, b.idx(experts)), colActive),
                        b.eq(rowThread, b.idx(0))),
                 [&] {
                   SmallVector<Value> ones(width, b.f32(1));
                   b.storeVecF(ones, a[2], {blk, c});
                 });
      },
      /*dynamicSharedBytes=*/partialBytes + tileBytes);
}

Lowered lowerQuantizeColwise(moe::QuantizeOp op, moe::TileAttr tile,
                             BufferMap buffer, LoweringContext &ctx) {
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales()), offsets = buffer(op.getOffsets());
  int64_t group = op.getGroupSize();
  Type inType = elementType(in);
  // 4 bytes of a row per thread (two bf16 columns, one f32): 128 bytes per
  // warp and row, read straight down the group's rows.
  int64_t width = inType.isF32() ? 1 : 2;
  std::optional<int64_t> cols = staticDim(in, 1);
  if (!quantizable(inType) || !cols || *cols % width ||
      group % std::min<int64_t>(group, 16))
    return std::nullopt;
  int64_t pairs = *cols / width;
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();

  Value blockEnds = ctx.allocTemp(
      MemRefType::get({experts}, h.getI32Type()), {h.idx(experts)});
  if (failed(emitBlockEnds(ctx, tile, offsets, blockEnds, group)))
    return failure();

  // Rows at or past the last group end quantize to 0: one thread per row,
  // which leaves at once unless its row is one of them.
  int64_t tailWidth = KernelBuilder::vectorWidth(fp8);
  bool tailVector = *cols % tailWidth == 0;
  if (failed(launchPerItem(
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
  if (h.hasWarpShuffles())
    if (Lowered lowered = lowerColwiseBlocks(op, blockEnds, buffer, ctx))
      return lowered;
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
          auto [first, last] =
              scaleBlockRows(b, a[3], a[4], e, blk, group);
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
          Value amaxBits = b.loop(
              b.idx(0), b.idx(group / unroll), {b.zeroVec(bitsType)},
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

Lowered lowerDequantizeFP8(moe::DequantizeOp op, moe::TileAttr tile,
                           BufferMap buffer, LoweringContext &ctx) {
  Value data = buffer(op.getData()), scales = buffer(op.getScales());
  Value out = buffer(op.getOutput()), offsets = buffer(op.getOffsets());
  int64_t group = op.getGroupSize();
  bool colwise = op.getAxis() == moe::QuantAxis::colwise;
  std::optional<int64_t> cols = staticDim(out, 1);
  int64_t width = chunkWidth(cols, {elementType(data), elementType(out)});
  // Row-wise: 16 bytes of output per item (8 FP8 bytes in), so that every
  // store is one whole 16-byte access: 1.3x the speed of 16 FP8 bytes in and
  // two stores per item on the H200.
  if (!colwise && width && elementType(out).getIntOrFloatBitWidth() > 8)
    width = KernelBuilder::vectorWidth(elementType(out));
  if (!width || (!colwise && group % width))
    return std::nullopt;
  int64_t chunks = *cols / width;
  KernelBuilder &h = ctx.host();
  SmallVector<Value> operands = {data, scales, out};
  int64_t experts = 0;
  if (colwise) {
    experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
    Value blockEnds = ctx.allocTemp(
        MemRefType::get({experts}, h.getI32Type()), {h.idx(experts)});
    if (failed(emitBlockEnds(ctx, tile, offsets, blockEnds, group)))
      return failure();
    operands.append({offsets, blockEnds});
  }
  Value count = h.mul(ctx.sizes(out)[0], h.idx(chunks));
  if (!colwise)
    // One scale per chunk: the group divides into whole chunks.
    return launchUnrolled(
        ctx, "fp8_vec", count, tile, kRowwiseUnroll, operands,
        [&](KernelBuilder &b, ValueRange a, Value item) -> ItemRest {
          Value r = b.div(item, b.idx(chunks));
          Value c = b.mul(b.rem(item, b.idx(chunks)), b.idx(width));
          Value scale = b.loadF(a[1], {r, b.div(c, b.idx(group))});
          Value x = b.loadVecF32(a[0], {r, c}, width);
          return [=, &b](Value active) {
            b.ifThen(active, [&] {
              auto f32x = VectorType::get({width}, b.getF32Type());
              Value s = vector::BroadcastOp::create(b, f32x, scale);
              b.storeVecF32(arith::MulFOp::create(b, x, s), a[2], {r, c});
            });
          };
        });
  return launchPerItem(
      ctx, "fp8_vec", count, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto f32x = VectorType::get({width}, b.getF32Type());
        // The row's expert (first group end past it), then its block; rows
        // past the last group are zero.
        Value e = firstGreater(b, a[3], experts, r);
        Value y = b.ifElse(
            b.ult(e, b.idx(experts)), f32x,
            [&] {
              Value blocksBefore = b.ifElse(
                  b.eq(e, b.idx(0)), b.getIndexType(),
                  [&] { return b.idx(0); },
                  [&] { return b.loadIdx(a[4], {b.sub(e, b.idx(1))}); });
              Value blk = b.add(
                  blocksBefore,
                  b.div(b.sub(r, groupStart(b, a[3], e)), b.idx(group)));
              Value scale = b.loadVecF32(a[1], {blk, c}, width);
              return Value(arith::MulFOp::create(
                  b, b.loadVecF32(a[0], {r, c}, width), scale));
            },
            [&] { return b.zeroVec(f32x); });
        b.storeVecF32(y, a[2], {r, c});
      });
}

//===----------------------------------------------------------------------===//
// dequantize (NF4)
//===----------------------------------------------------------------------===//

Lowered lowerDequantizeNF4(moe::DequantizeOp op, moe::TileAttr tile,
                           BufferMap buffer, LoweringContext &ctx) {
  Value data = buffer(op.getData()), scales = buffer(op.getScales());
  Value out = buffer(op.getOutput()), codebook = buffer(op.getCodebook());
  Value experts = buffer(op.getExperts());
  int64_t group = op.getGroupSize();
  // 16 outputs (8 packed bytes) per thread, inside one absmax block.
  constexpr int64_t width = 16;
  std::optional<int64_t> cols = staticDim(out, 2);
  if (!cols || *cols % width || group % width ||
      !KernelBuilder::vectorWidth(elementType(out)))
    return std::nullopt;
  int64_t chunks = *cols / width;
  KernelBuilder &h = ctx.host();
  SmallVector<Value> outSizes = ctx.sizes(out);
  SmallVector<Value> operands = {data, scales, codebook, out};
  if (experts)
    operands.push_back(experts);
  Value count = h.mul(h.mul(outSizes[0], outSizes[1]), h.idx(chunks));
  return launchUnrolled(
      ctx, "nf4_vec", count, tile, kRowwiseUnroll, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) -> ItemRest {
        Value K = b.dim(a[3], 1);
        Value chunk = b.rem(id, b.idx(chunks));
        Value rowOf = b.div(id, b.idx(chunks)); // sel * K + r
        Value sel = b.div(rowOf, K), r = b.rem(rowOf, K);
        Value c = b.mul(chunk, b.idx(width));
        Value e = experts ? b.loadIdx(a[4], {sel}) : sel;
        Value packed = b.loadVec(a[0], {e, r, b.div(c, b.idx(2))}, width / 2);
        Value absmax = b.loadF(
            a[1], {e, b.div(b.add(b.mul(r, b.idx(*cols)), c), b.idx(group))});
        return [=, &b](Value active) {
          // ui8 is not an arith type; it is i8 once lowered.
          auto bytesType = VectorType::get({width / 2}, b.getI8Type());
          Value bytes = UnrealizedConversionCastOp::create(
                            b, TypeRange{bytesType}, ValueRange{packed})
                            .getResult(0);
          SmallVector<Value> values;
          for (int64_t i = 0; i < width / 2; ++i) {
            Value byte = arith::ExtUIOp::create(
                b, b.getI32Type(), vector::ExtractOp::create(b, bytes, i));
            // Even columns are the high nibble, odd ones the low.
            Value high = arith::ShRUIOp::create(b, byte, b.i32(4));
            Value low = arith::AndIOp::create(b, byte, b.i32(15));
            for (Value nibble : {high, low}) {
              Value code = b.loadF(a[2], {arith::IndexCastOp::create(
                                             b, b.getIndexType(), nibble)});
              values.push_back(b.fmul(code, absmax));
            }
          }
          b.ifThen(active, [&] { b.storeVecF(values, a[3], {sel, r, c}); });
        };
      });
}

} // namespace

Lowered moec::kernels::lowerVectorized(Operation *op, moe::TileAttr tile,
                                       BufferMap buffer,
                                       LoweringContext &ctx) {
  return llvm::TypeSwitch<Operation *, Lowered>(op)
      .Case<moe::PermuteOp>(
          [&](auto o) { return lowerPermute(o, tile, buffer, ctx); })
      .Case<moe::UnpermuteOp>(
          [&](auto o) { return lowerUnpermute(o, tile, buffer, ctx); })
      .Case<moe::SwigluOp>(
          [&](auto o) { return lowerSwiglu(o, tile, buffer, ctx); })
      .Case<moe::SwigluGradOp>(
          [&](auto o) { return lowerSwigluGrad(o, tile, buffer, ctx); })
      .Case<moe::QuantizeOp>([&](auto o) {
        if (o.getAxis() == moe::QuantAxis::colwise)
          return lowerQuantizeColwise(o, tile, buffer, ctx);
        if (ctx.host().hasWarpShuffles())
          if (Lowered lowered = lowerQuantizeRowwiseWarp(o, tile, buffer, ctx))
            return lowered;
        return lowerQuantizeRowwise(o, tile, buffer, ctx);
      })
      .Case<moe::DequantizeOp>([&](auto o) -> Lowered {
        if (elementType(buffer(o.getData())).isUnsignedInteger(8))
          return lowerDequantizeNF4(o, tile, buffer, ctx);
        return lowerDequantizeFP8(o, tile, buffer, ctx);
      })
      .Default([](Operation *) { return std::nullopt; });
}
