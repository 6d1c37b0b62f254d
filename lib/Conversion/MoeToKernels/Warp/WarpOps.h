//===- WarpOps.h - Warp-level building blocks -------------------*- C++ -*-===//
//
// Part of moec. Shuffles, warp reductions and the i32 bit helpers the warp
// kernels (router_topk, sort_by_expert) are written with. For targets with
// warp shuffles (TargetInfo::hasWarpShuffles); redux.sync and ballots where
// the target has them.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPOPS_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPOPS_H

#include "../KernelBuilder.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace moec::kernels::warp {

/// Largest expert count of the warp routing kernels: 16 per lane.
constexpr int64_t kMaxExperts = 16 * 32;

mlir::Value shuffle(KernelBuilder &b, mlir::Value value,
                    mlir::Value laneOrOffset, mlir::gpu::ShuffleMode mode);
mlir::Value shuffleXor(KernelBuilder &b, mlir::Value value, int64_t mask);
mlir::Value shuffleIdx(KernelBuilder &b, mlir::Value value, mlir::Value lane);

// i32 and index helpers.
mlir::Value toI32(KernelBuilder &b, mlir::Value index);
mlir::Value toIndex(KernelBuilder &b, mlir::Value i32);
mlir::Value lor(KernelBuilder &b, mlir::Value x, mlir::Value y);
mlir::Value slt(KernelBuilder &b, mlir::Value x, mlir::Value y);
mlir::Value feq(KernelBuilder &b, mlir::Value x, mlir::Value y);
mlir::Value shl(KernelBuilder &b, mlir::Value x, mlir::Value y);
mlir::Value shr(KernelBuilder &b, mlir::Value x, mlir::Value y);
mlir::Value band(KernelBuilder &b, mlir::Value x, int64_t mask);
mlir::Value shl64(KernelBuilder &b, mlir::Value x, int64_t n);
mlir::Value shr64(KernelBuilder &b, mlir::Value x, int64_t n);

/// Sum (or max) of a f32 over the 32 lanes of a warp, in every lane.
mlir::Value warpReduce(KernelBuilder &b, mlir::Value v, bool max);
/// The largest u32 over the 32 lanes, in every lane: one redux.sync where
/// the target has it, a shuffle reduction elsewhere.
mlir::Value warpMaxU32(KernelBuilder &b, mlir::Value v);
/// The lowest lane of the warp where `pred` holds (32 if none), in every
/// lane: one ballot where the target has it, a min-reduction elsewhere.
mlir::Value lowestLaneWith(KernelBuilder &b, mlir::Value pred,
                           mlir::Value lane);

} // namespace moec::kernels::warp

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_WARP_WARPOPS_H
