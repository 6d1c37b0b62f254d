//===- VectorCommon.h - Shared parts of the vector kernels ------*- C++ -*-===//
//
// Part of moec. The unrolled per-item launch of the bandwidth-bound kernels
// and the FP8 quantization pieces that the vector and warp quantize kernels
// share.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORCOMMON_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORCOMMON_H

#include "../LoweringContext.h"

namespace moec::kernels {

/// Work items per thread of the row-wise quantize, FP8 dequantize and NF4
/// kernels (launchUnrolled). On the H200 1, 2 and 4 came within 2 % of each
/// other; 2 was never the slowest.
constexpr int64_t kRowwiseUnroll = 2;

/// Most input elements one thread keeps in registers for a row-wise group.
constexpr int64_t kMaxGroupRegisters = 128;

/// The rest of a work item's kernel body once its loads are issued;
/// `active` says whether the item is a real one (see launchUnrolled).
using ItemRest = std::function<void(mlir::Value active)>;
/// Emits the loads of one work item (its index clamped into range) and
/// returns the rest of its work.
using ItemLoads = std::function<ItemRest(KernelBuilder &, mlir::ValueRange args,
                                         mlir::Value item)>;

/// Launches `unroll` work items per thread, a block's width apart (so that
/// every step of a warp stays coalesced), and issues the loads of all of
/// them before the rest of any: the compiler may not move loads above
/// stores to buffers that may alias, and one 16-byte load per thread keeps
/// too few bytes in flight to reach the copy bandwidth. Items past `count`
/// load the last item again; their rest runs with `active` false, so that
/// warp shuffles in it see every lane.
mlir::LogicalResult launchUnrolled(LoweringContext &ctx, llvm::StringRef suffix,
                                   mlir::Value count, moe::TileAttr tile,
                                   int64_t unroll, mlir::ValueRange operands,
                                   const ItemLoads &loads);

/// The block's dynamic workgroup memory as bytes (the launch sizes it).
mlir::Value workgroupBytes(KernelBuilder &b);
/// `bytes` (workgroupBytes) as a static `shape` x `elem` array starting
/// `byteOffset` bytes in.
mlir::Value workgroupArray(KernelBuilder &b, mlir::Value bytes,
                           llvm::ArrayRef<int64_t> shape, mlir::Type elem,
                           int64_t byteOffset = 0);

/// `blockEnds[e]` = number of column-wise scale blocks of experts <= e
/// (each expert group split into blocks of `group` rows). With warp
/// shuffles one block with a thread per expert scans the block counts
/// (shuffles, then the warps' totals through workgroup memory); elsewhere,
/// or past 1024 experts, each thread sums the counts before its own.
mlir::LogicalResult emitBlockEnds(LoweringContext &ctx, moe::TileAttr tile,
                                  mlir::Value offsets, mlir::Value blockEnds,
                                  int64_t group);

/// Rows [first, last) of column-wise scale block `blk`, which belongs to
/// expert e < E (emitBlockEnds' table `blockEnds`).
std::pair<mlir::Value, mlir::Value>
scaleBlockRows(KernelBuilder &b, mlir::Value offsets, mlir::Value blockEnds,
               mlir::Value e, mlir::Value blk, int64_t group);

/// |x| of a vector of bf16/f16/f32 as unsigned integers of the same width:
/// the bits with the sign cleared, which order as the magnitudes do. The
/// amax of a group is taken on these, so that a thread keeps its group in
/// registers as loaded (bf16: half the registers of f32 copies).
mlir::Value magnitudeBits(KernelBuilder &b, mlir::Value vec);
/// Element i of an amax vector from magnitudeBits, as f32.
mlir::Value magnitudeToF32(KernelBuilder &b, mlir::Value amaxBits, int64_t i,
                           mlir::Type elemType);
/// Whether quantize reads `type` through magnitudeBits.
bool quantizable(mlir::Type type);

} // namespace moec::kernels

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_VECTOR_VECTORCOMMON_H
