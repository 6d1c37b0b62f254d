//===- Matmul.cpp - Scalar grouped and dense matmul -----------------------===//
//
// Part of moec. One thread per output element (or a few sharing its
// reduction): the reference loop with bias, LoRA, FP8 block scales, SwiGLU
// (or its gradient) and row scale in f32, and the weight gradient. Every
// layout the dialect has; the sm90a target uses Hopper/ where it applies.
//
//===-------------------------------------------------------------------===//

#include "ScalarKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Support/MoeShapes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <functional>

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// Everything a grouped matmul output element needs, as kernel arguments.
struct MatmulArgs {
  Value lhs, rhs, offsets, gather, bias, loraA, loraB, rowScale;
  /// [M, r] f32: each grouped row's x · A_eᵀ (x · B_e when transposed),
  /// computed by a kernel of its own before the matmul.
  Value loraDown;
  Value lhsScales, rhsScales; ///< FP8 block scales
  int64_t scaleGroup = 128;
  int64_t k = 1; ///< slots per token (gather/scatter)
  bool transposeRhs = false;
  bool expertsInColumns = false; ///< rhs [K, E, N]
  bool swiglu = false;
  double loraScaling = 1.0;
  bool transposeLora = false;
  int64_t rank = 0; ///< LoRA rank
};

/// The LoRA up projection's weight of rank index `ar` (e * r + j) for
/// output column `c`: B[c, ar], or A[ar, c] when transposed.
Value loraUp(KernelBuilder &b, const MatmulArgs &m, Value ar, Value c) {
  return m.transposeLora ? b.loadF(m.loraA, {ar, c})
                         : b.loadF(m.loraB, {c, ar});
}

/// y[row, col] of a grouped matmul for expert e (f32), with bias, LoRA,
/// SwiGLU and row scale applied; zero for a padding row of a gather.
Value matmulElement(KernelBuilder &b, const MatmulArgs &m, Value e, Value row,
                    Value col, Value width) {
  Value K = b.dim(m.lhs, 1);
  auto dot = [&](Value lhsRow, Value c) {
    Value acc = b.loop(
        b.idx(0), K, {b.f32(0)},
        [&](Value kk, ValueRange it) -> SmallVector<Value> {
          Value x = b.loadF(m.lhs, {lhsRow, kk});
          Value w = m.transposeRhs       ? b.loadF(m.rhs, {e, c, kk})
                    : m.expertsInColumns ? b.loadF(m.rhs, {kk, e, c})
                                         : b.loadF(m.rhs, {e, kk, c});
          if (m.lhsScales) {
            // FP8: each operand times its block's scale.
            Value g = b.idx(m.scaleGroup);
            Value kb = b.div(kk, g), cb = b.div(c, g);
            x = b.fmul(x, b.loadF(m.lhsScales, {lhsRow, kb}));
            w = b.fmul(w, m.transposeRhs ? b.loadF(m.rhsScales, {e, cb, kb})
                                         : b.loadF(m.rhsScales, {e, kb, cb}));
          }
          return {b.fadd(it[0], b.fmul(x, w))};
        })[0];
    if (m.bias)
      acc = b.fadd(acc, b.loadF(m.bias, {e, c}));
    if (m.loraA) {
      // (x · A_eᵀ) · B_eᵀ with A_e = A[e*r:(e+1)*r], B_e = B[:, e*r:(e+1)*r]:
      // the row's down projection is already in m.loraDown.
      Value base = b.mul(e, b.idx(m.rank));
      Value lora = b.loop(
          b.idx(0), b.idx(m.rank), {b.f32(0)},
          [&](Value r, ValueRange it) -> SmallVector<Value> {
            Value down = b.loadF(m.loraDown, {row, r});
            Value up = loraUp(b, m, b.add(base, r), c);
            return {b.fadd(it[0], b.fmul(down, up))};
          })[0];
      acc = b.fadd(acc, b.fmul(lora, b.f32(m.loraScaling)));
    }
    return acc;
  };
  auto compute = [&](Value lhsRow) -> Value {
    Value y;
    if (m.swiglu) {
      Value g = dot(lhsRow, col);
      Value u = dot(lhsRow, b.add(col, width));
      y = b.swiglu(g, u);
    } else {
      y = dot(lhsRow, col);
    }
    if (m.rowScale)
      y = b.fmul(y, b.loadF(m.rowScale, {row}));
    return y;
  };
  if (!m.gather)
    return compute(row);
  auto [slot, valid] = b.loadSigned(m.gather, {row});
  return b.ifElse(
      valid, b.getF32Type(), [&] { return compute(b.div(slot, b.idx(m.k))); },
      [&] { return b.f32(0); });
}

/// The LoRA down projection of every grouped row, [M, r] f32 in a scratch
/// buffer: x_i · A_eᵀ (x_i · B_e with transpose_lora), zero for padding rows
/// and rows past the last group. One thread per (row, rank index), so the
/// matmul's elements read r values instead of recomputing r dot products.
FailureOr<Value> emitLoraDown(moe::GroupedMatmulOp op, moe::TileAttr tile,
                              BufferMap buffer, LoweringContext &ctx,
                              int64_t rank) {
  KernelBuilder &h = ctx.host();
  Value lhs = buffer(op.getLhs()), offsets = buffer(op.getOffsets());
  Value gather = buffer(op.getGatherSlots());
  Value down = op.getTransposeLora() ? buffer(op.getLoraB())
                                     : buffer(op.getLoraA());
  Value rows = ctx.sizes(gather ? gather : lhs)[0];
  Value scratch = ctx.allocTemp(
      MemRefType::get({ShapedType::kDynamic, rank}, h.getF32Type()),
      {rows, h.idx(rank)});
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  int64_t k = op.getK().value_or(1);
  bool transposed = op.getTransposeLora();
  SmallVector<Value> operands = {lhs, offsets, down, scratch};
  if (gather)
    operands.push_back(gather);
  // FP8 rows are their codes times the row's block scales (as in the
  // matmul's own product).
  Value lhsScales = buffer(op.getLhsScales());
  int scalesAt = -1;
  if (lhsScales) {
    scalesAt = operands.size();
    operands.push_back(lhsScales);
  }
  int64_t group = op.getScaleGroup();
  if (failed(launchPerItem(
          ctx, "lora_down", h.mul(rows, h.idx(rank)), tile, operands,
          [&](KernelBuilder &b, ValueRange a, Value id) {
            Value row = b.div(id, b.idx(rank)), j = b.rem(id, b.idx(rank));
            Value e = expertOfRow(b, a[1], b.idx(experts), row);
            Value ar = b.add(b.mul(e, b.idx(rank)), j);
            auto dot = [&](Value lhsRow) {
              return b.loop(b.idx(0), b.dim(a[0], 1), {b.f32(0)},
                            [&](Value kk, ValueRange it) -> SmallVector<Value> {
                              Value w = transposed ? b.loadF(a[2], {kk, ar})
                                                   : b.loadF(a[2], {ar, kk});
                              Value x = b.loadF(a[0], {lhsRow, kk});
                              if (scalesAt >= 0)
                                x = b.fmul(x, b.loadF(a[scalesAt],
                                                      {lhsRow,
                                                       b.div(kk, b.idx(group))}));
                              return {b.fadd(it[0], b.fmul(x, w))};
                            })[0];
            };
            Value value = b.ifElse(
                b.ult(e, b.idx(experts)), b.getF32Type(),
                [&] {
                  if (!gather)
                    return dot(row);
                  auto [slot, valid] = b.loadSigned(a[4], {row});
                  return b.ifElse(
                      valid, b.getF32Type(),
                      [&] { return dot(b.div(slot, b.idx(k))); },
                      [&] { return b.f32(0); });
                },
                [&] { return b.f32(0); });
            b.storeF(value, a[3], {row, j});
          })))
    return failure();
  return scratch;
}

/// A grouped matmul's kernel operands (lhs, rhs, offsets, out, then the
/// optional ones, remembered by position) and how a kernel reads them back.
struct MatmulOperands {
  SmallVector<Value> values;
  std::function<MatmulArgs(ValueRange)> unpack;
  int swigluInputAt = -1; ///< swiglu_grad's saved input [M, 2N]
  int64_t experts = 0, slotsPerToken = 1;

  int add(Value v) {
    if (!v)
      return -1;
    values.push_back(v);
    return values.size() - 1;
  }
};

/// Combined in token order: out[t, c] = sum_j w[t, j] · y[pos(t·k+j), c].
LogicalResult emitScatteredMatmul(moe::GroupedMatmulOp op, moe::TileAttr tile,
                                  BufferMap buffer, LoweringContext &ctx,
                                  MatmulOperands &m, Value width) {
  KernelBuilder &h = ctx.host();
  Value out = buffer(op.getOut()), offsets = buffer(op.getOffsets());
  SmallVector<Value> outSizes = ctx.sizes(out);
  const int64_t k = m.slotsPerToken, experts = m.experts;
  Value numSlots = h.mul(outSizes[0], h.idx(k));
  FailureOr<Value> inverse =
      emitInverse(ctx, tile, buffer(op.getScatterSlots()), offsets, numSlots,
                  buffer(op.getScatterPositions()));
  if (failed(inverse))
    return failure();
  int inverseAt = m.add(*inverse);
  int weightsAt = m.add(buffer(op.getScatterWeights()));
  return launchPerItem(
      ctx, "scatter", h.mul(outSizes[0], width), tile, m.values,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        MatmulArgs args = m.unpack(a);
        Value outArg = a[3];
        Value W = b.dim(outArg, 1);
        Value t = b.div(id, W), c = b.rem(id, W);
        Value acc = b.loop(
            b.idx(0), b.idx(k), {b.f32(0)},
            [&](Value j, ValueRange it) -> SmallVector<Value> {
              auto [row, valid] =
                  b.loadSigned(a[inverseAt], {b.add(b.mul(t, b.idx(k)), j)});
              Value term = b.ifElse(
                  valid, b.getF32Type(),
                  [&] {
                    Value e = expertOfRow(b, args.offsets, b.idx(experts), row);
                    Value y = matmulElement(b, args, e, row, c, W);
                    if (weightsAt >= 0)
                      y = b.fmul(y, b.loadF(a[weightsAt], {t, j}));
                    return y;
                  },
                  [&] { return b.f32(0); });
              return {b.fadd(it[0], term)};
            })[0];
        b.storeF(acc, outArg, {t, c});
      });
}

/// One output element of the grouped tile schedule: y of (row, col), or
/// with swiglu_grad the gradient of the saved input's gate and up columns.
void storeGroupedElement(KernelBuilder &b, const MatmulArgs &args,
                         const MatmulOperands &m, ValueRange a, Value group,
                         Value row, Value col, Value W) {
  Value outArg = a[3];
  Value tail = b.eq(group, b.idx(m.experts));
  Value y = b.ifElse(
      tail, b.getF32Type(), [&] { return b.f32(0); },
      [&] { return matmulElement(b, args, group, row, col, W); });
  if (m.swigluInputAt < 0)
    return b.storeF(y, outArg, {row, col});
  // y is the SwiGLU output's gradient: out = swiglu_grad(h, y). Rows past
  // the last group are zeros whatever h holds there (as in the reference
  // and the sm_90a kernels).
  Value input = a[m.swigluInputAt], upCol = b.add(col, W);
  auto [dGate, dUp] = b.swigluGrad(y, b.loadF(input, {row, col}),
                                   b.loadF(input, {row, upCol}));
  b.storeF(b.select(tail, b.f32(0), dGate), outArg, {row, col});
  b.storeF(b.select(tail, b.f32(0), dUp), outArg, {row, upCol});
}

/// Grouped output through the ragged tile schedule. Tiles are numbered
/// expert by expert (ceil(rows_e / m) m-tiles each, times the n-tiles),
/// then the rows past the last group (written as zeros). The grid is an
/// upper bound on that count, floor(M / m) + E + 1 m-tiles, so the host
/// never needs the group sizes; blocks past the real count exit at once.
LogicalResult emitGroupedTiles(moe::GroupedMatmulOp op, moe::TileAttr tile,
                               BufferMap buffer, LoweringContext &ctx,
                               MatmulOperands &m, Value width) {
  KernelBuilder &h = ctx.host();
  const int64_t experts = m.experts;
  int64_t tm = tile.getM(), tn = tile.getN(), threads = tile.getThreads();
  Value rowsTotal = ctx.sizes(buffer(op.getOut()))[0];
  Value nTiles = h.ceilDiv(width, h.idx(tn));
  Value mTilesBound = h.add(h.div(rowsTotal, h.idx(tm)), h.idx(experts + 1));
  Value grid = h.mul(mTilesBound, nTiles);
  m.values.push_back(rowsTotal);
  return ctx.launch(
      "", grid, tile, m.values,
      [&](KernelBuilder &b, ValueRange a, Value block, Value thread) {
        MatmulArgs args = m.unpack(a);
        Value M = a.back();
        Value W = b.dim(a[3], 1);
        if (m.swigluInputAt >= 0)
          W = b.div(W, b.idx(2));
        Value NT = b.ceilDiv(W, b.idx(tn));
        Value mTile = b.div(block, NT), nTile = b.rem(block, NT);
        // Walk the groups (experts, then the tail) to find this m-tile's.
        auto found = b.loop(
            b.idx(0), b.idx(experts + 1),
            {b.idx(0), b.idx(experts + 1), b.idx(0), b.idx(0)},
            [&](Value g, ValueRange it) -> SmallVector<Value> {
              Value start = groupStart(b, args.offsets, g);
              Value end = b.ifElse(
                  b.eq(g, b.idx(experts)), b.getIndexType(), [&] { return M; },
                  [&] { return b.loadIdx(args.offsets, {g}); });
              Value tiles = b.ceilDiv(b.sub(end, start), b.idx(tm));
              Value next = b.add(it[0], tiles);
              Value here = b.land(b.ule(it[0], mTile), b.ult(mTile, next));
              Value rowStart =
                  b.add(start, b.mul(b.sub(mTile, it[0]), b.idx(tm)));
              return {next, b.select(here, g, it[1]),
                      b.select(here, rowStart, it[2]),
                      b.select(here, end, it[3])};
            });
        Value group = found[1], rowStart = found[2], rowEnd = found[3];
        b.ifThen(b.ult(group, b.idx(experts + 1)), [&] {
          int64_t perThread = std::max<int64_t>(1, tm * tn / threads);
          b.loop(b.idx(0), b.idx(perThread), [&](Value q) {
            Value local = b.add(b.mul(q, b.idx(threads)), thread);
            Value row = b.add(rowStart, b.div(local, b.idx(tn)));
            Value col = b.add(b.mul(nTile, b.idx(tn)), b.rem(local, b.idx(tn)));
            Value inTile = b.ult(local, b.idx(tm * tn));
            Value ok =
                b.land(inTile, b.land(b.ult(row, rowEnd), b.ult(col, W)));
            b.ifThen(ok, [&] {
              storeGroupedElement(b, args, m, a, group, row, col, W);
            });
          });
        });
      });
}

} // namespace

LogicalResult scalar::emitGroupedWeightGrad(moe::GroupedWeightGradOp op,
                                            moe::TileAttr tile,
                                            BufferMap buffer,
                                            LoweringContext &ctx) {
  // out[e, i, n] = sum over rows r of group e of lhs_r[i] · grad_out[r, n]
  // (out[i, e, n] with experts_in_columns, out[e, n, i] with
  // transpose_rhs), plus accumulate's element when given.
  KernelBuilder &h = ctx.host();
  Value lhs = buffer(op.getLhs()), grad = buffer(op.getGradOut());
  Value offsets = buffer(op.getOffsets()), out = buffer(op.getOut());
  int64_t slotsPerToken = op.getK().value_or(1);
  Value gather = buffer(op.getGatherSlots());
  Value into = buffer(op.getAccumulate());
  bool inColumns = op.getExpertsInColumns();
  bool transposed = op.getTransposeRhs();
  SmallVector<Value> outSizes = ctx.sizes(out);
  Value count = h.mul(h.mul(outSizes[0], outSizes[1]), outSizes[2]);
  SmallVector<Value> operands = {lhs, grad, offsets, out};
  if (gather)
    operands.push_back(gather);
  int intoAt = -1;
  if (into) {
    intoAt = operands.size();
    operands.push_back(into);
  }
  // FP8: lhs [K, P] and grad_out [N, P] transposed by moe.quantize
  // {transpose}, scales [B, K] and [B, N] per 128-row block.
  Value lhsScales = buffer(op.getLhsScales());
  int scalesAt = operands.size();
  if (lhsScales)
    operands.append({lhsScales, buffer(op.getGradScales())});
  return launchPerItem(
      ctx, "", count, tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        // Items in the output's order: its three dimensions, the last
        // contiguous.
        Value middle = b.dim(a[3], 1), inner = b.dim(a[3], 2);
        Value first = b.div(id, b.mul(middle, inner));
        Value second = b.rem(b.div(id, inner), middle);
        Value last = b.rem(id, inner);
        Value e = inColumns ? second : first;
        Value i = inColumns ? first : transposed ? last : second;
        Value n = transposed ? second : last;
        Value start = groupStart(b, a[2], e);
        Value end = b.loadIdx(a[2], {e});
        Value acc;
        if (lhsScales) {
          // Each block's products summed, then times its two scales.
          const int64_t g = kFp8ScaleBlock;
          Value rows = b.sub(end, start), first = blocksBefore(b, a[2], e, g);
          acc = b.loop(
              b.idx(0), b.ceilDiv(rows, b.idx(g)), {b.f32(0)},
              [&](Value j, ValueRange it) -> SmallVector<Value> {
                Value blk = b.add(first, j), p0 = b.mul(blk, b.idx(g));
                Value p1 = b.add(p0, b.minIdx(b.idx(g),
                                              b.sub(rows, b.mul(j, b.idx(g)))));
                Value sum = b.loop(
                    p0, p1, {b.f32(0)},
                    [&](Value p, ValueRange in) -> SmallVector<Value> {
                      return {b.fadd(in[0], b.fmul(b.loadF(a[0], {i, p}),
                                                   b.loadF(a[1], {n, p})))};
                    })[0];
                Value scale = b.fmul(b.loadF(a[scalesAt], {blk, i}),
                                     b.loadF(a[scalesAt + 1], {blk, n}));
                return {b.fadd(it[0], b.fmul(sum, scale))};
              })[0];
        } else {
          acc = b.loop(
            start, end, {b.f32(0)},
            [&](Value r, ValueRange it) -> SmallVector<Value> {
              Value x;
              if (gather) {
                auto [slot, valid] = b.loadSigned(a[4], {r});
                x = b.ifElse(
                    valid, b.getF32Type(),
                    [&] {
                      return b.loadF(a[0],
                                     {b.div(slot, b.idx(slotsPerToken)), i});
                    },
                    [&] { return b.f32(0); });
              } else {
                x = b.loadF(a[0], {r, i});
              }
              return {b.fadd(it[0], b.fmul(x, b.loadF(a[1], {r, n})))};
            })[0];
        }
        // Added after the sum, as the wgmma kernel's epilogue does.
        if (intoAt >= 0)
          acc = b.fadd(acc, b.loadF(a[intoAt], {first, second, last}));
        b.storeF(acc, a[3], {first, second, last});
      });
}

LogicalResult scalar::emitGroupedMatmul(moe::GroupedMatmulOp op,
                                        moe::TileAttr tile, BufferMap buffer,
                                        LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value offsets = buffer(op.getOffsets()), out = buffer(op.getOut());
  MatmulOperands m;
  m.experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  m.slotsPerToken = op.getK().value_or(1);
  m.values = {buffer(op.getLhs()), buffer(op.getRhs()), offsets, out};
  int gatherAt = m.add(buffer(op.getGatherSlots()));
  int biasAt = m.add(buffer(op.getBias()));
  int loraAAt = m.add(buffer(op.getLoraA()));
  int loraBAt = m.add(buffer(op.getLoraB()));
  int rowScaleAt = m.add(buffer(op.getRowScale()));
  int lhsScalesAt = m.add(buffer(op.getLhsScales()));
  int rhsScalesAt = m.add(buffer(op.getRhsScales()));
  m.swigluInputAt = m.add(buffer(op.getActivationInput()));
  int64_t rank = 0;
  if (op.getLoraA())
    rank = cast<ShapedType>(op.getLoraA().getType()).getDimSize(0) / m.experts;
  int loraDownAt = -1;
  if (op.getLoraA()) {
    FailureOr<Value> down = emitLoraDown(op, tile, buffer, ctx, rank);
    if (failed(down))
      return failure();
    loraDownAt = m.add(*down);
  }
  m.unpack = [&](ValueRange a) {
    MatmulArgs args;
    args.lhs = a[0];
    args.rhs = a[1];
    args.offsets = a[2];
    auto at = [&](int i) { return i < 0 ? Value() : a[i]; };
    args.gather = at(gatherAt);
    args.bias = at(biasAt);
    args.loraA = at(loraAAt);
    args.loraB = at(loraBAt);
    args.loraDown = at(loraDownAt);
    args.transposeLora = op.getTransposeLora();
    args.rowScale = at(rowScaleAt);
    args.lhsScales = at(lhsScalesAt);
    args.rhsScales = at(rhsScalesAt);
    args.scaleGroup = op.getScaleGroup();
    args.k = op.getK().value_or(1);
    args.transposeRhs = op.getTransposeRhs();
    args.expertsInColumns = op.getExpertsInColumns();
    args.swiglu = op.getActivation() == moe::Activation::swiglu;
    args.loraScaling = op.getLoraScaling().convertToDouble();
    args.rank = rank;
    return args;
  };
  SmallVector<Value> outSizes = ctx.sizes(out);
  // The matmul's columns: half the output's with swiglu_grad.
  Value width =
      m.swigluInputAt >= 0 ? h.div(outSizes[1], h.idx(2)) : outSizes[1];
  if (op.getScatterSlots())
    return emitScatteredMatmul(op, tile, buffer, ctx, m, width);
  return emitGroupedTiles(op, tile, buffer, ctx, m, width);
}

LogicalResult scalar::emitDenseMatmul(linalg::MatmulOp op, moe::TileAttr tile,
                                      BufferMap buffer, LoweringContext &ctx) {
  // The conversion checked the indexing maps (matmulLayout).
  MatmulLayout layout = *matmulLayout(op);
  KernelBuilder &h = ctx.host();
  Value a = buffer(op.getInputs()[0]), bm = buffer(op.getInputs()[1]);
  Value c = buffer(op.getResult(0));
  SmallVector<Value> cSizes = ctx.sizes(c);
  return launchPerItem(
      ctx, "", h.mul(cSizes[0], cSizes[1]), tile, {a, bm, c},
      [&](KernelBuilder &b, ValueRange args, Value id) {
        Value N = b.dim(args[2], 1);
        Value K = b.dim(args[0], layout.transposeA ? 0 : 1);
        Value i = b.div(id, N), j = b.rem(id, N);
        Value acc =
            b.loop(b.idx(0), K, {b.f32(0)},
                   [&](Value kk, ValueRange it) -> SmallVector<Value> {
                     Value x = layout.transposeA ? b.loadF(args[0], {kk, i})
                                                 : b.loadF(args[0], {i, kk});
                     Value w = layout.transposeB ? b.loadF(args[1], {j, kk})
                                                 : b.loadF(args[1], {kk, j});
                     return {b.fadd(it[0], b.fmul(x, w))};
                   })[0];
        b.storeF(acc, args[2], {i, j});
      });
}
