//===- Elementwise.cpp - Scalar swiglu, add, layout copies, (de)quantize -===//
//
// Part of moec. One thread per output element (or per FP8 group),
// f32 arithmetic, one rounding at the store (transposes, reshapes, pads
// and slices copy the bits).
//
//===-------------------------------------------------------------------===//

#include "ScalarKernels.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// For colwise groups: the expert group holding scale block `block`, as
/// (found, first row, end row) of the block.
SmallVector<Value> colwiseBlockRows(KernelBuilder &b, Value offsets,
                                    int64_t experts, int64_t group,
                                    Value block) {
  auto found = b.loop(
      b.idx(0), b.idx(experts), {b.idx(0), b.idx(0), b.idx(0), b.idx(0)},
      [&](Value e, ValueRange it) -> SmallVector<Value> {
        Value start = groupStart(b, offsets, e);
        Value end = b.loadIdx(offsets, {e});
        Value blocks = b.ceilDiv(b.sub(end, start), b.idx(group));
        Value next = b.add(it[0], blocks);
        Value here = b.land(b.ule(it[0], block), b.ult(block, next));
        Value first = b.add(start, b.mul(b.sub(block, it[0]), b.idx(group)));
        Value last = b.minIdx(b.add(first, b.idx(group)), end);
        return {next, b.select(here, b.idx(1), it[1]),
                b.select(here, first, it[2]), b.select(here, last, it[3])};
      });
  return {found[1], found[2], found[3]};
}

} // namespace

LogicalResult scalar::emitSwiglu(moe::SwigluOp op, moe::TileAttr tile,
                                 BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value in = buffer(op.getInput()), out = buffer(op.getOutput());
  SmallVector<Value> sizes = ctx.sizes(out);
  moe::GateUpLayout layout = op.getLayout();
  return launchPerItem(
      ctx, "", h.mul(sizes[0], sizes[1]), tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value half = b.dim(a[1], 1);
        Value r = b.div(id, half), c = b.rem(id, half);
        Value g = b.loadF(a[0], {r, gateUpColumn(b, layout, half, c, false)});
        Value u = b.loadF(a[0], {r, gateUpColumn(b, layout, half, c, true)});
        b.storeF(b.swiglu(g, u), a[1], {r, c});
      });
}

LogicalResult scalar::emitSwigluGrad(moe::SwigluGradOp op, moe::TileAttr tile,
                                     BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value in = buffer(op.getInput()), dy = buffer(op.getGradOutput());
  Value out = buffer(op.getGradInput());
  SmallVector<Value> sizes = ctx.sizes(dy);
  moe::GateUpLayout layout = op.getLayout();
  return launchPerItem(
      ctx, "", h.mul(sizes[0], sizes[1]), tile, {in, dy, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value half = b.dim(a[1], 1);
        Value r = b.div(id, half), c = b.rem(id, half);
        Value gc = gateUpColumn(b, layout, half, c, false);
        Value uc = gateUpColumn(b, layout, half, c, true);
        auto [dg, du] = b.swigluGrad(b.loadF(a[1], {r, c}),
                                     b.loadF(a[0], {r, gc}),
                                     b.loadF(a[0], {r, uc}));
        b.storeF(dg, a[2], {r, gc});
        b.storeF(du, a[2], {r, uc});
      });
}

LogicalResult scalar::emitQuantize(moe::QuantizeOp op, moe::TileAttr tile,
                                   BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value in = buffer(op.getInput()), data = buffer(op.getData());
  Value scales = buffer(op.getScales()), offsets = buffer(op.getOffsets());
  int64_t g = op.getGroupSize();
  Type fp8 = cast<MemRefType>(data.getType()).getElementType();
  double fp8Max = fp8MaxOf(fp8);
  bool pow2 = op.getPow2Scale();
  SmallVector<Value> scaleSizes = ctx.sizes(scales);
  Value groups = h.mul(scaleSizes[0], scaleSizes[1]);

  if (op.getAxis() == moe::QuantAxis::blocks) {
    // One thread per scale: the amax of its g x g block of [E, N, K], then
    // the block's data ([E, K, N] and transposed scales with transpose;
    // both layouts with transposed_data).
    bool transposed = op.getTranspose(), both = op.writesBothLayouts();
    SmallVector<Value> args{in, data, scales};
    if (both)
      args.append({buffer(op.getTransposedData()),
                   buffer(op.getTransposedScales())});
    return launchPerItem(
        ctx, "blocks", h.mul(groups, scaleSizes[2]), tile, args,
        [&](KernelBuilder &b, ValueRange a, Value id) {
          Value rows = b.dim(a[0], 1), cols = b.dim(a[0], 2);
          Value S1 = b.dim(a[2], 1), S2 = b.dim(a[2], 2);
          Value e = b.div(id, b.mul(S1, S2));
          Value s1 = b.rem(b.div(id, S2), S1), s2 = b.rem(id, S2);
          Value br = transposed ? s2 : s1, bc = transposed ? s1 : s2;
          Value r0 = b.mul(br, b.idx(g)), c0 = b.mul(bc, b.idx(g));
          Value r1 = b.minIdx(b.add(r0, b.idx(g)), rows);
          Value c1 = b.minIdx(b.add(c0, b.idx(g)), cols);
          Value amax = b.loop(
              r0, r1, {b.f32(0)},
              [&](Value r, ValueRange outer) -> SmallVector<Value> {
                return b.loop(
                    c0, c1, {outer[0]},
                    [&](Value c, ValueRange it) -> SmallVector<Value> {
                      return {b.fmax(it[0],
                                     b.fabs(b.loadF(a[0], {e, r, c})))};
                    });
              })[0];
          Value scale = groupScale(b, amax, fp8Max, pow2);
          b.storeF(scale, a[2], {e, s1, s2});
          if (both)
            b.storeF(scale, a[4], {e, s2, s1});
          b.loop(r0, r1, [&](Value r) {
            b.loop(c0, c1, [&](Value c) {
              Value q = b.fdiv(b.loadF(a[0], {e, r, c}), scale);
              b.storeF(q, a[1], transposed ? SmallVector<Value>{e, c, r}
                                           : SmallVector<Value>{e, r, c});
              if (both)
                b.storeF(q, a[3], {e, c, r});
            });
          });
        });
  }

  if (op.getAxis() == moe::QuantAxis::rowwise) {
    // One thread per (row, group): amax, scale, then the group's data.
    return launchPerItem(
        ctx, "rowwise", groups, tile, {in, data, scales},
        [&](KernelBuilder &b, ValueRange a, Value id) {
          Value G = b.dim(a[2], 1), K = b.dim(a[0], 1);
          Value r = b.div(id, G), grp = b.rem(id, G);
          Value c0 = b.mul(grp, b.idx(g));
          Value c1 = b.minIdx(b.add(c0, b.idx(g)), K);
          Value amax = b.loop(
              c0, c1, {b.f32(0)},
              [&](Value c, ValueRange it) -> SmallVector<Value> {
                return {b.fmax(it[0],
                               b.fabs(b.loadF(a[0], {r, c})))};
              })[0];
          Value scale = groupScale(b, amax, fp8Max, pow2);
          b.storeF(scale, a[2], {r, grp});
          b.loop(c0, c1, [&](Value c) {
            b.storeF(b.fdiv(b.loadF(a[0], {r, c}), scale), a[1], {r, c});
          });
        });
  }

  // Colwise: one thread per (scale block row, column); rows past the last
  // group are zero and unused scale blocks hold 1. Transposed, data [K,
  // g * blocks] is zeroed first (the padding of each expert's last block),
  // and row r of block `blk` goes to column g * blk + r - (block's first).
  int64_t experts = cast<MemRefType>(offsets.getType()).getDimSize(0);
  SmallVector<Value> dataSizes = ctx.sizes(data);
  bool transposed = op.getTranspose();
  if (failed(launchPerItem(
          ctx, "tail", h.mul(dataSizes[0], dataSizes[1]), tile, {offsets, data},
          [&](KernelBuilder &b, ValueRange a, Value id) {
            Value K = b.dim(a[1], 1);
            Value r = b.div(id, K), c = b.rem(id, K);
            if (transposed) {
              b.storeF(b.f32(0), a[1], {r, c});
              return;
            }
            Value end = b.loadIdx(a[0], {b.idx(experts - 1)});
            b.ifThen(b.ule(end, r), [&] { b.storeF(b.f32(0), a[1], {r, c}); });
          })))
    return failure();
  return launchPerItem(
      ctx, "colwise", groups, tile, {in, data, scales, offsets},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value K = b.dim(a[2], 1);
        Value blk = b.div(id, K), c = b.rem(id, K);
        SmallVector<Value> rows = colwiseBlockRows(b, a[3], experts, g, blk);
        Value amax = b.loop(
            rows[1], rows[2], {b.f32(0)},
            [&](Value r, ValueRange it) -> SmallVector<Value> {
              return {b.fmax(it[0],
                             b.fabs(b.loadF(a[0], {r, c})))};
            })[0];
        Value scale = groupScale(b, amax, fp8Max, pow2);
        b.storeF(scale, a[2], {blk, c});
        b.loop(rows[1], rows[2], [&](Value r) {
          Value q = b.fdiv(b.loadF(a[0], {r, c}), scale);
          if (transposed)
            b.storeF(q, a[1],
                     {c, b.add(b.mul(blk, b.idx(g)), b.sub(r, rows[1]))});
          else
            b.storeF(q, a[1], {r, c});
        });
      });
}

LogicalResult scalar::emitDequantize(moe::DequantizeOp op, moe::TileAttr tile,
                                     BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  Value data = buffer(op.getData()), scales = buffer(op.getScales());
  Value out = buffer(op.getOutput());
  int64_t g = op.getGroupSize();
  SmallVector<Value> outSizes = ctx.sizes(out);
  auto dataType = cast<MemRefType>(data.getType());

  if (dataType.getElementType().isUnsignedInteger(8)) {
    // NF4: out[s, r, c] = codebook[nibble] * absmax[e, (r*N + c) / g].
    Value codebook = buffer(op.getCodebook());
    Value experts = buffer(op.getExperts());
    SmallVector<Value> operands = {data, scales, codebook, out};
    if (experts)
      operands.push_back(experts);
    Value count = h.mul(h.mul(outSizes[0], outSizes[1]), outSizes[2]);
    return launchPerItem(
        ctx, "nf4", count, tile, operands,
        [&](KernelBuilder &b, ValueRange a, Value id) {
          Value K = b.dim(a[3], 1), N = b.dim(a[3], 2);
          Value sel = b.div(id, b.mul(K, N));
          Value r = b.rem(b.div(id, N), K), c = b.rem(id, N);
          Value e = experts ? b.loadIdx(a[4], {sel}) : sel;
          Value byte =
              memref::LoadOp::create(b, a[0], {e, r, b.div(c, b.idx(2))});
          // ui8 is not an arith type; it is i8 once lowered.
          Value raw = UnrealizedConversionCastOp::create(
                          b, TypeRange{b.getI8Type()}, ValueRange{byte})
                          .getResult(0);
          Value wide = arith::ExtUIOp::create(b, b.getI32Type(), raw);
          Value odd = b.eq(b.rem(c, b.idx(2)), b.idx(1));
          Value nibble =
              b.select(odd, arith::AndIOp::create(b, wide, b.i32(15)),
                       arith::ShRUIOp::create(b, wide, b.i32(4)));
          Value code = b.loadF(
              a[2], {arith::IndexCastOp::create(b, b.getIndexType(), nibble)});
          Value blockIdx = b.div(b.add(b.mul(r, N), c), b.idx(g));
          b.storeF(b.fmul(code, b.loadF(a[1], {e, blockIdx})), a[3],
                   {sel, r, c});
        });
  }

  // FP8: output = data * scale of the element's group.
  Value offsets = buffer(op.getOffsets());
  bool colwise = op.getAxis() == moe::QuantAxis::colwise;
  int64_t numExperts =
      offsets ? cast<MemRefType>(offsets.getType()).getDimSize(0) : 0;
  SmallVector<Value> operands = {data, scales, out};
  if (colwise)
    operands.push_back(offsets);
  return launchPerItem(
      ctx, "fp8", h.mul(outSizes[0], outSizes[1]), tile, operands,
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value K = b.dim(a[2], 1);
        Value r = b.div(id, K), c = b.rem(id, K);
        Value x = b.loadF(a[0], {r, c});
        if (!colwise) {
          b.storeF(b.fmul(x, b.loadF(a[1], {r, b.div(c, b.idx(g))})), a[2],
                   {r, c});
          return;
        }
        // Scale block of row r: blocks of the groups before its group, plus
        // its offset in its group; rows past the last group are zero.
        auto found = b.loop(
            b.idx(0), b.idx(numExperts), {b.idx(0), b.idx(0), b.idx(0)},
            [&](Value e, ValueRange it) -> SmallVector<Value> {
              Value start = groupStart(b, a[3], e);
              Value end = b.loadIdx(a[3], {e});
              Value here = b.land(b.ule(start, r), b.ult(r, end));
              Value blk = b.add(it[0], b.div(b.sub(r, start), b.idx(g)));
              Value blocks = b.ceilDiv(b.sub(end, start), b.idx(g));
              return {b.add(it[0], blocks), b.select(here, b.idx(1), it[1]),
                      b.select(here, blk, it[2])};
            });
        Value y = b.ifElse(
            b.eq(found[1], b.idx(1)), b.getF32Type(),
            [&] {
              return b.fmul(x, b.loadF(a[1], {found[2], c}));
            },
            [&] { return b.f32(0); });
        b.storeF(y, a[2], {r, c});
      });
}

namespace {

/// One thread per element of `operands.back()` (the result): `body` gets the
/// element's coordinates, last dimension fastest.
LogicalResult launchPerElement(
    LoweringContext &ctx, moe::TileAttr tile, ValueRange operands,
    const std::function<void(KernelBuilder &, ValueRange, ArrayRef<Value>)>
        &body) {
  KernelBuilder &h = ctx.host();
  SmallVector<Value> sizes = ctx.sizes(operands.back());
  Value count = h.idx(1);
  for (Value size : sizes)
    count = h.mul(count, size);
  int64_t rank = sizes.size();
  return launchPerItem(ctx, "", count, tile, operands,
                       [&](KernelBuilder &b, ValueRange a, Value id) {
                         SmallVector<Value> index(rank);
                         Value rest = id;
                         for (int64_t d = rank - 1; d >= 0; --d) {
                           Value size = b.dim(a.back(), d);
                           index[d] = d == 0 ? rest : b.rem(rest, size);
                           rest = b.div(rest, size);
                         }
                         body(b, a, index);
                       });
}

} // namespace

LogicalResult scalar::emitElementwiseAdd(linalg::AddOp op, moe::TileAttr tile,
                                         BufferMap buffer,
                                         LoweringContext &ctx) {
  // Gradients reaching one value along several paths (e.g. the tokens of an
  // MoE layer: the router and the experts) are summed by linalg.add.
  Value lhs = buffer(op.getInputs()[0]), rhs = buffer(op.getInputs()[1]);
  Value out = buffer(op.getResult(0));
  return launchPerElement(
      ctx, tile, {lhs, rhs, out},
      [](KernelBuilder &b, ValueRange a, ArrayRef<Value> index) {
        b.storeF(b.fadd(b.loadF(a[0], index), b.loadF(a[1], index)), a[2],
                 index);
      });
}

LogicalResult scalar::emitFill(linalg::FillOp op, moe::TileAttr tile,
                               BufferMap buffer, LoweringContext &ctx) {
  // A constant tensor (e.g. the LoRA scale as a row_scale vector); the zero
  // fill of a matmul's accumulator never becomes a kernel.
  FloatAttr value;
  if (!matchPattern(op.getInputs()[0], m_Constant(&value)))
    return op.emitOpError("needs a constant float fill value");
  double constant = value.getValueAsDouble();
  Value out = buffer(op.getResult(0));
  return launchPerElement(
      ctx, tile, {out},
      [&](KernelBuilder &b, ValueRange a, ArrayRef<Value> index) {
        b.storeF(b.f32(static_cast<float>(constant)), a[0], index);
      });
}

namespace {

/// Coordinates of flat element `flat` in a row-major `shape`.
SmallVector<Value> unflatten(KernelBuilder &b, Value flat,
                             ArrayRef<int64_t> shape) {
  SmallVector<Value> index(shape.size());
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    Value size = b.idx(shape[d]);
    index[d] = d == 0 ? flat : b.rem(flat, size);
    flat = b.div(flat, size);
  }
  return index;
}

/// The source index of result index `index` under `permutation` (result
/// dimension d is the source's dimension permutation[d]).
SmallVector<Value> permutedSource(ArrayRef<Value> index,
                                  ArrayRef<int64_t> permutation) {
  SmallVector<Value> source(index.size());
  for (auto [d, p] : llvm::enumerate(permutation))
    source[p] = index[d];
  return source;
}

/// The copy of a reshape: result element i (row-major) is the source's
/// element i. One thread per 16-byte piece where both last dimensions hold
/// whole pieces (the layout copies of moe-decompose-lora-grad: adapters and
/// their gradients, tens to hundreds of MB), else per element. The shapes
/// are static (the conversion checks it).
LogicalResult emitReshape(Value in, Value out, moe::TileAttr tile,
                          LoweringContext &ctx) {
  auto inType = cast<ShapedType>(in.getType());
  auto outType = cast<ShapedType>(out.getType());
  int64_t width = KernelBuilder::vectorWidth(inType.getElementType());
  if (width < 1 || inType.getShape().back() % width ||
      outType.getShape().back() % width)
    width = 1;
  KernelBuilder &h = ctx.host();
  Value count = h.idx(outType.getNumElements() / width);
  return launchPerItem(
      ctx, "", count, tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value flat = b.mul(id, b.idx(width));
        b.storeVec(b.loadVec(a[0], unflatten(b, flat, inType.getShape()),
                             width),
                   a[1], unflatten(b, flat, outType.getShape()));
      });
}

} // namespace

LogicalResult scalar::emitExpandShape(tensor::ExpandShapeOp op,
                                      moe::TileAttr tile, BufferMap buffer,
                                      LoweringContext &ctx) {
  return emitReshape(buffer(op.getSrc()), buffer(op.getResult()), tile, ctx);
}

LogicalResult scalar::emitCollapseShape(tensor::CollapseShapeOp op,
                                        moe::TileAttr tile, BufferMap buffer,
                                        LoweringContext &ctx) {
  return emitReshape(buffer(op.getSrc()), buffer(op.getResult()), tile, ctx);
}

namespace {

/// A transpose of the last two dimensions whose sizes are multiples of the
/// 16-byte vector width w: one thread per w x w block, w vector loads of
/// input rows (a warp's loads cover whole 512-byte row pieces), the block
/// transposed in registers, w vector stores of output rows. Exact bits.
LogicalResult emitBlockTranspose(Value in, Value out, int64_t width,
                                 moe::TileAttr tile, LoweringContext &ctx) {
  // The grid of blocks: the input's shape with its last two dimensions in
  // blocks, row-major, so neighbouring threads read neighbouring column
  // blocks.
  SmallVector<int64_t> blocks(cast<ShapedType>(in.getType()).getShape());
  const int64_t rank = blocks.size();
  blocks[rank - 2] /= width;
  blocks[rank - 1] /= width;
  KernelBuilder &h = ctx.host();
  Value count = h.idx(ShapedType::getNumElements(blocks));
  return launchPerItem(
      ctx, "blocks", count, tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        SmallVector<Value> block = unflatten(b, id, blocks);
        Value row0 = b.mul(block[rank - 2], b.idx(width));
        Value col0 = b.mul(block[rank - 1], b.idx(width));
        auto at = [&](Value row, Value col) {
          SmallVector<Value> index(block.begin(), block.end() - 2);
          index.append({row, col});
          return index;
        };
        SmallVector<Value> loaded;
        for (int64_t i = 0; i < width; ++i)
          loaded.push_back(
              b.loadVec(a[0], at(b.add(row0, b.idx(i)), col0), width));
        auto vecType = cast<VectorType>(loaded[0].getType());
        for (int64_t j = 0; j < width; ++j) {
          SmallVector<Value> column;
          for (int64_t i = 0; i < width; ++i)
            column.push_back(vector::ExtractOp::create(b, loaded[i], j));
          b.storeVec(vector::FromElementsOp::create(b, vecType, column), a[1],
                     at(b.add(col0, b.idx(j)), row0));
        }
      });
}

/// A transpose that keeps the last dimension (a multiple of the 16-byte
/// vector width w) in place: one thread per w elements of it, a vector load
/// and a vector store.
LogicalResult emitRowPieceTranspose(Value in, Value out,
                                    ArrayRef<int64_t> permutation,
                                    int64_t width, moe::TileAttr tile,
                                    LoweringContext &ctx) {
  auto outType = cast<ShapedType>(out.getType());
  KernelBuilder &h = ctx.host();
  Value count = h.idx(outType.getNumElements() / width);
  return launchPerItem(
      ctx, "pieces", count, tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        SmallVector<Value> index =
            unflatten(b, b.mul(id, b.idx(width)), outType.getShape());
        b.storeVec(b.loadVec(a[0], permutedSource(index, permutation), width),
                   a[1], index);
      });
}

} // namespace

LogicalResult scalar::emitTranspose(linalg::TransposeOp op, moe::TileAttr tile,
                                    BufferMap buffer, LoweringContext &ctx) {
  // The LoRA adapters of a backward (moe-transpose-lora-adapters) and the
  // layout changes of moe-decompose-lora-grad: tens to hundreds of MB at
  // the larger ranks (on GPUs the 16-bit swaps take the vector strategy's
  // tiled kernel, Vector/Transpose.cpp). A swap of the last two dimensions
  // in whole 16-byte blocks goes block by block, a permutation that keeps a last dimension
  // of whole 16-byte pieces piece by piece; anything else one thread per
  // output element (writes coalesced, reads strided through L2).
  Value in = buffer(op.getInput()), out = buffer(op.getResult()[0]);
  SmallVector<int64_t> permutation(op.getPermutation());
  auto inType = cast<ShapedType>(op.getInput().getType());
  const int64_t rank = permutation.size();
  int64_t width = KernelBuilder::vectorWidth(inType.getElementType());
  bool swapsLastTwo = rank >= 2 && inType.hasStaticShape() &&
                      permutation[rank - 2] == rank - 1 &&
                      permutation[rank - 1] == rank - 2;
  for (int64_t d = 0; d + 2 < rank; ++d)
    swapsLastTwo = swapsLastTwo && permutation[d] == d;
  if (swapsLastTwo && width > 1 && inType.getDimSize(rank - 2) % width == 0 &&
      inType.getDimSize(rank - 1) % width == 0)
    return emitBlockTranspose(in, out, width, tile, ctx);
  if (rank >= 1 && inType.hasStaticShape() && width > 1 &&
      permutation[rank - 1] == rank - 1 &&
      inType.getDimSize(rank - 1) % width == 0)
    return emitRowPieceTranspose(in, out, permutation, width, tile, ctx);
  return launchPerElement(
      ctx, tile, {in, out},
      [&](KernelBuilder &b, ValueRange a, ArrayRef<Value> index) {
        b.storeVec(b.loadVec(a[0], permutedSource(index, permutation), 1),
                   a[1], index);
      });
}

namespace {

/// One copy of `out`'s elements from `in` (a pad or a slice): `source` maps
/// an output index to the input index it reads and whether it is inside
/// the input (null: always; else `fill` outside). Where `lastWhole` (the
/// last dimension read in order from an offset that is a multiple of the
/// 16-byte vector width w, both sizes multiples of w), one thread per w
/// elements (the adapters' rows of moe-pad-lora-rank); else one thread per
/// element. Exact bits.
LogicalResult emitBoxCopy(
    Value in, Value out, bool lastWhole, double fill, moe::TileAttr tile,
    LoweringContext &ctx,
    const std::function<Value(KernelBuilder &, ArrayRef<Value>,
                              SmallVector<Value> &)> &source) {
  auto inType = cast<ShapedType>(in.getType());
  auto outType = cast<ShapedType>(out.getType());
  Type elem = outType.getElementType();
  int64_t width = KernelBuilder::vectorWidth(elem);
  if (!lastWhole || width < 2 || outType.getRank() == 0 ||
      inType.getShape().back() % width || outType.getShape().back() % width)
    width = 1;
  auto copyItem = [&](KernelBuilder &b, ValueRange a,
                      ArrayRef<Value> index) {
    SmallVector<Value> from;
    Value inside = source(b, index, from);
    if (width == 1) {
      Value element =
          inside ? b.ifElse(
                       inside, b.getF32Type(),
                       [&] { return b.loadF(a[0], from); },
                       [&] { return b.f32(static_cast<float>(fill)); })
                 : b.loadF(a[0], from);
      b.storeF(element, a[1], index);
      return;
    }
    auto vecType = VectorType::get({width}, elem);
    Value piece =
        inside ? b.ifElse(
                     inside, vecType, [&] { return b.loadVec(a[0], from, width); },
                     [&]() -> Value {
                       return arith::ConstantOp::create(
                           b, DenseElementsAttr::get(
                                  vecType, b.getFloatAttr(elem, fill)));
                     })
               : b.loadVec(a[0], from, width);
    b.storeVec(piece, a[1], index);
  };
  if (width == 1)
    return launchPerElement(ctx, tile, {in, out}, copyItem);
  KernelBuilder &h = ctx.host();
  Value count = h.idx(outType.getNumElements() / width);
  return launchPerItem(ctx, "pieces", count, tile, {in, out},
                       [&](KernelBuilder &b, ValueRange a, Value id) {
                         copyItem(b, a,
                                  unflatten(b, b.mul(id, b.idx(width)),
                                            outType.getShape()));
                       });
}

} // namespace

// The zero padding and the slices of moe-pad-lora-rank (adapters and their
// gradients). Static shapes, offsets and strides (the conversion checks
// them).
LogicalResult scalar::emitPad(tensor::PadOp op, moe::TileAttr tile,
                              BufferMap buffer, LoweringContext &ctx) {
  FloatAttr value;
  Value padding = op.getConstantPaddingValue();
  if (!padding || !matchPattern(padding, m_Constant(&value)))
    return op.emitOpError("needs a constant float padding value");
  SmallVector<int64_t> low(op.getStaticLow());
  ArrayRef<int64_t> sourceShape = op.getSourceType().getShape();
  const int64_t last = sourceShape.size() - 1;
  bool lastWhole = !sourceShape.empty() && low[last] == 0 &&
                   op.getResultType().getShape()[last] == sourceShape[last];
  return emitBoxCopy(
      buffer(op.getSource()), buffer(op.getResult()), lastWhole,
      value.getValueAsDouble(), tile, ctx,
      [&](KernelBuilder &b, ArrayRef<Value> index, SmallVector<Value> &from) {
        // index - low wraps below zero, so one unsigned compare per padded
        // dimension checks both ends.
        Value inside;
        for (auto [d, i] : llvm::enumerate(index)) {
          from.push_back(b.sub(i, b.idx(low[d])));
          if (lastWhole && static_cast<int64_t>(d) == last)
            continue;
          Value here = b.ult(from.back(), b.idx(sourceShape[d]));
          inside = inside ? b.land(inside, here) : here;
        }
        return inside;
      });
}

LogicalResult scalar::emitExtractSlice(tensor::ExtractSliceOp op,
                                       moe::TileAttr tile, BufferMap buffer,
                                       LoweringContext &ctx) {
  SmallVector<int64_t> offsets(op.getStaticOffsets());
  SmallVector<int64_t> strides(op.getStaticStrides());
  int64_t width =
      KernelBuilder::vectorWidth(op.getResultType().getElementType());
  bool lastWhole = !offsets.empty() && strides.back() == 1 && width > 1 &&
                   offsets.back() % width == 0;
  return emitBoxCopy(
      buffer(op.getSource()), buffer(op.getResult()), lastWhole, 0.0, tile,
      ctx,
      [&](KernelBuilder &b, ArrayRef<Value> index, SmallVector<Value> &from) {
        for (auto [d, i] : llvm::enumerate(index))
          from.push_back(
              b.add(b.idx(offsets[d]), b.mul(i, b.idx(strides[d]))));
        return Value();
      });
}
