//===- Epilogue.cpp - Outputs of the sm_90a matmul ------------------------===//
//
// Part of moec. From the wgmma accumulators in registers to the output:
// bias, SwiGLU (the block's B rows are BN/2 gate columns then the matching
// BN/2 up columns, so a thread holds both halves), row scale, then rounded
// stores: column pairs, 16-byte chunks traded within a quad of lanes,
// (block-barrier kernel, plain epilogue) through a padded shared-memory
// tile and out as 16-byte row stores, or (warp-specialized weight
// gradient) through a staging tile of its own and out as bulk copies.
// With swiglu_grad each pair is an output gradient: the gate and up
// gradients, from the saved input's pairs, go to both halves of the row.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

Epilogue::Epilogue(KernelEnv &env, const MmaLoop &mma) : env(env), mma(mma) {
  const HopperPlan &plan = env.plan;
  const KernelArgs &args = env.args;
  int64_t outTileN = plan.outTileN();
  auto outType = cast<MemRefType>(args.out.getType());
  outElem = outType.getElementType();
  outBytes = outElem.getIntOrFloatBitWidth() / 8;
  outVector = 16 / outBytes;
  // Staging rows lie 16 bytes apart beyond the tile width, so that the pair
  // stores of a warp's 8 rows hit different banks.
  stagingStride = outTileN + outVector; // elements
  outChunks = outTileN / 8;
  // The output tile goes through shared memory when it fits in the stages
  // the next tile's prologue leaves free: direct pair stores fill half of
  // each 32-byte sector. Only for a plain epilogue: with a gather, SwiGLU,
  // bias or row scale the kernel already needs all 255 registers, and
  // staging spills (ptxas, measured on the bench shapes). Also only for
  // whole column tiles and whole K slices: with a partial last tile
  // (N = 264) or slice (K = 520) the staged kernel spilled 20-148 bytes
  // (ptxas). Not warp-specialized: there the producer is already refilling
  // every stage with the next tile.
  int64_t outN = outType.getDimSize(outType.getRank() - 1);
  bool staged = !plan.warpSpecialized && !plan.weightGrad() && !plan.swiglu &&
                !plan.swigluGrad && !args.gather && !args.bias &&
                !args.rowScale && !ShapedType::isDynamic(outN) &&
                outN % outTileN == 0 && plan.k % kBlockK == 0 &&
                kBlockM * stagingStride * outBytes <=
                    (plan.stages - plan.ahead()) * plan.stageBytes();
  // Otherwise 16-bit outputs go out as 16-byte chunks gathered within each
  // quad of lanes (no shared memory, few registers): on the H200 the
  // gathered gate_up ran 3-12 % faster (Qwen3 T=8192 0.810 -> 0.736 ms).
  // Not with SwiGLU, where it measured 4-8 % slower at DeepSeek-V3 and the
  // dense MLP.
  // Not with accumulate either: pairStores loads the pairs added to.
  bool quad = !staged && !plan.swiglu && !plan.swigluGrad && outBytes == 2 &&
              outTileN % 32 == 0 && !args.accumulate;
  stores = staged ? Stores::Staged : quad ? Stores::QuadGather : Stores::Pairs;
  if (plan.swigluGrad) {
    auto inputElem =
        cast<MemRefType>(args.swigluInput.getType()).getElementType();
    // Not with a row scale or bias: their registers made the quad version
    // spill 4-28 bytes (ptxas, gmm_swiglu_grad_ws), the pairs none.
    bool quadGrad = outBytes == 2 && inputElem.getIntOrFloatBitWidth() == 16 &&
                    outTileN % 32 == 0 && !args.rowScale && !args.bias;
    stores = quadGrad ? Stores::SwigluGradQuad : Stores::SwigluGrad;
  }
  if (plan.bulkStores) {
    assert(outBytes == 2 && stagingStride == plan.stagingStride() &&
           "the plan sized the staging tile");
    stores = Stores::Bulk;
  }
}

// Accumulator 4j + 2h + q of a thread: row warpgroup*64 + warp*16 +
// lane/4 + 8h, column 8j + 2(lane % 4) + q.
void Epilogue::placeFragment() {
  KernelBuilder &b = env.b;
  rowInTile =
      b.add(b.add(b.mul(mma.warpgroup, b.idx(64)), b.mul(mma.warp, b.idx(16))),
            b.div(mma.lane, b.idx(4)));
  colInTile = b.mul(b.rem(mma.lane, b.idx(4)), b.idx(2));
}

Value Epilogue::accumulator(Value result, int64_t index) {
  return LLVM::ExtractValueOp::create(env.b, result, ArrayRef<int64_t>{index})
      .getResult();
}

// The output value of accumulator pair (h, j), element q of the pair: bias,
// SwiGLU, row scale applied. `c` must be a column in range.
Value Epilogue::outputAt(Value result, Value group, int64_t h, int64_t j,
                         int64_t q, Value c, Value scale) {
  KernelBuilder &b = env.b;
  Value bias = env.args.bias;
  Value y = accumulator(result, 4 * j + 2 * h + q);
  if (env.plan.swiglu) {
    Value up = accumulator(result, 4 * (j + outChunks) + 2 * h + q);
    if (bias) {
      y = b.fadd(y, b.loadF(bias, {group, c}));
      up = b.fadd(up, b.loadF(bias, {group, b.add(c, env.outWidth)}));
    }
    y = b.swiglu(y, up);
  } else if (bias) {
    y = b.fadd(y, b.loadF(bias, {group, c}));
  }
  return scale ? b.fmul(y, scale) : y;
}

void Epilogue::emit(const TileState &t, Value result) {
  KernelBuilder &b = env.b;
  // A dense Aᵀ·B's chunk without rows stores nothing: sumRowSplits reads
  // only the chunks that have rows.
  if (env.plan.rowSplits > 1) {
    b.ifThen(b.ult(b.idx(0), t.reduceRows), [&] { store(t, result); });
    return;
  }
  store(t, result);
}

void Epilogue::store(const TileState &t, Value result) {
  KernelBuilder &b = env.b;
  // Built here, not once per kernel: nothing more stays live across the
  // k-loop.
  Value staging;
  if (stores == Stores::Staged) {
    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(),
                                                gpu::AddressSpace::Workgroup);
    Value byteShift =
        b.sub(env.stageA(b.idx(env.plan.ahead())), addressOf(b, env.smem));
    staging = memref::ViewOp::create(
        b,
        MemRefType::get({ShapedType::kDynamic}, outElem,
                        MemRefLayoutAttrInterface(), workgroup),
        env.smem, byteShift, ValueRange{b.idx(kBlockM * stagingStride)});
  }
  if (stores == Stores::QuadGather)
    return quadStores(t, result);
  if (stores == Stores::Bulk)
    return bulkStores(t, result);
  if (stores == Stores::SwigluGrad)
    return swigluGradStores(t, result);
  if (stores == Stores::SwigluGradQuad)
    return swigluGradQuadStores(t, result);
  pairStores(t, result, staging);
  if (stores == Stores::Staged)
    stagedStores(t, staging);
}

// The 4 lanes of a quad hold columns 8j + [0, 8) of one row as pairs: a 4x4
// transpose of 32-bit words through index shuffles gives lane q all 8
// columns of chunk 4m + q, one 16-byte store, so that a warp store writes 8
// rows x 64 bytes instead of 8 rows x 16 bytes.
void Epilogue::quadStores(const TileState &t, Value result) {
  KernelBuilder &b = env.b;
  Type i32 = b.getI32Type();
  Value quadLane = b.rem(mma.lane, b.idx(4));
  Value quadBase = b.sub(mma.lane, quadLane);
  for (int64_t h = 0; h < 2; ++h) {
    Value r = b.add(rowInTile, b.idx(8 * h));
    Value rowOk = b.ult(r, t.rowCount);
    Value row = b.add(t.rowStart, r);
    Value scale =
        env.args.rowScale
            ? b.loadF(env.args.rowScale, {b.select(rowOk, row, t.rowStart)})
            : Value();
    for (int64_t m = 0; m < outChunks / 4; ++m) {
      SmallVector<Value> words = quadWords(t, result, h, m, scale);
      SmallVector<Value> gathered = quadTranspose(words, quadLane, quadBase);
      Value chunk = b.add(b.idx(4 * m), quadLane);
      Value col = b.add(t.colStart, b.mul(chunk, b.idx(8)));
      b.ifThen(b.land(rowOk, b.ult(col, env.outWidth)), [&] {
        Value vec = vector::BitCastOp::create(
            b, VectorType::get({8}, outElem),
            vector::FromElementsOp::create(b, VectorType::get({4}, i32),
                                           gathered));
        b.storeVec(vec, env.args.out, env.outIndices(t, row, col));
      });
    }
  }
}

// Lane q's words of chunks 4m .. 4m+3 (packed pairs).
SmallVector<Value> Epilogue::quadWords(const TileState &t, Value result,
                                       int64_t h, int64_t m, Value scale) {
  KernelBuilder &b = env.b;
  auto pairType = VectorType::get({2}, outElem);
  SmallVector<Value> words;
  for (int64_t d = 0; d < 4; ++d) {
    int64_t j = 4 * m + d;
    Value col = b.add(t.colStart, b.add(b.idx(8 * j), colInTile));
    Value c = b.minIdx(col, b.sub(env.outWidth, b.idx(2)));
    SmallVector<Value> pair;
    for (int64_t q = 0; q < 2; ++q)
      pair.push_back(arith::TruncFOp::create(
          b, outElem,
          outputAt(result, t.group, h, j, q, b.add(c, b.idx(q)), scale)));
    Value word = vector::BitCastOp::create(
        b, VectorType::get({1}, b.getI32Type()),
        vector::FromElementsOp::create(b, pairType, pair));
    words.push_back(vector::ExtractOp::create(b, word, 0));
  }
  return words;
}

// Round d: lane q sends its word of chunk 4m + (q + d) % 4 to lane
// (q + d) % 4 and receives, from lane (q - d) % 4, that lane's word of
// chunk 4m + q, which is word (q - d) % 4 of the output.
SmallVector<Value> Epilogue::quadTranspose(ArrayRef<Value> words,
                                           Value quadLane, Value quadBase) {
  KernelBuilder &b = env.b;
  SmallVector<Value> gathered(4, b.i32(0));
  for (int64_t d = 0; d < 4; ++d) {
    Value sendIdx = b.rem(b.add(quadLane, b.idx(d)), b.idx(4));
    Value send = words[0];
    for (int64_t w = 1; w < 4; ++w)
      send = b.select(b.eq(sendIdx, b.idx(w)), words[w], send);
    Value fromIdx = b.rem(b.add(quadLane, b.idx(4 - d)), b.idx(4));
    Value got = send;
    if (d)
      got = gpu::ShuffleOp::create(
                b, send,
                arith::IndexCastOp::create(b, b.getI32Type(),
                                           b.add(quadBase, fromIdx)),
                b.i32(32), gpu::ShuffleMode::IDX)
                .getShuffleResult();
    for (int64_t w = 0; w < 4; ++w)
      gathered[w] = b.select(b.eq(fromIdx, b.idx(w)), got, gathered[w]);
  }
  return gathered;
}

void Epilogue::forFragmentRows(
    const TileState &t, function_ref<void(int64_t, Value, Value, Value)> body) {
  KernelBuilder &b = env.b;
  for (int64_t h = 0; h < 2; ++h) {
    Value r = b.add(rowInTile, b.idx(8 * h));
    b.ifThen(b.ult(r, t.rowCount), [&] {
      Value row = b.add(t.rowStart, r);
      Value scale =
          env.args.rowScale ? b.loadF(env.args.rowScale, {row}) : Value();
      body(h, r, row, scale);
    });
  }
}

// Every thread's column pairs, to the output or to the staging tile. With
// accumulate (a weight gradient added to a given one), a batch of chunks'
// pairs of that gradient is loaded before the batch's stores, so that the
// loads overlap; each element is loaded before its own store, so the
// output may be the same memory. The loads are pinned (loadVecInPlace):
// as plain vector loads the f32 gradient added to in place ran 4.3x slower
// at Qwen3-30B-A3B's gate_up (6.34 against 1.31 ms on the H200; 1.56 out
// of place), unchanged at the other shapes measured.
void Epilogue::pairStores(const TileState &t, Value result, Value staging) {
  KernelBuilder &b = env.b;
  constexpr int64_t kBatch = 8;
  Value into = env.args.accumulate;
  forFragmentRows(t, [&](int64_t h, Value r, Value row, Value scale) {
    for (int64_t j0 = 0; j0 < outChunks; j0 += kBatch) {
      int64_t j1 = std::min(outChunks, j0 + kBatch);
      SmallVector<SmallVector<Value>> added;
      for (int64_t j = j0; j < j1 && into; ++j) {
        Value col = b.add(t.colStart, b.add(b.idx(8 * j), colInTile));
        // In range for the load; the store checks the column.
        Value c = b.minIdx(col, b.sub(env.outWidth, b.idx(2)));
        Value pair = b.loadVecInPlace(into, env.outIndices(t, row, c), 2);
        SmallVector<Value> values;
        for (int64_t q = 0; q < 2; ++q) {
          values.push_back(vector::ExtractOp::create(b, pair, q));
          if (!outElem.isF32())
            values.back() =
                arith::ExtFOp::create(b, b.getF32Type(), values.back());
        }
        added.push_back(values);
      }
      for (int64_t j = j0; j < j1; ++j) {
        Value colInOut = b.add(b.idx(8 * j), colInTile);
        Value col = b.add(t.colStart, colInOut);
        b.ifThen(b.ult(col, env.outWidth), [&] {
          SmallVector<Value> pair;
          for (int64_t q = 0; q < 2; ++q) {
            pair.push_back(outputAt(result, t.group, h, j, q,
                                    b.add(col, b.idx(q)), scale));
            if (into)
              pair.back() = b.fadd(pair.back(), added[j - j0][q]);
          }
          if (staging)
            b.storeVecF(pair, staging,
                        {b.add(b.mul(r, b.idx(stagingStride)), colInOut)});
          else
            b.storeVecF(pair, env.args.out, env.outIndices(t, row, col));
        });
      }
    }
  });
}

// One prefetch per 128-byte line of the tile in the gradient added to,
// spread over the MMA threads, issued before the tile's k-loop when the
// reduction is short (at most kPrefetchRows rows): there the epilogue's
// loads of the f32 main gradient would otherwise wait on DRAM with the
// tensor cores idle. On the H200 (bench/training_kernels.py
// dw_gate_up_accumulate) prefetching every tile ran 1.04-1.11x faster at
// 64-256 rows per expert but 0.88-0.97x at 512-1024 (Mixtral, OLMoE and
// Qwen3 at T = 2048 / 8192): over a long k-loop the lines leave L2 again
// and the prefetches compete with the operands' copies.
// `prefetch.global.L2` needs no alignment (the bulk prefetch does, and a
// main gradient may be a view into a flat buffer at any 4-byte offset).
void Epilogue::prefetchAccumulate(const TileState &t) {
  constexpr int64_t kPrefetchRows = 256;
  Value into = env.args.accumulate;
  if (!into)
    return;
  KernelBuilder &b = env.b;
  int64_t lineElems =
      128 / std::max<int64_t>(1, outElem.getIntOrFloatBitWidth() / 8);
  int64_t width = std::min<int64_t>(lineElems, env.plan.outTileN());
  b.ifThen(b.ule(t.reduceRows, b.idx(kPrefetchRows)), [&] {
    forRowChunks(t, width, [&](Value r, Value, Value col) {
      Value address = arith::IndexCastOp::create(
          b, b.getI64Type(),
          b.elementAddress(into, env.outIndices(t, b.add(t.rowStart, r), col)));
      LLVM::InlineAsmOp::create(
          b, TypeRange{}, ValueRange{address}, "prefetch.global.L2 [$0];", "l",
          /*has_side_effects=*/true, /*is_align_stack=*/false,
          LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
          ArrayAttr());
    });
  });
}

// The saved input's pairs are loaded a batch of chunks at a time before
// any of the batch's stores: the stores may alias them for all the
// compilers know, so loads issued between stores would each wait out a
// global-memory round trip.
void Epilogue::swigluGradStores(const TileState &t, Value result) {
  KernelBuilder &b = env.b;
  constexpr int64_t kBatch = 8;
  Value input = env.args.swigluInput;
  Value lastPair = b.sub(env.outWidth, b.idx(2));
  forFragmentRows(t, [&](int64_t h, Value, Value row, Value scale) {
    for (int64_t j0 = 0; j0 < outChunks; j0 += kBatch) {
      int64_t j1 = std::min(outChunks, j0 + kBatch);
      SmallVector<Value> cols;
      SmallVector<SmallVector<Value>> gates, ups;
      for (int64_t j = j0; j < j1; ++j) {
        cols.push_back(b.add(t.colStart, b.add(b.idx(8 * j), colInTile)));
        // In range for the loads; the stores check the column.
        Value c = b.minIdx(cols.back(), lastPair);
        gates.push_back(b.loadVecF(input, {row, c}, 2));
        ups.push_back(b.loadVecF(input, {row, b.add(c, env.outWidth)}, 2));
      }
      for (int64_t j = j0; j < j1; ++j) {
        Value col = cols[j - j0];
        b.ifThen(b.ult(col, env.outWidth), [&] {
          SmallVector<Value> dGate, dUp;
          for (int64_t q = 0; q < 2; ++q) {
            Value dy =
                outputAt(result, t.group, h, j, q, b.add(col, b.idx(q)), scale);
            auto [dg, du] = b.swigluGrad(dy, gates[j - j0][q], ups[j - j0][q]);
            dGate.push_back(dg);
            dUp.push_back(du);
          }
          b.storeVecF(dGate, env.args.out, {row, col});
          b.storeVecF(dUp, env.args.out, {row, b.add(col, env.outWidth)});
        });
      }
    }
  });
}

// Per row and batch of quad chunk groups: first every lane's 16-byte gate
// and up loads (as in swigluGradStores), then per group the two f32
// transposes (first and second elements of the pairs), the gradients and
// 16-byte stores.
void Epilogue::swigluGradQuadStores(const TileState &t, Value result) {
  KernelBuilder &b = env.b;
  // Chunk groups whose loads are in flight together, 8 registers each (4
  // spilled 36-52 bytes, ptxas). Tried on the H200 and left out: streaming
  // (evict-first) loads and stores (within 3 %, and spills) and an L2
  // prefetch of the tile's input rows as its k-loop starts (up to 8 %
  // slower; bench/results/swiglu-grad-fusion-h200.md).
  constexpr int64_t kBatch = 2;
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  Value input = env.args.swigluInput;
  Value quadLane = b.rem(mma.lane, b.idx(4));
  Value quadBase = b.sub(mma.lane, quadLane);
  auto bits = [&](Value v, Type to) {
    return arith::BitcastOp::create(b, to, v).getResult();
  };
  for (int64_t h = 0; h < 2; ++h) {
    Value r = b.add(rowInTile, b.idx(8 * h));
    Value rowOk = b.ult(r, t.rowCount);
    Value row = b.add(t.rowStart, r);
    // Not forFragmentRows: every lane of the quad takes part in the
    // shuffles, so rows past the tile's read its first row and store
    // nothing instead of skipping the body.
    Value loadRow = b.select(rowOk, row, t.rowStart);
    int64_t groups = outChunks / 4;
    for (int64_t m0 = 0; m0 < groups; m0 += kBatch) {
      int64_t m1 = std::min(groups, m0 + kBatch);
      SmallVector<Value> cols;
      SmallVector<SmallVector<Value>> gates, ups;
      for (int64_t m = m0; m < m1; ++m) {
        Value chunk = b.add(b.idx(4 * m), quadLane);
        cols.push_back(b.add(t.colStart, b.mul(chunk, b.idx(8))));
        Value c = b.minIdx(cols.back(), b.sub(env.outWidth, b.idx(8)));
        gates.push_back(b.loadVecF(input, {loadRow, c}, 8));
        ups.push_back(b.loadVecF(input, {loadRow, b.add(c, env.outWidth)}, 8));
      }
      for (int64_t m = m0; m < m1; ++m) {
        // Element q of pair (chunk 4m + d) from every lane: word d.
        SmallVector<Value> gathered[2];
        for (int64_t q = 0; q < 2; ++q) {
          SmallVector<Value> words;
          for (int64_t d = 0; d < 4; ++d) {
            int64_t j = 4 * m + d;
            Value col = b.add(t.colStart, b.add(b.idx(8 * j), colInTile));
            Value c = b.minIdx(col, b.sub(env.outWidth, b.idx(2)));
            // No bias or row scale here (see the constructor).
            words.push_back(bits(
                outputAt(result, t.group, h, j, q, b.add(c, b.idx(q)), Value()),
                i32));
          }
          gathered[q] = quadTranspose(words, quadLane, quadBase);
        }
        // Word w came from lane w: columns 2w and 2w + 1 of the chunk.
        SmallVector<Value> dGate, dUp;
        for (int64_t e = 0; e < 8; ++e) {
          Value dy = bits(gathered[e % 2][e / 2], f32);
          auto [dg, du] = b.swigluGrad(dy, gates[m - m0][e], ups[m - m0][e]);
          dGate.push_back(dg);
          dUp.push_back(du);
        }
        Value col = cols[m - m0];
        b.ifThen(b.land(rowOk, b.ult(col, env.outWidth)), [&] {
          b.storeVecF(dGate, env.args.out, {row, col});
          b.storeVecF(dUp, env.args.out, {row, b.add(col, env.outWidth)});
        });
      }
    }
  }
}

void Epilogue::forRowChunks(const TileState &t, int64_t width,
                            function_ref<void(Value, Value, Value)> body) {
  KernelBuilder &b = env.b;
  int64_t perRow = env.plan.outTileN() / width;
  for (int64_t q = 0; q < kBlockM * perRow / kThreads; ++q) {
    Value id = b.add(mma.mathThread, b.idx(q * kThreads));
    Value r = b.div(id, b.idx(perRow));
    Value c = b.mul(b.rem(id, b.idx(perRow)), b.idx(width));
    Value col = b.add(t.colStart, c);
    b.ifThen(b.land(b.ult(r, t.rowCount), b.ult(col, env.outWidth)),
             [&] { body(r, c, col); });
  }
}

// From the staging tile to the output, 16 bytes a thread at a time.
void Epilogue::stagedStores(const TileState &t, Value staging) {
  KernelBuilder &b = env.b;
  gpu::BarrierOp::create(b);
  forRowChunks(t, outVector, [&](Value r, Value c, Value col) {
    Value v = b.loadVec(staging, {b.add(b.mul(r, b.idx(stagingStride)), c)},
                        outVector);
    b.storeVec(v, env.args.out, env.outIndices(t, b.add(t.rowStart, r), col));
  });
}

void Epilogue::mmaThreadsBarrier() {
  KernelBuilder &b = env.b;
  NVVM::BarrierOp::create(b, Type(), b.i32(3), b.i32(kThreads),
                          NVVM::BarrierReductionAttr(), Value());
}

// Row r of the staging tile goes out as one bulk copy of the tile's
// columns in range, issued by MMA thread r (16-byte aligned: rows of N % 8
// == 0 elements, column tiles of 64, 128 or 256, staging rows of 144, 272
// or 528 bytes).
void Epilogue::bulkStores(const TileState &t, Value result) {
  KernelBuilder &b = env.b;
  MLIRContext *ctx = b.getContext();
  // The previous tile's copies have read the staging tile.
  NVVM::CpAsyncBulkWaitGroupOp::create(b, b.getI32IntegerAttr(0),
                                       b.getUnitAttr());
  mmaThreadsBarrier();
  Value tile = env.stagingTile();
  pairStores(t, result, env.sharedView(tile, outElem, kBlockM * stagingStride));
  // Generic-proxy writes, read by the bulk copies' async proxy.
  fenceAsyncShared(b);
  mmaThreadsBarrier();
  Value r = mma.mathThread;
  b.ifThen(b.land(b.ult(r, b.idx(kBlockM)), b.ult(r, t.rowCount)), [&] {
    Value columns =
        b.minIdx(b.idx(env.plan.outTileN()), b.sub(env.outWidth, t.colStart));
    Value dst = arith::IndexCastOp::create(
        b, b.getI64Type(),
        b.elementAddress(env.args.out,
                         env.outIndices(t, b.add(t.rowStart, r), t.colStart)));
    Value src = b.add(tile, b.mul(r, b.idx(stagingStride * outBytes)));
    NVVM::CpAsyncBulkSharedCTAToGlobalOp::create(
        b, LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(ctx, 1), dst),
        pointerAt(b, src, 3), toI32(b, b.mul(columns, b.idx(outBytes))),
        Value(), Value());
    NVVM::CpAsyncBulkCommitGroupOp::create(b);
  });
}

void Epilogue::drain() {
  if (stores == Stores::Bulk)
    NVVM::CpAsyncBulkWaitGroupOp::create(env.b, env.b.getI32IntegerAttr(0),
                                         UnitAttr());
}

void Epilogue::zeroFill(const TileState &t) {
  KernelBuilder &b = env.b;
  int64_t width = std::min<int64_t>(8, KernelBuilder::vectorWidth(outElem));
  forRowChunks(t, width, [&](Value r, Value, Value col) {
    SmallVector<Value> zeros(width, mma.zeroF);
    Value row = b.add(t.rowStart, r);
    b.storeVecF(zeros, env.args.out, env.outIndices(t, row, col));
    // swiglu_grad's up half too.
    if (env.plan.swigluGrad)
      b.storeVecF(zeros, env.args.out, {row, b.add(col, env.outWidth)});
  });
}
