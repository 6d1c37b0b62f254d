//===- VectorKernels.cpp - Vectorized kernels of the bandwidth-bound ops --===//
//
// Part of moec. permute, unpermute, swiglu(_grad), quantize and dequantize
// move bytes and do little arithmetic, so their speed is the share of the
// memory bandwidth they reach. That takes wide accesses: each thread here
// owns a chunk of one row (16 bytes of the narrowest element it touches)
// instead of one element, so that a warp reads and writes whole cache lines
// with 16-byte vector loads and stores, and the per-row work (slot lookup,
// expert search, scale) is paid once per chunk. Row-wise FP8 groups stay in
// registers between the amax and the scaling; column-wise groups are read
// straight down the columns twice, the second time from L2.
//
// No shared memory and no intra-block synchronization: these kernels run on
// every backend, the host included, so the host tests check them too. Each
// generator returns std::nullopt where the shapes do not allow the vector
// accesses (a dynamic or indivisible row length); Kernels.cpp then emits the
// scalar kernel.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

using Lowered = std::optional<LogicalResult>;

Type elementType(Value memref) {
  return cast<MemRefType>(memref.getType()).getElementType();
}

/// The static size of dimension d, if any.
std::optional<int64_t> staticDim(Value memref, unsigned d) {
  int64_t size = cast<MemRefType>(memref.getType()).getDimSize(d);
  if (ShapedType::isDynamic(size))
    return std::nullopt;
  return size;
}

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
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  // Token order: each token's chunk is read once and written to its k rows.
  // (Row order would read every token k times, and the rows written in
  // between evict it from L2.) The rows come from the inverse map.
  SmallVector<Value> tokenSizes = ctx.sizes(tokens);
  Value numSlots = h.mul(tokenSizes[0], h.idx(k));
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, slots, offsets, numSlots);
  if (failed(inverse))
    return failure();
  SmallVector<Value> operands = {tokens, *inverse, rows};
  if (probs)
    operands.append({probs, outProbs});
  if (scales)
    operands.append({scales, outScales});
  if (failed(launchPerItem(
          ctx, "scatter_vec", h.mul(tokenSizes[0], h.idx(chunks)), tile,
          operands, [&](KernelBuilder &b, ValueRange a, Value id) {
            Value t = b.div(id, b.idx(chunks));
            Value chunk = b.rem(id, b.idx(chunks));
            Value c = b.mul(chunk, b.idx(width));
            Value v = b.loadVec(a[0], {t, c}, width);
            for (int64_t j = 0; j < k; ++j) {
              Value slot = b.add(b.mul(t, b.idx(k)), b.idx(j));
              auto [r, valid] = b.loadSigned(a[1], {slot});
              b.ifThen(valid, [&] {
                b.storeVec(v, a[2], {r, c});
                unsigned next = 3;
                // The token's first thread carries its probabilities, the
                // first `numScales` threads its FP8 scales.
                if (probs) {
                  Value in = a[next], out = a[next + 1];
                  next += 2;
                  b.ifThen(b.eq(chunk, b.idx(0)), [&] {
                    b.storeF(b.loadF(in, {t, b.idx(j)}), out, {r});
                  });
                }
                if (scales) {
                  Value in = a[next], out = a[next + 1];
                  b.ifThen(b.ult(chunk, b.dim(out, 1)), [&] {
                    b.storeF(b.loadF(in, {t, chunk}), out, {r, chunk});
                  });
                }
              });
            }
          })))
    return failure();

  // Padding rows, and rows past the last group, are zero: one thread per
  // row, which leaves at once for a row that holds a token.
  SmallVector<Value> padOperands = {slots, offsets, rows};
  if (probs)
    padOperands.push_back(outProbs);
  if (scales)
    padOperands.push_back(outScales);
  return launchPerItem(
      ctx, "pad", ctx.sizes(rows)[0], tile, padOperands,
      [&](KernelBuilder &b, ValueRange a, Value r) {
        Value end = b.loadIdx(a[1], {b.idx(experts - 1)});
        Value valid = b.loadSigned(a[0], {r}).second;
        Value pad = b.select(valid, b.ule(end, r),
                             arith::ConstantOp::create(b, b.getBoolAttr(true)));
        b.ifThen(pad, [&] {
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
                     buffer(op.getOut()), op.getK());
}

} // namespace

std::optional<LogicalResult>
moec::kernels::emitCombine(LoweringContext &ctx, moe::TileAttr tile,
                           Value rows, Value slots, Value offsets,
                           Value weights, Value out, int64_t k) {
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
      emitInverse(ctx, tile, slots, offsets, numSlots);
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
/// (each expert group split into blocks of `group` rows): one thread per
/// expert.
LogicalResult emitBlockEnds(LoweringContext &ctx, moe::TileAttr tile,
                            Value offsets, Value blockEnds, int64_t group) {
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  KernelBuilder &h = ctx.host();
  return launchPerItem(
      ctx, "block_ends", h.idx(experts), tile, {offsets, blockEnds},
      [&](KernelBuilder &b, ValueRange a, Value e) {
        Value total = b.loop(
            b.idx(0), b.add(e, b.idx(1)), {b.idx(0)},
            [&](Value i, ValueRange it) -> SmallVector<Value> {
              Value rows = b.sub(b.loadIdx(a[0], {i}), groupStart(b, a[0], i));
              return {b.add(it[0], b.ceilDiv(rows, b.idx(group)))};
            })[0];
        b.storeI32(total, a[1], {e});
      });
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

/// Row-wise FP8 groups with warp shuffles (NVVM, ROCDL): one thread per
/// 16-byte chunk as in the other kernels, so that a warp's loads and stores
/// are whole lines; the group's lanes combine their amax with xor shuffles.
/// Every lane takes part in the shuffles (a lane past the end works on the
/// last chunk again) and only the stores are guarded.
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
  int64_t lanes = group / width; // per group
  if (lanes > 32 || !llvm::isPowerOf2_64(lanes) || tile.getThreads() % 32)
    return std::nullopt;
  int64_t chunks = *cols / width;
  Type fp8 = elementType(data);
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  KernelBuilder &h = ctx.host();
  Value count = h.mul(ctx.sizes(in)[0], h.idx(chunks));
  int64_t threads = tile.getThreads();
  return ctx.launch(
      "rowwise_warp", h.ceilDiv(count, h.idx(threads)), tile,
      {in, data, scales, count},
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        Value n = a[3];
        Value id = b.add(b.mul(block, b.idx(threads)), thread);
        Value active = b.ult(id, n);
        Value item = b.minIdx(id, b.sub(n, b.idx(1)));
        Value r = b.div(item, b.idx(chunks));
        Value chunk = b.rem(item, b.idx(chunks));
        Value c = b.mul(chunk, b.idx(width));
        Value x = b.loadVec(a[0], {r, c}, width);
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
          Value blocksBefore = b.ifElse(
              b.eq(e, b.idx(0)), b.getIndexType(), [&] { return b.idx(0); },
              [&] { return b.loadIdx(a[4], {b.sub(e, b.idx(1))}); });
          Value first = b.add(groupStart(b, a[3], e),
                              b.mul(b.sub(blk, blocksBefore), b.idx(group)));
          Value last = b.minIdx(b.add(first, b.idx(group)),
                                b.loadIdx(a[3], {e}));
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
  return launchPerItem(
      ctx, "fp8_vec", h.mul(ctx.sizes(out)[0], h.idx(chunks)), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value r = b.div(id, b.idx(chunks));
        Value c = b.mul(b.rem(id, b.idx(chunks)), b.idx(width));
        auto f32x = VectorType::get({width}, b.getF32Type());
        if (!colwise) {
          // One scale per chunk: the group divides into whole chunks.
          Value scale = vector::BroadcastOp::create(
              b, f32x, b.loadF(a[1], {r, b.div(c, b.idx(group))}));
          Value x = b.loadVecF32(a[0], {r, c}, width);
          b.storeVecF32(arith::MulFOp::create(b, x, scale), a[2], {r, c});
          return;
        }
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
  return launchPerItem(
      ctx, "nf4_vec", count, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value K = b.dim(a[3], 1);
        Value chunk = b.rem(id, b.idx(chunks));
        Value rowOf = b.div(id, b.idx(chunks)); // sel * K + r
        Value sel = b.div(rowOf, K), r = b.rem(rowOf, K);
        Value c = b.mul(chunk, b.idx(width));
        Value e = experts ? b.loadIdx(a[4], {sel}) : sel;
        Value packed = b.loadVec(a[0], {e, r, b.div(c, b.idx(2))}, width / 2);
        // ui8 is not an arith type; it is i8 once lowered.
        auto bytesType = VectorType::get({width / 2}, b.getI8Type());
        Value bytes = UnrealizedConversionCastOp::create(
                          b, TypeRange{bytesType}, ValueRange{packed})
                          .getResult(0);
        Value absmax = b.loadF(
            a[1], {e, b.div(b.add(b.mul(r, b.idx(*cols)), c), b.idx(group))});
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
        b.storeVecF(values, a[3], {sel, r, c});
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
