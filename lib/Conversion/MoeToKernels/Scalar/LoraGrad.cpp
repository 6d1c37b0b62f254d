//===- LoraGrad.cpp - Gradients of the LoRA adapters ----------------------===//
//
// Part of moec. moe.lora_grad in three launches through [M, r] f32 scratch:
// first each grouped row's u = x · A_eᵀ and du = s · dy · B_e, then
// dA[e*r+j, :] = Σ du[:, j] · x and dB[:, e*r+j] = s · Σ dy · u[:, j] over
// the expert's rows. Every thread accumulates a chunk of C rank indices in
// registers, so each activation it loads feeds C products (one thread per
// output element re-read x and dy r times and was 10-100x slower than the
// torch._grouped_mm composition, bench/results/lora-kernels-h200.md); rows
// are read with 16-byte vector loads where the row length allows. Where a
// reduction is long and the threads few (Mixtral: 16k rows, K + N = 33k;
// 8 experts), it is split into slices whose f32 partial sums a second
// kernel adds in slice order, so the result stays deterministic.
//
//===----------------------------------------------------------------------===//

#include "ScalarKernels.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

namespace {

/// The rank indices a thread accumulates: the largest divisor of r up to 16,
/// so that every chunk is full (no bounds checks).
int64_t rankChunk(int64_t rank) {
  for (int64_t c = std::min<int64_t>(rank, 16); c > 1; --c)
    if (rank % c == 0)
      return c;
  return 1;
}

/// Elements per vector load along the last dimension of `memref` that
/// `divisor` (a count of elements, or the row length when 0) and the
/// 16-byte access allow: a power of two, 1 for a dynamic row length.
int64_t rowWidth(Value memref, int64_t divisor = 0) {
  auto type = cast<MemRefType>(memref.getType());
  int64_t length = divisor ? divisor : type.getShape().back();
  int64_t n = KernelBuilder::vectorWidth(type.getElementType());
  if (ShapedType::isDynamic(length) || n == 0)
    return 1;
  while (n > 1 && length % n != 0)
    n /= 2;
  return n;
}

/// Adds to `acc[t]` (t < C) the products x[q] · w(t)[q] over a vector.
void accumulate(KernelBuilder &b, SmallVectorImpl<Value> &acc,
                ArrayRef<Value> x,
                const std::function<SmallVector<Value>(int64_t)> &w) {
  for (int64_t t = 0; t < static_cast<int64_t>(acc.size()); ++t) {
    SmallVector<Value> wt = w(t);
    for (auto [xq, wq] : llvm::zip_equal(x, wt))
      acc[t] = b.fadd(acc[t], b.fmul(xq, wq));
  }
}

/// Slices for a kernel of `threads` threads (without slicing): enough for
/// about 128k threads, at most 16.
int64_t sliceCount(int64_t threads) {
  return std::clamp<int64_t>(llvm::divideCeil(int64_t(1) << 17, threads), 1,
                             16);
}

/// out[r, c] = Σ_s part[s * R + r, c] over `slices` partial sums of an
/// [R, C] result, in slice order.
LogicalResult reduceSlices(LoweringContext &ctx, StringRef suffix,
                           moe::TileAttr tile, Value part, Value out,
                           int64_t slices) {
  KernelBuilder &h = ctx.host();
  SmallVector<Value> sizes = ctx.sizes(out);
  return launchPerItem(
      ctx, suffix, h.mul(sizes[0], sizes[1]), tile, {part, out},
      [&](KernelBuilder &b, ValueRange a, Value id) {
        Value R = b.dim(a[1], 0), C = b.dim(a[1], 1);
        Value r = b.div(id, C), c = b.rem(id, C);
        Value sum = b.f32(0);
        for (int64_t s = 0; s < slices; ++s)
          sum = b.fadd(sum, b.loadF(a[0], {b.add(b.mul(b.idx(s), R), r), c}));
        b.storeF(sum, a[1], {r, c});
      });
}

/// What the three passes of moe.lora_grad share: the buffers, the sizes and
/// the rank chunk C (chunks = r / C of them).
struct LoraGradShape {
  Value lhs, dy, offsets, loraA, loraB, gradA, gradB, gather;
  int64_t experts, rank, k, C, chunks, K, N;
  double scaling;
};

LoraGradShape loraGradShape(moe::LoraGradOp op, BufferMap buffer) {
  LoraGradShape s;
  s.lhs = buffer(op.getLhs());
  s.dy = buffer(op.getGradOut());
  s.offsets = buffer(op.getOffsets());
  s.loraA = buffer(op.getLoraA());
  s.loraB = buffer(op.getLoraB());
  s.gradA = buffer(op.getGradA());
  s.gradB = buffer(op.getGradB());
  s.gather = buffer(op.getGatherSlots());
  s.experts = cast<MemRefType>(s.offsets.getType()).getDimSize(0);
  s.rank = cast<MemRefType>(s.loraA.getType()).getDimSize(0) / s.experts;
  s.k = op.getK().value_or(1);
  s.scaling = op.getLoraScaling().convertToDouble();
  s.C = rankChunk(s.rank);
  s.chunks = s.rank / s.C;
  s.K = cast<MemRefType>(s.lhs.getType()).getShape().back();
  s.N = cast<MemRefType>(s.dy.getType()).getShape().back();
  return s;
}

/// The lhs row of grouped row `row` and whether it has one (for a padding
/// slot of a gather: row 0, which the caller must not read).
std::pair<Value, Value> lhsRow(KernelBuilder &b, int64_t k, Value slots,
                               Value row) {
  if (!slots)
    return {row, Value()};
  auto [slot, valid] = b.loadSigned(slots, {row});
  return {b.select(valid, b.div(slot, b.idx(k)), b.idx(0)), valid};
}

SmallVector<Value> zeros(KernelBuilder &b, int64_t C) {
  return SmallVector<Value>(C, b.f32(0));
}

/// The output itself, or f32 partial sums [slices * rows, columns] that
/// reduceSlices adds into it.
Value partsFor(LoweringContext &ctx, Value out, int64_t slices) {
  if (slices == 1)
    return out;
  KernelBuilder &h = ctx.host();
  SmallVector<Value> sizes = ctx.sizes(out);
  int64_t columns = cast<MemRefType>(out.getType()).getShape()[1];
  return ctx.allocTemp(
      MemRefType::get({ShapedType::kDynamic, columns}, h.getF32Type()),
      {h.mul(h.idx(slices), sizes[0]), sizes[1]});
}

//===----------------------------------------------------------------------===//
// First pass: u = x · A_eᵀ and du = s · dy · B_e per grouped row
//===----------------------------------------------------------------------===//

/// How the first pass splits a row: vector steps and slices of K and N.
struct RowSlicing {
  int64_t xStep, dyStep, bWidth, slices, sliceK, sliceN;
};

RowSlicing rowSlicing(const LoraGradShape &s) {
  RowSlicing r;
  r.xStep = std::min(rowWidth(s.lhs), rowWidth(s.loraA));
  r.dyStep = rowWidth(s.dy);
  r.bWidth = rowWidth(s.loraB, s.C);
  // One slice per 4096 elements of K + N, at most 16: the row count is not
  // known here, and long rows are what starve the GPU (Mixtral's gate_up:
  // 8 slices; Qwen3's 3584 stay whole, where slicing cost 3-6 %).
  r.slices = ShapedType::isDynamic(s.K) || ShapedType::isDynamic(s.N)
                 ? 1
                 : std::clamp<int64_t>((s.K + s.N) / 4096, 1, 16);
  // Slice lengths, multiples of the vector steps (0: the whole row).
  auto sliceLength = [&](int64_t length, int64_t step) -> int64_t {
    return r.slices == 1 ? 0
                         : llvm::divideCeil(length, r.slices * step) * step;
  };
  r.sliceK = sliceLength(s.K, r.xStep);
  r.sliceN = sliceLength(s.N, r.dyStep);
  return r;
}

/// u[t] = Σ_{kLo <= kk < kHi} x[src, kk] · A[ar0 + t, kk], t < C.
SmallVector<Value> rowTimesA(KernelBuilder &b, ValueRange a,
                             const LoraGradShape &s, const RowSlicing &r,
                             Value src, Value kLo, Value kHi, Value ar0) {
  return b.loop(
      kLo, kHi, zeros(b, s.C),
      [&](Value kk, ValueRange it) -> SmallVector<Value> {
        SmallVector<Value> acc(it);
        accumulate(b, acc, b.loadVecF(a[0], {src, kk}, r.xStep),
                   [&](int64_t t) {
                     return b.loadVecF(a[3], {b.add(ar0, b.idx(t)), kk},
                                       r.xStep);
                   });
        return acc;
      },
      b.idx(r.xStep));
}

/// du[t] = Σ_{nLo <= n < nHi} dy[row, n] · B[n, ar0 + t], t < C.
SmallVector<Value> rowTimesB(KernelBuilder &b, ValueRange a,
                             const LoraGradShape &s, const RowSlicing &r,
                             Value row, Value nLo, Value nHi, Value ar0) {
  return b.loop(
      nLo, nHi, zeros(b, s.C),
      [&](Value n, ValueRange it) -> SmallVector<Value> {
        SmallVector<Value> acc(it);
        SmallVector<Value> g = b.loadVecF(a[1], {row, n}, r.dyStep);
        // B[n + q, ar0 .. ar0 + C): C contiguous adapter columns.
        for (int64_t q = 0; q < r.dyStep; ++q) {
          Value nq = b.add(n, b.idx(q));
          SmallVector<Value> w;
          for (int64_t t = 0; t < s.C; t += r.bWidth)
            llvm::append_range(
                w, b.loadVecF(a[4], {nq, b.add(ar0, b.idx(t))}, r.bWidth));
          for (int64_t t = 0; t < s.C; ++t)
            acc[t] = b.fadd(acc[t], b.fmul(g[q], w[t]));
        }
        return acc;
      },
      b.idx(r.dyStep));
}

/// One thread of the first pass: u and du of one grouped row for C rank
/// indices and one slice of K and of N; lanes take consecutive rows, which
/// mostly share an expert (its A_e and B_e rows broadcast).
void emitRowItem(KernelBuilder &b, ValueRange a, Value id,
                 const LoraGradShape &s, const RowSlicing &r) {
  Value slots = s.gather ? a[7] : Value();
  Value M = b.dim(a[1], 0);
  Value row = b.rem(id, M), rest = b.div(id, M);
  Value j0 = b.mul(b.rem(rest, b.idx(s.chunks)), b.idx(s.C));
  Value slice = b.div(rest, b.idx(s.chunks));
  Value e = expertOfRow(b, a[2], b.idx(s.experts), row);
  Value inGroup = b.ult(e, b.idx(s.experts));
  // A padding row past the last group reads expert 0 (masked).
  Value ar0 =
      b.add(b.mul(b.select(inGroup, e, b.idx(0)), b.idx(s.rank)), j0);
  auto [src, valid] = lhsRow(b, s.k, slots, row);
  // [lo, hi) of this thread's slice of a row of `length`.
  auto range = [&](Value length, int64_t sliceLen) {
    if (!sliceLen)
      return std::make_pair(b.idx(0), length);
    Value lo = b.mul(slice, b.idx(sliceLen));
    return std::make_pair(b.minIdx(lo, length),
                          b.minIdx(b.add(lo, b.idx(sliceLen)), length));
  };
  auto [kLo, kHi] = range(b.dim(a[0], 1), r.sliceK);
  // A padding slot reads no lhs row (there may be none: T = 0 with an
  // aligned sort's padding).
  if (valid)
    kHi = b.select(valid, kHi, kLo);
  SmallVector<Value> u = rowTimesA(b, a, s, r, src, kLo, kHi, ar0);
  auto [nLo, nHi] = range(b.dim(a[1], 1), r.sliceN);
  SmallVector<Value> du = rowTimesB(b, a, s, r, row, nLo, nHi, ar0);
  Value keep = valid ? b.land(inGroup, valid) : inGroup;
  Value partRow = b.add(b.mul(slice, M), row);
  for (int64_t t = 0; t < s.C; ++t) {
    Value j = b.add(j0, b.idx(t));
    b.storeF(b.select(keep, u[t], b.f32(0)), a[5], {partRow, j});
    b.storeF(b.select(keep, b.fmul(du[t], b.f32(s.scaling)), b.f32(0)), a[6],
             {partRow, j});
  }
}

/// The first pass into the [M, r] scratch `up` (u) and `down` (du), through
/// partial sums where rows are sliced.
LogicalResult emitRowsPass(LoweringContext &ctx, moe::TileAttr tile,
                           const LoraGradShape &s, Value up, Value down) {
  KernelBuilder &h = ctx.host();
  Value rows = ctx.sizes(s.dy)[0];
  const RowSlicing r = rowSlicing(s);
  Value upParts = partsFor(ctx, up, r.slices);
  Value downParts = partsFor(ctx, down, r.slices);
  SmallVector<Value> operands = {s.lhs,   s.dy,    s.offsets, s.loraA,
                                 s.loraB, upParts, downParts};
  if (s.gather)
    operands.push_back(s.gather);
  if (failed(launchPerItem(
          ctx, "rows", h.mul(rows, h.idx(s.chunks * r.slices)), tile,
          operands, [&](KernelBuilder &b, ValueRange a, Value id) {
            emitRowItem(b, a, id, s, r);
          })))
    return failure();
  if (r.slices > 1 &&
      (failed(reduceSlices(ctx, "rows_sum_u", tile, upParts, up, r.slices)) ||
       failed(reduceSlices(ctx, "rows_sum_du", tile, downParts, down,
                           r.slices))))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Second and third passes: dA and dB, reductions over each expert's rows
//===----------------------------------------------------------------------===//

/// Σ over slice `slice` (of `slices`) of the rows of expert e, C rank
/// indices at once: `term(i, acc)` adds row i's products.
SmallVector<Value>
overGroup(KernelBuilder &b, int64_t C, Value offs, Value e, Value slice,
          int64_t slices,
          const std::function<void(Value, SmallVector<Value> &)> &term) {
  Value lo = groupStart(b, offs, e), hi = b.loadIdx(offs, {e});
  if (slices > 1) {
    Value length = b.ceilDiv(b.sub(hi, lo), b.idx(slices));
    lo = b.minIdx(b.add(lo, b.mul(slice, length)), hi);
    hi = b.minIdx(b.add(lo, length), hi);
  }
  return b.loop(lo, hi, zeros(b, C),
                [&](Value i, ValueRange it) -> SmallVector<Value> {
                  SmallVector<Value> acc(it);
                  term(i, acc);
                  return acc;
                });
}

/// C f32 scratch values of row i from column j0 (vector loads of `width`
/// when C and the alignment allow).
SmallVector<Value> scratchRow(KernelBuilder &b, int64_t C, int64_t width,
                              Value scratch, Value i, Value j0) {
  SmallVector<Value> values;
  for (int64_t t = 0; t < C; t += width)
    llvm::append_range(values,
                       b.loadVecF(scratch, {i, b.add(j0, b.idx(t))}, width));
  return values;
}

/// Thread (e, slice, chunk, column): lanes take consecutive columns, so
/// the loads of x and dy are coalesced and the scratch row is broadcast.
struct Item {
  Value e, slice, j0, column;
};

Item splitItem(KernelBuilder &b, const LoraGradShape &s, Value id,
               Value columns, int64_t slices) {
  Value column = b.rem(id, columns), rest = b.div(id, columns);
  Value j0 = b.mul(b.rem(rest, b.idx(s.chunks)), b.idx(s.C));
  rest = b.div(rest, b.idx(s.chunks));
  return Item{b.div(rest, b.idx(slices)), b.rem(rest, b.idx(slices)), j0,
              column};
}

/// Slices of each expert's rows for a pass with `columns` output columns
/// per rank chunk (K for dA, N for dB): 1 where that is dynamic.
int64_t groupSlices(const LoraGradShape &s, int64_t columns) {
  return ShapedType::isDynamic(columns)
             ? 1
             : sliceCount(s.experts * s.chunks * columns);
}

/// dA[e*r+j, :] = Σ du[:, j] · x over the expert's rows.
LogicalResult emitGradAPass(LoweringContext &ctx, moe::TileAttr tile,
                            const LoraGradShape &s, Value down,
                            int64_t scratchWidth) {
  KernelBuilder &h = ctx.host();
  Value sizeK = ctx.sizes(s.gradA)[1];
  const int64_t aSlices = groupSlices(s, s.K);
  Value partsA = partsFor(ctx, s.gradA, aSlices);
  SmallVector<Value> aOperands = {s.lhs, s.offsets, down, partsA};
  if (s.gather)
    aOperands.push_back(s.gather);
  if (failed(launchPerItem(
          ctx, "a", h.mul(h.idx(s.experts * s.chunks * aSlices), sizeK), tile,
          aOperands, [&](KernelBuilder &b, ValueRange a, Value id) {
            Value slots = s.gather ? a[4] : Value();
            Item item = splitItem(b, s, id, b.dim(a[3], 1), aSlices);
            SmallVector<Value> acc = overGroup(
                b, s.C, a[1], item.e, item.slice, aSlices,
                [&](Value i, SmallVector<Value> &sum) {
                  auto [src, valid] = lhsRow(b, s.k, slots, i);
                  // A padding slot reads no lhs row (T may be 0).
                  Value x = valid ? b.ifElse(
                                        valid, b.getF32Type(),
                                        [&, src = src] {
                                          return b.loadF(a[0],
                                                         {src, item.column});
                                        },
                                        [&] { return b.f32(0); })
                                  : b.loadF(a[0], {src, item.column});
                  SmallVector<Value> g =
                      scratchRow(b, s.C, scratchWidth, a[2], i, item.j0);
                  for (int64_t t = 0; t < s.C; ++t)
                    sum[t] = b.fadd(sum[t], b.fmul(g[t], x));
                });
            Value ar0 = b.add(
                b.mul(b.add(b.mul(item.slice, b.idx(s.experts)), item.e),
                      b.idx(s.rank)),
                item.j0);
            for (int64_t t = 0; t < s.C; ++t)
              b.storeF(acc[t], a[3], {b.add(ar0, b.idx(t)), item.column});
          })))
    return failure();
  if (aSlices > 1)
    return reduceSlices(ctx, "a_sum", tile, partsA, s.gradA, aSlices);
  return success();
}

/// dB[:, e*r+j] = s · Σ dy · u[:, j] over the expert's rows.
LogicalResult emitGradBPass(LoweringContext &ctx, moe::TileAttr tile,
                            const LoraGradShape &s, Value up,
                            int64_t scratchWidth) {
  KernelBuilder &h = ctx.host();
  Value sizeN = ctx.sizes(s.gradB)[0];
  const int64_t bSlices = groupSlices(s, s.N);
  Value partsB = partsFor(ctx, s.gradB, bSlices);
  if (failed(launchPerItem(
          ctx, "b", h.mul(h.idx(s.experts * s.chunks * bSlices), sizeN), tile,
          {s.dy, s.offsets, up, partsB},
          [&](KernelBuilder &b, ValueRange a, Value id) {
            Value columns = b.dim(a[0], 1);
            Item item = splitItem(b, s, id, columns, bSlices);
            SmallVector<Value> acc = overGroup(
                b, s.C, a[1], item.e, item.slice, bSlices,
                [&](Value i, SmallVector<Value> &sum) {
                  Value g = b.loadF(a[0], {i, item.column});
                  SmallVector<Value> u =
                      scratchRow(b, s.C, scratchWidth, a[2], i, item.j0);
                  for (int64_t t = 0; t < s.C; ++t)
                    sum[t] = b.fadd(sum[t], b.fmul(g, u[t]));
                });
            Value ar0 = b.add(b.mul(item.e, b.idx(s.rank)), item.j0);
            Value n = b.add(b.mul(item.slice, columns), item.column);
            for (int64_t t = 0; t < s.C; ++t)
              b.storeF(b.fmul(acc[t], b.f32(s.scaling)), a[3],
                       {n, b.add(ar0, b.idx(t))});
          })))
    return failure();
  if (bSlices > 1)
    return reduceSlices(ctx, "b_sum", tile, partsB, s.gradB, bSlices);
  return success();
}

} // namespace

LogicalResult scalar::emitLoraGrad(moe::LoraGradOp op, moe::TileAttr tile,
                                   BufferMap buffer, LoweringContext &ctx) {
  KernelBuilder &h = ctx.host();
  const LoraGradShape s = loraGradShape(op, buffer);
  Value rows = ctx.sizes(s.dy)[0];
  auto scratchType =
      MemRefType::get({ShapedType::kDynamic, s.rank}, h.getF32Type());
  Value up = ctx.allocTemp(scratchType, {rows, h.idx(s.rank)});
  Value down = ctx.allocTemp(scratchType, {rows, h.idx(s.rank)});
  if (failed(emitRowsPass(ctx, tile, s, up, down)))
    return failure();
  const int64_t scratchWidth = rowWidth(up, s.C);
  if (failed(emitGradAPass(ctx, tile, s, down, scratchWidth)))
    return failure();
  return emitGradBPass(ctx, tile, s, up, scratchWidth);
}
